#!/usr/bin/env python3
"""Where the machine's CPU goes over an interval, by lab node and by process.

    python tests/bench/lab_cpu.py [SECONDS]      (default 120)

Reads /proc for every process of the host twice, SECONDS apart, and assigns each to the podman
container whose cgroup it is in (or "host"); prints the total (100 % = one core), each container
and the 25 busiest (container, process) pairs. Run it on a converged, idle lab to see what keeping
the lab alive costs the tests beside it (docs/lab.md, "make test"), or during a test to see who
competes. A process that started in the interval counts with all its CPU time. No assertions.
"""

import collections
import os
import subprocess
import sys
import time

HZ = os.sysconf("SC_CLK_TCK")


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


def main() -> int:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 120.0
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
