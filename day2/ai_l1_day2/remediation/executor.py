"""Runs one isolation in its own process, detached from the receiver.

The receiver starts `python -m ai_l1_day2.remediation.execute <job dir>` in a new session:
a receiver that dies (kill -9, OOM, a redeploy) does not take a half-done drain with it.
The child calls ai_l1_day2.runner.run_operation with the job's own runs directory, writes
the ansible-runner ident to <job dir>/ident as soon as the first event names it, and the
outcome to <job dir>/result.json (written atomically) when the run ends.

A restarted receiver asks about each job it finds running: finished (result.json, or the
run's artifacts status when the child died after ansible-runner finished), still alive, or
dead without an outcome. "Alive" means the job's lease is held: <job dir>/lease, a file the
receiver creates (mode 0600, its own) and takes a shared flock on before it starts the child,
which inherits that lock (the receiver then closes its descriptor). The run's guard (guard.py)
takes the same lock with --lease, and ansible-playbook and its forked workers inherit it, so
the lease is held until the last of them has exited, whichever dies first; the guard itself
exits only once every process below it (ssh, the modules' commands) is gone. Nobody else can
hold it: another user cannot open the file, and a process whose command line merely names the
job's directory counts for nothing. Holding starts before the child exists, so a receiver that
died between starting a run and recording its pid does not start a second one either; a lease
nobody holds (the receiver died before the start, or the run ended) means not alive.

A job directory without a lease (a run started by an earlier receiver) falls back to what those
receivers counted: processes whose command line names the job's directory, but only the
receiver's own user's. terminate() stops the processes holding the lease (SIGTERM: the guard
stops everything below it), then SIGKILLs them and what they started after grace_s.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the directory holding ai_l1_day2/


class JobDirs:
    """What every executor keeps per job: its directory and the run's ident file."""

    def __init__(self, jobs_dir: Path):
        self.jobs_dir = Path(jobs_dir)

    def job_dir(self, job_id: int) -> Path:
        return self.jobs_dir / f"job-{job_id:06d}"

    def ident(self, job: dict) -> str | None:
        try:
            return (self.job_dir(job["id"]) / "ident").read_text().strip() or None
        except OSError:
            return None


LEASE = "lease"
TERMINATE_GRACE_S = 30.0  # more than guard.STOP_GRACE_S: the guard's own SIGKILLs come first


def open_lease(path: Path, create: bool = False) -> int | None:
    """The lease file, opened (O_NOFOLLOW): None when it is missing or not the receiver's own
    (a regular file, owned by this user, no access for group and others)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_CREAT if create else 0)
    try:
        fd = os.open(path, flags, 0o600)
    except OSError:
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        os.close(fd)
        return None
    return fd


def lease_held(fd: int) -> bool:
    """Whether anyone holds a lock on the lease (an exclusive one cannot be had)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    fcntl.flock(fd, fcntl.LOCK_UN)
    return False


def _stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name (state, ppid, ...); None when gone or a zombie."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields


def _own_pids(uid: int):
    """Pids of live processes of user `uid` (the owner of /proc/<pid>), but this one."""
    me = os.getpid()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
        except OSError:
            continue
        yield int(entry.name)


def _holds(pid: int, dev_ino: tuple[int, int]) -> bool:
    """Whether process `pid` has the file `dev_ino` open."""
    fds = f"/proc/{pid}/fd"
    try:
        names = os.listdir(fds)
    except OSError:
        return False
    for name in names:
        try:
            st = os.stat(f"{fds}/{name}")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == dev_ino:
            return True
    return False


class SubprocessExecutor(JobDirs):
    def __init__(self, jobs_dir: Path, python: str = sys.executable):
        super().__init__(jobs_dir)
        self.python = python
        self.uid = os.geteuid()
        self._children: dict[int, subprocess.Popen] = {}

    def lease(self, job_id: int) -> Path:
        return self.job_dir(job_id) / LEASE

    def start(self, job: dict, spec: dict) -> int:
        jdir = self.job_dir(job["id"])
        (jdir / "runs").mkdir(parents=True, exist_ok=True)
        attempt = job["attempts"]
        spec_path = jdir / f"spec-{attempt}.json"
        spec_path.write_text(json.dumps(spec, indent=2, sort_keys=True))
        # a previous attempt's outcome must not pass for this one's
        (jdir / "ident").unlink(missing_ok=True)
        if (jdir / "result.json").exists():
            (jdir / "result.json").replace(jdir / f"result-before-{attempt}.json")
        (jdir / f"idents-before-{attempt}").write_text("\n".join(self.runs(job["id"])))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE_ROOT), env.get("PYTHONPATH")]))
        lease = self._lease_for_start(job["id"])
        try:
            # Held from here: the child inherits the lock, so the run counts as alive from its
            # first instant, whenever the receiver dies.
            fcntl.flock(lease, fcntl.LOCK_SH)
            with open(jdir / f"execute-{attempt}.log", "ab") as log:
                proc = subprocess.Popen(  # noqa: S603 (our own interpreter and module)
                    [self.python, "-m", "ai_l1_day2.remediation.execute", str(jdir), str(spec_path)],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                    start_new_session=True, close_fds=True, pass_fds=(lease,))
        finally:
            os.close(lease)  # the child's copy keeps the lock
        self._children[proc.pid] = proc
        return proc.pid

    def _lease_for_start(self, job_id: int) -> int:
        path = self.lease(job_id)
        fd = open_lease(path, create=True)
        if fd is None:  # not ours (or not a file): nobody else's lease may stand for a run
            path.unlink(missing_ok=True)
            fd = os.open(path, os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        os.fchmod(fd, 0o600)
        return fd

    def _reap(self) -> None:
        for child in list(self._children.values()):
            child.poll()  # reap our own exited children

    def run_processes(self, job: dict) -> list[int]:
        """Pids of every process of this job's run that holds its lease (the child, the guard,
        ansible-playbook and its workers), wherever it was reparented."""
        self._reap()
        fd = open_lease(self.lease(job["id"]))
        if fd is None:
            return self._legacy_processes(job)
        try:
            st = os.fstat(fd)
        finally:
            os.close(fd)
        return [pid for pid in _own_pids(self.uid) if _holds(pid, (st.st_dev, st.st_ino))]

    def _legacy_processes(self, job: dict) -> list[int]:
        """A job without a lease (started by an earlier receiver): the receiver's user's processes
        whose command line names the job's directory (the child: JOB_DIR SPEC; ansible-playbook:
        -e @JOB_DIR/runs/<ident>/env/extravars)."""
        jdir = str(self.job_dir(job["id"]).resolve()).encode()
        pids = []
        for pid in _own_pids(self.uid):
            try:
                args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if any(arg == jdir or jdir + b"/" in arg for arg in args):
                pids.append(pid)
        return pids

    def alive(self, job: dict) -> bool:
        self._reap()
        fd = open_lease(self.lease(job["id"]))
        if fd is None:
            return bool(self._legacy_processes(job))
        try:
            return lease_held(fd)
        finally:
            os.close(fd)

    def terminate(self, job: dict, grace_s: float = TERMINATE_GRACE_S) -> None:
        """End every process of the run: SIGTERM to those holding its lease (the guard stops all
        that is below it, ansible's own workers included), then SIGKILL to them and to every
        process below them while the lease is still held after grace_s."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid, started in self._to_signal(job, below=sig == signal.SIGKILL):
                _signal(pid, started, sig)
            end = time.monotonic() + grace_s
            while self.alive(job) and time.monotonic() < end:
                time.sleep(0.2)
            if not self.alive(job):
                return

    def _to_signal(self, job: dict, below: bool) -> list[tuple[int, str]]:
        """(pid, start time) of the processes holding the lease, and with `below` of every
        process under them too."""
        found = self.run_processes(job)
        if below:
            children: dict[int, list[int]] = {}
            for pid in _own_pids(self.uid):
                if (fields := _stat(pid)) is not None:
                    children.setdefault(int(fields[1]), []).append(pid)
            queue = list(found)
            while queue:
                for pid in children.get(queue.pop(0), ()):
                    if pid not in found:
                        found.append(pid)
                        queue.append(pid)
        return [(pid, started) for pid in found if (started := _start_time(pid)) is not None]

    def result(self, job: dict) -> dict | None:
        """The run's outcome once it is known, from result.json or the artifacts."""
        jdir = self.job_dir(job["id"])
        try:
            return json.loads((jdir / "result.json").read_text())
        except (OSError, ValueError):
            pass
        ident = self.ident(job)
        earlier = {line for f in jdir.glob("idents-before-*") for line in f.read_text().split()}
        # runs/<private data dir>/artifacts/<ident>/status; no recursion (a run directory links to the project)
        for status in sorted((jdir / "runs").glob("*/artifacts/*/status")):
            if ident and status.parent.name != ident:
                continue
            if status.parent.name in earlier:
                continue
            if status.read_text().strip() == "canceled":
                # ended by guard.py when its run child died: no outcome; the Node says how far it got
                continue
            rc_file = status.parent / "rc"
            rc = int(rc_file.read_text().strip()) if rc_file.is_file() and rc_file.read_text().strip() else None
            return {"ident": status.parent.name, "status": status.read_text().strip(), "rc": rc,
                    "artifacts_dir": str(status.parent), "source": "artifacts"}
        return None

    def wait(self, job: dict, on_ident, poll_s: float = 0.1, timeout_s: float | None = None) -> dict | None:
        """Block until every process of the job's run has exited; report the ident once it
        appears. A run still going after timeout_s (an orphan nobody enforces the run timeout
        on any more) is terminated."""
        seen = None
        end = time.monotonic() + timeout_s if timeout_s else None
        while True:
            running = self.alive(job)
            if seen is None:
                seen = self.ident(job)
                if seen:
                    on_ident(seen)
            if not running:
                self._children.pop(job.get("pid"), None)
                return self.result(job)
            if end is not None and time.monotonic() > end:
                self.terminate(job)
                end = None
            time.sleep(poll_s)

    def runs(self, job_id: int) -> list[str]:
        """Every ansible-runner ident that ran for this job (its artifacts directories)."""
        root = self.job_dir(job_id) / "runs"
        return sorted({p.name for p in root.glob("*/artifacts/*") if p.is_dir()})


def _start_time(pid: int) -> str | None:
    """When the process started (/proc/<pid>/stat field 22): with the pid, it names one process."""
    fields = _stat(pid)
    return fields[19] if fields else None


def _signal(pid: int, started: str, sig: int) -> None:
    """Signal the process `pid` that started at `started`, never one that took its pid since:
    through a pidfd (it pins the process whose start time is then checked) where there is one."""
    pidfd = None
    try:
        if hasattr(os, "pidfd_open") and hasattr(signal, "pidfd_send_signal"):
            pidfd = os.pidfd_open(pid)
        if _start_time(pid) != started:
            return
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, sig)
        else:
            os.kill(pid, sig)
    except OSError:
        pass
    finally:
        if pidfd is not None:
            os.close(pidfd)


def make_executor(cfg):
    """The executor run.backend names: runner (this module: ansible-runner in a detached child) or
    awx (awx.AwxExecutor: the isolate job template launched through AWX's API)."""
    if cfg.backend == "awx":
        from .awx import AwxExecutor  # noqa: PLC0415

        return AwxExecutor(cfg.jobs_dir, cfg.awx)
    return SubprocessExecutor(cfg.jobs_dir)
