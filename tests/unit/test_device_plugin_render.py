"""roles/k8s_device_plugins renders NVIDIA's DaemonSet and config file from the inventory: the MIG
strategy, the device list strategy, time slicing and the image (the manifest's, by digest, or the
inventory's). Rendered for real by ansible-playbook on localhost with the role's own template and
vars; the lab applies the same objects to a real API server (tests/integration/test_workloads.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "k8s_device_plugins"
PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  vars_files: [{role}/defaults/main.yml, {role}/vars/main.yml]
  tasks:
    - ansible.builtin.copy:
        dest: "{{{{ out }}}}"
        content: "{{{{ lookup('ansible.builtin.template', '{role}/templates/' ~ template) }}}}"
        mode: "0600"
"""
DIGEST = "sha256:" + "ab" * 32


def render_objects(tmp_path: Path, template: str, **extra) -> list[dict]:
    (tmp_path / "play.yml").write_text(PLAY.format(role=ROLE))
    out = tmp_path / "objects.yml"
    (tmp_path / "vars.json").write_text(json.dumps({"out": str(out), "ansible_python_interpreter": sys.executable,
                                                    "template": template, **extra}))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,",
                           str(tmp_path / "play.yml"), "-e", f"@{tmp_path / 'vars.json'}"],
                          capture_output=True, text=True, check=False, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return yaml.safe_load(out.read_text())


def render(tmp_path: Path, **extra) -> tuple[dict, dict]:
    kinds = {o["kind"]: o for o in render_objects(tmp_path, "nvidia-device-plugin.yml.j2", **extra)}
    assert sorted(kinds) == ["ConfigMap", "DaemonSet"]
    return kinds["DaemonSet"], json.loads(kinds["ConfigMap"]["data"]["config.json"])


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
