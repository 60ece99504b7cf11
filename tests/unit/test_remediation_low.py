"""Smaller holes in the receiver's input handling: a bounded number of alerts per notification,
NaN and Infinity refused, only alerts that are firing and have not ended isolate, a node matched
by its own name or address only, and the receiver's files kept from other users."""

from __future__ import annotations

import json
import os
import stat
import time

import pytest
from ai_l1_day2.remediation import service as service_mod
from ai_l1_day2.remediation.service import PayloadError, Service
from ai_l1_day2.remediation.store import Store
from remediation_fakes import FakeExecutor, FakeNodes, alert, make_config, payload


@pytest.fixture
def svc(tmp_path):
    conf = make_config(tmp_path, ceiling={"max_fraction": 1.0, "pool_label": "accelerator"},
                       workers=("gpu1", "gpu2", "gpu3", "gpu4"))
    return Service(conf, Store(conf.db_path), FakeNodes(names=("gpu1", "gpu2", "gpu3", "gpu4")),
                   FakeExecutor(conf.jobs_dir))


def test_a_notification_with_too_many_alerts_is_refused_whole(svc):
    many = payload(*[{"status": "firing", "labels": {}} for _ in range(service_mod.MAX_ALERTS + 1)])
    with pytest.raises(PayloadError, match="more than"):
        svc.handle_payload(many)
    assert svc.store.audit_entries("alert") == []


@pytest.mark.parametrize("status", [None, "resolved", "", "FIRING"])
def test_only_firing_alerts_isolate(svc, status):
    a = alert(host="gpu1")
    if status is None:
        a.pop("status")
    else:
        a["status"] = status
    [d] = svc.handle_payload(payload(a))
    assert d["decision"] == "ignored" and "status" in d["reason"], d


def test_an_alert_that_ended_long_ago_does_not_isolate(svc):
    a = alert(host="gpu1")
    a["endsAt"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 3600))
    [d] = svc.handle_payload(payload(a))
    assert d["decision"] == "ignored" and "endsAt" in d["reason"], d


@pytest.mark.parametrize("ends", ["0001-01-01T00:00:00Z", None, "not a time"])
def test_a_firing_alert_with_a_zero_or_future_end_isolates(svc, ends):
    a = alert(host="gpu2", fp=f"e-{ends}")
    if ends is None:
        ends = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 600))
    a["endsAt"] = ends
    [d] = svc.handle_payload(payload(a))
    assert d["decision"] == "queued", d


def test_a_host_of_another_domain_does_not_match_a_node_by_its_first_label(svc):
    a = alert(host="", fp="dom", instance="gpu4.some.other.domain:9400")
    a["labels"].pop("Hostname", None)
    [d] = svc.handle_payload(payload(a))
    assert d["decision"] == "refused" and "matches no Kubernetes Node" in d["reason"], d


def test_an_address_the_node_reports_still_matches(svc):
    a = alert(host="", fp="addr", instance="10.0.0.2:9400")
    a["labels"].pop("Hostname", None)
    [d] = svc.handle_payload(payload(a))
    assert d["node"] == "gpu2" and d["decision"] == "queued", d


def test_nan_and_infinity_are_not_json():
    from ai_l1_day2.remediation import server as server_mod  # noqa: PLC0415

    for text in ('{"version": "4", "alerts": [], "x": NaN}', '{"a": Infinity}', '{"a": -Infinity}'):
        with pytest.raises(ValueError, match="not a JSON value"):
            json.loads(text, parse_constant=server_mod._no_constant)  # noqa: SLF001 (the server's own parser hook)


def test_the_receiver_keeps_its_files_from_other_users(tmp_path, monkeypatch):
    """serve() sets the umask before it opens the store: the store is not world-readable."""
    from ai_l1_day2.remediation import cli  # noqa: PLC0415

    old = os.umask(0o022)
    try:
        monkeypatch.setattr(cli, "_load", lambda _args: (_ for _ in ()).throw(SystemExit(0)))
        with pytest.raises(SystemExit):
            cli.serve(type("Args", (), {"config": None})())
        now = os.umask(0o022)
    finally:
        os.umask(old)
    assert now == 0o027
    path = tmp_path / "f"
    os.umask(now)
    try:
        path.write_text("x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) & 0o007 == 0


def test_a_notready_node_counts_against_the_pool_ceiling(tmp_path):
    """Pool of 4 at 0.25: one node NotReady already takes the pool's one unavailable slot."""
    conf = make_config(tmp_path, ceiling={"max_fraction": 0.25, "pool_label": "accelerator"},
                       workers=("gpu1", "gpu2", "gpu3", "gpu4"))
    nodes = FakeNodes(names=("gpu1", "gpu2", "gpu3", "gpu4"))
    nodes.items["gpu3"].ready = False
    svc = Service(conf, Store(conf.db_path), nodes, FakeExecutor(conf.jobs_dir))
    [d] = svc.handle_payload(payload(alert(host="gpu1")))
    assert d["decision"] == "refused" and "pool ceiling" in d["reason"] and "gpu3" in d["reason"], d


@pytest.mark.parametrize(("conditions", "ready"), [
    ([{"type": "Ready", "status": "True"}], True),
    ([{"type": "Ready", "status": "False"}], False),
    ([{"type": "Ready", "status": "Unknown"}], False),
    ([], True),
])
def test_the_node_view_reads_readiness(conditions, ready):
    from ai_l1_day2.remediation import kube  # noqa: PLC0415

    info = kube._info({"metadata": {"name": "n"}, "status": {"conditions": conditions}})  # noqa: SLF001
    assert info.ready is ready
