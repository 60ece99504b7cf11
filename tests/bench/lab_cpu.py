#!/usr/bin/env python3
"""Where the machine's CPU goes over an interval, by lab node and by process.

    python tests/bench/lab_cpu.py [SECONDS]          (default 120)
    python tests/bench/lab_cpu.py --pods [SECONDS]   (by Kubernetes Pod, from the cgroups)

Reads /proc for every process of the host twice, SECONDS apart, and assigns each to the podman
container whose cgroup it is in (or "host"); prints the total (100 % = one core), each container
and the 25 busiest (container, process) pairs. Run it on a converged, idle lab to see what keeping
the lab alive costs the tests beside it (docs/lab.md, "make test"), or during a test to see who
competes. A process that started in the interval counts with all its CPU time; one that started
and ended in it (an exec probe's runc, the probe's command) is not seen: --pods counts those.

--pods reads the cgroup v1 CPU accounting of each lab node instead (cpuacct.usage, which keeps the
CPU of processes that have ended): each Pod's slice under the node's kubepods.slice, named from the
API, and the node's own processes outside them (kubelet, containerd, the shims, runc). No assertions.
"""

import collections
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

HZ = os.sysconf("SC_CLK_TCK")
CPUACCT = Path("/sys/fs/cgroup/cpuacct")
POD_SLICE = re.compile(r"kubepods(?:-[a-z]+)?-pod([0-9a-f_]+)\.slice$")


def container_ids() -> dict[str, str]:
    out = subprocess.run(["podman", "ps", "--no-trunc", "--format", "{{.ID}} {{.Names}}"],
                         capture_output=True, text=True, check=False).stdout
    return dict(line.split(maxsplit=1) for line in out.splitlines() if " " in line)


def sample(ids: dict[str, str]) -> dict[str, tuple[str, str, int]]:
    """pid: (container, command name, utime + stime in clock ticks)."""
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{pid}/stat").read()
            cgroups = open(f"/proc/{pid}/cgroup").read()
        except OSError:
            continue  # ended between listdir and open
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        where = next((name for cid, name in ids.items() if cid in cgroups), "host")
        out[pid] = (where, comm, int(fields[11]) + int(fields[12]))
    return out


def usage(group: Path) -> int:
    try:
        return int((group / "cpuacct.usage").read_text())
    except (OSError, ValueError):
        return 0


def pod_groups(ids: dict[str, str]) -> dict[tuple[str, str], Path]:
    """(node, pod uid or "node"): the cgroup; "node" is the node container's whole group."""
    groups = {}
    for node_group in CPUACCT.glob("*/libpod-*"):
        node = ids.get(node_group.name.removeprefix("libpod-"))
        if not node:
            continue
        groups[node, "node"] = node_group
        for pod in (node_group / "kubepods.slice").rglob("*.slice"):
            match = POD_SLICE.search(pod.name)
            if match:
                groups[node, match.group(1).replace("_", "-")] = pod
    return groups


def pod_names(node: str) -> dict[str, str]:
    """Pod uid (and a static Pod's config hash): namespace/name, read on the control plane `node`."""
    out = subprocess.run(["podman", "exec", node, "kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf",
                          "get", "pods", "-A", "-o", "json"], capture_output=True, text=True, check=False)
    names = {}
    for pod in json.loads(out.stdout or '{"items": []}')["items"]:
        meta = pod["metadata"]
        name = f"{meta['namespace']}/{meta['name']}"
        names[meta["uid"]] = name
        mirror = meta.get("annotations", {}).get("kubernetes.io/config.mirror")
        if mirror:
            names[mirror] = name
    return names


def by_pod(seconds: float) -> int:
    ids = container_ids()
    groups = pod_groups(ids)
    before, t0 = {key: usage(group) for key, group in groups.items()}, time.monotonic()
    time.sleep(seconds)
    after, elapsed = {key: usage(group) for key, group in groups.items()}, time.monotonic() - t0
    used = {key: max(after[key] - before[key], 0) / 1e9 for key in groups}
    control_plane = next((name for name in ids.values() if re.search(r"cp\d*$", name)), None)
    names = pod_names(control_plane) if control_plane else {}
    nodes = sorted({node for node, _ in groups})
    total = sum(used[node, "node"] for node in nodes)
    print(f"total {100 * total / elapsed:5.1f} % of one core over {elapsed:.0f} s (cgroup CPU accounting)")
    rows = []
    for node in nodes:
        pods = {uid: t for (n, uid), t in used.items() if n == node and uid != "node"}
        rows.append((used[node, "node"] - sum(pods.values()), node, "(kubelet, containerd, shims, runc)"))
        rows += [(t, node, names.get(uid, uid)) for uid, t in pods.items()]
        print(f"  {node:<22} {100 * used[node, 'node'] / elapsed:5.1f} %   outside Pods "
              f"{100 * rows[-len(pods) - 1][0] / elapsed:5.1f} %")
    print("busiest:")
    for t, node, what in sorted(rows, reverse=True)[:30]:
        print(f"  {100 * t / elapsed:5.1f} %  {node:<22} {what}")
    return 0


def main() -> int:
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the output quietly
    args = sys.argv[1:]
    if args[:1] == ["--pods"]:
        return by_pod(float(args[1]) if len(args) > 1 else 120.0)
    seconds = float(args[0]) if args else 120.0
    ids = container_ids()
    before, t0 = sample(ids), time.monotonic()
    time.sleep(seconds)
    after, elapsed = sample(ids), time.monotonic() - t0
    by_container, by_process = collections.Counter(), collections.Counter()
    for pid, (where, comm, ticks) in after.items():
        used = ticks - (before[pid][2] if pid in before and before[pid][1] == comm else 0)
        by_container[where] += used
        by_process[where, comm] += used

    def pct(ticks: int) -> str:
        return f"{100 * ticks / HZ / elapsed:5.1f} %"

    print(f"total {pct(sum(by_container.values()))} of one core over {elapsed:.0f} s "
          f"({os.cpu_count()} cores)")
    print("by container: " + ", ".join(f"{name} {pct(t)}" for name, t in by_container.most_common()))
    for (where, comm), ticks in by_process.most_common(25):
        print(f"  {pct(ticks)}  {where:<14} {comm}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
