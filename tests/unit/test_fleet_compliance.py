"""Filters ai_platform.l1.fleet_compliance and fleet_compliance_table (playbooks/day2/report.yml):
what each node runs against the inventory's golden baseline. The parsers are fed the real tools'
output (captured from Debian 12's containerd, kubelet, MLNX_OFED's ofed_info and a ConnectX-6's
sysfs); bad input is refused with the node's name, never a traceback."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.ai_platform.l1.plugins.filter.fleet_compliance import (
    COMPONENTS,
    fleet_compliance,
    fleet_compliance_metrics,
    fleet_compliance_table,
    observed,
)

CONTAINERD_DEBIAN = "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3\n"
CONTAINERD_DOCKER = "containerd containerd.io 1.7.22 7f7fdf5fed64eb6a7caf99b3e12efcf9d60e311c"
KUBELET = "Kubernetes v1.34.4"
OFED = "MLNX_OFED_LINUX-24.10-1.1.4.0:"
GPU = {"gpu_info": {"present": True, "driver_version": "550.54.15", "cuda_driver_version": "12.4", "count": 2,
                    "gpus": [{"index": 0, "vbios_version": "92.00.45.00.03"},
                             {"index": 1, "vbios_version": "92.00.45.00.03"}]}}
NPU = {"npu_info": {"present": True, "installed": {"driver": "24.1.rc2", "firmware": "7.5.0.1.129",
                                                   "cann": "8.0.RC2", "toolkit": "8.0.RC2"}}}


def gpu_node(**over):
    raw = {"groups": ["k8s_worker", "gpu_nvidia"], "kernel": "6.1.0-27-amd64", "containerd": CONTAINERD_DEBIAN,
           "kubelet": KUBELET, "ofed": OFED, "nic_firmware": "28.39.1002\n28.39.1002", "gpu_info": GPU,
           "npu_info": {}}
    raw.update(over)
    return raw


def npu_node(**over):
    raw = {"groups": ["k8s_worker", "npu_ascend"], "kernel": "6.1.0-27-amd64", "containerd": CONTAINERD_DEBIAN,
           "kubelet": KUBELET, "ofed": "", "nic_firmware": "", "gpu_info": {}, "npu_info": NPU}
    raw.update(over)
    return raw


BASELINE = {
    "all": {"kernel": "6.1.0-27-amd64", "containerd": "1.6.20~ds1", "kubelet": "1.34.4"},
    "gpu_nvidia": {"nvidia_driver": "550.54.15", "cuda": "12.4", "ofed": "24.10-1.1.4.0",
                   "nic_firmware": ["28.39.1002", "28.41.1000"]},
    "npu_ascend": {"ascend_driver": "24.1.rc2", "ascend_firmware": "7.5.0.1.129", "cann": "8.0.RC2"},
}


@pytest.mark.parametrize(("raw", "component", "version"), [
    (gpu_node(), "containerd", "1.6.20~ds1"),
    (gpu_node(containerd=CONTAINERD_DOCKER), "containerd", "1.7.22"),
    (gpu_node(), "kubelet", "1.34.4"),
    (gpu_node(), "ofed", "24.10-1.1.4.0"),
    (gpu_node(), "nic_firmware", "28.39.1002"),
    (gpu_node(nic_firmware="28.39.1002\n28.41.1000\n"), "nic_firmware", "28.39.1002,28.41.1000"),
    (gpu_node(), "nvidia_driver", "550.54.15"),
    (gpu_node(), "cuda", "12.4"),
    (gpu_node(), "vbios", "92.00.45.00.03"),
    (gpu_node(gpu_info={"gpu_info": dict(GPU["gpu_info"], gpus=[{"vbios_version": "92.00.45.00.03"},
                                                                  {"vbios_version": "92.00.36.00.02"}])}),
     "vbios", "92.00.36.00.02,92.00.45.00.03"),
    (gpu_node(gpu_info={"gpu_info": dict(GPU["gpu_info"], gpus=[{"vbios_version": ""}])}), "vbios", ""),
    (gpu_node(gpu_info={"gpu_info": {"present": False, "driver_version": ""}}), "nvidia_driver", ""),
    (npu_node(), "ascend_driver", "24.1.rc2"),
    (npu_node(), "ascend_firmware", "7.5.0.1.129"),
    (npu_node(), "cann", "8.0.RC2"),
    (npu_node(), "ofed", ""),
    (npu_node(containerd="", kubelet=""), "kubelet", ""),
])
def test_each_component_is_read_from_the_tools_output(raw, component, version):
    assert observed(raw, "n")[component] == version


@pytest.mark.parametrize(("over", "message"), [
    ({"kubelet": "command not found"}, 'not "Kubernetes vX.Y.Z"'),
    ({"containerd": "runc version 1.1.12"}, 'not "containerd <source> <version> ..."'),
    ({"containerd": "containerd github.com/containerd/containerd dev"}, "no version in the containerd"),
    ({"ofed": "OFED: unknown"}, "not \"MLNX_OFED_LINUX-<version>:\""),
    ({"nic_firmware": "28.39.1002\nN/A"}, "'N/A' is not a firmware version"),
    ({"kernel": ["6.1"]}, "kernel must be a string"),
    ({"gpu_info": "550.54.15"}, "gpu_info must be the module result"),
    ({"uname": "Linux"}, "unknown keys uname"),
])
def test_malformed_output_is_refused_with_the_node(over, message):
    with pytest.raises(AnsibleFilterError, match="gpu7") as exc:
        fleet_compliance({"gpu7": gpu_node(**over)}, BASELINE)
    assert message in str(exc.value)


def test_a_fleet_on_its_baseline_is_compliant():
    report = fleet_compliance({"gpu1": gpu_node(), "npu1": npu_node()}, BASELINE)
    assert report["summary"] == {"nodes": 2, "compliant": 2, "drifted": 0} and report["drift"] == []
    gpu = report["nodes"]["gpu1"]["components"]
    assert gpu["nvidia_driver"] == {"observed": "550.54.15", "expected": ["550.54.15"], "status": "ok"}
    # A component the node's groups do not pin is reported, not judged.
    assert report["nodes"]["gpu1"]["components"]["cann"]["status"] == "unpinned"
    assert list(gpu) == list(COMPONENTS)


def test_drift_and_missing_components_are_named():
    old_driver = {"gpu_info": dict(GPU["gpu_info"], driver_version="535.161.08")}
    nodes = {"gpu1": gpu_node(), "gpu2": gpu_node(gpu_info=old_driver, kubelet="Kubernetes v1.33.7"),
             "npu1": npu_node(npu_info={"npu_info": {"installed": {"driver": "24.1.rc2", "firmware": "",
                                                                    "cann": "8.0.RC2"}}})}
    report = fleet_compliance(nodes, BASELINE)
    assert report["summary"] == {"nodes": 3, "compliant": 1, "drifted": 2}
    assert [(d["node"], d["component"], d["observed"], d["status"]) for d in report["drift"]] == [
        ("gpu2", "kubelet", "1.33.7", "drift"), ("gpu2", "nvidia_driver", "535.161.08", "drift"),
        ("npu1", "ascend_firmware", "", "missing")]
    table = fleet_compliance_table(report).splitlines()
    header = table[0].split()
    assert header[0] == "node" and "nvidia_driver" in header and "cann" in header
    gpu2 = dict(zip(header, table[2].split(), strict=True))
    assert gpu2["kubelet"] == "1.33.7!" and gpu2["nvidia_driver"] == "535.161.08!" and gpu2["cuda"] == "12.4"
    assert dict(zip(header, table[3].split(), strict=True))["ascend_firmware"] == "-?"
    assert "1 of 3 nodes match the baseline" in table
    assert "gpu2 nvidia_driver: 535.161.08, baseline 550.54.15" in table
    assert "npu1 ascend_firmware: not found, baseline 7.5.0.1.129" in table


def test_a_later_group_of_the_baseline_wins_and_a_list_allows_each_version():
    baseline = {"all": {"kubelet": "1.34.4"}, "gpu_nvidia": {"kubelet": ["1.33.7", "1.34.4"]}}
    report = fleet_compliance({"gpu1": gpu_node(kubelet="Kubernetes v1.33.7"),
                               "npu1": npu_node(kubelet="Kubernetes v1.33.7")}, baseline)
    assert report["nodes"]["gpu1"]["compliant"] is True
    assert [d["node"] for d in report["drift"]] == ["npu1"]


@pytest.mark.parametrize(("baseline", "message"), [
    (["1.34.4"], "the baseline must be a dict"),
    ({"all": "1.34.4"}, "baseline group all must be a dict"),
    ({"all": {"kublet": "1.34.4"}}, "unknown components kublet"),
    ({"all": {"kubelet": ""}}, "baseline all.kubelet"),
    ({"all": {"kubelet": True}}, "baseline all.kubelet"),
    ({"all": {"kubelet": ["1.34.4", None]}}, "baseline all.kubelet"),
])
def test_a_bad_baseline_is_refused(baseline, message):
    with pytest.raises(AnsibleFilterError, match=message):
        fleet_compliance({"gpu1": gpu_node()}, baseline)


def test_no_nodes_is_refused():
    with pytest.raises(AnsibleFilterError, match="non-empty dict"):
        fleet_compliance({}, BASELINE)


def test_the_sample_baseline_is_what_the_rollout_installs():
    root = Path(__file__).resolve().parents[2]
    sample = root / "inventories" / "sample"

    def read(path):
        return yaml.safe_load((sample / path).read_text())

    baseline = read("group_vars/all/fleet_baseline.yml")["fleet_baseline"]
    containerd = yaml.safe_load((root / "roles" / "containerd" / "defaults" / "main.yml").read_text())
    ascend_role = yaml.safe_load((root / "roles" / "ascend_driver" / "defaults" / "main.yml").read_text())
    # containerd --version prints the upstream version of the Debian package (1.6.20~ds1-1+deb12u3).
    kubernetes_node = {"kubelet": read("group_vars/all/cluster.yml")["k8s_version"],
                       "containerd": containerd["containerd_version"].rsplit("-", 1)[0]}
    assert baseline["k8s_control_plane"] == baseline["k8s_worker"] == kubernetes_node
    assert "storage" not in baseline and "all" not in baseline  # storage nodes run no kubelet
    assert baseline["gpu_nvidia"]["nvidia_driver"] == read("group_vars/gpu_nvidia/nvidia.yml")["nvidia_driver_version"]
    ascend = read("group_vars/npu_ascend/ascend.yml")
    assert baseline["npu_ascend"] == {"ascend_driver": ascend["ascend_driver_version"],
                                      "ascend_firmware": ascend_role["ascend_driver_firmware_version"],
                                      "cann": ascend["ascend_driver_cann_version"]}
    fleet_compliance({"gpu1": gpu_node()}, baseline)  # the filter takes it


def test_a_nodes_metrics_are_its_pinned_components_and_the_reports_time():
    """The exposition text node_exporter's textfile collector reads, checked by promtool (the format
    and the naming conventions) and read back."""
    old_driver = {"gpu_info": dict(GPU["gpu_info"], driver_version='535"161')}
    report = fleet_compliance({"gpu1": gpu_node(gpu_info=old_driver, ofed=""), "npu1": npu_node()}, BASELINE)
    text = fleet_compliance_metrics(report, "gpu1", 1765100000.7)
    check = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True,
                           timeout=60, check=False)
    assert check.returncode == 0, check.stdout + check.stderr
    sample = re.compile(r'^ai_l1_fleet_component_drift\{component="(\w+)",observed="((?:[^"\\]|\\.)*)",'
                        r'expected="([^"]*)"\} ([01])$')
    drift = {m[1]: (m[2].replace('\\"', '"'), m[3], int(m[4]))
             for m in map(sample.match, text.splitlines()) if m}
    assert drift == {
        "kernel": ("6.1.0-27-amd64", "6.1.0-27-amd64", 0), "containerd": ("1.6.20~ds1", "1.6.20~ds1", 0),
        "kubelet": ("1.34.4", "1.34.4", 0), "nvidia_driver": ('535"161', "550.54.15", 1), "cuda": ("12.4", "12.4", 0),
        "ofed": ("not found", "24.10-1.1.4.0", 1), "nic_firmware": ("28.39.1002", "28.39.1002 or 28.41.1000", 0)}
    assert text.endswith("\nai_l1_fleet_compliance_timestamp_seconds 1765100000\n")


@pytest.mark.parametrize(("host", "timestamp", "message"), [
    ("gpu9", 1.0, "gpu9 is not a node of the report"),
    ("gpu1", 0, "seconds since the epoch"),
    ("gpu1", "now", "seconds since the epoch"),
    ("gpu1", True, "seconds since the epoch"),
])
def test_metrics_of_an_unknown_node_or_a_bad_time_are_refused(host, timestamp, message):
    report = fleet_compliance({"gpu1": gpu_node()}, BASELINE)
    with pytest.raises(AnsibleFilterError, match=message):
        fleet_compliance_metrics(report, host, timestamp)
