"""Canceled and timed out mean stopped: ansible-playbook and every process it started (its
workers, which call setsid(), and the commands of their modules) have exited before the run's
status is written or reported (runner.stop_run, guard.py), through ai-l1-day2 (cancel, SIGTERM,
--timeout) and through the remediation receiver's timeout kill (executor.terminate).

Each run is real (ansible-runner, ansible-playbook, a local task): the task marks that it began,
sleeps, then writes a marker file. The run is stopped while the task sleeps; no process that
was part of the run may be left once the stop is reported, and the marker must never appear.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ai_l1_day2 import runner
from ai_l1_day2.remediation.executor import SubprocessExecutor
from ai_l1_day2.runner import OPERATIONS, run_operation

PLAY = """---
- name: Stand-in for a day-2 playbook
  hosts: all
  connection: local
  gather_facts: false
  tasks:
    - name: Mark the start, sleep, then write the marker
      ansible.builtin.command:
        argv: ["{{ ansible_playbook_python }}", "{{ task_script }}", "{{ started }}", "{{ marker }}",
               "{{ sleep_s }}", "{{ detach }}"]
      changed_when: true
"""
# detach: the command forks a process in a session of its own (as ssh is started) and waits for it
TASK = """import os, sys, time
started, marker, sleep_s, detach = sys.argv[1:5]
if detach == "detach":
    pid = os.fork()
    if pid:
        os.waitpid(pid, 0)
        sys.exit(0)
    os.setsid()
open(started, "w").close()
time.sleep(float(sleep_s))
open(marker, "w").close()
"""
SLEEP_S = 6


@pytest.fixture
def project(tmp_path, monkeypatch):
    root = tmp_path / "project"
    (root / "playbooks" / "day2").mkdir(parents=True)
    for playbook in OPERATIONS.values():
        (root / "playbooks" / "day2" / playbook).write_text(PLAY)
    local = "{ansible_connection: local, ansible_python_interpreter: '{{ ansible_playbook_python }}'}"
    (root / "inventory.yml").write_text(f"all:\n  hosts:\n    node1: {local}\n")
    (tmp_path / "task.py").write_text(TASK)
    monkeypatch.setenv(runner.PROJECT_ENV, str(root))
    monkeypatch.setenv(runner.RUNS_ENV, str(tmp_path / "runs"))
    return root


def task_vars(tmp_path: Path, sleep_s: float = SLEEP_S, detach: bool = False) -> dict:
    return {"task_script": str(tmp_path / "task.py"), "started": str(tmp_path / "started"),
            "marker": str(tmp_path / "marker"), "sleep_s": sleep_s, "detach": "detach" if detach else "stay"}


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def tree(root: int) -> dict[tuple[int, str], str]:
    """Every live process below `root`: (pid, start time) -> its command line."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, queue = {}, [root]
    while queue:
        for pid in children.get(queue.pop(0), ()):
            fields = _stat(pid)
            if fields:
                try:
                    args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                found[(pid, fields[19])] = " ".join(a.decode(errors="replace") for a in args)  # field 22: start
                queue.append(pid)
    return found


def left(procs: dict[tuple[int, str], str]) -> list[str]:
    """The processes of `procs` still alive (same pid, same start time, not a zombie)."""
    alive = []
    for (pid, start), args in procs.items():
        fields = _stat(pid)
        if fields and fields[0] not in ("Z", "X") and fields[19] == start:
            alive.append(f"{pid} {args[:160]}")
    return alive


def left_once_exited(procs: dict[tuple[int, str], str], timeout: float = 10.0) -> list[str]:
    """left(), for a lease seen free: the kernel releases a process's locks (closing its files)
    before the process is done exiting, so the last holder may still show for a moment."""
    end = time.monotonic() + timeout
    while (alive := left(procs)) and time.monotonic() < end:
        time.sleep(0.05)
    return alive


def has_task(procs: dict[tuple[int, str], str], detached: bool = False) -> bool:
    """The task's command was running (the stop came while it slept), in two processes when
    it detached one."""
    return sum("task.py" in args for args in procs.values()) == (2 if detached else 1)


def wait_for(path: Path, timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < end, f"{path.name} never appeared: the task did not start"
        time.sleep(0.1)


def assert_no_marker(tmp_path: Path) -> None:
    """Wait until the task's sleep would have ended (and then some): no marker."""
    end = (tmp_path / "started").stat().st_mtime + SLEEP_S + 3
    time.sleep(max(0.0, end - time.time()))
    assert not (tmp_path / "marker").exists(), "the stopped run's task went on and wrote its marker"


def test_cancel_stops_every_process_of_the_run_before_it_says_canceled(project, tmp_path):
    running: dict = {}

    def cancel() -> bool:
        if not (tmp_path / "started").exists():
            return False
        running.update(tree(os.getpid()))  # the run as it is when the cancel comes
        return True

    res = run_operation("drain", inventory=project / "inventory.yml", limit=["node1"], quiet=True,
                        extravars=task_vars(tmp_path), cancel_callback=cancel)
    assert res.status == "canceled"
    assert (res.artifacts_dir / "status").read_text().strip() == "canceled"
    assert has_task(running), running
    assert left(running) == [], "processes of the canceled run are left"
    assert_no_marker(tmp_path)


def test_a_timeout_stops_every_process_of_the_run_before_it_says_timeout(project, tmp_path):
    running: dict = {}

    def watch() -> bool:
        if (tmp_path / "started").exists() and not running:
            running.update(tree(os.getpid()))
        return False

    res = run_operation("drain", inventory=project / "inventory.yml", limit=["node1"], quiet=True,
                        extravars=task_vars(tmp_path, sleep_s=600, detach=True), cancel_callback=watch, timeout=60)
    assert has_task(running, detached=True), "the task had not started when the run timed out"
    assert res.status == "timeout" and res.rc == 254
    assert left(running) == [], "processes of the timed-out run are left"


def test_sigterm_to_ai_l1_day2_stops_the_run_before_it_reports_canceled(project, tmp_path):
    args = [f"{k}={v}" for k, v in task_vars(tmp_path).items()]
    cli = subprocess.Popen([sys.executable, "-m", "ai_l1_day2.cli", "drain", "-n", "node1", "-i",
                            str(project / "inventory.yml"), "--json", *[a for v in args for a in ("-e", v)]],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(tmp_path / "started")
        running = tree(cli.pid)
        assert has_task(running), running
        cli.send_signal(signal.SIGTERM)
        out, err = cli.communicate(timeout=600)
    finally:
        if cli.poll() is None:
            cli.kill()
    assert left(running) == [], "processes of the canceled run are left"
    assert cli.returncode == 5, err
    assert json.loads(out)["status"] == "canceled"
    assert_no_marker(tmp_path)


def test_the_receivers_timeout_kill_stops_every_process_of_the_run(project, tmp_path):
    ex = SubprocessExecutor(tmp_path / "jobs")
    job = {"id": 1, "attempts": 1, "pid": None}
    spec = {"operation": "isolate", "inventory": str(project / "inventory.yml"), "limit": ["node1"],
            "extravars": task_vars(tmp_path, detach=True), "timeout": None}
    job["pid"] = ex.start(job, spec)
    try:
        wait_for(tmp_path / "started")
        running = tree(os.getpid())
        assert has_task(running, detached=True), running
        assert ex.alive(job) and job["pid"] in ex.run_processes(job)
        # past the run timeout: the receiver ends the run (SIGTERM: the child cancels it)
        result = ex.wait(job, lambda ident: None, timeout_s=0.1)
    finally:
        ex.terminate(job, grace_s=5)
    assert left_once_exited(running) == [], "processes of the killed run are left"
    assert not ex.alive(job)
    assert result["status"] == "canceled" and result["source"] == "runner", result
    assert_no_marker(tmp_path)


def test_a_run_whose_child_is_killed_is_alive_until_its_last_process_is_gone(project, tmp_path):
    """kill -9 of the receiver's run child (an OOM kill): the guard stops the run and records it
    canceled (no outcome: the Node decides); the job's lease stays held, so a restarted receiver
    waits instead of starting a second run, until no process of the run is left."""
    ex = SubprocessExecutor(tmp_path / "jobs")
    job = {"id": 2, "attempts": 1, "pid": None}
    spec = {"operation": "isolate", "inventory": str(project / "inventory.yml"), "limit": ["node1"],
            "extravars": task_vars(tmp_path, detach=True), "timeout": None}
    job["pid"] = ex.start(job, spec)
    try:
        wait_for(tmp_path / "started")
        running = tree(os.getpid())
        assert has_task(running, detached=True), running
        os.kill(job["pid"], signal.SIGKILL)
        restarted = SubprocessExecutor(tmp_path / "jobs")  # a receiver that never knew the child
        assert restarted.wait(job, lambda ident: None, poll_s=0.01) is None
        assert left_once_exited(running) == [], "the lease was free while processes of the run lived"
    finally:
        ex.terminate(job, grace_s=5)
    [status] = (ex.job_dir(2) / "runs").glob("*/artifacts/*/status")
    assert status.read_text() == "canceled\n"
    assert_no_marker(tmp_path)
