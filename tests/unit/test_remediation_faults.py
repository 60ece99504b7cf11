"""The remediation receiver when its store or the Kubernetes API fails (issue 13, item 2):
/healthz tells the truth, a webhook the store cannot record is answered 503 (Alertmanager
sends it again), a refused write around a run is retried until the disk is back, a lost store
never reuses job numbers that have artifacts, and an unusable store at start exits 3."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
import urllib.error
import urllib.request

import pytest
from ai_l1_day2.remediation import cli
from ai_l1_day2.remediation import server as server_mod
from ai_l1_day2.remediation.service import Service
from ai_l1_day2.remediation.store import Store, StoreError
from remediation_fakes import TOKEN, FakeExecutor, FakeNodes, alert, make_config, payload
from test_remediation_auth import post
from test_remediation_store import wait_state


def make(tmp_path, nodes=None, **cfg):
    conf = make_config(tmp_path, **cfg)
    return Service(conf, Store(conf.db_path), nodes or FakeNodes(), FakeExecutor(conf.jobs_dir))


@pytest.fixture
def served(tmp_path):
    svc = make(tmp_path)
    srv = server_mod.make_server(svc, "127.0.0.1", 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield svc, f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def call(url: str, body: dict | None = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else None
    if data is not None:
        return post(url, data, {"Authorization": f"Bearer {TOKEN}"})
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {TOKEN}"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_healthz_ok_then_names_a_deleted_store_and_a_dead_api(served):
    svc, url = served
    assert call(f"{url}/healthz") == (200, {"status": "ok", "store": "ok", "kubernetes": "ok",
                                            "owner": svc.owner, "dry_run": False})
    svc.nodes.down = True
    svc.cfg.db_path.unlink()
    code, body = call(f"{url}/healthz")
    assert code == 503 and body["status"] == "unhealthy"
    assert "is gone" in body["store"] and "does not answer" in body["kubernetes"]


def test_a_webhook_the_store_cannot_record_is_503(served):
    svc, url = served
    svc.cfg.db_path.unlink()
    code, body = call(f"{url}/webhook", payload(alert()))
    assert code == 503 and "is gone" in body["error"], body
    assert svc.executor.started == []


def test_a_webhook_whose_decision_cannot_be_written_is_503(served):
    svc, url = served
    # A store that still is its file but refuses writes (a full disk): the decision's own
    # transaction fails, so Alertmanager is told to retry and nothing runs.
    svc.store._db.execute("PRAGMA query_only=ON")
    code, body = call(f"{url}/webhook", payload(alert()))
    assert code == 503 and "readonly" in body["error"], body
    assert svc.executor.started == []
    svc.store._db.execute("PRAGMA query_only=OFF")
    assert svc.store.jobs() == []


def test_store_check_sees_a_replaced_file(tmp_path):
    store = Store(tmp_path / "s.sqlite")
    store.check()
    (tmp_path / "s.sqlite").unlink()
    Store(tmp_path / "s.sqlite").close()  # someone else's fresh file at the same path
    with pytest.raises(StoreError, match="replaced"):
        store.check()


def test_a_refused_write_around_a_run_is_retried_until_it_lands(tmp_path, monkeypatch):
    svc = make(tmp_path)
    real = svc.store.finish_job
    refusals = []

    def full_disk(*args, **kwargs):
        if len(refusals) < 2:
            refusals.append(time.monotonic())
            raise sqlite3.OperationalError("database or disk is full")
        return real(*args, **kwargs)

    monkeypatch.setattr(svc.store, "finish_job", full_disk)
    svc.start()
    try:
        [d] = svc.handle_payload(payload(alert()))
        wait_state(svc.store, d["job_id"], ("done",), timeout=60)
    finally:
        svc.stop()
    job = svc.store.job(d["job_id"])
    assert job["state"] == "done" and len(refusals) == 2, job
    with svc.store.transaction() as db:
        assert svc.store.lock_holder(db, "gpu1") is None


def test_a_lost_store_never_reuses_job_numbers(tmp_path):
    a = make(tmp_path)
    a.start()
    try:
        [d] = a.handle_payload(payload(alert()))
        wait_state(a.store, d["job_id"], ("done",))
    finally:
        a.stop()
    (a.cfg.jobs_dir / "job-000007").mkdir(parents=True)  # artifacts of earlier jobs
    a.store.close()
    a.cfg.db_path.unlink()
    for suffix in ("-wal", "-shm"):
        a.cfg.db_path.with_name(a.cfg.db_path.name + suffix).unlink(missing_ok=True)
    b = make(tmp_path)
    b.start()
    try:
        [d2] = b.handle_payload(payload(alert(host="gpu2")))
    finally:
        b.stop()
    assert d2["job_id"] == 8
    [reset] = b.store.audit_entries("store.reset")
    assert "job directories up to 7" in reset["reason"]


def test_an_unusable_store_at_start_exits_3(tmp_path, monkeypatch):
    conf = make_config(tmp_path)
    conf.db_path.mkdir(parents=True)  # a directory where the database file should be
    monkeypatch.setattr(cli, "_load", lambda args: conf)

    class Kube:
        def __init__(self, *args):
            pass

    from ai_l1_day2.remediation import kube  # noqa: PLC0415

    monkeypatch.setattr(kube, "KubeNodes", Kube)
    assert cli.serve(type("Args", (), {"config": None})()) == 3


def test_finished_job_directories_beyond_the_retention_are_removed(tmp_path):
    svc = make(tmp_path, run={"keep_job_dirs": 2}, ceiling={"max_fraction": 1.0, "pool_label": "accelerator"})
    svc.start()
    try:
        ids = []
        for host in ("gpu1", "gpu2", "gpu3"):
            [d] = svc.handle_payload(payload(alert(host=host)))
            ids.append(d["job_id"])
            wait_state(svc.store, d["job_id"], ("done",))
            svc.executor.job_dir(d["job_id"]).mkdir(parents=True, exist_ok=True)
        (svc.cfg.jobs_dir / "job-000099").mkdir()  # not a finished job of this store: kept
        assert svc.prune_job_dirs() == [ids[0]]
    finally:
        svc.stop()
    assert sorted(p.name for p in svc.cfg.jobs_dir.iterdir()) == [
        f"job-{ids[1]:06d}", f"job-{ids[2]:06d}", "job-000099"]
    assert svc.store.job(ids[0])["state"] == "done"  # the row and the audit stay


def test_readyz_needs_no_credentials_and_tells_only_up_or_down(served):
    """kubelet's probes carry no token: /readyz answers them, with no detail a caller could use."""
    svc, url = served

    def anonymous(path):
        try:
            with urllib.request.urlopen(f"{url}{path}", timeout=10) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read())

    assert anonymous("/readyz") == (200, {"status": "ok"})
    assert anonymous("/healthz")[0] == 401
    svc.nodes.down = True
    assert anonymous("/readyz") == (503, {"status": "unhealthy"})
