"""The node_metadata module: one list and a PATCH per Node that differs, for many Nodes at once.

Driven through a fake CoreV1Api that holds Node dicts, applies patches as the API server does
(merge patch, resourceVersion precondition -> 409) and counts its calls.
"""

import copy
import json
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from kubernetes.client.exceptions import ApiException

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collections"))

from ansible_collections.ai_platform.l1.plugins.filter.node_label_patch import node_label_patch  # noqa: E402
from ansible_collections.ai_platform.l1.plugins.filter.node_taint_plan import node_taint_plan  # noqa: E402
from ansible_collections.ai_platform.l1.plugins.module_utils import node_metadata as nm  # noqa: E402
from ansible_collections.ai_platform.l1.plugins.modules import node_metadata as mod  # noqa: E402
from merge_patch_oracle import merge_patch  # noqa: E402

LABELS_ANN = nm.LABELS_ANNOTATION
TAINTS_ANN = nm.TAINTS_ANNOTATION
TRAIN = {"key": "dedicated", "value": "training", "effect": "NoSchedule"}
FAULT = {"key": "ai-platform.io/fault", "value": "xid79", "effect": "NoSchedule"}
UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": "2026-01-01T00:00:00Z"}
BASE = {"kubernetes.io/hostname": "x", "kubernetes.io/os": "linux"}


def api_exception(status, reason, message):
    exc = ApiException(status=status, reason=reason)
    exc.body = json.dumps({"kind": "Status", "status": "Failure", "message": message, "code": status})
    return exc


class Response:
    """What the client returns with _preload_content=False: the raw body in .data."""

    def __init__(self, obj):
        self.data = json.dumps(obj).encode()


class FakeCoreV1Api:
    """list_node / read_node / patch_node over Node dicts, with injectable conflicts and failures."""

    def __init__(self, nodes=(), register_after_reads=None):
        self.nodes = {}
        self.version = 100
        self.calls = []
        self.patches = []
        self.concurrent_writes = {}  # name -> [function(node)], one run before each of its next patches
        self.failures = {}  # name -> ApiException raised by its patches
        self.register_after_reads = dict(register_after_reads or {})  # name -> (reads before it exists, node)
        self.lock = threading.Lock()
        for node in nodes:
            self.put(node)

    def put(self, node):
        node = copy.deepcopy(node)
        self.version += 1
        node["metadata"]["resourceVersion"] = str(self.version)
        self.nodes[node["metadata"]["name"]] = node

    def count(self, method):
        return sum(1 for call in self.calls if call[0] == method)

    def list_node(self, **kwargs):
        assert kwargs.get("_preload_content") is False
        with self.lock:
            self.calls.append(("list", None))
            return Response({"kind": "NodeList", "metadata": {"resourceVersion": str(self.version)},
                             "items": [self.nodes[n] for n in sorted(self.nodes)]})

    def read_node(self, name, **kwargs):
        assert kwargs.get("_preload_content") is False
        with self.lock:
            self.calls.append(("read", name))
            if name in self.register_after_reads:
                reads, node = self.register_after_reads[name]
                if reads <= 1:
                    del self.register_after_reads[name]
                    self.put(node)
                else:
                    self.register_after_reads[name] = (reads - 1, node)
            if name not in self.nodes:
                raise api_exception(404, "Not Found", 'nodes "%s" not found' % name)
            return Response(self.nodes[name])

    def patch_node(self, name, body, **kwargs):
        assert kwargs.get("_preload_content") is False
        with self.lock:
            self.calls.append(("patch", name))
            self.patches.append((name, copy.deepcopy(body)))
            if name in self.failures:
                raise self.failures[name]
            if name not in self.nodes:
                raise api_exception(404, "Not Found", 'nodes "%s" not found' % name)
            writes = self.concurrent_writes.get(name)
            if writes:
                # Somebody else (a controller, an operator) writes the Node just before our patch.
                node = copy.deepcopy(self.nodes[name])
                writes.pop(0)(node)
                self.put(node)
            current = self.nodes[name]
            wanted_version = (body.get("metadata") or {}).get("resourceVersion")
            if wanted_version and wanted_version != current["metadata"]["resourceVersion"]:
                raise api_exception(409, "Conflict", 'Operation cannot be fulfilled on nodes "%s": the object '
                                    "has been modified; please apply your changes to the latest version and "
                                    "try again" % name)
            body = copy.deepcopy(body)
            body.get("metadata", {}).pop("resourceVersion", None)
            self.put(merge_patch(current, body))
            return Response(self.nodes[name])


def node(name, labels=None, annotations=None, taints=None):
    out = {"apiVersion": "v1", "kind": "Node",
           "metadata": {"name": name, "labels": dict(BASE, **{"kubernetes.io/hostname": name}, **(labels or {}))},
           "spec": {"podCIDR": "10.244.0.0/24"}}
    if annotations:
        out["metadata"]["annotations"] = dict(annotations)
    if taints is not None:
        out["spec"]["taints"] = [dict(t) for t in taints]
    return out


def run(api, nodes, **kwargs):
    kwargs.setdefault("sleep", lambda s: None)
    return mod.reconcile(api, nodes, **kwargs)


def labels_of(api, name):
    return api.nodes[name]["metadata"].get("labels") or {}


def annotations_of(api, name):
    return api.nodes[name]["metadata"].get("annotations") or {}


def taints_of(api, name):
    return api.nodes[name]["spec"].get("taints") or []


# --- no change, labels --------------------------------------------------------------------------

def test_converged_nodes_get_no_patch():
    api = FakeCoreV1Api([
        node("gpu1", {"accelerator": "nvidia"}, {LABELS_ANN: "accelerator"}),
        node("gpu2", {"pool": "training"}, {TAINTS_ANN: json.dumps(["dedicated:NoSchedule"])}, [TRAIN, FAULT]),
    ])
    result, problems = run(api, {"gpu1": {"labels": {"accelerator": "nvidia"}}}, labels_annotation=LABELS_ANN)
    assert problems == [] and result["changed"] is False
    assert result["nodes"]["gpu1"] == dict(mod._entry(), changed=False)
    result, problems = run(api, {"gpu2": {"labels": {"pool": "training"}, "taints": [TRAIN]}})
    assert problems == [] and result["changed"] is False
    assert api.count("list") == 2 and api.count("patch") == 0 and api.count("read") == 0


def test_merged_labels_are_added_and_corrected_never_removed():
    api = FakeCoreV1Api([node("gpu1", {"pool": "inference", "team": "vision"})])
    result, problems = run(api, {"gpu1": {"labels": {"pool": "training", "rack": 12}}})
    assert problems == []
    entry = result["nodes"]["gpu1"]
    assert entry["changed"] is True
    assert entry["labels_added"] == {"rack": "12"} and entry["labels_changed"] == {"pool": "training"}
    assert entry["labels_removed"] == []
    assert labels_of(api, "gpu1") == dict(BASE, **{"kubernetes.io/hostname": "gpu1"}, pool="training",
                                           team="vision", rack="12")
    # Only values were set: the patch does not depend on what was read, so no precondition.
    assert api.patches == [("gpu1", {"metadata": {"labels": {"pool": "training", "rack": "12"}}})]


def test_owned_labels_no_longer_wanted_are_removed_and_foreign_ones_kept():
    api = FakeCoreV1Api([node("gpu1", {"accelerator": "nvidia", "accelerator-mig-profiles": "1g.10gb",
                                       "accelerator-topology": "pcie", "team": "vision"},
                              {LABELS_ANN: "accelerator,accelerator-mig-profiles", "other": "x"})])
    result, problems = run(api, {"gpu1": {"labels": {"accelerator": "nvidia", "accelerator-count": "8"}}},
                           labels_annotation=LABELS_ANN)
    assert problems == []
    entry = result["nodes"]["gpu1"]
    assert entry["labels_added"] == {"accelerator-count": "8"}
    assert entry["labels_removed"] == ["accelerator-mig-profiles"]
    labels = labels_of(api, "gpu1")
    assert "accelerator-mig-profiles" not in labels
    # Never recorded as ours: stays, although it is one of the role's keys.
    assert labels["accelerator-topology"] == "pcie" and labels["team"] == "vision"
    assert annotations_of(api, "gpu1") == {LABELS_ANN: "accelerator,accelerator-count", "other": "x"}
    # A removal was computed from the Node read: it is sent with that resourceVersion.
    name, body = api.patches[0]
    assert body["metadata"]["resourceVersion"]


# --- taints -----------------------------------------------------------------------------------------

def test_taints_added_and_corrected_foreign_ones_kept_in_place():
    gpu = {"key": "nvidia.com/gpu", "value": "", "effect": "PreferNoSchedule"}
    api = FakeCoreV1Api([node("gpu1", {}, None, [UNREACHABLE, dict(TRAIN, value="inference"), FAULT])])
    result, problems = run(api, {"gpu1": {"labels": {}, "taints": [TRAIN, gpu]}})
    assert problems == []
    entry = result["nodes"]["gpu1"]
    assert entry["taints_changed"] == [TRAIN]
    assert entry["taints_added"] == [{"key": "nvidia.com/gpu", "effect": "PreferNoSchedule"}]
    assert entry["taints_removed"] == []
    # The foreign taints keep their place and fields (timeAdded); the corrected one takes the old one's place.
    assert taints_of(api, "gpu1") == [UNREACHABLE, TRAIN, FAULT,
                                      {"key": "nvidia.com/gpu", "effect": "PreferNoSchedule"}]
    assert json.loads(annotations_of(api, "gpu1")[TAINTS_ANN]) == ["dedicated:NoSchedule",
                                                                     "nvidia.com/gpu:PreferNoSchedule"]
    body = api.patches[0][1]
    assert body["metadata"]["resourceVersion"]  # a new complete list: only for the version it came from
    result, problems = run(api, {"gpu1": {"labels": {}, "taints": [TRAIN, gpu]}})
    assert result["changed"] is False and api.count("patch") == 1


def test_a_dropped_taint_is_removed_only_when_recorded_as_ours():
    ours = {"key": "ai-platform.io/maintenance", "effect": "NoSchedule"}
    api = FakeCoreV1Api([
        node("gpu1", {}, {TAINTS_ANN: json.dumps(["ai-platform.io/maintenance:NoSchedule", "dedicated:NoSchedule"])},
             [ours, TRAIN, FAULT, UNREACHABLE]),
        # Same taints, never recorded: somebody else's, they stay.
        node("gpu2", {}, None, [ours, TRAIN, FAULT]),
    ])
    result, problems = run(api, {"gpu1": {"taints": [TRAIN]}, "gpu2": {"taints": []}})
    assert problems == []
    assert result["nodes"]["gpu1"]["taints_removed"] == [ours]
    assert taints_of(api, "gpu1") == [TRAIN, FAULT, UNREACHABLE]
    assert json.loads(annotations_of(api, "gpu1")[TAINTS_ANN]) == ["dedicated:NoSchedule"]
    assert result["nodes"]["gpu2"]["changed"] is False
    assert taints_of(api, "gpu2") == [ours, TRAIN, FAULT]


def test_no_taints_wanted_any_more_removes_ours_and_the_annotation():
    api = FakeCoreV1Api([node("gpu1", {}, {TAINTS_ANN: json.dumps(["dedicated:NoSchedule"])}, [TRAIN])])
    result, problems = run(api, {"gpu1": {"taints": []}})
    assert problems == [] and result["nodes"]["gpu1"]["taints_removed"] == [TRAIN]
    assert taints_of(api, "gpu1") == [] and TAINTS_ANN not in annotations_of(api, "gpu1")


def test_an_entry_without_taints_leaves_taints_and_their_annotation_alone():
    recorded = {TAINTS_ANN: json.dumps(["dedicated:NoSchedule"])}
    api = FakeCoreV1Api([node("gpu1", {}, recorded, [TRAIN])])
    result, problems = run(api, {"gpu1": {"labels": {"accelerator": "nvidia"}}}, labels_annotation=LABELS_ANN)
    assert problems == []
    assert taints_of(api, "gpu1") == [TRAIN]
    assert annotations_of(api, "gpu1") == dict(recorded, **{LABELS_ANN: "accelerator"})
    assert "spec" not in api.patches[0][1]


# --- missing Nodes ----------------------------------------------------------------------------------

def test_missing_nodes_fail_by_default_naming_all_after_reconciling_the_others():
    api = FakeCoreV1Api([node("gpu1")])
    result, problems = run(api, {"gpu1": {"labels": {"a": "b"}}, "gpu7": {}, "gpu3": {}})
    assert result["missing"] == ["gpu3", "gpu7"]
    assert len(problems) == 1 and "2 Nodes are not registered" in problems[0] and "gpu3, gpu7" in problems[0]
    assert labels_of(api, "gpu1")["a"] == "b"
    assert set(result["nodes"]) == {"gpu1"}


def test_missing_nodes_are_reported_with_skip():
    api = FakeCoreV1Api([node("gpu1")])
    result, problems = run(api, {"gpu1": {}, "gpu2": {"labels": {"a": "b"}}}, missing="skip")
    assert problems == [] and result["missing"] == ["gpu2"] and result["changed"] is False
    assert api.count("read") == 0  # no waiting asked for


def test_wait_timeout_reads_each_missing_node_until_it_registers():
    api = FakeCoreV1Api([node("gpu1")], register_after_reads={"gpu2": (3, node("gpu2"))})
    now = [0.0]
    slept = []

    def sleep(seconds):
        slept.append(seconds)
        now[0] += seconds

    result, problems = run(api, {"gpu1": {}, "gpu2": {"labels": {"a": "b"}}, "gpu9": {}}, missing="skip",
                           wait_timeout=30, sleep=sleep, clock=lambda: now[0])
    assert problems == []
    assert result["missing"] == ["gpu9"]
    assert result["nodes"]["gpu2"]["labels_added"] == {"a": "b"} and labels_of(api, "gpu2")["a"] == "b"
    assert api.count("list") == 1
    # gpu2 is read until it exists; gpu9 until the time is up (every 2 seconds for 30).
    assert [c for c in api.calls if c == ("read", "gpu2")] == [("read", "gpu2")] * 3
    assert sum(slept) == 30 and max(slept) == mod.POLL_INTERVAL


# --- conflicts and failures ------------------------------------------------------------------------

def test_a_conflict_is_retried_on_the_node_read_again_keeping_the_other_writers_taint():
    api = FakeCoreV1Api([node("gpu1", {}, None, [])])
    api.concurrent_writes["gpu1"] = [lambda n: n["spec"].setdefault("taints", []).append(dict(UNREACHABLE))]
    result, problems = run(api, {"gpu1": {"taints": [TRAIN]}})
    assert problems == [] and result["nodes"]["gpu1"]["changed"] is True
    assert api.count("patch") == 2 and api.count("read") == 1
    # The second patch was computed from the Node as re-read: the taint written meanwhile is kept.
    assert taints_of(api, "gpu1") == [UNREACHABLE, TRAIN]


def test_a_conflict_that_resolves_the_difference_needs_no_second_patch():
    api = FakeCoreV1Api([node("gpu1", {}, None, [])])

    def operator_did_it(n):
        n["spec"]["taints"] = [dict(TRAIN)]
        n["metadata"]["annotations"] = {TAINTS_ANN: json.dumps(["dedicated:NoSchedule"])}

    api.concurrent_writes["gpu1"] = [operator_did_it]
    result, problems = run(api, {"gpu1": {"taints": [TRAIN]}})
    assert problems == [] and result["nodes"]["gpu1"]["changed"] is False
    assert api.count("patch") == 1 and api.count("read") == 1


def test_a_node_that_keeps_conflicting_fails_after_the_last_attempt():
    api = FakeCoreV1Api([node("gpu1", {}, None, [])])
    api.concurrent_writes["gpu1"] = [lambda n: n["spec"].update(unschedulable=not n["spec"].get("unschedulable"))
                                     for _ in range(10)]
    result, problems = run(api, {"gpu1": {"taints": [TRAIN]}})
    assert api.count("patch") == mod.CONFLICT_ATTEMPTS
    assert result["failed_nodes"] == ["gpu1"]
    assert "409 Conflict" in result["nodes"]["gpu1"]["error"] and "after 5 attempts" in result["nodes"]["gpu1"]["error"]
    assert problems and "gpu1" in problems[0]


def test_one_failing_node_does_not_stop_the_others_and_every_error_is_listed():
    api = FakeCoreV1Api([node("gpu%d" % i) for i in range(1, 6)])
    api.failures["gpu2"] = api_exception(422, "Unprocessable Entity", 'Node "gpu2" is invalid: metadata.labels')
    api.failures["gpu4"] = api_exception(403, "Forbidden", 'nodes "gpu4" is forbidden: User cannot patch')
    api.failures["gpu5"] = ConnectionResetError("Connection reset by peer")
    nodes = {"gpu%d" % i: {"labels": {"pool": "training"}} for i in range(1, 6)}
    result, problems = run(api, nodes, parallel=3)
    assert result["failed_nodes"] == ["gpu2", "gpu4", "gpu5"]
    assert result["changed"] is True
    assert labels_of(api, "gpu1")["pool"] == "training" and labels_of(api, "gpu3")["pool"] == "training"
    assert result["nodes"]["gpu2"]["error"] == '422 Unprocessable Entity: Node "gpu2" is invalid: metadata.labels'
    assert result["nodes"]["gpu4"]["error"].startswith("403 Forbidden: ")
    assert result["nodes"]["gpu5"]["error"] == "ConnectionResetError: Connection reset by peer"
    assert result["nodes"]["gpu2"]["changed"] is False and result["nodes"]["gpu2"]["labels_added"] == {}
    assert len(problems) == 1
    assert problems[0].startswith("3 of 5 Nodes could not be reconciled: gpu2: 422")
    assert "gpu4: 403 Forbidden" in problems[0] and "gpu5: ConnectionResetError" in problems[0]


def test_a_node_the_rules_cannot_read_is_its_own_error():
    # A taint with an effect the rules do not know (a newer API?): that Node fails, the others go on.
    api = FakeCoreV1Api([node("gpu1", {}, None, [{"key": "x", "effect": "NoWhatever"}]), node("gpu2")])
    result, problems = run(api, {"gpu1": {"taints": []}, "gpu2": {"taints": [TRAIN]}})
    assert result["failed_nodes"] == ["gpu1"]
    assert "effect must be one of" in result["nodes"]["gpu1"]["error"]
    assert taints_of(api, "gpu2") == [TRAIN] and problems


def test_a_read_error_while_waiting_is_that_nodes_error():
    api = FakeCoreV1Api([node("gpu1")])
    original = api.read_node

    def read_node(name, **kwargs):
        if name == "gpu2":
            raise api_exception(500, "Internal Server Error", "etcdserver: request timed out")
        return original(name, **kwargs)

    api.read_node = read_node
    result, problems = run(api, {"gpu1": {}, "gpu2": {}}, wait_timeout=4, clock=iter(range(100)).__next__)
    assert result["failed_nodes"] == ["gpu2"] and result["missing"] == []
    assert result["nodes"]["gpu2"]["error"] == ("reading the Node: 500 Internal Server Error: "
                                                "etcdserver: request timed out")
    assert problems


def test_a_failing_list_is_one_clear_error():
    api = FakeCoreV1Api()
    api.list_node = lambda **kw: (_ for _ in ()).throw(api_exception(401, "Unauthorized", "Unauthorized"))
    with pytest.raises(mod.ApiCallFailed, match="listing the Nodes failed: 401 Unauthorized"):
        run(api, {"gpu1": {}})


# --- check mode and diff ---------------------------------------------------------------------------

def test_check_mode_reports_and_sends_nothing():
    api = FakeCoreV1Api([node("gpu1", {"old": "1"}, {LABELS_ANN: "old"}, [TRAIN])])
    before = copy.deepcopy(api.nodes)
    result, problems = run(api, {"gpu1": {"labels": {"new": "2"}, "taints": []}}, labels_annotation=LABELS_ANN,
                           check_mode=True, diff=True)
    assert problems == [] and result["changed"] is True
    entry = result["nodes"]["gpu1"]
    assert entry["labels_added"] == {"new": "2"} and entry["labels_removed"] == ["old"]
    assert entry["taints_removed"] == []  # never recorded as ours
    assert api.nodes == before and api.count("patch") == 0 and api.count("list") == 1
    assert result["diff"]["after"]["gpu1"]["labels"]["new"] == "2"


def test_diff_shows_changed_nodes_only_with_their_managed_metadata():
    api = FakeCoreV1Api([
        node("gpu1", {}, {"kubeadm.alpha.kubernetes.io/cri-socket": "x"}, [UNREACHABLE]),
        node("gpu2", {"pool": "training"}),
    ])
    result, problems = run(api, {"gpu1": {"labels": {"pool": "training"}, "taints": [TRAIN]},
                                 "gpu2": {"labels": {"pool": "training"}}}, diff=True)
    assert problems == []
    assert set(result["diff"]["before"]) == set(result["diff"]["after"]) == {"gpu1"}
    before, after = result["diff"]["before"]["gpu1"], result["diff"]["after"]["gpu1"]
    assert before["annotations"] == {} and before["taints"] == [
        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}]
    assert after["annotations"] == {TAINTS_ANN: json.dumps(["dedicated:NoSchedule"])}
    assert after["taints"][-1] == TRAIN and after["labels"]["pool"] == "training"
    assert "diff" not in run(api, {"gpu1": {}})[0]


# --- input ---------------------------------------------------------------------------------------

def test_bad_input_is_refused_before_any_api_call_naming_every_problem():
    api = FakeCoreV1Api([node("gpu1")])
    nodes = {
        "gpu1": {"labels": {"accelerator-mig-profiles": "1g.10gb,2g.20gb", "bad key": "x"}},
        "gpu2": {"taints": [{"key": "x", "effect": "Sometimes"}]},
        "gpu3": {"taints": [TRAIN, dict(TRAIN, value="other")]},
        "gpu4": {"lables": {}},
        "gpu5": ["not", "a", "dict"],
        "gpu6": {"labels": {"a": None}},
    }
    with pytest.raises(nm.NodeMetadataError) as exc:
        run(api, nodes)
    text = str(exc.value)
    for part in ("gpu1: label accelerator-mig-profiles: value '1g.10gb,2g.20gb' is not a valid label value",
                 "gpu1: label key 'bad key'", "gpu2: taints[0] x: effect must be one of",
                 "gpu3: taints listed twice (key:effect): dedicated:NoSchedule", "gpu4: unknown keys lables",
                 "gpu5: expected {labels, taints}, got list", "gpu6: label a: value None"):
        assert part in text
    assert api.calls == []


def test_annotation_options_are_checked():
    with pytest.raises(nm.NodeMetadataError, match="must differ"):
        nm.normalize_nodes({}, "example.com/x", "example.com/x")
    with pytest.raises(nm.NodeMetadataError, match="labels_annotation 'bad key'"):
        nm.normalize_nodes({}, "bad key")


def test_null_entry_means_nothing_wanted():
    api = FakeCoreV1Api([node("gpu1", {"accelerator": "nvidia"}, {LABELS_ANN: "accelerator"})])
    result, problems = run(api, {"gpu1": None}, labels_annotation=LABELS_ANN)
    assert problems == [] and result["nodes"]["gpu1"]["labels_removed"] == ["accelerator"]
    assert "accelerator" not in labels_of(api, "gpu1") and LABELS_ANN not in annotations_of(api, "gpu1")


# --- the same rules as the filters ----------------------------------------------------------------

LABEL_CASES = [
    ({}, None, {"accelerator": "nvidia", "accelerator-count": "8"}),
    ({"accelerator": "nvidia", "team": "a"}, {LABELS_ANN: "accelerator,node-type"},
     {"accelerator": "huawei-ascend", "node-type": "gpu-compute"}),
    ({"accelerator": "nvidia", "team": "a", "node-type": "x"}, {LABELS_ANN: "accelerator,node-type"}, {}),
    ({"accelerator": "nvidia", "old": "1"}, {LABELS_ANN: " old , ,accelerator"}, {"accelerator": "nvidia"}),
]


@pytest.mark.parametrize(("labels", "annotations", "desired"), LABEL_CASES)
def test_owned_labels_end_where_the_node_label_patch_filter_ends(labels, annotations, desired):
    start = node("gpu1", labels, annotations)
    by_filter = merge_patch(start, node_label_patch(start, desired)["patch"])
    api = FakeCoreV1Api([start])
    run(api, {"gpu1": {"labels": desired}}, labels_annotation=LABELS_ANN)
    got = api.nodes["gpu1"]["metadata"]
    assert got.get("labels") == by_filter["metadata"].get("labels")
    assert (got.get("annotations") or {}) == (by_filter["metadata"].get("annotations") or {})


def k8s_taint(taints, present=(), absent=()):
    """kubernetes.core.k8s_taint: present replaces same key:effect or appends; absent drops key:effect."""
    out = [dict(t) for t in taints]
    for t in present:
        same = [i for i, o in enumerate(out) if (o["key"], o["effect"]) == (t["key"], t["effect"])]
        if same:
            out[same[0]] = dict(t)
        else:
            out.append(dict(t))
    gone = {(t["key"], t["effect"]) for t in absent}
    return [o for o in out if (o["key"], o["effect"]) not in gone]


TAINT_CASES = [
    ({"pool": "x"}, None, [UNREACHABLE], {"pool": "training"}, [TRAIN]),
    ({}, {TAINTS_ANN: json.dumps(["dedicated:NoSchedule", "a:NoExecute"])},
     [dict(TRAIN, value="old"), {"key": "a", "effect": "NoExecute"}, FAULT], {}, [TRAIN]),
    ({}, {TAINTS_ANN: json.dumps(["dedicated:NoSchedule"])}, [TRAIN, FAULT], {"a": "1"}, []),
    ({}, {TAINTS_ANN: "not json"}, [TRAIN], {}, []),
]


@pytest.mark.parametrize(("labels", "annotations", "taints", "want_labels", "want_taints"), TAINT_CASES)
def test_taints_end_where_the_node_taint_plan_filter_and_k8s_taint_end(labels, annotations, taints, want_labels,
                                                                      want_taints):
    start = node("gpu1", labels, annotations, taints)
    plan = node_taint_plan(start, want_labels, want_taints)
    by_filter = merge_patch(start, {"metadata": plan["metadata"]})
    by_filter_taints = k8s_taint(taints, plan["taints_present"], plan["taints_absent"])
    api = FakeCoreV1Api([start])
    result, _ = run(api, {"gpu1": {"labels": want_labels, "taints": want_taints}})
    got = api.nodes["gpu1"]
    assert got["metadata"].get("labels") == by_filter["metadata"].get("labels")
    assert (got["metadata"].get("annotations") or {}) == (by_filter["metadata"].get("annotations") or {})
    assert [nm.normalize_taint(t, "t") for t in taints_of(api, "gpu1")] == [
        nm.normalize_taint(t, "t") for t in by_filter_taints]
    assert result["changed"] is plan["changed"]


# --- a fleet ---------------------------------------------------------------------------------------

def fleet(count):
    return [node("gpu%04d" % i, {}, None, [UNREACHABLE] if i % 100 == 0 else None) for i in range(count)]


def fleet_spec(count):
    return {"gpu%04d" % i: {"labels": {"accelerator": "nvidia", "accelerator-count": "8", "pool": "training"},
                            "taints": [TRAIN]} for i in range(count)}


@pytest.mark.parametrize("parallel", [1, 8])
def test_a_thousand_nodes_take_one_list_and_one_patch_each_then_nothing(parallel):
    api = FakeCoreV1Api(fleet(1000))
    result, problems = run(api, fleet_spec(1000), parallel=parallel)
    assert problems == [] and result["changed"] is True
    assert api.count("list") == 1 and api.count("patch") == 1000 and api.count("read") == 0
    assert sorted(name for name, _ in api.patches) == sorted(fleet_spec(1000))
    assert all(e["changed"] for e in result["nodes"].values())
    assert taints_of(api, "gpu0100") == [UNREACHABLE, TRAIN]
    api.calls.clear()
    result, problems = run(api, fleet_spec(1000), parallel=parallel)
    assert problems == [] and result["changed"] is False
    assert api.calls == [("list", None)]


# --- the module ------------------------------------------------------------------------------------

@pytest.fixture
def fake_client(monkeypatch):
    api = FakeCoreV1Api([node("gpu1", {}, None, [FAULT])])
    seen = {}

    def new_client_from_config(config_file=None):
        seen["config_file"] = config_file
        return "api-client"

    def core_v1(api_client):
        assert api_client == "api-client"
        return api

    monkeypatch.setattr(mod, "HAS_KUBERNETES", True)
    # Stand-ins for the kubernetes modules (touching the real CoreV1Api costs a second of import).
    monkeypatch.setattr(mod, "k8s_config", SimpleNamespace(new_client_from_config=new_client_from_config))
    monkeypatch.setattr(mod, "k8s_client", SimpleNamespace(CoreV1Api=core_v1))
    return api, seen


def test_module_reconciles_and_reports(run_module, fake_client):
    api, seen = fake_client
    out = run_module(mod, kubeconfig="/etc/kubernetes/admin.conf",
                     nodes={"gpu1": {"labels": {"pool": "training"}, "taints": [TRAIN]}})
    assert out["_rc"] == 0 and out["changed"] is True
    assert seen["config_file"] == "/etc/kubernetes/admin.conf"
    assert out["nodes"]["gpu1"]["taints_added"] == [TRAIN] and out["missing"] == [] and out["failed_nodes"] == []
    assert out["diff"]["after"]["gpu1"]["taints"] == [FAULT, TRAIN]
    assert taints_of(api, "gpu1") == [FAULT, TRAIN]


def test_module_fails_with_the_results_when_a_node_is_missing(run_module, fake_client):
    api, _seen = fake_client
    out = run_module(mod, nodes={"gpu1": {"labels": {"pool": "training"}}, "gpu2": {}})
    assert out["_rc"] == 1 and out["failed"] is True
    assert "not registered" in out["msg"] and "gpu2" in out["msg"]
    assert out["missing"] == ["gpu2"] and out["nodes"]["gpu1"]["changed"] is True
    assert labels_of(api, "gpu1")["pool"] == "training"


def test_module_check_mode(run_module, fake_client):
    api, _seen = fake_client
    out = run_module(mod, check_mode=True, nodes={"gpu1": {"labels": {"pool": "training"}}})
    assert out["_rc"] == 0 and out["changed"] is True and api.count("patch") == 0


@pytest.mark.parametrize(("args", "message"), [
    ({"nodes": {"gpu1": {"labels": {"a": "-x"}}}}, "invalid nodes: gpu1: label a"),
    ({"nodes": {}, "parallel": 0}, "parallel must be 1 to 16"),
    ({"nodes": {}, "wait_timeout": -1}, "wait_timeout must be 0 or more"),
])
def test_module_refuses_bad_options_before_the_api(run_module, fake_client, args, message):
    api, _seen = fake_client
    out = run_module(mod, **args)
    assert out["_rc"] == 1 and message in out["msg"] and api.calls == []
    assert out["nodes"] == {} and out["failed_nodes"] == []


def test_module_without_the_kubernetes_library(run_module, monkeypatch):
    monkeypatch.setattr(mod, "HAS_KUBERNETES", False)
    monkeypatch.setattr(mod, "KUBERNETES_ERR", "ImportError")
    out = run_module(mod, nodes={"gpu1": {}})
    assert out["_rc"] == 1 and "kubernetes" in out["msg"]


def test_module_list_failure(run_module, fake_client):
    api, _seen = fake_client
    api.list_node = lambda **kw: (_ for _ in ()).throw(api_exception(403, "Forbidden", "nodes is forbidden"))
    out = run_module(mod, nodes={"gpu1": {}})
    assert out["_rc"] == 1 and out["msg"] == "listing the Nodes failed: 403 Forbidden: nodes is forbidden"
