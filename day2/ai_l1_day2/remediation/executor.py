"""Runs one isolation in its own process, detached from the receiver.

The receiver starts `python -m ai_l1_day2.remediation.execute <job dir>` in a new session:
a receiver that dies (kill -9, OOM, a redeploy) does not take a half-done drain with it.
The child calls ai_l1_day2.runner.run_operation with the job's own runs directory, writes
the ansible-runner ident to <job dir>/ident as soon as the first event names it, and the
outcome to <job dir>/result.json (written atomically) when the run ends.

A restarted receiver asks about each job it finds running: finished (result.json, or the
run's artifacts status when the child died after ansible-runner finished), still alive, or
dead without an outcome. "Alive" means any process whose command line names the job's
directory: the child itself, and ansible-playbook with its forks, which ansible-runner starts
in a session of their own (pexpect) and which outlive a child killed with SIGKILL. The pid the
store records is not needed for this, so a receiver that died between starting a run and
recording its pid does not start a second one either.
"""

from __future__ import annotations

import json
import os
import signal
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


class SubprocessExecutor(JobDirs):
    def __init__(self, jobs_dir: Path, python: str = sys.executable):
        super().__init__(jobs_dir)
        self.python = python
        self._children: dict[int, subprocess.Popen] = {}

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
        with open(jdir / f"execute-{attempt}.log", "ab") as log:
            proc = subprocess.Popen(  # noqa: S603 (our own interpreter and module)
                [self.python, "-m", "ai_l1_day2.remediation.execute", str(jdir), str(spec_path)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                start_new_session=True, close_fds=True)
        self._children[proc.pid] = proc
        return proc.pid

    def run_processes(self, job: dict) -> list[int]:
        """Pids of every process of this job's run, wherever it was reparented."""
        for child in list(self._children.values()):
            child.poll()  # reap our own exited children: a zombie has no command line anyway
        jdir = str(self.job_dir(job["id"]).resolve()).encode()
        pids = []
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                args = Path(entry.path, "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            # the child: JOB_DIR SPEC; ansible-playbook: -e @JOB_DIR/runs/<ident>/env/extravars
            if any(arg == jdir or jdir + b"/" in arg for arg in args):
                pids.append(int(entry.name))
        return pids

    def alive(self, job: dict) -> bool:
        return bool(self.run_processes(job))

    def terminate(self, job: dict, grace_s: float = 10.0) -> None:
        """End every process of the run: SIGTERM, then SIGKILL what is left after grace_s."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in self.run_processes(job):
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
            end = time.monotonic() + grace_s
            while self.alive(job) and time.monotonic() < end:
                time.sleep(0.2)
            if not self.alive(job):
                return

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


def make_executor(cfg):
    """The executor run.backend names: runner (this module: ansible-runner in a detached child) or
    awx (awx.AwxExecutor: the isolate job template launched through AWX's API)."""
    if cfg.backend == "awx":
        from .awx import AwxExecutor  # noqa: PLC0415

        return AwxExecutor(cfg.jobs_dir, cfg.awx)
    return SubprocessExecutor(cfg.jobs_dir)
