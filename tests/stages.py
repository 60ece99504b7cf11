#!/usr/bin/env python3
"""`make test`: the gates in order, independent ones side by side, each stage's time at the end.

    python3 tests/stages.py [STAGE ...]     (default: every stage of PLAN)

Each stage is a Makefile target. A step of PLAN runs its stages at once: what one stage leaves
idle on this 2-core machine (ansible-lint is one process, sanity runs its tests one after the
other, the image and artifact checks wait on podman and the file mirror, molecule's scenarios
wait on containers and SSH) the other uses. The output of stages that run side by side goes to
.cache/stages/<stage>.log and is printed whole, one stage after the other, when the step ends.
The first step with a failed stage ends the run (exit 1); the table of durations is printed
either way.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOGS = ROOT / ".cache" / "stages"
PLAN: list[list[str]] = [
    ["bootstrap"],
    # The node image and the lab's artifacts, once, for molecule and the integration tests. Before
    # sanity, not beside it: the receiver image hashes the collection, where sanity writes tests/output.
    ["lab-prerequisites"],
    # The gates that need no lab, with molecule's scenarios (they wait on containers and SSH, the
    # others on the CPU).
    ["lint", "sanity", "unit", "ee", "molecule-scenarios"],
    # The lab's integration tests alone: their waits are on the lab's control loops, which slow
    # down with anything beside them (2026-12-06: 53 min beside molecule, against about 42 alone).
    ["integration-tests"],
]


def fmt(seconds: float) -> str:
    return f"{int(seconds // 60)} min {seconds % 60:04.1f} s"


def run_step(stages: list[str], durations: dict[str, float]) -> bool:
    """Run one step's stages; True when all passed."""
    t0 = time.monotonic()
    if len(stages) == 1:
        print(f"== stage {stages[0]}", flush=True)
        rc = subprocess.run(["make", "--no-print-directory", stages[0]], cwd=ROOT, check=False).returncode
        durations[stages[0]] = time.monotonic() - t0
        return rc == 0
    LOGS.mkdir(parents=True, exist_ok=True)
    print(f"== stages side by side: {', '.join(stages)} (logs in {LOGS.relative_to(ROOT)})", flush=True)
    procs = {}
    for stage in stages:
        log = (LOGS / f"{stage}.log").open("w")
        procs[stage] = (subprocess.Popen(["make", "--no-print-directory", stage], cwd=ROOT, stdout=log,
                                         stderr=subprocess.STDOUT), log)
    pending = dict(procs)
    codes = {}
    while pending:
        for stage, (proc, log) in list(pending.items()):
            if proc.poll() is not None:
                codes[stage] = proc.returncode
                durations[stage] = time.monotonic() - t0
                log.close()
                del pending[stage]
        time.sleep(0.5)
    for stage in stages:
        print(f"== stage {stage} ({'passed' if codes[stage] == 0 else f'FAILED, exit {codes[stage]}'}, "
              f"{fmt(durations[stage])})", flush=True)
        sys.stdout.write((LOGS / f"{stage}.log").read_text(errors="replace"))
        sys.stdout.flush()
    return all(code == 0 for code in codes.values())


def main(argv: list[str]) -> int:
    plan = [[s for s in step if not argv or s in argv] for step in PLAN]
    plan = [step for step in plan if step]
    unknown = set(argv) - {s for step in PLAN for s in step}
    if unknown:
        print(f"unknown stages: {', '.join(sorted(unknown))}", file=sys.stderr)
        return 2
    durations: dict[str, float] = {}
    t0 = time.monotonic()
    ok = True
    for step in plan:
        step_t0 = time.monotonic()
        ok = run_step(step, durations)
        if len(step) > 1:
            durations[" + ".join(step)] = time.monotonic() - step_t0
        if not ok:
            break
    total = time.monotonic() - t0
    print("\n== make test: stage durations")
    for stage, seconds in durations.items():
        print(f"   {stage:<40} {fmt(seconds)}")
    print(f"   {'total':<40} {fmt(total)}  ({'passed' if ok else 'FAILED'})", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
