"""Remediation policy: XID lists, node resolution, dedupe, lock, rate limit, pool ceiling,
dry-run, config validation. Decisions go through the real SQLite store."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from ai_l1_day2.remediation import config as config_mod
from ai_l1_day2.remediation import policy
from ai_l1_day2.remediation.service import PayloadError, Service
from ai_l1_day2.remediation.store import Store
from remediation_fakes import FakeExecutor, FakeNodes, alert, make_config, payload


class Clock:
    def __init__(self, now=1_000_000.0):
        self.now = now

    def __call__(self):
        return self.now


def service(tmp_path, nodes=None, clock=None, monotonic=None, **cfg):
    if nodes is not None:
        cfg.setdefault("workers", tuple(nodes.items))
    conf = make_config(tmp_path, **cfg)
    clock = clock or Clock()
    store = Store(conf.db_path, clock=clock)
    # Time passes for both clocks alike unless a test moves the wall clock alone.
    return Service(conf, store, nodes or FakeNodes(), FakeExecutor(conf.jobs_dir), clock=clock,
                   monotonic=monotonic or clock)


def decide(svc, *alerts):
    return [d["decision"] for d in svc.handle_payload(payload(*alerts))]


@pytest.mark.parametrize("xid", [13, 31, 43, 45, 68, 109])
def test_default_ignore_list(tmp_path, xid):
    svc = service(tmp_path)
    [d] = svc.handle_payload(payload(alert(xid=xid)))
    assert d["decision"] == "ignored" and f"XID {xid} is in xid.ignore" in d["reason"]
    assert svc.store.jobs() == []


@pytest.mark.parametrize("xid", [48, 63, 64, 74, 79, 94, 95])
def test_hardware_xids_isolate(tmp_path, xid):
    svc = service(tmp_path)
    [d] = svc.handle_payload(payload(alert(xid=xid)))
    assert (d["decision"], d["node"], d["kind"]) == ("queued", "gpu1", f"xid-{xid}")
    assert f"XID {xid}" in d["detail"]


def test_allow_list_restricts_and_ignore_wins(tmp_path):
    svc = service(tmp_path, xid={"allow": [79, 48]})
    assert decide(svc, alert(xid=94, host="gpu1")) == ["ignored"]
    assert decide(svc, alert(xid=79, host="gpu2")) == ["queued"]
    with pytest.raises(config_mod.ConfigError, match=r"both xid.allow and xid.ignore"):
        make_config(tmp_path, xid={"allow": [13]})


def test_xid_from_label_and_unknown_xid(tmp_path):
    svc = service(tmp_path)
    [d] = svc.handle_payload(payload(alert(xid=None)))
    assert d["decision"] == "refused" and "XID code not found" in d["reason"]
    assert policy.alert_xid({"labels": {"xid": "79"}}) == 79
    assert policy.alert_xid({"labels": {}, "annotations": {"description": "reported XID 48."}}) == 48
    svc2 = service(tmp_path / "b", xid={"unknown": "isolate"})
    assert decide(svc2, alert(xid=None)) == ["queued"]


def test_other_alerts_and_resolved_are_ignored(tmp_path):
    svc = service(tmp_path)
    assert decide(svc, alert(name="GPUHighTemperature"), alert(status="resolved")) == ["ignored", "ignored"]


@pytest.mark.parametrize(("name", "kind"), [("GPURowRemapFailure", "row-remap-failure"),
                                            ("GPUFallenOffBus", "gpu-lost")])
def test_row_remap_failure_and_gpu_fallen_off_the_bus_isolate(tmp_path, name, kind):
    """The health signals monitoring/rules added for the policy, in the default alerts map."""
    [d] = service(tmp_path).handle_payload(payload(alert(name=name, host="gpu1")))
    assert (d["decision"], d["node"], d["kind"]) == ("queued", "gpu1", kind), d


def test_node_from_instance_address_and_unknown_node(tmp_path):
    svc = service(tmp_path)
    unavailable = {"alertname": "GPUNodeUnavailable", "instance": "10.0.0.2:9400", "job": "dcgm-exporter"}
    [d] = svc.handle_payload(payload({"status": "firing", "labels": unavailable, "fingerprint": "u1"}))
    assert (d["decision"], d["node"], d["kind"]) == ("queued", "gpu2", "gpu-unavailable")
    [d] = svc.handle_payload(payload(alert(name="GPUECCUncorrectableError", host="gpu9")))
    assert d["decision"] == "refused" and "matches no Kubernetes Node" in d["reason"]
    [d] = svc.handle_payload(payload({"status": "firing", "labels": {"alertname": "GPUECCUncorrectableError"}}))
    assert d["decision"] == "refused" and "no node label" in d["reason"]


def test_dedupe_by_fingerprint_within_window(tmp_path):
    clock = Clock()
    svc = service(tmp_path, clock=clock, dedupe_window_s=600)
    first = svc.handle_payload(payload(alert()))[0]
    again = svc.handle_payload(payload(alert()))[0]
    assert again["decision"] == "duplicate" and again["job_id"] == first["job_id"]
    # after the window (and the first job finished), the same alert isolates again
    svc.store.finish_job(first["job_id"], "done", status="successful", rc=0, message="t")
    clock.now += 601
    assert decide(svc, alert()) == ["queued"]


def test_lock_refuses_second_alert_for_same_node_and_records_it(tmp_path):
    svc = service(tmp_path)
    first = svc.handle_payload(payload(alert()))[0]
    [d] = svc.handle_payload(payload(alert(name="GPUECCUncorrectableError")))
    assert d["decision"] == "refused" and f"locked by job {first['job_id']}" in d["reason"]
    refused = [a for a in svc.store.audit_entries("alert") if a["decision"] == "refused"]
    assert len(refused) == 1 and refused[0]["node"] == "gpu1" and "locked" in refused[0]["reason"]
    assert len(svc.store.jobs()) == 1


def test_already_isolated_node_is_ignored(tmp_path):
    nodes = FakeNodes()
    nodes.isolate("gpu1")
    svc = service(tmp_path, nodes=nodes)
    [d] = svc.handle_payload(payload(alert()))
    assert d["decision"] == "ignored" and "already isolated" in d["reason"]


def test_rate_limit(tmp_path):
    clock = Clock()
    nodes = FakeNodes(names=[f"n{i}" for i in range(10)])
    svc = service(tmp_path, nodes=nodes, clock=clock, rate_limit={"max_runs": 2, "window_s": 60},
                  ceiling={"max_fraction": 1.0, "pool_label": "accelerator"})
    assert decide(svc, alert(host="n0"), alert(host="n1"), alert(host="n2")) == ["queued", "queued", "refused"]
    assert "rate limit: 2 isolations within 60s" in svc.store.audit_entries("alert")[-1]["reason"]
    clock.now += 61
    assert decide(svc, alert(host="n2")) == ["queued"]


@pytest.mark.parametrize(("size", "fraction", "busy", "allowed"), [
    (3, 0.67, 0, True), (3, 0.67, 1, True), (3, 0.67, 2, False),
    (3, 0.5, 1, False), (4, 0.5, 1, True), (4, 0.5, 2, False),
    (10, 0.1, 0, True), (10, 0.1, 1, False), (2, 0.25, 0, False), (5, 1.0, 4, True),
])
def test_ceiling_math(size, fraction, busy, allowed):
    members = [f"n{i}" for i in range(size)]
    ok, limit, after = policy.ceiling("n0", members, set(members[1:1 + busy]), fraction)
    assert ok is allowed and after == busy + 1 and limit == int(fraction * size + 1e-9)


def test_ceiling_counts_target_already_cordoned_once(tmp_path):
    members = ["a", "b", "c", "d"]
    assert policy.ceiling("a", members, {"a", "b"}, 0.5) == (True, 2, 2)


def test_ceiling_counts_cordoned_nodes_from_the_api_and_active_jobs(tmp_path):
    nodes = FakeNodes(names=["gpu1", "gpu2", "gpu3"])
    nodes.items["gpu3"].unschedulable = True  # cordoned by someone else: counts
    svc = service(tmp_path, nodes=nodes)  # 0.67 of 3 -> 2 may be unavailable
    assert decide(svc, alert(host="gpu1")) == ["queued"]  # gpu3 cordoned + gpu1 job = 2
    [d] = svc.handle_payload(payload(alert(host="gpu2")))
    assert d["decision"] == "refused" and "pool ceiling" in d["reason"] and "gpu1, gpu3" in d["reason"]


def test_ceiling_third_of_three_stopped_static_pool(tmp_path):
    nodes = FakeNodes(names=["gpu1", "gpu2", "npu1"])
    nodes.items["npu1"].labels = {"accelerator": "ascend"}
    svc = service(tmp_path, nodes=nodes, ceiling={"max_fraction": 0.67, "pools": {"workers": ["gpu1", "gpu2", "npu1"]}})
    got = decide(svc, alert(host="gpu1"), alert(host="gpu2"), alert(name="GPUECCUncorrectableError", host="npu1"))
    assert got == ["queued", "queued", "refused"]


def test_node_in_no_pool_is_refused(tmp_path):
    nodes = FakeNodes()
    nodes.items["gpu1"].labels = {}
    svc = service(tmp_path, nodes=nodes)
    [d] = svc.handle_payload(payload(alert()))
    assert d["decision"] == "refused" and "in no pool" in d["reason"]


def test_dry_run_records_but_never_locks_or_runs(tmp_path):
    svc = service(tmp_path, dry_run=True)
    [d] = svc.handle_payload(payload(alert()))
    assert d["decision"] == "dry-run"
    assert [j["state"] for j in svc.store.jobs()] == ["dry-run"]
    assert svc.store.claim_next("x") is None
    assert decide(svc, alert(name="GPUECCUncorrectableError")) == ["dry-run"]  # no lock held


@pytest.mark.parametrize(("body", "message"), [
    ([], "expected a JSON object"),
    ({"version": "3", "alerts": []}, "unsupported payload version"),
    ({"version": "4", "alerts": {"labels": {}}}, "'alerts' must be a list"),  # one bad alert: test_remediation_abuse
])
def test_payload_validation(tmp_path, body, message):
    with pytest.raises(PayloadError, match=message):
        service(tmp_path).handle_payload(body)


@pytest.mark.parametrize(("overrides", "message"), [
    ({"ceiling": {"max_fraction": 1.5}}, r"ceiling.max_fraction: 1.5 is not within 0..1"),
    ({"rate_limit": {"max_runs": "5"}}, r"rate_limit.max_runs: expected int"),
    ({"auth": {"token": "inline"}}, r"auth.token: secrets are not read from the config file"),
    ({"xid": {"ignore": ["13"]}}, r"xid.ignore: expected a list of XID codes"),
    ({"bogus": 1}, r"unknown config keys: bogus"),
])
def test_config_errors_name_the_key(tmp_path, overrides, message):
    with pytest.raises(config_mod.ConfigError, match=message):
        make_config(tmp_path, **overrides)


def test_config_requires_a_credential_and_never_shows_it(tmp_path):
    with pytest.raises(config_mod.ConfigError, match="no credential configured"):
        config_mod.load(None, env={}, overrides={"state_dir": str(tmp_path)})
    cfg = make_config(tmp_path)
    assert "t0ken" not in repr(cfg) and "hmac-key" not in repr(cfg)
    with pytest.raises(config_mod.ConfigError, match="shorter than 16"):
        config_mod.load(None, env={"AI_L1_REMEDIATE_TOKEN": "short"}, overrides={"state_dir": str(tmp_path)})


def test_a_node_the_isolate_playbook_would_refuse_is_refused_before_any_change(tmp_path):
    """A control plane carrying an accelerator label (not in the run inventory's k8s_worker): the
    receiver must not cordon it and then watch the playbook refuse it."""
    nodes = FakeNodes(names=["gpu1", "cp1"])
    svc = service(tmp_path, nodes=nodes, workers=("gpu1",), ceiling={"max_fraction": 1.0, "pool_label": "accelerator"})
    [d] = svc.handle_payload(payload(alert(host="cp1")))
    assert d["decision"] == "refused" and "k8s_worker" in d["reason"] and d["job_id"] is None
    assert svc.store.jobs() == [] and nodes.cordons == []
    assert decide(svc, alert(host="gpu1")) == ["queued"]


def test_the_run_inventory_is_read_again_when_it_changes(tmp_path):
    nodes = FakeNodes(names=["gpu1", "gpu2"])
    svc = service(tmp_path, nodes=nodes, workers=("gpu1",), ceiling={"max_fraction": 1.0, "pool_label": "accelerator"})
    assert decide(svc, alert(host="gpu2")) == ["refused"]
    inventory = Path(svc.cfg.inventory)
    inventory.write_text("all: {children: {k8s_worker: {hosts: {gpu1: {}, gpu2: {}}}}}\n")
    os.utime(inventory, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))
    assert decide(svc, alert(host="gpu2", fp="again")) == ["queued"]


def test_a_wall_clock_set_forward_does_not_empty_the_rate_window(tmp_path):
    wall, mono = Clock(), Clock()
    nodes = FakeNodes(names=[f"n{i}" for i in range(10)])
    svc = service(tmp_path, nodes=nodes, clock=wall, monotonic=mono, rate_limit={"max_runs": 2, "window_s": 60},
                  ceiling={"max_fraction": 1.0, "pool_label": "accelerator"})
    assert decide(svc, alert(host="n0"), alert(host="n1")) == ["queued", "queued"]
    wall.now += 3600  # an NTP step, a hand-set clock: the window has not passed
    assert decide(svc, alert(host="n2")) == ["refused"]
    mono.now += 61
    wall.now += 61
    assert decide(svc, alert(host="n2", fp="later")) == ["queued"]
