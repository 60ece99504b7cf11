"""Runs ansible-playbook so that it cannot outlive the process that started it.

    python -m ai_l1_day2.guard ARTIFACTS_DIR -- ansible-playbook ARGS...

ansible-runner starts the playbook through pexpect, in a session of its own: when the process
running ansible-runner is killed with SIGKILL (an OOM kill, `kill -9` of ai-l1-day2 or of the
remediation receiver's run child), ansible-playbook would go on draining nodes with nobody
watching, and the run's artifacts would never get a status. run_operation puts this guard in
front of the command. Linux's parent-death signal (prctl PR_SET_PDEATHSIG) gives the guard a
SIGTERM when that process dies; the guard forwards it to ansible-playbook (which has the same
signal for the guard's own death), waits for it, and, because nobody else will, writes the
run's `status` (canceled) and `rc` into the artifacts. Signals from ansible-runner itself
(cancel, timeout) are forwarded the same way, and then ansible-runner records the outcome.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from pathlib import Path

PR_SET_PDEATHSIG = 1
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Ask the kernel for `sig` when the parent dies (Linux only; elsewhere a no-op)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":  # noqa: PLR2004 (ARTIFACTS -- COMMAND...)
        print("usage: python -m ai_l1_day2.guard ARTIFACTS_DIR -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    artifacts, command = Path(argv[0]), argv[2:]
    parent = os.getppid()
    die_with_parent()
    if os.getppid() != parent:  # the parent died before the request took effect
        return 143
    # Handlers first: a signal that arrives while the child starts is passed on once it runs.
    running: list[subprocess.Popen] = []
    pending: list[int] = []

    def forward(signum, _frame):
        if running:
            running[0].send_signal(signum)
        else:
            pending.append(signum)

    for sig in FORWARDED:
        signal.signal(sig, forward)
    child = subprocess.Popen(command, preexec_fn=die_with_parent)  # noqa: S603, PLW1509 (prctl only)
    running.append(child)
    for signum in pending:
        child.send_signal(signum)
    rc = child.wait()
    if os.getppid() != parent:
        # Whoever ran us is gone: record the end, or the run looks as if it never finished.
        artifacts.mkdir(parents=True, exist_ok=True)
        (artifacts / "rc").write_text(f"{rc}\n")
        (artifacts / "status").write_text("canceled\n")
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
