#!/usr/bin/env python3
"""Ceph bring-up on the lab's storage node, cold and warm (issue 18).

    python tests/bench/storage_bench.py [--inventory inventories/lab] [--json out.json]

Needs the lab up (`make lab`). Cold: the storage node's container and its volumes (disk files,
OSD data) are removed and recreated (`labctl up`), its cached facts dropped, and the Ceph play of
playbooks/storage.yml runs on it (`--limit storage`: packages from the Debian mirror, monitor,
manager, three OSDs, pools, clients, RGW with the seed's buckets and quotas, JuiceFS's Redis).
Warm: the same command again on the converged node (changed must be 0). Last, the whole
storage.yml runs once more so the Kubernetes side (the CSI Secret holds the new cluster's key)
matches the new cluster; that run's time is printed too.

Printed per run: wall time, controller CPU (user+sys of ansible-playbook and its children), tasks
changed. No assertion on times; a failed run stops the benchmark with its output's tail.

Pod start with overlayfs beside Stargz: tests/bench/stargz_bench.py.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
LABCTL = [sys.executable, str(ROOT / "lab" / "labctl.py")]
STORAGE = ROOT / "playbooks" / "storage.yml"
RECAP = re.compile(r"^(?P<host>\S+)\s*:\s*ok=\d+\s+changed=(?P<changed>\d+)\s", re.MULTILINE)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(label: str, cmd: list[str]) -> dict:
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    cpu0, t0 = children_cpu(), time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall, cpu = time.monotonic() - t0, children_cpu() - cpu0
    recap = {m["host"]: int(m["changed"]) for m in RECAP.finditer(proc.stdout)}
    if proc.returncode != 0:
        output = "\n".join(proc.stdout.splitlines()[-60:])
        sys.exit(f"{label} failed (exit {proc.returncode}):\n{output}{proc.stderr}")
    row = {"run": label, "wall_s": round(wall, 1), "controller_cpu_s": round(cpu, 1), "changed": recap}
    print(f"{label:<28} wall {wall:7.1f} s   controller CPU {cpu:6.1f} s   changed {recap}", flush=True)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inventory", type=Path, default=ROOT / "inventories" / "lab")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    hosts = yaml.safe_load((args.inventory / "hosts.yml").read_text())["all"]
    lab_name = hosts["vars"]["lab_name"]
    storage_hosts = list(hosts["children"]["storage"]["hosts"])
    for host in storage_hosts:
        container = f"{lab_name}-{host}"
        subprocess.run(["podman", "rm", "-f", "-t", "0", container], check=False, capture_output=True)
        subprocess.run(["podman", "volume", "rm", "-f", f"{container}-containerd", f"{container}-disks"],
                       check=False, capture_output=True)
        (ROOT / ".cache" / "ansible-facts" / host).unlink(missing_ok=True)
    rows = [run("labctl up (new storage node)", [*LABCTL, "-i", str(args.inventory / "hosts.yml"), "up"])]
    playbook = ["ansible-playbook", "-i", str(args.inventory), str(STORAGE)]
    rows.append(run("ceph cold (fresh node)", [*playbook, "--limit", "storage"]))
    rows.append(run("ceph warm (converged)", [*playbook, "--limit", "storage"]))
    rows.append(run("storage.yml whole (+ k8s)", playbook))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
