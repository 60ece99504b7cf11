"""The team queue model (module_utils/gpu_queues.py): quantities, the seed's percentages made
absolute for Volcano, the Kueue mapping field by field, and what a GPUQuota becomes."""

import datetime
import re
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.ai_platform.l1.plugins.filter.gpu_queues import FilterModule
from ansible_collections.ai_platform.l1.plugins.module_utils import gpu_queues as model

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = yaml.safe_load((ROOT / "inventories/sample/group_vars/all/gpu_queues.yml").read_text())
LAB = yaml.safe_load((ROOT / "inventories/lab/group_vars/all/gpu_queues.yml").read_text())
A100 = {"name": "a100-sxm-80gb", "model": "A100-SXM-80GB", "accelerator": "nvidia", "resource": "nvidia.com/gpu"}
H100 = {"name": "h100-sxm-80gb", "model": "H100-SXM-80GB", "accelerator": "nvidia", "resource": "nvidia.com/gpu"}
NPU = {"name": "ascend910b", "model": "Ascend910B", "accelerator": "huawei-ascend", "resource": "huawei.com/Ascend910"}
NOW = datetime.datetime(2026, 12, 2, 12, 0, tzinfo=datetime.timezone.utc)


def by_kind(objects, kind):
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def limits(queue, resource):
    for group in queue["spec"]["resourceGroups"]:
        for flavor in group["flavors"]:
            for res in flavor["resources"]:
                if res["name"] == resource:
                    return flavor["name"], {k: v for k, v in res.items() if k != "name"}
    return None


@pytest.mark.parametrize(("value", "amount"), [
    (128, Decimal(128)), ("512", Decimal(512)), ("500m", Decimal("0.5")), ("4096Gi", Decimal(4096 * 2**30)),
    ("1.5", Decimal("1.5")), ("2k", Decimal(2000)),
])
def test_quantities(value, amount):
    assert model.parse_quantity(value) == amount


@pytest.mark.parametrize("value", ["4096GB", "lots", "", "-1", True, None, "1e3"])
def test_bad_quantities(value):
    with pytest.raises(model.ModelError):
        model.parse_quantity(value)


def test_the_seed_queues_for_volcano_with_absolute_guarantees():
    queues = by_kind(model.volcano_queues(SAMPLE["gpu_queues_teams"]), "Queue")
    assert sorted(queues) == ["ai-platform-team", "inference-prod", "research-lab"]
    ai = queues["ai-platform-team"]
    assert ai["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    assert ai["spec"] == {"weight": 10, "reclaimable": True,
                          "capability": {"nvidia.com/gpu": "128", "cpu": "512", "memory": "4096Gi"},
                          # the seed's comment: "保障至少 64 张 GPU"
                          "guarantee": {"resource": {"nvidia.com/gpu": "64"}},
                          # Volcano's webhook: guarantee <= deserved <= capability
                          "deserved": {"nvidia.com/gpu": "64"}}
    assert "guarantee" not in queues["research-lab"]["spec"]
    assert "deserved" not in queues["research-lab"]["spec"]
    assert queues["research-lab"]["spec"]["reclaimable"] is False
    # 80 % of every resource, rounded down: whole GPUs, millicores, whole Mi.
    assert queues["inference-prod"]["spec"]["guarantee"] == {
        "resource": {"nvidia.com/gpu": "204", "cpu": "819200m", "memory": "3355443Mi"}}


def test_kueue_mapping_field_by_field():
    objects = model.kueue_objects(SAMPLE["gpu_queues_teams"], [A100, NPU], "gpu-pool")
    flavors = by_kind(objects, "ResourceFlavor")
    assert flavors["a100-sxm-80gb"]["spec"] == {"nodeLabels": {"accelerator-model": "A100-SXM-80GB"}}
    assert flavors["default-flavor"]["spec"] == {}
    queues = by_kind(objects, "ClusterQueue")
    ai, research, inference = queues["ai-platform-team"], queues["research-lab"], queues["inference-prod"]
    for queue, weight in ((ai, "10"), (research, "5"), (inference, "20")):
        assert queue["spec"]["cohortName"] == "gpu-pool"
        assert queue["spec"]["fairSharing"] == {"weight": weight}
        assert queue["spec"]["preemption"]["reclaimWithinCohort"] == "Any"
    # reclaimable with a guarantee: nominal = guarantee, borrows up to the capability.
    assert limits(ai, "nvidia.com/gpu") == ("a100-sxm-80gb", {"nominalQuota": "64", "borrowingLimit": "64"})
    assert limits(ai, "cpu") == ("default-flavor", {"nominalQuota": "512", "borrowingLimit": "0"})
    # not reclaimable, no guarantee: exclusive.
    assert limits(research, "nvidia.com/gpu")[1] == {"nominalQuota": "32", "borrowingLimit": "0", "lendingLimit": "0"}
    # not reclaimable with a guarantee: owns its capability, lends what is above the guarantee.
    assert limits(inference, "nvidia.com/gpu")[1] == {
        "nominalQuota": "256", "borrowingLimit": "0", "lendingLimit": "52"}
    # No team names an Ascend resource: no queue covers the NPU flavor.
    assert limits(ai, "huawei.com/Ascend910") is None
    local = by_kind(objects, "LocalQueue")
    assert local["research-lab"]["metadata"]["namespace"] == "research"
    assert local["research-lab"]["spec"] == {"clusterQueue": "research-lab"}
    assert research["spec"]["namespaceSelector"] == {"matchLabels": {"ai-platform.io/team": "research-lab"}}


def test_accelerator_models_restrict_the_flavors():
    team = dict(SAMPLE["gpu_queues_teams"][0], accelerator_models=["H100-SXM-80GB"])
    queue = by_kind(model.kueue_objects([team], [A100, H100], "c"), "ClusterQueue")["ai-platform-team"]
    gpu_group = [g for g in queue["spec"]["resourceGroups"] if g["coveredResources"] == ["nvidia.com/gpu"]][0]
    assert [f["name"] for f in gpu_group["flavors"]] == ["h100-sxm-80gb"]


def test_the_lab_model_holds_the_tests_scenarios():
    """tests/integration/test_queues.py relies on these numbers (16 A100 GPUs in the lab)."""
    queues = by_kind(model.kueue_objects(LAB["gpu_queues_teams"], [A100], "gpu-pool"), "ClusterQueue")
    assert limits(queues["ai-platform-team"], "nvidia.com/gpu")[1] == {"nominalQuota": "8", "borrowingLimit": "8"}
    assert limits(queues["research-lab"], "nvidia.com/gpu")[1] == {
        "nominalQuota": "4", "borrowingLimit": "0", "lendingLimit": "0"}
    assert limits(queues["inference-prod"], "nvidia.com/gpu")[1] == {
        "nominalQuota": "10", "borrowingLimit": "0", "lendingLimit": "8"}


def test_flavors_from_node_labels():
    nodes = [{"metadata": {"name": n, "labels": labels}} for n, labels in (
        ("gpu1", {"accelerator": "nvidia", "accelerator-model": "A100-SXM-80GB"}),
        ("gpu2", {"accelerator": "nvidia", "accelerator-model": "A100-SXM-80GB"}),
        ("npu1", {"accelerator": "huawei-ascend", "accelerator-model": "Ascend910B"}),
        ("cp1", {}))]
    assert model.accelerator_flavors(nodes) == [
        A100, {"name": "ascend910b", "model": "Ascend910B", "accelerator": "huawei-ascend",
               "resource": "huawei.com/Ascend910"}]


def test_team_errors_name_the_team_and_the_field():
    good = SAMPLE["gpu_queues_teams"]
    assert model.validate_teams(good) == []
    assert model.validate_teams([]) == ["gpu_queues_teams: a non-empty list of teams is required"]
    bad = [dict(good[0], guarantee={"percent": 50, "resources": ["huawei.com/Ascend910"]}, colour="red"),
           dict(good[1], name="ai-platform-team"), dict(good[2], capability={"cpu": 1, "memory": "1Gi"})]
    errors = model.validate_teams(bad)
    assert errors == [
        "gpu_queues_teams[0] (ai-platform-team): unknown field(s) colour (known: accelerator_models, capability, "
        "guarantee, name, namespaces, reclaimable, weight)",
        "gpu_queues_teams[0] (ai-platform-team).guarantee.resources: huawei.com/Ascend910 is not in capability",
        "gpu_queues_teams[1] (ai-platform-team): name repeats team 0",
        "gpu_queues_teams[2] (inference-prod).capability: no accelerator resource "
        "(nvidia.com/gpu, huawei.com/Ascend910)",
    ]
    with pytest.raises(model.ModelError, match="name repeats team 0"):
        model.volcano_queues(bad)


def test_filters():
    filters = FilterModule().filters()
    objects = filters["gpu_queue_objects"](LAB["gpu_queues_teams"], "kueue", [A100])
    assert [o["kind"] for o in objects[:3]] == ["Namespace"] * 3
    assert objects[0]["metadata"]["labels"] == {"ai-platform.io/team": "ai-platform-team"}
    assert {o["kind"] for o in filters["gpu_queue_objects"](SAMPLE["gpu_queues_teams"], "volcano")} == {
        "Namespace", "Queue"}
    with pytest.raises(AnsibleFilterError, match="unknown backend 'slurm'"):
        filters["gpu_queue_objects"](SAMPLE["gpu_queues_teams"], "slurm")
    with pytest.raises(AnsibleFilterError, match="a list of Nodes"):
        filters["gpu_queue_flavors"]("gpu1")
    assert filters["gpu_queue_flavors"]({"resources": []}) == []


QUEUE = "gpuquota-team-a-ai-platform-quota-463c261b9b19ddca"  # sha256("team-a/ai-platform-quota")[:16]


def gpuquota(spec, backend="kueue", flavors=(A100, NPU)):
    return model.gpuquota_objects("ai-platform-quota", "team-a", spec, backend=backend, flavors=list(flavors),
                                  cohort="gpu-pool", now=NOW, cpu_per_gpu="16", memory_per_gpu="128Gi")


def test_gpuquota_becomes_a_resource_quota_and_a_queue():
    objects, state = gpuquota({"team": "ai-platform", "totalGPUs": 8, "priority": 4,
                               "allowedModels": ["A100-SXM-80GB"], "excludedNodes": ["gpu9"]})
    rq = by_kind(objects, "ResourceQuota")["gpuquota-ai-platform-quota"]
    assert rq["metadata"]["namespace"] == "team-a"
    # Only NVIDIA models allowed: the Ascend resource gets none.
    assert rq["spec"]["hard"] == {"requests.nvidia.com/gpu": "8", "requests.huawei.com/Ascend910": "0"}
    cq = by_kind(objects, "ClusterQueue")[QUEUE]
    assert cq["spec"]["fairSharing"] == {"weight": "4"}
    assert cq["spec"]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "team-a"}}
    assert limits(cq, "nvidia.com/gpu") == ("a100-sxm-80gb", {"nominalQuota": "8", "borrowingLimit": "0"})
    assert limits(cq, "cpu")[1] == {"nominalQuota": "128", "borrowingLimit": "0"}
    assert limits(cq, "memory")[1]["nominalQuota"] == "1Ti"
    assert by_kind(objects, "LocalQueue")["ai-platform-quota"]["spec"] == {"clusterQueue": QUEUE}
    assert state == {"expired": False, "gpus": 8, "resources": {"huawei.com/Ascend910": 0, "nvidia.com/gpu": 8},
                     "errors": [], "unenforced": ["excludedNodes"]}


def test_preemptible_gpuquota_may_borrow():
    objects, _ = gpuquota({"team": "t", "totalGPUs": 2, "preemptible": True})
    cq = by_kind(objects, "ClusterQueue")[QUEUE]
    assert limits(cq, "nvidia.com/gpu")[1] == {"nominalQuota": "2"}


def test_expired_gpuquota_keeps_its_objects_at_zero():
    objects, state = gpuquota({"team": "t", "totalGPUs": 8, "validUntil": "2026-12-02T11:59:59Z"})
    assert state["expired"] is True and state["gpus"] == 0
    assert set(by_kind(objects, "ResourceQuota")["gpuquota-ai-platform-quota"]["spec"]["hard"].values()) == {"0"}
    cq = by_kind(objects, "ClusterQueue")[QUEUE]
    assert limits(cq, "nvidia.com/gpu")[1]["nominalQuota"] == "0"
    _, state = gpuquota({"team": "t", "totalGPUs": 8, "validUntil": "2026-12-02T12:00:01+00:00"})
    assert state["expired"] is False
    # Expired and preemptible: zero quota, and no borrowing past it either.
    objects, _ = gpuquota({"team": "t", "totalGPUs": 8, "preemptible": True, "validUntil": "2026-12-02T11:00:00Z"})
    assert limits(by_kind(objects, "ClusterQueue")[QUEUE], "nvidia.com/gpu")[1] == {
        "nominalQuota": "0", "borrowingLimit": "0"}


DNS_LABEL = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?"


def test_gpuquota_queue_names_do_not_collide_across_namespaces():
    # <namespace>-<name> alone is ambiguous: both were gpuquota-research-lab-x.
    one, two = model.gpuquota_names("x", "research-lab"), model.gpuquota_names("lab-x", "research")
    assert one["queue"] == "gpuquota-research-lab-x-ee956a7d847624c4"
    assert two["queue"] == "gpuquota-research-lab-x-d27f9b83bdf94688"
    assert one["legacy_queue"] == two["legacy_queue"] == "gpuquota-research-lab-x"
    # Long names are cut to 63 (a label value), never end in '-', still distinct.
    longest = [model.gpuquota_names(name, ns) for ns, name in (("a" * 63, "b" * 253), ("a" * 63, "b" * 252),
                                                               ("n" * 50, "-x." * 60 + "y"))]
    for names in [one, two, *longest]:
        assert re.fullmatch(DNS_LABEL, names["queue"]) and names["queue"].startswith("gpuquota-"), names
        assert len(names["resource_quota"]) <= 253 and not names["resource_quota"].endswith("-")
    assert len({n["queue"] for n in longest}) == len(longest)
    assert longest[0]["queue"] == "gpuquota-" + "a" * 37 + "-9af69da2264cff5f"
    assert model.gpuquota_names("ai-platform-quota", "team-a")["resource_quota"] == "gpuquota-ai-platform-quota"


@pytest.mark.parametrize("spec", [
    {"validUntil": "2026-12-02T11:00:00ZtFOO"},     # trailing text after a second 't'
    {"validUntil": "2026-12-02T11:00:00x5Z"},       # any character before the fraction
    {"validUntil": "2026-12-02T11:00:00+99:99"},    # an offset past 23:59
    {"validUntil": "0000-01-01T00:00:00Z"},         # year 0000
    {"validUntil": "2026-02-30T00:00:00Z"},
    {"totalGPUs": 10**14},                          # Decimal overflow in cpu/memory per GPU
    {"totalGPUs": 100001},
    {"totalGPUs": True}, {"priority": 9}, {"preemptible": "yes"}, {"allowedModels": "A100"},
])
def test_an_invalid_gpuquota_fails_closed(spec):
    for backend in ("kueue", "volcano"):
        objects, state = gpuquota({"team": "t", "totalGPUs": 8, "preemptible": True, **spec}, backend=backend)
        assert state["errors"] and state["gpus"] == 0 and state["expired"] is False, state
        assert set(by_kind(objects, "ResourceQuota")["gpuquota-ai-platform-quota"]["spec"]["hard"].values()) == {"0"}
    cq = by_kind(gpuquota({"team": "t", "totalGPUs": 8, "preemptible": True, **spec})[0], "ClusterQueue")[QUEUE]
    assert all(r["nominalQuota"] == "0" and r["borrowingLimit"] == "0" for g in cq["spec"]["resourceGroups"]
               for f in g["flavors"] for r in f["resources"])


CRD_SPEC = yaml.safe_load((ROOT / "roles/gpu_queues/files/gpuquota-crd.yml").read_text())[
    "spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]


@pytest.mark.parametrize(("text", "valid"), [
    ("2026-12-02T11:00:00Z", True), ("2026-12-02t11:00:00z", True), ("2026-12-02T11:00:00.5+05:30", True),
    ("2026-12-02T11:00:00.123456789-23:59", True), ("0001-01-01T00:00:00+01:00", True),
    ("9999-12-31T23:59:59-23:59", True),
    ("2026-12-02T11:00:00ZtFOO", False), ("2026-12-02T11:00:00x5Z", False), ("2026-12-02T11:00:00,5Z", False),
    ("2026-12-02T11:00:00+99:99", False), ("0000-01-01T00:00:00Z", False), ("2026-12-02T11:00:60Z", False),
    ("2026-12-02T11:00:00", False), ("2026-12-02 11:00:00Z", False), ("+2026-12-02T11:00:00Z", False),
    ("2026-12-02T11:00Z", False), ("next week", False), ("", False),
])
def test_valid_until_is_rfc3339_in_the_crd_and_the_controller(text, valid):
    # The CRD's pattern (Go's RE2 on the API server, the same syntax here) and the controller's
    # parser take the same strings.
    assert bool(re.search(CRD_SPEC["validUntil"]["pattern"], text)) == valid
    if valid:
        until = model.gpuquota_valid_until(text)
        assert until.tzinfo is not None
        assert model.gpuquota_expired({"validUntil": text}, NOW) == (until <= NOW)
    else:
        with pytest.raises(model.ModelError, match="RFC 3339"):
            model.gpuquota_valid_until(text)
    assert CRD_SPEC["validUntil"]["format"] == "date-time"
    assert CRD_SPEC["totalGPUs"]["maximum"] == model.GPUQUOTA_MAX_GPUS == 100000


def test_gpuquota_for_volcano():
    objects, _ = gpuquota({"team": "t", "totalGPUs": 3, "priority": 2, "preemptible": True}, backend="volcano")
    queue = by_kind(objects, "Queue")[QUEUE]
    assert queue["spec"] == {"weight": 2, "reclaimable": True,
                             "capability": {"huawei.com/Ascend910": "3", "nvidia.com/gpu": "3"}}
