"""The GPU Operator and HAMi paths of roles/k8s_device_plugins (k8s_device_plugins_nvidia_provider),
rendered by the role on the lab and validated by its API server; neither runs here.

Both charts come from the lab mirror like any chart (packed from the upstream chart archives of the
source cache, artifacts/sources.yml), through playbooks/device_plugins.yml with
k8s_device_plugins_nvidia_release_install false: the role resolves helm and the chart, renders the
release with its values (helm template, CRDs included) and keeps it on the API host; nothing is
installed. The release's images cannot be had here (the GPU Operator's and HAMi's images are not
built in the lab; HAMi needs real GPUs for its CUDA interception), so the test gives the resolver
placeholder digests for them in a copy of the lab's checksum overlay. The test then installs the
release's CRDs for real (the GPU Operator's ClusterPolicy and NVIDIADriver, NFD's NodeFeature*),
has the API server validate every other rendered object with `kubectl apply --dry-run=server`, and
removes the CRDs. The seed's shared-GPU Pod: as the seed writes it (annotations, a request without a
limit), the API refuses it; as HAMi reads a share (limits nvidia.com/gpu, gpumem, gpucores) it passes.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import yaml
from conftest import (
    CONTROL_PLANES,
    OVERLAY,
    REPO,
    admin_kubeconfig,
    controller_kubectl,
    on,
    playbook,
    recap,
    server_dry_run,
    tail,
)

PLAYBOOK = REPO / "playbooks" / "device_plugins.yml"
CP = CONTROL_PLANES[0]
# Manifest images the lab does not build (lab/k8s/build.py NOT_BUILT): a placeholder digest each.
PLACEHOLDER = "sha256:" + "0" * 64
NOT_IN_LAB = {
    "gpu_operator": ["gpu-operator-image", "k8s-mig-manager-image", "dcgm-exporter-image",
                     "node-feature-discovery-image"],
    "hami": ["hami-image", "hami-webhook-certgen-image"],
}
RENDERED = "/var/cache/ai-platform/charts/{release}.rendered.yml"


def render(provider: str, tmp: Path) -> list[dict]:
    overlay = yaml.safe_load(OVERLAY.read_text())
    for name in NOT_IN_LAB[provider]:
        overlay["artifacts"][name] = {"version": version(name), "sha256": {"amd64": PLACEHOLDER}}
    (tmp / "overlay.yml").write_text(yaml.safe_dump(overlay))
    (tmp / "extra.json").write_text(json.dumps({
        "k8s_device_plugins_nvidia_provider": provider, "k8s_device_plugins_nvidia_release_install": False,
        "artifacts_overlay": str(tmp / "overlay.yml")}))
    run = playbook(PLAYBOOK, "-e", f"@{tmp / 'extra.json'}", timeout=900)
    assert run.returncode == 0, f"device_plugins.yml with provider {provider} failed:\n{tail(run, 120)}"
    assert all(s["failed"] == 0 for s in recap(run.stdout).values())
    release = provider.replace("_", "-")
    text = on(CP, f"cat {RENDERED.format(release=release)}")
    assert text.returncode == 0, tail(text)
    return [d for d in yaml.safe_load_all(text.stdout) if d]


def version(name: str) -> str:
    manifest = yaml.safe_load((REPO / "artifacts" / "manifest.yml").read_text())
    return next(str(a["version"]) for a in manifest["artifacts"] if a["name"] == name)


def validate(objects: list[dict]) -> None:
    """The CRDs for real, every other object by a server-side dry run; the CRDs removed after."""
    crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    rest = [o for o in objects if o["kind"] != "CustomResourceDefinition"]
    names = [c["metadata"]["name"] for c in crds]
    kubeconfig = admin_kubeconfig()
    try:
        if crds:
            created = controller_kubectl(kubeconfig, "apply", "--server-side", "-f", "-",
                                         stdin=yaml.safe_dump_all(crds))
            assert created.returncode == 0, tail(created)
            ready = controller_kubectl(kubeconfig, "wait", "--for=condition=Established", "--timeout=60s",
                                       *[f"crd/{n}" for n in names])
            assert ready.returncode == 0, tail(ready)
        proc = server_dry_run(rest)
        assert proc.returncode == 0, tail(proc, 60)
        assert proc.stdout.count("(server dry run)") == len(rest), proc.stdout
    finally:
        if crds:
            controller_kubectl(kubeconfig, "delete", "crd", "--ignore-not-found", *names)


@pytest.fixture
def tmp():
    with tempfile.TemporaryDirectory(prefix="ai-l1-gpu-release.") as d:
        yield Path(d)


def test_the_gpu_operator_release_with_the_seeds_values_passes_the_api(k8s_cluster, tmp):  # noqa: ARG001
    objects = render("gpu_operator", tmp)
    kinds = {o["kind"] for o in objects}
    assert {"ClusterPolicy", "CustomResourceDefinition", "Deployment", "DaemonSet"} <= kinds, kinds
    [policy] = [o for o in objects if o["kind"] == "ClusterPolicy"]
    spec = policy["spec"]
    # Driver and toolkit are the host roles'; the rest as the seed asks.
    assert spec["driver"]["enabled"] is False and spec["toolkit"]["enabled"] is False
    assert spec["devicePlugin"]["enabled"] is True and spec["migManager"]["enabled"] is True
    assert spec["migManager"]["config"]["default"] == "all-disabled"
    assert {"name": "DCGM_EXPORTER_INTERVAL", "value": "5000"} in spec["dcgmExporter"]["env"]
    assert spec["dcgmExporter"]["serviceMonitor"]["interval"] == "5s"
    # Images from the lab mirror, by digest.
    operator = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "gpu-operator")
    image = operator["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.startswith("10.89.100.1:5000/nvidia/gpu-operator:v26.7.0@sha256:"), image
    assert spec["devicePlugin"]["repository"] == "10.89.100.1:5000/nvidia"
    validate(objects)


def test_the_hami_release_passes_the_api(k8s_cluster, tmp):  # noqa: ARG001
    objects = render("hami", tmp)
    kinds = {o["kind"] for o in objects}
    assert {"Deployment", "DaemonSet", "MutatingWebhookConfiguration", "ConfigMap"} <= kinds, kinds
    plugin = next(o for o in objects if o["kind"] == "DaemonSet")
    assert plugin["spec"]["template"]["spec"]["nodeSelector"] == {"accelerator": "nvidia"}
    validate(objects)


SHARED_GPU_POD = {  # seed 4.2.3, as written
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "shared-gpu-pod", "namespace": "default",
                 "annotations": {"hami.io/gpu-memory": "16Gi", "hami.io/gpu-cores": "30"}},
    "spec": {"containers": [{"name": "inference", "image": "nvcr.io/nvidia/tritonserver:24.02-py3",
                             "resources": {"requests": {"nvidia.com/gpu": 1}}}]},
}


def test_the_seeds_shared_gpu_pod_as_hami_reads_a_share(k8s_cluster):  # noqa: ARG001
    as_written = server_dry_run([SHARED_GPU_POD])
    assert as_written.returncode != 0, "a request for an extended resource without a limit was accepted"
    assert "Limit must be set for non overcommitable resources" in as_written.stdout + as_written.stderr, \
        tail(as_written)
    share = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "16384", "nvidia.com/gpucores": "30"}
    fixed = json.loads(json.dumps(SHARED_GPU_POD))
    fixed["metadata"].pop("annotations")
    fixed["spec"]["schedulerName"] = "hami-scheduler"  # HAMi's admission webhook sets it where it runs
    fixed["spec"]["containers"][0]["resources"] = {"limits": share}
    proc = server_dry_run([fixed])
    assert proc.returncode == 0, tail(proc)
    assert "pod/shared-gpu-pod created (server dry run)" in proc.stdout, proc.stdout
