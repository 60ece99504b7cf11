"""The node_taint_plan filter (k8s_worker): inventory taints added or corrected, only this role's
own stale taints removed, labels added or corrected, nothing to send on a converged Node."""

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collections"))

from ansible.errors import AnsibleFilterError  # noqa: E402
from ansible_collections.ai_platform.l1.plugins.filter.node_taint_plan import (  # noqa: E402
    DEFAULT_ANNOTATION,
    FilterModule,
    node_taint_plan,
)

ANN = DEFAULT_ANNOTATION
FAULT = {"key": "ai-platform.io/fault", "value": "xid79", "effect": "NoSchedule", "timeAdded": None}
UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:00Z"}
TRAIN = {"key": "dedicated", "value": "training", "effect": "NoSchedule"}
GPU = {"key": "nvidia.com/gpu", "value": "", "effect": "PreferNoSchedule"}


def node(labels=None, annotations=None, taints=None):
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "gpu1", "labels": labels, "annotations": annotations},
            "spec": {"taints": taints} if taints is not None else {}}


def test_fresh_node_gets_taints_labels_and_the_ownership_record():
    out = node_taint_plan(node({"kubernetes.io/os": "linux"}), {"pool": "training"}, [TRAIN, GPU])
    # An empty value is left out: the API omits it, and k8s_taint would see a change forever.
    assert out["taints_present"] == [TRAIN, {"key": "nvidia.com/gpu", "effect": "PreferNoSchedule"}]
    assert out["taints_absent"] == []
    assert out["metadata"] == {"labels": {"pool": "training"},
                               "annotations": {ANN: json.dumps(["dedicated:NoSchedule",
                                                                "nvidia.com/gpu:PreferNoSchedule"])}}
    assert out["changed"] is True


def test_converged_node_needs_nothing():
    taints = [dict(TRAIN, timeAdded=None), {"key": "nvidia.com/gpu", "effect": "PreferNoSchedule"}, FAULT]
    n = node({"pool": "training"}, {ANN: json.dumps(["dedicated:NoSchedule", "nvidia.com/gpu:PreferNoSchedule"])},
             taints)
    out = node_taint_plan(n, {"pool": "training"}, [TRAIN, GPU])
    assert out == {"taints_present": [], "taints_absent": [], "metadata": {},
                   "managed": ["dedicated:NoSchedule", "nvidia.com/gpu:PreferNoSchedule"], "changed": False}


def test_a_changed_value_is_corrected():
    n = node({}, {ANN: json.dumps(["dedicated:NoSchedule"])}, [dict(TRAIN, value="inference")])
    out = node_taint_plan(n, {}, [TRAIN])
    assert out["taints_present"] == [TRAIN]
    assert out["changed"] is True


def test_only_own_dropped_taints_are_removed_and_foreign_ones_stay():
    n = node({}, {ANN: json.dumps(["dedicated:NoSchedule"])}, [TRAIN, FAULT, UNREACHABLE])
    out = node_taint_plan(n, {}, [])
    assert out["taints_absent"] == [TRAIN]
    assert out["taints_present"] == []
    # Nothing managed any more: the annotation is dropped (merge-patch null).
    assert out["metadata"] == {"annotations": {ANN: None}}


def test_a_foreign_taint_with_an_inventory_key_is_not_removed_unless_recorded():
    # Somebody else set dedicated:NoSchedule; the inventory never had it: it stays.
    out = node_taint_plan(node({}, None, [TRAIN]), {}, [])
    assert out["taints_absent"] == [] and out["changed"] is False


def test_a_broken_annotation_claims_nothing():
    out = node_taint_plan(node({}, {ANN: "not json"}, [TRAIN]), {}, [])
    assert out["taints_absent"] == []


def test_labels_only_differences_are_sent_and_never_removals():
    out = node_taint_plan(node({"a": "1", "b": "2", "other": "x"}), {"a": "1", "b": "3"}, [])
    assert out["metadata"] == {"labels": {"b": "3"}}


@pytest.mark.parametrize(("taints", "message"), [
    ([{"key": "", "effect": "NoSchedule"}], "must be a mapping with a key"),
    ([{"key": "x", "effect": "Sometimes"}], "effect must be one of"),
    ([TRAIN, dict(TRAIN, value="other")], "listed twice"),
])
def test_bad_taints_are_refused(taints, message):
    with pytest.raises(AnsibleFilterError, match=message):
        node_taint_plan(node(), {}, taints)


def test_registered():
    assert FilterModule().filters()["node_taint_plan"] is node_taint_plan
