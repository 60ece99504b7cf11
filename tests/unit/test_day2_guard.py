"""ansible-playbook cannot outlive the process running ansible-runner (ai_l1_day2/guard.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

GUARD = Path(__file__).resolve().parents[2] / "day2" / "ai_l1_day2" / "guard.py"


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def wait_gone(pid: int, timeout: float = 15) -> bool:
    end = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < end:
        time.sleep(0.1)
    return not alive(pid)


def test_the_playbook_dies_with_a_sigkilled_runner_and_the_run_gets_a_status(tmp_path):
    artifacts = tmp_path / "artifacts" / "run-1"
    pidfile = tmp_path / "playbook.pid"
    # The "runner": starts the guard in a session of its own (as pexpect does) and hangs.
    runner = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import subprocess, sys, time
        subprocess.Popen([sys.executable, {str(GUARD)!r}, {str(artifacts)!r}, "--", sys.executable, "-c",
                          "import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(60)"],
                         start_new_session=True)
        time.sleep(60)
    """)])
    end = time.monotonic() + 15
    while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < end:
        time.sleep(0.1)
    playbook = int(pidfile.read_text())
    assert alive(playbook)
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait()
    assert wait_gone(playbook), "the playbook outlived the runner"
    end = time.monotonic() + 10
    while not (artifacts / "status").exists() and time.monotonic() < end:
        time.sleep(0.1)
    assert (artifacts / "status").read_text() == "canceled\n"
    assert (artifacts / "rc").read_text() == "-15\n"


def test_a_stopped_run_leaves_no_process_behind_however_it_detached(tmp_path):
    """ansible's workers call setsid() and ssh runs in a session of its own: neither the
    playbook's process group nor its session holds them. On SIGTERM the guard stops every
    process below it (SIGKILL for one that ignores SIGTERM) and exits only once all are gone."""
    pidfile, marker = tmp_path / "detached.pid", tmp_path / "marker"
    playbook = textwrap.dedent(f"""
        import os, signal, time
        if os.fork() == 0:
            os.setsid()
            if os.fork():
                os._exit(0)  # the detached one is orphaned: reparented to the guard, not to us
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            open({str(pidfile)!r}, "w").write(str(os.getpid()))
            time.sleep(30)
            open({str(marker)!r}, "w").close()
            os._exit(0)
        time.sleep(60)
    """)
    guard = subprocess.Popen([sys.executable, str(GUARD), str(tmp_path / "a"), "--", sys.executable, "-c", playbook])
    end = time.monotonic() + 15
    while not (pidfile.exists() and pidfile.read_text()):
        assert time.monotonic() < end, "the detached process did not start"
        time.sleep(0.05)
    detached = int(pidfile.read_text())
    guard.send_signal(signal.SIGTERM)  # run_operation's cancel or timeout
    assert guard.wait(timeout=60) == 128 + signal.SIGTERM
    assert not alive(detached), "the guard exited while a process of the run lives"
    assert not marker.exists()


def test_signals_from_the_runner_reach_the_playbook_and_its_rc_comes_back(tmp_path):
    ready = tmp_path / "ready"
    guard = subprocess.Popen([sys.executable, str(GUARD), str(tmp_path / "a"), "--", sys.executable, "-c",
                              "import signal, sys, time\n"
                              "signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))\n"
                              f"open({str(ready)!r}, 'w').close()\n"
                              "time.sleep(60)"])
    end = time.monotonic() + 15
    while not ready.exists():  # the playbook runs: the guard forwards from here on
        assert time.monotonic() < end, "the playbook stand-in did not start"
        time.sleep(0.05)
    guard.send_signal(signal.SIGTERM)  # ansible-runner's cancel or timeout
    assert guard.wait(timeout=15) == 7
    assert not (tmp_path / "a" / "status").exists()  # the runner is alive: it records the outcome


def test_the_run_holds_its_lease_until_its_last_process_is_gone(tmp_path):
    """--lease: the guard holds a shared flock on the file, and the playbook inherits it: the
    remediation receiver counts the run alive while anyone holds it, even with the guard killed."""
    import fcntl  # noqa: PLC0415

    lease, ready, marker = tmp_path / "lease", tmp_path / "ready", tmp_path / "marker"
    lease.touch(mode=0o600)

    def held() -> bool:
        fd = os.open(lease, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    playbook = (f"import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                f"open({str(ready)!r}, 'w').close(); time.sleep(2); open({str(marker)!r}, 'w').close()")
    guard = subprocess.Popen([sys.executable, str(GUARD), str(tmp_path / "a"), "--lease", str(lease), "--",
                              sys.executable, "-c", playbook])
    end = time.monotonic() + 15
    while not ready.exists():
        assert time.monotonic() < end, "the playbook stand-in did not start"
        time.sleep(0.05)
    assert held()
    guard.kill()  # SIGKILL: nothing stops the playbook stand-in, which ignores SIGTERM
    guard.wait()
    assert held() and not marker.exists(), "the lease went with the guard while the playbook lives"
    end = time.monotonic() + 15
    while held():
        assert time.monotonic() < end, "the lease outlived the run"
        time.sleep(0.05)
    assert marker.exists()
    # a lease the guard cannot hold: the run does not start
    proc = subprocess.run([sys.executable, str(GUARD), str(tmp_path / "b"), "--lease", str(tmp_path / "none"), "--",
                           sys.executable, "-c", f"open({str(marker)!r} + '2', 'w')"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 1 and "lease" in proc.stderr and not Path(f"{marker}2").exists()


def test_usage():
    proc = subprocess.run([sys.executable, str(GUARD), "x"], capture_output=True, text=True, check=False)
    assert proc.returncode == 2 and "usage" in proc.stderr


def test_a_runs_directory_keeps_the_newest_finished_runs(tmp_path, monkeypatch):
    from ai_l1_day2 import runner  # noqa: PLC0415

    for n, status in enumerate(["successful", "failed", None, "successful", "successful"]):
        art = tmp_path / f"20261201T00000{n}-cordon-x" / "artifacts" / "id"
        art.mkdir(parents=True)
        if status:
            (art / "status").write_text(status)
    removed = runner.prune_runs(tmp_path, keep=2)
    # the oldest two finished ones go; the one without a status may still be running
    assert removed == ["20261201T000000-cordon-x", "20261201T000001-cordon-x"]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "20261201T000002-cordon-x", "20261201T000003-cordon-x", "20261201T000004-cordon-x"]
    monkeypatch.setenv("AI_L1_DAY2_KEEP_RUNS", "0")
    import pytest  # noqa: PLC0415

    with pytest.raises(runner.BadInput, match="AI_L1_DAY2_KEEP_RUNS"):
        runner.keep_runs()


def test_a_run_gets_the_api_address_of_its_pod_and_no_secret():
    """In the receiver's Pod the kubernetes client finds the API through KUBERNETES_SERVICE_*
    (in-cluster configuration); the receiver's token stays out of the run's environment."""
    from ai_l1_day2 import runner  # noqa: PLC0415

    environ = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443",
               "AI_L1_REMEDIATE_TOKEN": "secret-0123456789abcdef", "KUBERNETES_PORT": "tcp://10.96.0.1:443",
               "PATH": "/usr/bin"}
    env = runner.run_environment({**environ, "ANSIBLE_NOCOLOR": "1"}, environ)
    assert env == {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443", "PATH": "/usr/bin",
                   "ANSIBLE_NOCOLOR": "1"}
