"""The node_label_patch filter: merge, never remove foreign labels, remove own stale ones."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collections"))

from ansible.errors import AnsibleFilterError  # noqa: E402
from ansible_collections.ai_platform.l1.plugins.filter.node_label_patch import (  # noqa: E402
    DEFAULT_ANNOTATION,
    FilterModule,
    node_label_patch,
)
from merge_patch_oracle import merge_patch  # noqa: E402

ANN = DEFAULT_ANNOTATION


def node(labels=None, annotations=None):
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "gpu1", "labels": labels, "annotations": annotations}}


BASE = {"kubernetes.io/hostname": "gpu1", "kubernetes.io/os": "linux"}


def test_fresh_node_gets_labels_and_ownership_and_keeps_the_rest():
    out = node_label_patch(node(dict(BASE)), {"accelerator": "nvidia", "accelerator-count": "8"})
    assert out == {
        "set": {"accelerator": "nvidia", "accelerator-count": "8"},
        "remove": [],
        "owned": ["accelerator", "accelerator-count"],
        "changed": True,
        "patch": {"metadata": {
            "labels": {"accelerator": "nvidia", "accelerator-count": "8"},
            "annotations": {ANN: "accelerator,accelerator-count"},
        }},
    }


def test_converged_node_needs_no_patch():
    labels = dict(BASE, accelerator="nvidia", **{"accelerator-count": "8"})
    out = node_label_patch(node(labels, {ANN: "accelerator,accelerator-count"}),
                           {"accelerator-count": "8", "accelerator": "nvidia"})
    assert out == {"set": {}, "remove": [], "owned": ["accelerator", "accelerator-count"],
                   "changed": False, "patch": {}}


def test_changed_value_is_set_and_only_that():
    labels = dict(BASE, accelerator="nvidia", **{"accelerator-count": "4"})
    out = node_label_patch(node(labels, {ANN: "accelerator,accelerator-count"}),
                           {"accelerator": "nvidia", "accelerator-count": "8"})
    assert out["patch"] == {"metadata": {"labels": {"accelerator-count": "8"}}}


def test_own_stale_labels_are_removed_with_null_foreign_ones_kept():
    labels = dict(BASE, accelerator="nvidia", team="vision",
                  **{"accelerator-mig-profiles": "1g.10gb", "network.interface": "mlx5_0"})
    out = node_label_patch(
        node(labels, {ANN: "accelerator,accelerator-mig-profiles,network.interface", "other": "x"}),
        {"accelerator": "nvidia"})
    assert out["remove"] == ["accelerator-mig-profiles", "network.interface"]
    assert out["patch"] == {"metadata": {
        "labels": {"accelerator-mig-profiles": None, "network.interface": None},
        "annotations": {ANN: "accelerator"},
    }}
    # The foreign label and annotation are not in the patch, so a merge patch keeps them.
    assert "team" not in out["patch"]["metadata"]["labels"]
    assert "other" not in out["patch"]["metadata"]["annotations"]


def test_foreign_label_with_one_of_our_keys_is_not_removed_before_we_own_it():
    # Somebody set accelerator-topology by hand; we never set it, so we never remove it.
    labels = dict(BASE, **{"accelerator-topology": "pcie"})
    out = node_label_patch(node(labels, None), {"accelerator": "nvidia"})
    assert out["remove"] == []
    assert "accelerator-topology" not in out["patch"]["metadata"]["labels"]


def test_owned_key_already_gone_is_dropped_from_the_annotation_without_a_removal():
    labels = dict(BASE, accelerator="nvidia")
    out = node_label_patch(node(labels, {ANN: "accelerator,storage.local-nvme"}), {"accelerator": "nvidia"})
    assert out["remove"] == []
    assert out["patch"] == {"metadata": {"annotations": {ANN: "accelerator"}}}


def test_sloppy_annotation_is_read_and_rewritten_canonically():
    labels = dict(BASE, accelerator="nvidia", old="1")
    out = node_label_patch(node(labels, {ANN: " old , ,accelerator"}), {"accelerator": "nvidia"})
    assert out["remove"] == ["old"]
    assert out["patch"]["metadata"]["annotations"] == {ANN: "accelerator"}


def test_nothing_wanted_removes_all_owned_and_the_annotation():
    labels = dict(BASE, accelerator="nvidia")
    out = node_label_patch(node(labels, {ANN: "accelerator"}), {})
    assert out["patch"] == {"metadata": {"labels": {"accelerator": None}, "annotations": {ANN: None}}}
    assert node_label_patch(node(dict(BASE), None), {}) == {
        "set": {}, "remove": [], "owned": [], "changed": False, "patch": {}}


def test_node_without_labels_or_annotations_maps():
    out = node_label_patch({"metadata": {"name": "n"}}, {"a": "b"})
    assert out["patch"] == {"metadata": {"labels": {"a": "b"}, "annotations": {ANN: "a"}}}


def test_custom_annotation_key():
    out = node_label_patch(node(dict(BASE), {"example.com/owned": "x"}), {"a": "b"},
                           annotation="example.com/owned")
    assert out["remove"] == []  # x is not on the node
    assert out["patch"]["metadata"]["annotations"] == {"example.com/owned": "a"}


@pytest.mark.parametrize(("desired", "message"), [
    ({"accelerator-mig-profiles": "1g.10gb,2g.20gb"}, "not a valid label value"),
    ({"a": "-x"}, "not a valid label value"),
    ({"a": "x" * 64}, "not a valid label value"),
    ({"a": 8}, "not a valid label value"),
    ({"bad key": "x"}, "label key 'bad key'"),
    ({"Example.COM/x": "y"}, "not a DNS subdomain"),
    ({"/x": "y"}, "not a DNS subdomain"),
    ({"": "y"}, "empty"),
    ({"x" * 64: "y"}, "1-63 characters"),
])
def test_invalid_labels_are_refused_before_any_api_call(desired, message):
    with pytest.raises(AnsibleFilterError, match=message):
        node_label_patch(node(dict(BASE)), desired)


def test_valid_edge_values_pass():
    desired = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "empty": "", "a": "x" * 63,
               "network.bandwidth": "2.5Gbps"}
    assert node_label_patch(node(dict(BASE)), desired)["set"] == desired


@pytest.mark.parametrize("bad", [None, [], "node", {"kind": "Node"}])
def test_not_a_node_is_refused(bad):
    with pytest.raises(AnsibleFilterError, match="expects a Node object"):
        node_label_patch(bad, {})


def test_desired_must_be_a_dict():
    with pytest.raises(AnsibleFilterError, match="desired labels as a dict"):
        node_label_patch(node(), [("a", "b")])


def test_registered_as_filter():
    assert FilterModule().filters()["node_label_patch"] is node_label_patch


@pytest.mark.parametrize(("labels", "annotations", "desired"), [
    (dict(BASE), None, {"accelerator": "nvidia", "accelerator-count": "8"}),
    (dict(BASE, accelerator="nvidia", team="a"), {ANN: "accelerator,node-type"},
     {"accelerator": "huawei-ascend", "node-type": "gpu-compute"}),
    (dict(BASE, accelerator="nvidia", team="a", **{"node-type": "x"}), {ANN: "accelerator,node-type"}, {}),
])
def test_applying_the_patch_converges_and_keeps_foreign_labels(labels, annotations, desired):
    before = node(labels, annotations)
    out = node_label_patch(before, desired)
    after = merge_patch(before, out["patch"])
    assert node_label_patch(after, desired)["changed"] is False
    owned_before = {k for k in (annotations or {}).get(ANN, "").split(",") if k}
    for key, value in labels.items():
        if key not in owned_before and key not in desired:
            assert after["metadata"]["labels"][key] == value
    for key, value in desired.items():
        assert after["metadata"]["labels"][key] == value
