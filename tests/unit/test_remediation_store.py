"""Remediation store and restart recovery with a fake runner: queued work survives a
restart and runs once; a job a dead receiver left running is finished from its outcome,
waited for while its run lives, judged from the Node when it left nothing, never run twice."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from ai_l1_day2.remediation.executor import SubprocessExecutor
from ai_l1_day2.remediation.service import Service
from ai_l1_day2.remediation.store import Store
from remediation_fakes import FakeExecutor, FakeNodes, alert, make_config, payload


def make(tmp_path, nodes=None, **cfg):
    conf = make_config(tmp_path, **cfg)
    store = Store(conf.db_path)
    return Service(conf, store, nodes or FakeNodes(), FakeExecutor(conf.jobs_dir))


def wait_state(store, job_id, states, timeout=60):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        job = store.job(job_id)
        if job["state"] in states:
            return job
        time.sleep(0.02)
    pytest.fail(f"job {job_id} stayed {store.job(job_id)['state']}, expected {states}")


def dead_receiver_left_running(tmp_path, nodes=None, **cfg):
    """Receiver A queued a job and claimed it, then died: the row says running, owner A."""
    a = make(tmp_path, nodes=nodes, **cfg)
    [d] = a.handle_payload(payload(alert()))
    job = a.store.claim_next(a.owner)
    a.store.update_job(job["id"], pid=4_000_000, run_dir="x")  # beyond pid_max: never alive
    a.store.close()
    b = make(tmp_path, nodes=nodes or a.nodes, **cfg)
    b.owner = "receiver-b"
    return b, d["job_id"]


def test_worker_runs_job_once_and_releases_lock(tmp_path):
    svc = make(tmp_path)
    svc.start()
    try:
        [d] = svc.handle_payload(payload(alert()))
        job = wait_state(svc.store, d["job_id"], ("done", "failed"))
    finally:
        svc.stop()
    assert job["state"] == "done" and job["ident"] == f"run-{job['id']}-1" and job["attempts"] == 1
    [(job_id, spec)] = svc.executor.started
    assert job_id == job["id"] and spec["limit"] == ["gpu1"] and spec["operation"] == "isolate"
    assert spec["extravars"]["day2_fault"] == "xid-79" and "XID 79" in spec["extravars"]["day2_fault_details"]
    with svc.store.transaction() as db:
        assert svc.store.lock_holder(db, "gpu1") is None
    events = [e["event"] for e in svc.store.audit_entries()]
    assert events == ["receiver.started", "alert", "job.precordon", "job.started", "job.finished"]


def test_failed_run_is_recorded_failed(tmp_path):
    svc = make(tmp_path)
    svc.executor.on_start = lambda job, spec, ex: ex.results.__setitem__(
        job["id"], {"ident": "r", "status": "timeout", "rc": 254, "source": "runner"})
    svc.start()
    try:
        [d] = svc.handle_payload(payload(alert()))
        job = wait_state(svc.store, d["job_id"], ("done", "failed"))
    finally:
        svc.stop()
    assert (job["state"], job["status"], job["rc"]) == ("failed", "timeout", 254)


def test_queued_jobs_survive_restart_and_run_once(tmp_path):
    a = make(tmp_path)  # never started: the job stays queued, then the receiver "dies"
    [d] = a.handle_payload(payload(alert()))
    a.store.close()
    b = make(tmp_path)
    b.start()
    try:
        job = wait_state(b.store, d["job_id"], ("done",))
        time.sleep(0.3)
    finally:
        b.stop()
    assert [jid for jid, _ in b.executor.started] == [d["job_id"]]
    assert job["attempts"] == 1


def test_recovery_finished_run_marked_from_its_outcome(tmp_path):
    b, job_id = dead_receiver_left_running(tmp_path)
    b.executor.results[job_id] = {"ident": "r-1", "status": "successful", "rc": 0, "source": "artifacts"}
    b.recover()
    job = b.store.job(job_id)
    assert (job["state"], job["ident"]) == ("done", "r-1") and b.executor.started == []


def test_recovery_waits_for_a_live_run_instead_of_starting_another(tmp_path):
    b, job_id = dead_receiver_left_running(tmp_path)
    b.executor.alive_jobs.add(job_id)
    b.executor.idents[job_id] = "r-live"
    b.start()
    try:
        time.sleep(0.3)
        assert b.store.job(job_id)["state"] == "running"
        b.executor.results[job_id] = {"ident": "r-live", "status": "successful", "rc": 0, "source": "runner"}
        b.executor.alive_jobs.discard(job_id)
        job = wait_state(b.store, job_id, ("done",))
    finally:
        b.stop()
    assert b.executor.started == [] and job["ident"] == "r-live"
    assert any(e["decision"] == "adopted" for e in b.store.audit_entries("job.recovered"))


def test_recovery_dead_run_but_node_isolated_is_done_without_rerun(tmp_path):
    nodes = FakeNodes()
    b, job_id = dead_receiver_left_running(tmp_path, nodes=nodes)
    nodes.isolate("gpu1")
    b.start()
    try:
        job = wait_state(b.store, job_id, ("done", "failed"))
        time.sleep(0.2)
    finally:
        b.stop()
    assert job["state"] == "done" and "isolation completed" in job["message"] and b.executor.started == []


def test_recovery_dead_run_node_cordoned_and_tainted_but_not_drained_runs_again(tmp_path):
    """A receiver Pod deleted mid-drain takes its run with it: cordon and taint are there, the
    workload is not evicted yet. The job is run again (the playbook finishes the drain), once."""
    nodes = FakeNodes()
    b, job_id = dead_receiver_left_running(tmp_path, nodes=nodes)
    nodes.isolate("gpu1")
    nodes.pods["gpu1"] = ["team-a/train-0"]
    b.start()
    try:
        deadline = time.monotonic() + 10
        while not b.executor.started and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)
    finally:
        b.stop()
    assert [j for j, _ in b.executor.started] == [job_id], b.executor.started
    [recovered] = b.store.audit_entries("job.recovered")
    assert recovered["decision"] == "dead"
    [requeued] = b.store.audit_entries("job.requeued")
    assert "1 Pods are left to evict" in requeued["reason"] and "not isolated completely" in requeued["reason"]


def test_recovery_dead_run_node_not_isolated_runs_again_once(tmp_path):
    b, job_id = dead_receiver_left_running(tmp_path)
    b.start()
    try:
        job = wait_state(b.store, job_id, ("done", "failed"))
        time.sleep(0.3)
    finally:
        b.stop()
    assert job["state"] == "done" and job["attempts"] == 2
    assert [jid for jid, _ in b.executor.started] == [job_id]
    assert [e["event"] for e in b.store.audit_entries() if e["job_id"] == job_id][-4:] == [
        "job.requeued", "job.precordon", "job.started", "job.finished"]


def test_recovery_gives_up_after_max_attempts(tmp_path):
    b, job_id = dead_receiver_left_running(tmp_path, run={"max_attempts": 1})
    b.recover()
    job = b.store.job(job_id)
    assert job["state"] == "failed" and "max_attempts" in job["message"] and b.executor.started == []
    with b.store.transaction() as db:
        assert b.store.lock_holder(db, "gpu1") is None


def test_one_receiver_per_state_dir(tmp_path):
    a, b = make(tmp_path), make(tmp_path)
    a.acquire_state_dir()
    with pytest.raises(RuntimeError, match="one receiver per state directory"):
        b.acquire_state_dir()


def test_store_is_wal_and_lock_is_exclusive(tmp_path):
    store = Store(tmp_path / "s.sqlite")
    with store.transaction() as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        jid = store.insert_job(db, node="n", kind="k", detail="", alertname="a", fingerprint="f", pool="p",
                               state="queued")
        store.lock_node(db, "n", jid)
    other = Store(tmp_path / "s.sqlite")  # a second connection, as a second process would have
    with pytest.raises(Exception, match="UNIQUE"), other.transaction() as db:
        other.lock_node(db, "n", jid)


def test_executor_reads_outcome_from_artifacts_and_checks_pid(tmp_path):
    ex = SubprocessExecutor(tmp_path / "jobs")
    art = ex.job_dir(7) / "runs" / "id-a" / "artifacts" / "id-a"
    art.mkdir(parents=True)
    job = {"id": 7, "pid": None}
    assert ex.result(job) is None
    (art / "status").write_text("failed")
    (art / "rc").write_text("2")
    assert ex.result(job) == {"ident": "id-a", "status": "failed", "rc": 2, "artifacts_dir": str(art),
                              "source": "artifacts"}
    assert ex.runs(7) == ["id-a"]
    # a live process counts only when it holds the job's lease
    proc = lease_holder(ex, 7, 30)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert ex.alive({"id": 7, "pid": proc.pid}) is True
        # a recorded pid that is some other process (recycled) does not make a job alive
        lease_holder(ex, 8, 0).wait()  # job 8 ran, and its run is over
        assert ex.alive({"id": 8, "pid": other.pid}) is False
    finally:
        for p in (proc, other):
            p.kill()
            p.wait()
    assert ex.alive({"id": 7, "pid": proc.pid}) is False


def decoy(*args: str) -> subprocess.Popen:
    """A process of anyone's whose command line names a job directory (`sleep 9999 JOB_DIR`)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", *args])
    end = time.monotonic() + 10
    while args[-1].encode() not in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
        assert time.monotonic() < end, "the decoy did not start"
        time.sleep(0.01)
    return proc


def test_a_decoy_naming_the_job_directory_keeps_no_run_alive(tmp_path):
    """One `sleep 9999 /var/lib/ai-l1-remediate/jobs/job-000001` kept every job alive, its node
    locked: a run is what holds the job's lease, nothing a command line says."""
    ex = SubprocessExecutor(tmp_path / "jobs")
    lease_holder(ex, 1, 0).wait()  # the run started, and ended without an outcome
    jdir = ex.job_dir(1).resolve()
    decoys = [decoy(str(jdir)), decoy("-e", f"@{jdir}/runs/r-1/env/extravars")]
    try:
        assert ex.alive({"id": 1, "pid": None}) is False
        assert ex.alive({"id": 1, "pid": decoys[0].pid}) is False
        assert ex.run_processes({"id": 1, "pid": None}) == []
        ex.wait({"id": 1, "pid": None}, lambda ident: None, timeout_s=5)  # returns at once
    finally:
        for proc in decoys:
            proc.kill()
            proc.wait()


def test_a_job_without_a_lease_counts_only_the_receivers_own_processes(tmp_path):
    """A job an earlier receiver started (no lease file): its processes name the job directory,
    and only the receiver's own user's count."""
    ex = SubprocessExecutor(tmp_path / "jobs")
    jdir = ex.job_dir(2).resolve()
    jdir.mkdir(parents=True)
    proc = decoy(str(jdir))
    try:
        assert ex.alive({"id": 2, "pid": None}) is True
        assert ex.run_processes({"id": 2, "pid": None}) == [proc.pid]
        ex.uid = os.geteuid() + 1  # the same process, as another user's
        assert ex.alive({"id": 2, "pid": None}) is False
        assert ex.run_processes({"id": 2, "pid": None}) == []
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="starting another user's process needs root")
def test_another_users_process_never_keeps_a_run_alive(tmp_path):
    ex = SubprocessExecutor(tmp_path / "jobs")
    lease_holder(ex, 3, 0).wait()
    ex.job_dir(4).mkdir(parents=True)
    procs = [subprocess.Popen(["sh", "-c", "sleep 30; :", str(ex.job_dir(n).resolve())], user=65534) for n in (3, 4)]
    try:
        time.sleep(0.5)
        assert all(proc.poll() is None for proc in procs)
        for n in (3, 4):  # with a lease, and without one
            assert ex.alive({"id": n, "pid": None}) is False, n
            assert ex.run_processes({"id": n, "pid": None}) == [], n
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_a_started_run_holds_its_lease_from_its_first_instant(tmp_path):
    """The receiver takes the lease before the child exists and the child inherits it: a
    receiver dying right after the start leaves a run that counts as alive. The lease is the
    receiver's own (0600); one left there by someone else is replaced."""
    ex = SubprocessExecutor(tmp_path / "jobs")
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexec sleep 30\n")  # keeps the inherited descriptor, names nothing
    fake.chmod(0o755)
    ex.python = str(fake)
    ex.job_dir(5).mkdir(parents=True)
    lease(ex, 5).write_text("")
    lease(ex, 5).chmod(0o666)
    pid = ex.start({"id": 5, "attempts": 1}, {})
    try:
        st = lease(ex, 5).stat()
        assert (st.st_mode & 0o777, st.st_uid) == (0o600, os.geteuid())
        assert ex.alive({"id": 5, "pid": None}) is True
        assert ex.run_processes({"id": 5, "pid": None}) == [pid]
    finally:
        os.kill(pid, 9)
    end = time.monotonic() + 10
    while ex.alive({"id": 5, "pid": pid}):
        assert time.monotonic() < end, "the lease outlived the run"
        time.sleep(0.05)


def test_a_dead_receivers_job_is_not_held_by_a_decoy(tmp_path):
    """After a restart, a job whose run is gone is judged from the Node at once, whatever other
    processes name its directory (it used to stay `running`, its node locked, while they lived)."""
    nodes = FakeNodes()
    a = make(tmp_path, nodes=nodes)
    [d] = a.handle_payload(payload(alert()))
    job = a.store.claim_next(a.owner)
    a.store.close()
    conf = make_config(tmp_path)
    b = Service(conf, Store(conf.db_path), nodes, SubprocessExecutor(conf.jobs_dir))
    b.owner = "receiver-b"
    lease_holder(b.executor, job["id"], 0).wait()  # the run was started and died
    b.store.update_job(job["id"], pid=4_000_000, run_dir=str(b.executor.job_dir(job["id"])))
    proc = decoy(str(b.executor.job_dir(job["id"]).resolve()))
    b.executor.start = lambda *args: pytest.fail("the job was judged isolated: nothing to run again")
    nodes.isolate("gpu1")
    try:
        b.recover()
        done = b.store.job(d["job_id"])
    finally:
        proc.kill()
        proc.wait()
    assert done["state"] == "done" and "isolation completed" in done["message"]
    [recovered] = b.store.audit_entries("job.recovered")
    assert recovered["decision"] == "dead"
    with b.store.transaction() as db:
        assert b.store.lock_holder(db, "gpu1") is None


def test_concurrent_webhooks_never_double_lock(tmp_path):
    svc = make(tmp_path, ceiling={"max_fraction": 1.0, "pool_label": "accelerator"})
    results = []

    def send(name):
        results.extend(svc.handle_payload(payload(alert(name=name, host="gpu1"))))

    threads = [threading.Thread(target=send, args=(n,)) for n in ("GPUXidError", "GPUECCUncorrectableError") * 4]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(d["decision"] == "queued" for d in results) == 1
    assert len(svc.store.jobs()) == 1


@pytest.mark.parametrize("fail", [False, True])
def test_precordon_before_the_run_and_a_failed_one_still_runs(tmp_path, fail):
    nodes = FakeNodes()
    nodes.fail_cordon = fail
    svc = make(tmp_path, nodes=nodes)
    seen = []
    svc.executor.on_start = lambda job, spec, ex: (seen.append(nodes.items["gpu1"].unschedulable),
                                                   ex.results.__setitem__(job["id"], {"ident": "r", "status":
                                                                                      "successful", "rc": 0}))
    svc.start()
    try:
        [d] = svc.handle_payload(payload(alert()))
        job = wait_state(svc.store, d["job_id"], ("done", "failed"))
    finally:
        svc.stop()
    assert job["state"] == "done" and len(svc.executor.started) == 1
    [pre] = svc.store.audit_entries("job.precordon")
    if fail:
        assert seen == [False] and pre["decision"] == "failed" and "API down" in pre["reason"]
    else:
        assert seen == [True] and pre["decision"] == "cordoned"
        [(node, key, reason)] = nodes.cordons
        assert (node, key) == ("gpu1", "ai-platform.io/cordon-reason") and f"remediation job {job['id']}" in reason


def test_precordon_off(tmp_path):
    nodes = FakeNodes()
    svc = make(tmp_path, nodes=nodes, run={"precordon": False})
    svc.start()
    try:
        [d] = svc.handle_payload(payload(alert()))
        wait_state(svc.store, d["job_id"], ("done",))
    finally:
        svc.stop()
    assert nodes.cordons == [] and svc.store.audit_entries("job.precordon") == []


def test_receiver_error_around_a_job_fails_it_and_frees_the_node(tmp_path):
    svc = make(tmp_path)

    def boom(job, spec, ex):
        raise RuntimeError("executor exploded")

    svc.executor.on_start = boom
    svc.start()
    try:
        [d] = svc.handle_payload(payload(alert()))
        job = wait_state(svc.store, d["job_id"], ("failed",))
    finally:
        svc.stop()
    assert "executor exploded" in job["message"]
    with svc.store.transaction() as db:
        assert svc.store.lock_holder(db, "gpu1") is None


def test_executor_never_takes_an_earlier_attempts_outcome(tmp_path, monkeypatch):
    ex = SubprocessExecutor(tmp_path / "jobs")
    first = ex.job_dir(3) / "runs" / "id-1" / "artifacts" / "id-1"
    first.mkdir(parents=True)
    (first / "status").write_text("failed")
    (ex.job_dir(3) / "result.json").write_text('{"ident": "id-1", "status": "failed"}')

    class NoProcess:
        pid = 1

    monkeypatch.setattr("subprocess.Popen", lambda *a, **k: NoProcess())
    ex.start({"id": 3, "attempts": 2}, {})  # attempt 2 dies before its first event
    assert ex.result({"id": 3, "pid": None}) is None


def lease(ex: SubprocessExecutor, job_id: int) -> Path:
    return ex.job_dir(job_id) / "lease"


def lease_holder(ex: SubprocessExecutor, job_id: int, seconds: float) -> subprocess.Popen:
    """A process of the job's run: it holds the job's lease (as the run child, guard.py --lease
    and ansible-playbook do) for `seconds`, in a session of its own."""
    ex.job_dir(job_id).mkdir(parents=True, exist_ok=True)
    os.close(os.open(lease(ex, job_id), os.O_RDONLY | os.O_CREAT, 0o600))
    held = ex.job_dir(job_id) / f"held-{time.monotonic_ns()}"
    proc = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time; "
                             "fcntl.flock(os.open(sys.argv[1], os.O_RDONLY), fcntl.LOCK_SH); "
                             "open(sys.argv[2], 'w').close(); time.sleep(float(sys.argv[3]))",
                             str(lease(ex, job_id)), str(held), str(seconds)], start_new_session=True)
    end = time.monotonic() + 10
    while not held.exists():
        assert time.monotonic() < end, "the stand-in did not take the lease"
        time.sleep(0.01)
    return proc


def orphan_run(ex: SubprocessExecutor, job_id: int, seconds: float) -> subprocess.Popen:
    """What a SIGKILLed child leaves: ansible-playbook in its own session, holding the job's
    lease, reparented away from us."""
    return lease_holder(ex, job_id, seconds)


def test_an_orphaned_playbook_counts_as_the_run_without_a_pid(tmp_path):
    ex = SubprocessExecutor(tmp_path / "jobs")
    proc = orphan_run(ex, 3, 30)
    try:
        # no pid recorded (the receiver died before writing it), the child itself gone
        assert ex.alive({"id": 3, "pid": None}) is True
        assert ex.run_processes({"id": 3, "pid": None}) == [proc.pid]
        assert ex.alive({"id": 30, "pid": None}) is False  # job-000030 is not job-000003
    finally:
        proc.kill()
        proc.wait()
    assert ex.alive({"id": 3, "pid": None}) is False


def test_wait_ends_an_orphan_that_outlives_the_run_timeout(tmp_path):
    ex = SubprocessExecutor(tmp_path / "jobs")
    proc = orphan_run(ex, 4, 60)
    t0 = time.monotonic()
    assert ex.wait({"id": 4, "pid": None}, lambda ident: None, poll_s=0.05, timeout_s=0.5) is None
    assert proc.wait(timeout=15) == -15  # SIGTERM
    assert time.monotonic() - t0 < 15


def test_restart_never_starts_a_run_while_an_orphaned_playbook_lives(tmp_path):
    nodes = FakeNodes()
    a = make(tmp_path, nodes=nodes)
    [d] = a.handle_payload(payload(alert()))
    job = a.store.claim_next(a.owner)  # claimed; died before the pid was recorded
    a.store.close()
    conf = make_config(tmp_path)
    b = Service(conf, Store(conf.db_path), nodes, SubprocessExecutor(conf.jobs_dir))
    b.owner = "receiver-b"
    proc = orphan_run(b.executor, job["id"], 2)
    b.executor.start = lambda *args: pytest.fail("a second run was started while the first lives")
    nodes.isolate("gpu1")  # what the orphan's isolate playbook achieves before it ends
    b.start()
    try:
        time.sleep(0.5)
        assert b.store.job(d["job_id"])["state"] == "running"
        proc.wait(timeout=10)
        done = wait_state(b.store, d["job_id"], ("done", "failed"))
    finally:
        b.stop()
    assert done["state"] == "done" and "isolation completed" in done["message"]
    [adopted] = [e for e in b.store.audit_entries("job.recovered") if e["decision"] == "adopted"]
    assert str(proc.pid) in adopted["reason"]


def test_an_adopted_run_takes_a_worker_slot(tmp_path):
    b, job_id = dead_receiver_left_running(tmp_path, run={"workers": 1})
    b.executor.alive_jobs.add(job_id)
    b.start()
    try:
        [d] = b.handle_payload(payload(alert(host="gpu2")))
        time.sleep(0.5)
        assert b.executor.started == [], "a new run started beside the adopted one with run.workers 1"
        b.executor.results[job_id] = {"ident": "r", "status": "successful", "rc": 0, "source": "runner"}
        b.executor.alive_jobs.discard(job_id)
        wait_state(b.store, d["job_id"], ("done",))
    finally:
        b.stop()
    assert [jid for jid, _ in b.executor.started] == [d["job_id"]]


def test_a_run_the_guard_canceled_has_no_outcome(tmp_path):
    # guard.py writes `canceled` when the run child died under it: the Node decides, not this
    ex = SubprocessExecutor(tmp_path / "jobs")
    art = ex.job_dir(5) / "runs" / "id-b" / "artifacts" / "id-b"
    art.mkdir(parents=True)
    (art / "status").write_text("canceled\n")
    (art / "rc").write_text("-15\n")
    assert ex.result({"id": 5, "pid": None}) is None


def _run_failing(tmp_path, nodes, on_start):
    svc = make(tmp_path, nodes=nodes)
    svc.executor.on_start = on_start
    svc.start()
    try:
        [d] = svc.handle_payload(payload(alert()))
        return svc, wait_state(svc.store, d["job_id"], ("done", "failed"))
    finally:
        svc.stop()


def test_a_run_that_failed_before_its_first_step_leaves_the_node_schedulable(tmp_path):
    """The validation play refused the run: the receiver's own cordon is undone, and audited."""
    nodes = FakeNodes()
    svc, job = _run_failing(tmp_path, nodes, lambda job, spec, ex: ex.results.__setitem__(
        job["id"], {"ident": "r", "status": "failed", "rc": 2}))
    assert job["state"] == "failed"
    assert nodes.releases == ["gpu1"] and not nodes.items["gpu1"].unschedulable
    assert [e["decision"] for e in svc.store.audit_entries("job.precordon")] == ["cordoned", "released"]


def test_a_run_that_failed_after_the_playbook_cordoned_keeps_the_node_cordoned(tmp_path):
    """The playbook's own cordon replaced the reason (a drain that timed out, say): it stays."""
    nodes = FakeNodes()

    def playbook_cordons_then_fails(job, spec, ex):
        nodes.annotations["gpu1"]["ai-platform.io/cordon-reason"] = "fault isolation: xid-79: GPUXidError"
        ex.results[job["id"]] = {"ident": "r", "status": "failed", "rc": 2}

    _svc, job = _run_failing(tmp_path, nodes, playbook_cordons_then_fails)
    assert job["state"] == "failed" and nodes.releases == [] and nodes.items["gpu1"].unschedulable


def test_a_node_cordoned_before_the_alert_is_not_precordoned_nor_released(tmp_path):
    """An operator's cordon (and its reason) is never the receiver's to undo."""
    nodes = FakeNodes()
    nodes.items["gpu1"].unschedulable = True
    nodes.annotations["gpu1"] = {"ai-platform.io/cordon-reason": "maintenance by ops"}
    svc = make(tmp_path, nodes=nodes, ceiling={"max_fraction": 1.0, "pool_label": "accelerator"})
    svc.executor.on_start = lambda job, spec, ex: ex.results.__setitem__(
        job["id"], {"ident": "r", "status": "failed", "rc": 2})
    svc.start()
    try:
        [d] = svc.handle_payload(payload(alert()))
        wait_state(svc.store, d["job_id"], ("failed",))
    finally:
        svc.stop()
    assert nodes.cordons == [] and nodes.releases == [] and nodes.items["gpu1"].unschedulable
    assert nodes.annotations["gpu1"] == {"ai-platform.io/cordon-reason": "maintenance by ops"}
    assert [e["decision"] for e in svc.store.audit_entries("job.precordon")] == ["skipped"]
