"""The Kubernetes preflight (playbooks/kubernetes_preflight.yml, imported by site.yml right after
the inventory validation) refuses, on the controller and before any host is touched, a
Kubernetes version the artifact manifest does not pin and an artifact the rollout needs that
has no checksum, naming it. (An even number of control planes and versions older than 1.28 are
refused by the validation play itself: tests/unit/test_validation_play.py.)

Runs the real site.yml against the sample inventory (103 unreachable hosts) with a checksum
overlay written here from the manifest, so each case has exactly one mistake.
"""

import json

import pytest
import yaml
from test_validation_play import ROOT, SAMPLE_SECRET, run_playbook

MANIFEST = ROOT / "artifacts" / "manifest.yml"
PREFLIGHT_PLAY = "Kubernetes preflight"
REFUSAL_TASK = "artifacts : Refuse unknown artifacts, missing checksums and version mismatches"


def overlay(tmp_path, without=()):
    """Checksums (made up, well-formed) for every manifest artifact except `without`."""
    manifest = yaml.safe_load(MANIFEST.read_text())
    entries = {}
    for n, art in enumerate(manifest["artifacts"]):
        if art["name"] in without:
            continue
        digest = f"{n:064x}"
        sha = f"sha256:{digest}" if art["kind"] == "image" else digest
        entries[art["name"]] = {"version": art["version"], "sha256": {arch: sha for arch in manifest["arches"]}}
    path = tmp_path / "overlay.yml"
    path.write_text(yaml.safe_dump({"artifacts": entries}))
    return path


def kubeadm_version():
    return next(a["version"] for a in yaml.safe_load(MANIFEST.read_text())["artifacts"] if a["name"] == "kubeadm")


def refusal(tmp_path, *extra):
    proc, report = run_playbook("playbooks/site.yml", ROOT / "inventories" / "sample", *SAMPLE_SECRET, *extra)
    if report is None:
        pytest.fail(f"no JSON report (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    plays = [p["play"]["name"] for p in report["plays"]]
    # The validation play passed, the preflight refused, nothing after it started.
    assert plays == ["Validate the inventory", PREFLIGHT_PLAY], plays
    assert proc.returncode == 2, proc.stderr
    tasks = report["plays"][1]["tasks"]
    assert tasks[-1]["task"]["name"] == REFUSAL_TASK, [t["task"]["name"] for t in tasks]
    [result] = tasks[-1]["hosts"].values()
    assert result["failed"] is True
    # No task ran anywhere but on the controller, and nothing changed.
    for task in tasks:
        for res in task["hosts"].values():
            assert res.get("_ansible_delegated_vars", {}).get("ansible_host") in (None, "localhost", "127.0.0.1")
    assert all(s["changed"] == 0 for s in report["stats"].values())
    return result["msg"]


def test_the_overlay_alone_passes_the_preflight(tmp_path):
    """The control case: the same run with every checksum gets past the refusal."""
    proc, report = run_playbook("playbooks/kubernetes_preflight.yml", ROOT / "inventories" / "sample",
                                "-e", json.dumps({"artifacts_overlay": str(overlay(tmp_path))}))
    assert report is not None, proc.stderr
    assert proc.returncode == 0, json.dumps(report["plays"][-1]["tasks"][-1], indent=1)[-3000:]


def test_unsupported_version_is_refused_by_name(tmp_path):
    msg = refusal(tmp_path, "-e", json.dumps({"artifacts_overlay": str(overlay(tmp_path)), "k8s_version": "1.33.7"}))
    assert msg == (f"version 1.33.7 of kubeadm is not supported by this release: {MANIFEST} "
                   f"pins kubeadm {kubeadm_version()}")


def test_artifact_without_checksum_is_refused_by_name(tmp_path):
    msg = refusal(tmp_path, "-e", json.dumps({"artifacts_overlay": str(overlay(tmp_path, without=["kubelet"]))}))
    assert msg == (f"refusing artifacts without a sha256 for amd64: kubelet (fill them in {MANIFEST} "
                   "or point artifacts_overlay at a checksum overlay)")


def test_production_manifest_alone_is_refused_naming_every_unverified_artifact(tmp_path):
    """No overlay: the shipped manifest has no upstream checksums for the Kubernetes artifacts yet."""
    msg = refusal(tmp_path)
    assert msg.startswith("refusing artifacts without a sha256 for amd64: kubeadm, kubelet, kubectl, ")
    # The sample inventory runs Calico with the VXLAN backend: its manifest and three images.
    for name in ("calico-vxlan-manifest", "calico-node-image", "calico-cni-image", "calico-kube-controllers-image"):
        assert name in msg, name
    assert "python-kubernetes" not in msg and "python-durationpy" not in msg  # PyPI's checksums are in
