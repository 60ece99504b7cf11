"""The GPUQuota controller's handlers (day2/ai_l1_gpuquota/operator.py) with the API calls replaced:
what it applies, the status it writes, the events it sends, and what delete removes."""

import datetime
import sys
from pathlib import Path

import kopf
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "day2"))
from ai_l1_gpuquota import operator  # noqa: E402
from ansible_collections.ai_platform.l1.plugins.module_utils import gpu_queues as model  # noqa: E402

SETTINGS = operator.settings({"GPUQUOTA_BACKEND": "kueue", "GPUQUOTA_COHORT": "gpu-pool",
                              "GPUQUOTA_FLAVORS": '[{"name": "a100-sxm-80gb", "model": "A100-SXM-80GB", '
                                                  '"accelerator": "nvidia", "resource": "nvidia.com/gpu"}]'})
NOW = datetime.datetime(2026, 12, 2, 12, 0, tzinfo=datetime.timezone.utc)
BODY = {"metadata": {"name": "quota", "namespace": "team-a", "generation": 2}}


QUEUE = "gpuquota-team-a-quota-d5c0a58f8f1291ed"  # gpuquota-<ns>-<name>-<sha256("team-a/quota")[:16]>


class Cluster(dict):
    """The API server as the controller sees it: (kind, namespace, name) -> object."""

    def apply(self, obj):
        key = (obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])
        self.setdefault(key, {"metadata": {"uid": f"uid-{len(self)}"}})
        self[key] = {**obj, "metadata": {**obj["metadata"], "uid": self[key]["metadata"]["uid"]}}
        self.applied.append(obj)

    def get(self, api_version, kind, name, namespace=None):  # noqa: ARG002
        return dict.get(self, (kind, namespace, name))

    def delete(self, api_version, kind, name, namespace, uid):
        assert self[(kind, namespace, name)]["metadata"]["uid"] == uid
        del self[(kind, namespace, name)]
        self.deleted.append((api_version, kind, name, namespace))
        return True

    def add(self, kind, namespace, name, annotations=None, **fields):
        self[(kind, namespace, name)] = {"kind": kind, **fields, "metadata": {
            "name": name, "namespace": namespace, "uid": f"theirs-{name}", "annotations": annotations or {}}}


@pytest.fixture
def cluster(monkeypatch):
    store = Cluster()
    store.applied, store.deleted = [], []
    monkeypatch.setattr(operator, "get", store.get)
    monkeypatch.setattr(operator, "apply", store.apply)
    monkeypatch.setattr(operator, "delete", store.delete)
    return store


@pytest.fixture
def api(monkeypatch, cluster):
    calls = {"applied": cluster.applied, "deleted": cluster.deleted, "events": [], "cluster": cluster}
    monkeypatch.setattr(operator, "now", lambda: NOW)
    monkeypatch.setattr(kopf, "info", lambda body, reason, message: calls["events"].append(("Normal", reason)))
    monkeypatch.setattr(kopf, "warn", lambda body, reason, message: calls["events"].append(("Warning", reason)))
    monkeypatch.setattr(operator, "SETTINGS", SETTINGS)
    return calls


def reconcile(spec, status=None, name="quota", namespace="team-a"):
    patch = kopf.Patch()
    summary = operator.reconcile_one(name, namespace, spec, body=BODY, status=status or {}, patch=patch,
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
    assert summary["objects"] == ["ResourceQuota/team-a/gpuquota-quota", f"ClusterQueue/{QUEUE}",
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
    reconcile({"team": "t", "totalGPUs": 8})
    operator.cleanup(name="quota", namespace="team-a")
    assert api["deleted"] == [("v1", "ResourceQuota", "gpuquota-quota", "team-a"),
                              ("kueue.x-k8s.io/v1beta2", "LocalQueue", "quota", "team-a"),
                              ("kueue.x-k8s.io/v1beta2", "ClusterQueue", QUEUE, None)]
    assert not api["cluster"]


def test_quotas_of_lookalike_namespaces_get_their_own_queues(api):
    # research-lab/x and research/lab-x were both ClusterQueue gpuquota-research-lab-x.
    reconcile({"team": "a", "totalGPUs": 8}, name="x", namespace="research-lab")
    reconcile({"team": "b", "totalGPUs": 2}, name="lab-x", namespace="research")
    queues = {o["metadata"]["name"]: o for o in api["applied"] if o["kind"] == "ClusterQueue"}
    assert len(queues) == 2 and all(q.startswith("gpuquota-research-lab-x-") for q in queues)
    assert {q["metadata"]["annotations"]["ai.internal/gpuquota"] for q in queues.values()} == {
        "research-lab/x", "research/lab-x"}
    operator.cleanup(name="lab-x", namespace="research")
    left = [key for key in api["cluster"] if key[0] == "ClusterQueue"]
    assert left == [("ClusterQueue", None, model.gpuquota_names("x", "research-lab")["queue"])]


def test_a_teams_own_local_queue_is_not_taken_over_nor_deleted(api):
    api["cluster"].add("LocalQueue", "team-a", "quota", spec={"clusterQueue": "team-a-own"})
    patch, summary = reconcile({"team": "t", "totalGPUs": 8})
    assert [o["kind"] for o in api["applied"]] == ["ResourceQuota", "ClusterQueue"]
    assert api["cluster"][("LocalQueue", "team-a", "quota")]["spec"] == {"clusterQueue": "team-a-own"}
    assert "LocalQueue/team-a/quota" not in summary["objects"]
    ready = patch.status["conditions"][0]
    assert (ready["status"], ready["reason"]) == ("False", "NotOwner")
    assert "LocalQueue/team-a/quota" in ready["message"]
    assert api["events"] == [("Warning", "NotOwner")]
    operator.cleanup(name="quota", namespace="team-a")
    assert [d[1] for d in api["deleted"]] == ["ResourceQuota", "ClusterQueue"]
    assert list(api["cluster"]) == [("LocalQueue", "team-a", "quota")]


def test_a_queue_not_its_own_is_refused_with_its_local_queue(api):
    api["cluster"].add("ClusterQueue", None, QUEUE, annotations={"ai.internal/gpuquota": "elsewhere/quota"})
    patch, _ = reconcile({"team": "t", "totalGPUs": 8})
    assert [o["kind"] for o in api["applied"]] == ["ResourceQuota"]
    assert patch.status["conditions"][0]["reason"] == "NotOwner"
    operator.cleanup(name="quota", namespace="team-a")
    assert ("ClusterQueue", None, QUEUE) in api["cluster"]


def test_the_queue_of_the_old_name_is_replaced_when_it_is_its_own(api):
    mark, old = {"ai.internal/gpuquota": "team-a/quota"}, "gpuquota-team-a-quota"
    api["cluster"].add("ClusterQueue", None, old, annotations=mark)
    api["cluster"].add("LocalQueue", "team-a", "quota", annotations=mark, spec={"clusterQueue": old})
    reconcile({"team": "t", "totalGPUs": 8})
    # Kueue refuses a change of spec.clusterQueue: the LocalQueue is re-created, the old queue removed.
    assert [d[1:3] for d in api["deleted"]] == [("LocalQueue", "quota"), ("ClusterQueue", old)]
    assert api["cluster"][("LocalQueue", "team-a", "quota")]["spec"] == {"clusterQueue": QUEUE}
    # Another GPUQuota's queue of that name (the old, ambiguous naming) is left.
    api["cluster"].add("ClusterQueue", None, old, annotations={"ai.internal/gpuquota": "team/a-quota"})
    reconcile({"team": "t", "totalGPUs": 8})
    assert ("ClusterQueue", None, old) in api["cluster"]


@pytest.mark.parametrize("bad", [
    {"validUntil": "2026-12-02T13:00:00ZtFOO"}, {"validUntil": "2026-12-02T13:00:00x5Z"},
    {"validUntil": "2026-12-02T13:00:00+99:99"}, {"validUntil": "0000-01-01T00:00:00Z"},
    {"totalGPUs": 10**14}, {"totalGPUs": 100001},
])
def test_an_invalid_spec_is_refused_and_fails_closed(api, bad):
    # In force with 8 GPUs, then updated to a value the API server stored: no crash, and the old
    # cap is not kept: every object goes to 0 GPUs.
    patch, _ = reconcile({"team": "t", "totalGPUs": 8, "preemptible": True})
    status = dict(patch.status)
    api["applied"].clear()
    patch, summary = reconcile({"team": "t", "totalGPUs": 8, "preemptible": True, **bad}, status)
    assert [o["kind"] for o in api["applied"]] == ["ResourceQuota", "ClusterQueue", "LocalQueue"]
    assert set(api["applied"][0]["spec"]["hard"].values()) == {"0"}
    assert all(r["nominalQuota"] == "0" and r["borrowingLimit"] == "0"
               for g in api["applied"][1]["spec"]["resourceGroups"] for f in g["flavors"] for r in f["resources"])
    assert summary["gpus"] == 0 and patch.status["gpus"] == 0
    ready, expired = patch.status["conditions"]
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert next(iter(bad)) in ready["message"]
    assert (expired["status"], expired["reason"]) == ("Unknown", "InvalidSpec")
    assert api["events"] == [("Normal", "Reconciled"), ("Warning", "InvalidSpec")]
    # The timer's next pass: no second event.
    reconcile({"team": "t", "totalGPUs": 8, **bad}, dict(patch.status))
    assert api["events"] == [("Normal", "Reconciled"), ("Warning", "InvalidSpec")]


def test_a_new_invalid_quota_starts_at_zero(api):
    patch, _ = reconcile({"team": "t", "totalGPUs": 10**14})
    assert set(api["applied"][0]["spec"]["hard"].values()) == {"0"}
    assert patch.status["conditions"][0]["reason"] == "InvalidSpec"


@pytest.mark.parametrize(("until", "gpus"), [("2026-12-02t11:00:00z", 0), ("2026-12-02t13:00:00.1234567z", 8),
                                             ("2026-12-02T13:00:00+01:30", 0)])
def test_lower_case_and_long_fractions_are_rfc3339(api, until, gpus):
    patch, _ = reconcile({"team": "t", "totalGPUs": 8, "validUntil": until})
    assert patch.status["gpus"] == gpus
    assert patch.status["conditions"][0]["reason"] == ("Expired" if gpus == 0 else "Reconciled")
