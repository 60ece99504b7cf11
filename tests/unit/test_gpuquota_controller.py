"""The GPUQuota controller's handlers (day2/ai_l1_gpuquota/operator.py) with the API calls replaced:
what it applies, the status it writes, the events it sends, and what delete removes."""

import datetime
import sys
from pathlib import Path

import kopf
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "day2"))
from ai_l1_gpuquota import operator  # noqa: E402

SETTINGS = operator.settings({"GPUQUOTA_BACKEND": "kueue", "GPUQUOTA_COHORT": "gpu-pool",
                              "GPUQUOTA_FLAVORS": '[{"name": "a100-sxm-80gb", "model": "A100-SXM-80GB", '
                                                  '"accelerator": "nvidia", "resource": "nvidia.com/gpu"}]'})
NOW = datetime.datetime(2026, 12, 2, 12, 0, tzinfo=datetime.timezone.utc)
BODY = {"metadata": {"name": "quota", "namespace": "team-a", "generation": 2}}


@pytest.fixture
def api(monkeypatch):
    calls = {"applied": [], "deleted": [], "events": []}
    monkeypatch.setattr(operator, "apply", calls["applied"].append)
    monkeypatch.setattr(operator, "delete", lambda *a: calls["deleted"].append(a))
    monkeypatch.setattr(operator, "now", lambda: NOW)
    monkeypatch.setattr(kopf, "info", lambda body, reason, message: calls["events"].append(("Normal", reason)))
    monkeypatch.setattr(kopf, "warn", lambda body, reason, message: calls["events"].append(("Warning", reason)))
    monkeypatch.setattr(operator, "SETTINGS", SETTINGS)
    return calls


def reconcile(spec, status=None):
    patch = kopf.Patch()
    summary = operator.reconcile_one("quota", "team-a", spec, body=BODY, status=status or {}, patch=patch,
                                     settings_=SETTINGS)
    return patch, summary


def test_settings_are_checked():
    assert SETTINGS["backend"] == "kueue" and SETTINGS["flavors"][0]["model"] == "A100-SXM-80GB"
    with pytest.raises(SystemExit, match="GPUQUOTA_BACKEND must be kueue or volcano"):
        operator.settings({"GPUQUOTA_BACKEND": "slurm"})
    with pytest.raises(SystemExit, match="GPUQUOTA_FLAVORS is not JSON"):
        operator.settings({"GPUQUOTA_BACKEND": "kueue", "GPUQUOTA_FLAVORS": "[a100"})
    with pytest.raises(SystemExit, match="GPUQUOTA_CPU_PER_GPU"):
        operator.settings({"GPUQUOTA_BACKEND": "kueue", "GPUQUOTA_CPU_PER_GPU": "sixteen"})


def test_reconcile_applies_and_reports(api):
    patch, summary = reconcile({"team": "t", "totalGPUs": 8})
    assert [o["kind"] for o in api["applied"]] == ["ResourceQuota", "ClusterQueue", "LocalQueue"]
    assert summary["objects"] == ["ResourceQuota/team-a/gpuquota-quota", "ClusterQueue/gpuquota-team-a-quota",
                                  "LocalQueue/team-a/quota"]
    status = dict(patch.status)
    assert status["gpus"] == 8 and status["expired"] is False and status["observedGeneration"] == 2
    ready = {c["type"]: c for c in status["conditions"]}
    assert (ready["Ready"]["status"], ready["Ready"]["reason"]) == ("True", "Reconciled")
    assert ready["Expired"]["status"] == "False"
    assert api["events"] == [("Normal", "Reconciled")]
    # The timer's next pass with nothing changed: no new event, the transition time kept.
    later = {**status, "conditions": [dict(c, lastTransitionTime="2026-12-01T00:00:00Z") for c in status["conditions"]]}
    patch, _ = reconcile({"team": "t", "totalGPUs": 8}, later)
    assert api["events"] == [("Normal", "Reconciled")]
    assert {c["lastTransitionTime"] for c in patch.status["conditions"]} == {"2026-12-01T00:00:00Z"}


def test_expiry_is_a_warning_and_zero_quota(api):
    patch, _ = reconcile({"team": "t", "totalGPUs": 8, "validUntil": "2026-12-02T11:00:00Z"})
    assert api["applied"][0]["spec"]["hard"]["requests.nvidia.com/gpu"] == "0"
    assert patch.status["gpus"] == 0
    assert {c["type"]: c["reason"] for c in patch.status["conditions"]} == {"Ready": "Expired",
                                                                            "Expired": "ValidUntilPassed"}
    assert api["events"] == [("Warning", "Expired")]


def test_an_api_refusal_goes_on_the_object_and_is_retried(api, monkeypatch):
    def refuse(obj):
        raise RuntimeError('ClusterQueue.kueue.x-k8s.io "x" is invalid')
    monkeypatch.setattr(operator, "apply", refuse)
    patch = kopf.Patch()
    with pytest.raises(kopf.TemporaryError):
        operator.reconcile_one("quota", "team-a", {"team": "t", "totalGPUs": 1}, body=BODY, status={},
                               patch=patch, settings_=SETTINGS)
    ready = patch.status["conditions"][0]
    assert (ready["status"], ready["reason"]) == ("False", "ApplyFailed")
    assert "is invalid" in ready["message"]
    assert api["events"] == [("Warning", "ApplyFailed")]


def test_delete_removes_what_it_created(api):
    operator.cleanup(name="quota", namespace="team-a")
    assert api["deleted"] == [("v1", "ResourceQuota", "gpuquota-quota", "team-a"),
                              ("kueue.x-k8s.io/v1beta2", "LocalQueue", "quota", "team-a"),
                              ("kueue.x-k8s.io/v1beta2", "ClusterQueue", "gpuquota-team-a-quota")]
