"""roles/k8s_device_plugins renders NVIDIA's DaemonSet and config file from the inventory: the MIG
strategy, the device list strategy, time slicing and the image (the manifest's, by digest, or the
inventory's). Rendered for real by ansible-playbook on localhost with the role's own template and
vars; the lab applies the same objects to a real API server (tests/integration/test_workloads.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from conftest import role_expression

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "k8s_device_plugins"
DIGEST = "sha256:" + "ab" * 32


def run_play(tmp_path: Path, content: str, **extra) -> str:
    """What the role's vars make of the Jinja expression `content`, rendered by ansible-playbook."""
    return role_expression(tmp_path, "k8s_device_plugins", content, **extra)


def render_objects(tmp_path: Path, template: str, **extra) -> list[dict]:
    return yaml.safe_load(run_play(tmp_path, f"lookup('ansible.builtin.template', '{ROLE}/templates/{template}')",
                                   **extra))


def render(tmp_path: Path, **extra) -> tuple[dict, dict]:
    kinds = {o["kind"]: o for o in render_objects(tmp_path, "nvidia-device-plugin.yml.j2", **extra)}
    assert sorted(kinds) == ["ConfigMap", "DaemonSet"]
    return kinds["DaemonSet"], json.loads(kinds["ConfigMap"]["data"]["config.json"])


# The day-2 operation upgrade-driver labels a node to take its device plugin off while the driver changes.
PAUSED_FOR_DRIVER_UPGRADE = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "ai-platform.io/driver-upgrade", "operator": "DoesNotExist"}]}]}}}


def test_defaults_and_the_manifest_image_by_digest(tmp_path):
    ds, config = render(tmp_path, k8s_device_plugins_artifacts={
        "nvidia-device-plugin-image": {"image": "mirror:5000/nvidia/k8s-device-plugin:v0.20.0", "sha256": DIGEST}})
    assert config == {"version": "v1", "sharing": {},
                      "flags": {"migStrategy": "none", "failOnInitError": True,
                                "plugin": {"deviceListStrategy": ["envvar"], "deviceIDStrategy": "uuid"}}}
    pod = ds["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"] == f"mirror:5000/nvidia/k8s-device-plugin:v0.20.0@{DIGEST}"
    assert pod["nodeSelector"] == {"accelerator": "nvidia"}
    assert pod["affinity"] == PAUSED_FOR_DRIVER_UPGRADE
    assert container["securityContext"] == {"privileged": False}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/driver-root"]["readOnly"] is True and "/var/lib/kubelet/device-plugins" in mounts
    assert {"key": "ai-platform.io/fault", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]


@pytest.mark.parametrize(("strategy", "privileged"), [("single", True), ("mixed", True), ("none", False)])
def test_mig_strategy_reaches_the_config(tmp_path, strategy, privileged):
    ds, config = render(tmp_path, k8s_device_plugins_mig_strategy=strategy, k8s_device_plugins_nvidia_image="x/y:1")
    assert config["flags"]["migStrategy"] == strategy
    assert ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privileged"] is privileged


def test_time_slicing_and_cdi(tmp_path):
    ds, config = render(tmp_path, k8s_device_plugins_time_slicing_replicas=4,
                        k8s_device_plugins_device_list_strategy="cdi-cri", k8s_device_plugins_nvidia_image="x/y:1")
    assert config["sharing"] == {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 4}]}}
    assert config["flags"]["plugin"]["deviceListStrategy"] == ["cdi-cri"]
    # a config change changes the pod template, so the DaemonSet rolls
    ds2, _ = render(tmp_path, k8s_device_plugins_nvidia_image="x/y:1")
    key = "ai-platform.io/config-sha256"
    assert ds["spec"]["template"]["metadata"]["annotations"][key] != \
        ds2["spec"]["template"]["metadata"]["annotations"][key]


def test_inventory_image_wins_and_no_image_renders_empty(tmp_path):
    ds, _ = render(tmp_path, k8s_device_plugins_nvidia_image="site-registry/nvidia/k8s-device-plugin:v0.20.0",
                   k8s_device_plugins_artifacts={"nvidia-device-plugin-image": {"image": "other", "sha256": DIGEST}})
    assert ds["spec"]["template"]["spec"]["containers"][0]["image"] == "site-registry/nvidia/k8s-device-plugin:v0.20.0"
    ds, _ = render(tmp_path)
    assert not ds["spec"]["template"]["spec"]["containers"][0]["image"]  # the role's preflight refuses this


def test_site_environment_follows_the_roles_own(tmp_path):
    ds, _ = render(tmp_path, k8s_device_plugins_nvidia_image="img",
                   k8s_device_plugins_nvidia_env={"ZZ_LAST": 1, "AA_FIRST": "x y"})
    env = [(e["name"], e["value"]) for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]]
    assert [n for n, _ in env[:4]] == ["CONFIG_FILE", "NVIDIA_DRIVER_ROOT", "CONTAINER_DRIVER_ROOT",
                                       "FAIL_ON_INIT_ERROR"]
    assert env[4:] == [("AA_FIRST", "x y"), ("ZZ_LAST", "1")]  # sorted, values as strings
    ds, _ = render(tmp_path, k8s_device_plugins_nvidia_image="img")
    assert len(ds["spec"]["template"]["spec"]["containers"][0]["env"]) == 4


def test_ascend_plugin_is_huaweis_daemonset_on_the_seeds_label(tmp_path):
    objects = render_objects(tmp_path, "ascend-device-plugin.yml.j2", k8s_device_plugins_artifacts={
        "ascend-device-plugin-image": {"image": "mirror:5000/ascend-k8sdeviceplugin:v6.0.0", "sha256": DIGEST}})
    kinds = {o["kind"]: o for o in objects}
    assert sorted(kinds) == ["ClusterRole", "ClusterRoleBinding", "DaemonSet", "ServiceAccount"]
    pod = kinds["DaemonSet"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert pod["nodeSelector"] == {"accelerator": "huawei-ascend"}  # the seed's value, not huawei-Ascend910
    assert pod["affinity"] == PAUSED_FOR_DRIVER_UPGRADE
    assert container["image"] == f"mirror:5000/ascend-k8sdeviceplugin:v6.0.0@{DIGEST}"
    assert container["command"] == ["/bin/bash", "-c", "--"]
    assert container["args"][0].startswith("device-plugin -useAscendDocker=true -volcanoType=false")
    assert container["securityContext"]["privileged"] is True
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/usr/local/Ascend/driver"]["readOnly"] is True
    assert pod["serviceAccountName"] == kinds["ServiceAccount"]["metadata"]["name"]
    off = render_objects(tmp_path, "ascend-device-plugin.yml.j2", k8s_device_plugins_ascend_image="x/y:1",
                         k8s_device_plugins_ascend_use_ascend_docker=False)
    args = next(o for o in off if o["kind"] == "DaemonSet")["spec"]["template"]["spec"]["containers"][0]["args"][0]
    assert "-useAscendDocker=false" in args


# The release's values (none while an artifact is missing), what is missing, the release and the waited nodes.
RELEASE = ("{'values': k8s_device_plugins__release_values if not k8s_device_plugins__release_missing else None, "
           "'missing': k8s_device_plugins__release_missing, 'release': k8s_device_plugins__release, "
           "'waited': k8s_device_plugins__waited_nodes} | to_json")
RELEASE_IMAGES = {
    "gpu-operator-image": "mirror:5000/nvidia/gpu-operator:v26.7.0",
    "nvidia-device-plugin-image": "mirror:5000/nvidia/k8s-device-plugin:v0.20.0",
    "k8s-mig-manager-image": "mirror:5000/nvidia/cloud-native/k8s-mig-manager:v0.15.0",
    "dcgm-exporter-image": "mirror:5000/nvidia/k8s/dcgm-exporter:4.6.0-4.8.3-distroless",
    "node-feature-discovery-image": "mirror:5000/nfd/node-feature-discovery:v0.19.0",
    "hami-image": "mirror:5000/projecthami/hami:v2.10.0",
    "hami-webhook-certgen-image": "mirror:5000/jettech/kube-webhook-certgen:v1.5.2",
    "kube-scheduler-image": "mirror:5000/kube-scheduler:v1.34.4",
}
RELEASE_ARTIFACTS = {
    **{name: {"image": image, "sha256": DIGEST} for name, image in RELEASE_IMAGES.items()},
    "helm": {"version": "v3.22.0"}, "gpu-operator-chart": {"version": "v26.7.0"}, "hami-chart": {"version": "2.10.0"},
}


def release(tmp_path: Path, provider: str, **extra) -> dict:
    return json.loads(run_play(tmp_path, RELEASE, **{
        "k8s_device_plugins_nvidia_provider": provider, "k8s_device_plugins_gpu_nodes": ["gpu1"],
        "k8s_device_plugins_npu_nodes": ["npu1"], "k8s_device_plugins_artifacts": RELEASE_ARTIFACTS, **extra}))


def test_gpu_operator_values_leave_driver_toolkit_and_dcgm_to_the_host_roles(tmp_path):
    got = release(tmp_path, "gpu_operator", k8s_device_plugins_mig_strategy="mixed",
                  k8s_device_plugins_time_slicing_replicas=2)
    assert got["release"] == "gpu-operator" and got["missing"] == [] and got["waited"] == ["npu1", "gpu1"]
    v = got["values"]
    assert v["driver"] == {"enabled": False} and v["toolkit"] == {"enabled": False} and v["dcgm"] == {"enabled": False}
    # Every image from the manifest entry, tag and digest (the operator builds repository/image:version).
    assert v["operator"] == {"repository": "mirror:5000/nvidia", "image": "gpu-operator",
                             "version": f"v26.7.0@{DIGEST}"}
    assert v["validator"] == v["operator"]
    assert v["migManager"]["repository"] == "mirror:5000/nvidia/cloud-native"
    assert v["gfd"]["image"] == v["devicePlugin"]["image"] == "k8s-device-plugin"
    assert v["node-feature-discovery"]["image"] == {"repository": "mirror:5000/nfd/node-feature-discovery",
                                                    "tag": f"v0.19.0@{DIGEST}"}
    # The seed's settings, as the chart spells them.
    assert v["dcgmExporter"]["env"] == [{"name": "DCGM_EXPORTER_INTERVAL", "value": "5000"}]
    assert v["dcgmExporter"]["serviceMonitor"] == {"enabled": True, "interval": "5s"}
    assert v["migManager"]["config"] == {"default": "all-disabled"} and v["mig"] == {"strategy": "mixed"}
    # The role's own config file (MIG strategy, time slicing) for the operator's device plugin.
    config = yaml.safe_load(v["devicePlugin"]["config"]["data"]["config.yaml"])
    assert config["flags"]["migStrategy"] == "mixed"
    assert config["sharing"] == {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": 2}]}}
    assert v["devicePlugin"]["config"]["name"] != "nvidia-device-plugin-config"  # the role's DaemonSet's, removed
    fault = {"key": "ai-platform.io/fault", "operator": "Exists", "effect": "NoSchedule"}
    assert fault in v["daemonsets"]["tolerations"]


def test_hami_values_and_the_inventorys_values_on_top(tmp_path):
    got = release(tmp_path, "hami", k8s_device_plugins_nvidia_release_values={
        "devicePlugin": {"deviceSplitCount": 4}, "scheduler": {"service": {"type": "ClusterIP"}}})
    assert got["release"] == "hami" and got["missing"] == []
    v = got["values"]
    assert v["scheduler"]["extender"]["image"] == {"registry": "mirror:5000", "repository": "projecthami/hami",
                                                   "tag": f"v2.10.0@{DIGEST}"}
    assert v["scheduler"]["kubeScheduler"]["image"]["repository"] == "kube-scheduler"
    # the seed's label; the chart's gpu=on removed (helm drops a key set to null)
    assert v["devicePlugin"]["nvidiaNodeSelector"] == {"accelerator": "nvidia", "gpu": None}
    assert v["devicePlugin"]["disablecorelimit"] == "false"  # the seed's cores.enable
    assert json.loads(v["devicePlugin"]["nodeConfiguration"]["config"]) == {"nodeconfig": []}
    # merged, not replaced
    assert v["devicePlugin"]["deviceSplitCount"] == 4 and v["devicePlugin"]["migStrategy"] == "none"
    assert v["scheduler"]["service"] == {"type": "ClusterIP"} and "extender" in v["scheduler"]


def test_a_release_names_what_it_lacks_and_rendering_only_waits_for_no_gpu_node(tmp_path):
    got = release(tmp_path, "hami", k8s_device_plugins_nvidia_release_install=False,
                  k8s_device_plugins_artifacts={"helm": {"version": "v3.22.0"}})
    assert sorted(got["missing"]) == ["hami-chart", "hami-image", "hami-webhook-certgen-image", "kube-scheduler-image"]
    assert got["waited"] == ["npu1"]
    plain = release(tmp_path, "device_plugin", k8s_device_plugins_nvidia_release_install=False)
    assert plain["values"] == {} and plain["missing"] == [] and plain["waited"] == ["npu1", "gpu1"]
