#!/usr/bin/env python3
"""Fleet benchmark: what the host layers of site.yml cost as the fleet grows.

    python tests/bench/fleet_scale.py [--sizes 6,12,24] [--strategy linear|mitogen_linear] [--keep] [--pause-lab]
                                      [--floor]

For each N: N lab nodes of the A100 profile (containers `ai-l1-fleet-fgpuNN` on the lab's network
`ai-l1-lab`, addresses from podman, read back with `labctl status --json`, beside the 6-node lab:
run `make lab` first, the lab's file mirror and registry serve them), then the host layers of
playbooks/site.yml on them (`--tags baseline,container_runtime,rdma,nvidia --limit gpu_nvidia`:
the OS baseline, containerd and the node binaries, RDMA, the NVIDIA driver, container toolkit and
DCGM), then the same command again (a no-op run: changed must be 0).

Printed per N and run: wall time, controller CPU (user+sys of ansible-playbook and its children),
the nodes' CPU (their containers' cgroups), tasks, host-task results, changed; then the
per-added-node slope of each between the smallest and the largest N. No assertion on times: the
figures are printed (and written with --json); a run that fails or leaves a host unreachable
stops the benchmark with its log named (its figures would mean nothing). Sizes go up on the same
nodes: the converge run at a larger N finds the smaller N's nodes converged already, so only the
no-op runs compare like with like.

Not measured here: the Kubernetes join and the labels layer, which need the nodes to join the
lab's control planes (a 2-core machine holds the 6-node cluster, not 24 more kubelets); their
API side at 1,000 Nodes is tests/bench/node_metadata_bench.py and the kwok figures.
--pause-lab pauses the lab's own nodes (`podman pause`) while the fleet's runs go, so their control
planes and Ceph do not share this machine's cores with the figures (the file mirror and registry
are host processes and keep serving); they are unpaused at the end, whatever happens.
--floor then runs, on the same nodes, two plays with as many tasks per host as the no-op run had
task results per host: every task `ansible.builtin.ping` with become (the smallest module run over
SSH), then every task `ansible.builtin.debug` (no connection at all). They are what Ansible itself
costs for that many results on this machine, whatever the tasks do: the floor under the no-op run.
The strategy: `linear` is Ansible's; `mitogen_linear` needs `mitogen` (requirements.txt) and is
found as every run finds it, through ansible.cfg's strategy_plugins (plugins/strategy).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
LAB_INVENTORY = ROOT / "inventories" / "lab"
LABCTL = [sys.executable, str(ROOT / "lab" / "labctl.py")]
PREFIX = "fgpu"
TAGS = "baseline,container_runtime,rdma,nvidia"


def fleet_spec(n: int) -> dict:
    return {"lab_name": "ai-l1-fleet", "network": "ai-l1-lab", "external_network": True,
            "nodes": [{"host": f"{PREFIX}{i:02d}", "container": f"ai-l1-fleet-{PREFIX}{i:02d}", "profile": "a100"}
                      for i in range(1, n + 1)]}


def lab_containers() -> list[str]:
    proc = subprocess.run([*LABCTL, "status", "--json"], capture_output=True, text=True, check=False)
    if proc.returncode:
        return []
    return [row["container"] for row in json.loads(proc.stdout) if row["state"] == "running"]


def fleet_addresses(spec_path: Path) -> dict[str, str]:
    """host -> address podman gave the node (the lab's network is shared, so labctl assigns none)."""
    proc = subprocess.run([*LABCTL, "--spec", str(spec_path), "status", "--json"], check=True,
                          capture_output=True, text=True)
    return {row["host"]: row["ip"] for row in json.loads(proc.stdout)}


def fleet_inventory(spec: dict, addresses: dict[str, str], where: Path) -> Path:
    """The lab's variables, its control planes (validated, never touched: --limit) and N GPU nodes."""
    lab = yaml.safe_load((LAB_INVENTORY / "hosts.yml").read_text())["all"]
    inv = where / "inventory"
    shutil.copytree(LAB_INVENTORY / "group_vars", inv / "group_vars")
    connection = inv / "group_vars" / "all" / "connection.yml"
    conn = yaml.safe_load(connection.read_text())
    conn["ansible_ssh_private_key_file"] = str(ROOT / ".lab" / "ssh" / "id_ed25519")
    connection.write_text("---\n" + yaml.safe_dump(conn))
    hosts = {"all": {"vars": lab["vars"], "children": {
        "k8s_control_plane": lab["children"]["k8s_control_plane"],
        "k8s_worker": {"children": {"gpu_nvidia": {"hosts": {
            n["host"]: {"ansible_host": addresses[n["host"]], "lab_hardware_profile": n["profile"]}
            for n in spec["nodes"]}}}},
    }}}
    (inv / "hosts.yml").write_text("---\n" + yaml.safe_dump(hosts, sort_keys=False))
    return inv


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def node_cpu(containers: list[str]) -> float | None:
    """CPU seconds the fleet's containers have used (their cgroups: v1 cpuacct.usage, v2 cpu.stat);
    None when a cgroup cannot be read. The nodes share this machine's cores with the controller, so
    a run's wall time here is bound by what the modules cost on the nodes, which a real fleet pays
    on each machine in parallel."""
    total = 0.0
    for name in containers:
        proc = subprocess.run(["podman", "inspect", "--format", "{{.State.CgroupPath}}", name],
                              capture_output=True, text=True, check=False)
        path = proc.stdout.strip().lstrip("/")
        v1, v2 = Path("/sys/fs/cgroup/cpuacct") / path / "cpuacct.usage", Path("/sys/fs/cgroup") / path / "cpu.stat"
        if proc.returncode or not path:
            return None
        if v1.is_file():
            total += int(v1.read_text()) / 1e9
        elif v2.is_file():
            usage = dict(line.split() for line in v2.read_text().splitlines())
            total += int(usage["usage_usec"]) / 1e6
        else:
            return None
    return total


def run_layers(inventory: Path, strategy: str, log: Path, containers: list[str]) -> dict:
    return run_playbook(ROOT / "playbooks" / "site.yml", inventory, strategy, log, containers, extra=["--tags", TAGS])


def floor_playbook(module: str, tasks: int, where: Path) -> Path:
    """One play of `tasks` separate tasks (a loop would be one result) of one trivial module."""
    play = [{"name": f"Floor: {tasks} {module} tasks per host", "hosts": "gpu_nvidia", "become": True,
             "gather_facts": False,
             "tasks": [{"name": f"{module} {i}", module: {}} for i in range(1, tasks + 1)]}]
    path = where / f"floor-{module.rsplit('.', 1)[-1]}-{tasks}.yml"
    path.write_text("---\n" + yaml.safe_dump(play, sort_keys=False))
    return path


def run_floors(per_host: int, inventory: Path, strategy: str, prefix: Path, containers: list[str]) -> dict:
    """Ansible's own cost of `per_host` task results per host: pings over SSH, then debug tasks."""
    floors = {}
    for module in ("ansible.builtin.ping", "ansible.builtin.debug"):
        name = "floor_" + module.rsplit(".", 1)[-1]
        floors[name] = run_playbook(floor_playbook(module, per_host, prefix.parent), inventory, strategy,
                                    prefix.parent / f"{prefix.name}-{name}.json", containers)
    return floors


def run_playbook(playbook: Path, inventory: Path, strategy: str, log: Path, containers: list[str], *,
                 extra: tuple[str, ...] | list[str] = ()) -> dict:
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
           "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json", "ANSIBLE_FORCE_COLOR": "0",
           "ANSIBLE_STRATEGY": strategy}
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), str(playbook),
           "-i", str(inventory), *extra, "--limit", "gpu_nvidia"]
    nodes0, cpu0, t0 = node_cpu(containers), children_cpu(), time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    wall, cpu, nodes1 = time.monotonic() - t0, children_cpu() - cpu0, node_cpu(containers)
    node_s = round(nodes1 - nodes0, 1) if nodes0 is not None and nodes1 is not None else None
    log.write_text(proc.stdout + proc.stderr)
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        return {"rc": proc.returncode, "wall_s": wall, "cpu_s": cpu, "node_cpu_s": node_s, "error": proc.stderr[-2000:]}
    tasks = [t for p in report["plays"] for t in p["tasks"]]
    stats = report["stats"]
    return {"rc": proc.returncode, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "node_cpu_s": node_s,
            "tasks": len(tasks),
            "host_tasks": sum(len(t["hosts"]) for t in tasks),
            "changed": sum(s["changed"] for s in stats.values()),
            "failed": sum(s["failures"] + s["unreachable"] for s in stats.values())}


def broken(run: dict) -> bool:
    return run["rc"] != 0 or bool(run.get("failed")) or "error" in run


def slope(rows: list[dict], key: str, run: str) -> float | None:
    a, b = rows[0], rows[-1]
    if a["n"] == b["n"] or key not in a[run] or key not in b[run]:
        return None
    return round((b[run][key] - a[run][key]) / (b["n"] - a["n"]), 2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="6,12,24", help="node counts, ascending (default 6,12,24)")
    parser.add_argument("--strategy", default="linear", help="Ansible strategy (linear, mitogen_linear)")
    parser.add_argument("--keep", action="store_true", help="leave the fleet nodes up at the end")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--pause-lab", action="store_true", help="pause the lab's own nodes during the runs")
    parser.add_argument("--floor", action="store_true",
                        help="also run as many ping, then debug, tasks per host as the no-op run had results")
    args = parser.parse_args()
    sizes = sorted(int(s) for s in args.sizes.split(","))
    work = Path(tempfile.mkdtemp(prefix="fleet-bench-"))
    rows = []
    try:
        for n in sizes:
            spec_path = work / f"spec-{n}.json"
            spec = fleet_spec(n)
            spec_path.write_text(json.dumps(spec))
            t0 = time.monotonic()
            subprocess.run([*LABCTL, "--spec", str(spec_path), "up"], check=True)
            up_s = time.monotonic() - t0
            inventory = fleet_inventory(spec, fleet_addresses(spec_path), work / f"n{n}")
            containers = [node["container"] for node in spec["nodes"]]
            paused = lab_containers() if args.pause_lab else []
            if paused:
                subprocess.run(["podman", "pause", *paused], check=True, capture_output=True)
            try:
                first = run_layers(inventory, args.strategy, work / f"n{n}-first.json", containers)
                noop = (run_layers(inventory, args.strategy, work / f"n{n}-noop.json", containers)
                        if not broken(first) else first)
                floors = (run_floors(round(noop["host_tasks"] / n), inventory, args.strategy, work / f"n{n}",
                                     containers) if args.floor and not broken(noop) else {})
            finally:
                if paused:
                    subprocess.run(["podman", "unpause", *paused], check=False, capture_output=True)
            if broken(first) or broken(noop):
                print(f"N={n}: the run failed (rc {first['rc']}/{noop['rc']}, {first.get('failed')}/"
                      f"{noop.get('failed')} hosts failed or unreachable): see {work}/n{n}-*.json", flush=True)
                return 1
            rows.append({"n": n, "strategy": args.strategy, "up_s": round(up_s, 1), "first": first, "noop": noop,
                         **floors})
            for run in ("first", "noop", *floors):
                r = rows[-1][run]
                print(f"N={n:3d} {args.strategy:15s} {run:11s} rc={r['rc']} wall={r['wall_s']}s cpu={r['cpu_s']}s "
                      f"cpu/host={r['cpu_s'] / n:.2f}s node_cpu={r.get('node_cpu_s')}s "
                      f"tasks={r.get('tasks')} host_tasks={r.get('host_tasks')} "
                      f"changed={r.get('changed')} failed={r.get('failed')}", flush=True)
    finally:
        if not args.keep and sizes:
            spec_path = work / "spec-down.json"
            spec_path.write_text(json.dumps(fleet_spec(sizes[-1])))
            subprocess.run([*LABCTL, "--spec", str(spec_path), "down"], check=False)
    if len(rows) > 1:
        for run in ("first", "noop"):
            print(f"slope per added node ({run}, N {rows[0]['n']} -> {rows[-1]['n']}): "
                  + ", ".join(f"{k}={slope(rows, k, run)}" for k in ("wall_s", "cpu_s", "node_cpu_s", "host_tasks")))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    print(f"logs: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
