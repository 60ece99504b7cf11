#!/usr/bin/env python3
"""`make test`: every gate, each started as soon as the stages it waits for have passed, the ones
that are ready side by side; each stage's start, end and duration at the end.

    python3 tests/stages.py [STAGE ...]     (default: every stage of STAGES; named stages run
                                             without the stages they wait for)

Each stage is a Makefile target. Its output goes to .cache/stages/<stage>.log and is printed whole
when the stage ends, so that the output of stages running at the same time is not interleaved.
When a stage fails, no other stage starts; the ones running finish; the run exits 1. The table of
durations is printed either way.
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / ".cache" / "stages"
# stage: the stages it starts after. On this 2-core machine the order is about the CPU as much as
# about what a stage needs.
STAGES: dict[str, list[str]] = {
    "bootstrap": [],
    # The node image and the lab's artifacts, once, for molecule and the integration tests. Before
    # sanity, not beside it: the receiver image hashes the collection, where sanity writes tests/output.
    "lab-prerequisites": ["bootstrap"],
    # The lab's integration tests, the longest stage, as soon as the lab can start; the gates that
    # need no lab and molecule's scenarios beside them, niced (NICE). The lab's nodes run in a CPU
    # group of their own weighted as eight processes (inventories/lab, lab_cpu_shares), so its
    # control loops stay on time while the other stages take the CPU it leaves. (Until 2026-12-07
    # the integration tests waited for lint, sanity and unit: every container shared podman's one
    # group, which weighed as much as a single host process, and the lab's etcd starved beside them.)
    "integration-tests": ["lab-prerequisites"],
    "lint": ["lab-prerequisites"],
    "sanity": ["lab-prerequisites"],
    "unit": ["lab-prerequisites"],
    "ee": ["lab-prerequisites"],
    "molecule-scenarios": ["lab-prerequisites"],
}
# Lower CPU priority (nice) for the stages off the critical path: they take the CPU the integration
# tests leave instead of slowing them down. Molecule's nodes are containers in podman's default
# group (weight 1024), its controller niced here.
NICE: dict[str, int] = {stage: 10 for stage in ("lint", "sanity", "unit", "ee", "molecule-scenarios")}


def cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of the whole machine since boot, from /proc/stat (0, 0 where it is absent)."""
    try:
        fields = [float(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return 0.0, 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def busy_percent(before: tuple[float, float], after: tuple[float, float]) -> str:
    total = after[1] - before[1]
    return f"{100 * (after[0] - before[0]) / total:3.0f} %" if total > 0 else "  ?"


# Containers run outside the stages' process trees (podman's conmon is not their child): their CPU is
# read from the cgroup v1 CPU accounting of the groups they start in, the lab's (labctl's
# lab_cpu_shares) and podman's default (molecule's nodes).
CPUACCT = Path("/sys/fs/cgroup/cpuacct")
CONTAINER_GROUPS = ("ai-l1-lab-", "libpod_parent")


def container_cpu(root: Path = CPUACCT) -> dict[str, float]:
    """CPU seconds used so far by each container group under `root` ({} where there is none)."""
    usage = {}
    try:
        groups = [g for g in root.iterdir() if g.name.startswith(CONTAINER_GROUPS)]
    except OSError:
        return usage
    for group in groups:
        try:
            usage[group.name] = int((group / "cpuacct.usage").read_text()) / 1e9
        except (OSError, ValueError):
            continue
    return usage


class CpuSampler(threading.Thread):
    """The machine's CPU use each `every` seconds: where the run leaves the cores idle (a stage that
    could start earlier) and where stages compete for them; and the containers' CPU seconds (a group
    removed between two samples keeps its last reading)."""

    def __init__(self, every: float = 60.0) -> None:
        super().__init__(daemon=True)
        self.every, self.samples, self._done = every, [cpu_times()], threading.Event()
        self.first, self.last = container_cpu(), {}

    def sample(self) -> None:
        self.samples.append(cpu_times())
        self.last.update(container_cpu())

    def run(self) -> None:
        while not self._done.wait(self.every):
            self.sample()

    def container_seconds(self) -> dict[str, float]:
        """CPU seconds each container group used during the run."""
        self.last.update(container_cpu())
        return {g: used - self.first.get(g, 0.0) for g, used in sorted(self.last.items())}

    def stop(self) -> list[str]:
        self._done.set()
        return [busy_percent(a, b).strip().removesuffix(" %") for a, b in itertools.pairwise(self.samples)]


def fmt(seconds: float) -> str:
    return f"{int(seconds // 60)} min {seconds % 60:04.1f} s"


def schedule(stages: dict[str, list[str]], start, poll, interval: float = 0.5) -> dict[str, int]:
    """Run `stages` by their dependencies: `start(stage)` starts one, `poll(stage)` returns its exit
    code once it has ended (None before). Returns the exit code of every stage that ran."""
    codes: dict[str, int] = {}
    running: set[str] = set()
    failed = False
    while True:
        if not failed:
            for stage, after in stages.items():
                if stage not in codes and stage not in running and all(codes.get(a) == 0 for a in after):
                    start(stage)
                    running.add(stage)
        if not running:
            return codes
        for stage in sorted(running):
            code = poll(stage)
            if code is not None:
                codes[stage] = code
                running.discard(stage)
                failed = failed or code != 0
        time.sleep(interval)


def main(argv: list[str]) -> int:
    unknown = set(argv) - set(STAGES)
    if unknown:
        print(f"unknown stages: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    chosen = {s: [a for a in after if not argv or a in argv] for s, after in STAGES.items() if not argv or s in argv}
    LOGS.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    procs: dict[str, tuple[subprocess.Popen, object]] = {}
    times: dict[str, tuple[float, float]] = {}
    cpu: dict[str, tuple[tuple[float, float], tuple[float, float]]] = {}
    seconds: dict[str, float] = {}
    sampler = CpuSampler()
    sampler.start()

    def start(stage: str) -> None:
        print(f"== {fmt(time.monotonic() - t0)}: stage {stage} started (log: {(LOGS / stage).relative_to(ROOT)}.log)",
              flush=True)
        log = (LOGS / f"{stage}.log").open("w")
        nice = ["nice", "-n", str(NICE[stage])] if stage in NICE else []
        procs[stage] = (subprocess.Popen([*nice, "make", "--no-print-directory", stage], cwd=ROOT, stdout=log,
                                         stderr=subprocess.STDOUT), log)
        times[stage] = (time.monotonic() - t0, 0.0)
        cpu[stage] = (cpu_times(), (0.0, 0.0))

    def poll(stage: str) -> int | None:
        proc, log = procs[stage]
        # wait4, not Popen.poll: its rusage is the CPU of the stage's whole process tree.
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid == 0:
            return None
        code = proc.returncode = os.waitstatus_to_exitcode(status)
        seconds[stage] = usage.ru_utime + usage.ru_stime
        log.close()
        began = times[stage][0]
        times[stage] = (began, time.monotonic() - t0)
        cpu[stage] = (cpu[stage][0], cpu_times())
        print(f"== {fmt(time.monotonic() - t0)}: stage {stage} "
              f"{'passed' if code == 0 else f'FAILED, exit {code}'} ({fmt(times[stage][1] - began)})", flush=True)
        sys.stdout.write((LOGS / f"{stage}.log").read_text(errors="replace"))
        sys.stdout.flush()
        return code

    codes = schedule(chosen, start, poll)
    ok = all(code == 0 for code in codes.values()) and set(codes) == set(chosen)
    print("\n== make test: stage durations (start and end from the beginning of the run; the machine's CPU use "
          "while the stage ran; the CPU time of the stage's own processes)")
    for stage, (began, ended) in times.items():
        state = "" if codes.get(stage) == 0 else "  FAILED"
        print(f"   {stage:<20} {fmt(ended - began):>14}   {fmt(began):>14} .. {fmt(ended):<14} "
              f"CPU {busy_percent(*cpu[stage])}  {fmt(seconds.get(stage, 0.0)):>14} CPU time{state}")
    for group, used in sampler.container_seconds().items():
        print(f"   containers in {group}: {fmt(used)} CPU time")
    not_run = [s for s in chosen if s not in codes]
    if not_run:
        print(f"   not run: {', '.join(not_run)}")
    print(f"   {'total':<20} {fmt(time.monotonic() - t0):>14}  ({'passed' if ok else 'FAILED'})")
    print(f"   CPU use by minute (%): {' '.join(sampler.stop())}", flush=True)
    for stage in (s for s, code in codes.items() if code != 0):
        print(f"== {stage} failed; from its log (.cache/stages/{stage}.log):")
        for line in failure_lines((LOGS / f"{stage}.log").read_text(errors="replace")):
            print(f"   {line}")
    return 0 if ok else 1


# Lines that name what failed: pytest's summary, ansible's fatal/failed results, molecule's and make's
# errors. The whole log is printed above; these come last so that a run's tail names the failure.
FAILURE = re.compile(r"^(FAILED|ERROR) |^fatal: |^failed: |CRITICAL |^make(\[\d+\])?: \*\*\*| failed=[1-9]")


def failure_lines(log: str, most: int = 12) -> list[str]:
    lines = log.splitlines()
    named = [line[:300] for line in lines if FAILURE.search(line)]
    return (named or [line[:300] for line in lines[-most:]])[-most:]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
