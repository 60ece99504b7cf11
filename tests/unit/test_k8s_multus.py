"""roles/k8s_multus: the attachments' CNI configurations are checked before anything
is applied, the images come from the resolved artifacts by digest, the RDMA device plugin's
configuration is the inventory's. Rendered for real by ansible-playbook with the role's own vars; the
lab applies the same objects (tests/integration/test_network.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import role_expression

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "k8s_multus"
DIGEST = "sha256:" + "cd" * 32
ARTIFACTS = {
    "multus-image": {"image": "m:5000/k8snetworkplumbingwg/multus-cni:v4.3.0", "sha256": DIGEST},
    "whereabouts-image": {"image": "m:5000/k8snetworkplumbingwg/whereabouts:v0.9.2", "sha256": DIGEST},
    "rdma-shared-dev-plugin-image": {"image": "m:5000/mellanox/k8s-rdma-shared-dev-plugin:v1.5.3", "sha256": ""},
}
STORAGE = {"name": "storage-net", "config": {"cniVersion": "0.3.1", "type": "macvlan", "master": "eth1",
                                             "ipam": {"type": "whereabouts", "range": "10.89.101.192/27"}}}


def render(tmp_path: Path, content: str, **extra):
    return json.loads(role_expression(tmp_path, "k8s_multus", f"{content} | to_json",
                                      k8s_multus_artifacts=ARTIFACTS, **extra))


@pytest.mark.parametrize(("config", "problem"), [
    ({"type": "macvlan"}, "storage-net: the CNI configuration needs cniVersion and type"),
    ({"cniVersion": "0.3.1", "type": "macvlan", "ipam": {"type": "whereabouts"}},
     "storage-net: a whereabouts IPAM needs range, a CIDR"),
    ({"cniVersion": "0.3.1", "type": "macvlan", "ipam": {"type": "whereabouts", "range": "eth1"}},
     "storage-net: a whereabouts IPAM needs range, a CIDR"),
])
def test_an_incomplete_attachment_is_named(tmp_path, config, problem):
    assert render(tmp_path, "k8s_multus__problems",
                  k8s_multus_networks=[STORAGE, {"name": "storage-net", "config": config}]) == [problem]


def test_the_seeds_attachments_pass(tmp_path):
    ib = {"name": "ib-net", "config": {"cniVersion": "0.3.1", "type": "ib-sriov", "master": "ib0",
                                       "ipam": {"type": "whereabouts", "range": "192.168.200.0/24"}}}
    assert render(tmp_path, "k8s_multus__problems", k8s_multus_networks=[STORAGE, ib]) == []


def test_images_by_digest_and_the_files_follow_the_rdma_resources(tmp_path):
    images = render(tmp_path, "k8s_multus__manifest_images")
    assert images["multus-manifest"] == {
        "k8snetworkplumbingwg/multus-cni": f"m:5000/k8snetworkplumbingwg/multus-cni:v4.3.0@{DIGEST}"}
    assert images["rdma-shared-dev-plugin-manifest"] == {
        "mellanox/k8s-rdma-shared-dev-plugin": "m:5000/mellanox/k8s-rdma-shared-dev-plugin:v1.5.3"}
    assert "rdma-shared-dev-plugin-manifest" not in render(tmp_path, "k8s_multus__files")
    resources = [{"resourceName": "rdma_shared_compute", "rdmaHcaMax": 64, "selectors": {"ifNames": ["eth2"]}}]
    assert render(tmp_path, "k8s_multus__daemonsets", k8s_multus_rdma_resources=resources)[-1] == "rdma-shared-dp-ds"
    config = render(tmp_path, "k8s_multus__rdma_config", k8s_multus_rdma_resources=resources)
    assert json.loads(config["data"]["config.json"]) == {"periodicUpdateInterval": 300, "configList": resources}
