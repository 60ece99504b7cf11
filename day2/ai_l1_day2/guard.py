"""Runs ansible-playbook so that it cannot outlive the process that started it, and so that a
stopped run leaves no process behind.

    python -m ai_l1_day2.guard ARTIFACTS_DIR [--lease FILE] -- ansible-playbook ARGS...

ansible-runner starts the playbook through pexpect, in a session of its own: when the process
running ansible-runner is killed with SIGKILL (an OOM kill, `kill -9` of ai-l1-day2 or of the
remediation receiver's run child), ansible-playbook would go on draining nodes with nobody
watching, and the run's artifacts would never get a status. run_operation puts this guard in
front of the command. Linux's parent-death signal (prctl PR_SET_PDEATHSIG) gives the guard a
SIGTERM when that process dies; signals from run_operation itself (cancel, timeout) come the
same way.

Stopping means every process of the run, not only ansible-playbook: its workers call setsid()
(ansible-core's WorkerProcess), and ssh runs in a session of its own, so neither a process
group nor a session holds them all. The guard is therefore a child subreaper (prctl
PR_SET_CHILD_SUBREAPER): whatever the playbook starts stays below the guard, however it
detaches, and orphans are reparented to it. On SIGTERM, SIGINT or SIGHUP (or when the playbook
dies of a signal) the guard passes the signal to ansible-playbook (whose own handler stops its
workers), sends SIGTERM to every process below it, sends SIGKILL to what is left after
STOP_GRACE_S, and exits only when it has reaped every process below it. When whoever ran it is
gone it then writes the run's `status` (canceled) and `rc` into the artifacts, which nobody
else would; otherwise ansible-runner records the outcome once the guard has exited.

--lease FILE: the guard holds a shared flock on FILE (and ansible-playbook and its forked
workers inherit it) until the run has ended: the remediation receiver counts a run alive while
anyone holds its job's lease (remediation/executor.py).
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
STOP_GRACE_S = 10.0
USAGE = "usage: python -m ai_l1_day2.guard ARTIFACTS_DIR [--lease FILE] -- COMMAND [ARGS...]"


def _prctl(option: int, arg: int) -> None:
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0)


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """Ask the kernel for `sig` when the parent dies (Linux only; elsewhere a no-op)."""
    _prctl(PR_SET_PDEATHSIG, int(sig))


def become_subreaper() -> None:
    """Orphaned descendants are reparented to this process, not to init (Linux only)."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


def descendants(root: int) -> list[int]:
    """Pids of every live process below `root` (from /proc: parent links), parents first."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            fields = Path(entry.path, "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] in ("Z", "X"):  # exited: nothing to signal (a zombie below us is reaped)
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, queue = [], [root]
    while queue:
        for pid in children.get(queue.pop(0), ()):
            found.append(pid)
            queue.append(pid)
    return found


def _reap(child: subprocess.Popen) -> bool:
    """Reap every exited child (the playbook's status goes to `child`); True when none is left."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid == 0:
            return False
        if pid == child.pid:
            child.returncode = os.waitstatus_to_exitcode(status)


def end_run(child: subprocess.Popen, signum: int = signal.SIGTERM, grace_s: float = STOP_GRACE_S) -> None:
    """Stop every process below this one: `signum` to the playbook, SIGTERM to all of them,
    SIGKILL to what is left after grace_s; return once none is left (all reaped)."""
    me, termed = os.getpid(), {child.pid}
    if child.returncode is None:
        try:
            child.send_signal(signum)
        except OSError:
            pass
    end = time.monotonic() + grace_s
    while not _reap(child):
        late = time.monotonic() > end
        for pid in descendants(me):
            if not late and pid in termed:
                continue
            try:
                os.kill(pid, signal.SIGKILL if late else signal.SIGTERM)
            except OSError:
                continue
            termed.add(pid)
        time.sleep(0.05)


def hold_lease(path: str) -> int:
    """A shared flock on the lease file; the descriptor keeps it (inherited by the playbook)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    fcntl.flock(fd, fcntl.LOCK_SH)
    return fd


def parse(argv: list[str]) -> tuple[Path, str | None, list[str]] | None:
    if "--" not in argv:
        return None
    split = argv.index("--")
    head, command = argv[:split], argv[split + 1:]
    if len(head) == 3 and head[1] == "--lease":  # noqa: PLR2004 (ARTIFACTS --lease FILE)
        head, lease = head[:1], head[2]
    else:
        lease = None
    if len(head) != 1 or not command:
        return None
    return Path(head[0]), lease, command


def main(argv: list[str]) -> int:
    parsed = parse(argv)
    if parsed is None:
        print(USAGE, file=sys.stderr)
        return 2
    artifacts, lease_path, command = parsed
    # Handlers first: a signal that arrives before the playbook runs means it never starts.
    stop: list[int] = []

    def on_signal(signum, _frame):
        stop.append(signum)

    for sig in FORWARDED:
        signal.signal(sig, on_signal)
    parent = os.getppid()
    die_with_parent()
    become_subreaper()
    if os.getppid() != parent:  # the parent died before the request took effect
        return 143
    try:
        lease = hold_lease(lease_path) if lease_path else None
    except OSError as exc:  # an untracked run must not start
        print(f"guard: cannot hold the run's lease {lease_path}: {exc}", file=sys.stderr)
        return 1
    if stop or os.getppid() != parent:  # stopped before it started: nothing runs
        return ended(artifacts, parent, -(stop[0] if stop else signal.SIGTERM))
    child = subprocess.Popen(command, preexec_fn=die_with_parent,  # noqa: S603, PLW1509 (prctl only)
                             pass_fds=(lease,) if lease is not None else ())
    while child.poll() is None and not stop:
        time.sleep(0.2)
    # Stopped, or the playbook died of a signal (its workers and their commands may live on):
    # nothing of the run is left when the guard exits. A playbook that ended by itself leaves
    # only what it meant to (an ssh ControlPersist master).
    if stop or (child.returncode is not None and child.returncode < 0):
        end_run(child, stop[0] if stop else signal.SIGTERM)
    return ended(artifacts, parent, child.wait())


def ended(artifacts: Path, parent: int, rc: int) -> int:
    """The guard's exit status for the playbook's `rc`; when whoever ran us is gone, the run's
    end recorded first, or the run looks as if it never finished."""
    if os.getppid() != parent:
        artifacts.mkdir(parents=True, exist_ok=True)
        (artifacts / "rc").write_text(f"{rc}\n")
        (artifacts / "status").write_text("canceled\n")
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
