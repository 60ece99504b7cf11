"""The fleet compliance report (`ai-l1-day2 report`, playbooks/day2/report.yml) on the lab's seven
nodes, read through the project's own modules: the kubelet and containerd of every Kubernetes node,
the NVIDIA driver, CUDA and VBIOS through NVML (the lab's simulated NVML: tests/hardware/nvml), the Ascend
driver, firmware and CANN from the version files the lab's installers wrote. The rollout installed
what the sample's baseline pins (the lab's baseline is a link to it), so the fleet is compliant;
a baseline with another driver pin makes both GPU nodes drift, and strict mode fails the run. The
report changes nothing on any node."""

from __future__ import annotations

import json

import yaml
from conftest import LAB_INVENTORY, day2_tool, on, tail

BASELINE = yaml.safe_load((LAB_INVENTORY / "group_vars" / "all" / "fleet_baseline.yml").read_text())["fleet_baseline"]


def run_report(*args: str) -> tuple[int, dict, str]:
    proc = day2_tool("report", "-q", *args, timeout=600)
    return proc.returncode, json.loads(proc.stdout) if proc.stdout.strip() else {}, tail(proc)


def test_the_rolled_out_lab_matches_the_sample_baseline_and_nothing_changes(k8s_cluster):  # noqa: ARG001
    code, summary, output = run_report()
    assert code == 0, output
    report = summary["data"]["compliance"]
    assert report["drift"] == [] and report["summary"] == {"nodes": 7, "compliant": 7, "drifted": 0}, report["drift"]
    nodes = report["nodes"]
    for host in ("cp1", "gpu1", "npu1"):
        assert nodes[host]["components"]["kubelet"]["status"] == "ok"
        assert nodes[host]["components"]["kernel"]["observed"], host
    gpu = nodes["gpu1"]["components"]
    assert gpu["nvidia_driver"] == {"observed": BASELINE["gpu_nvidia"]["nvidia_driver"],
                                    "expected": [BASELINE["gpu_nvidia"]["nvidia_driver"]], "status": "ok"}
    assert gpu["cuda"]["observed"] and gpu["cuda"]["status"] == "unpinned"
    # The lab's simulated NVML answers nvmlDeviceGetVbiosVersion with its A100 default.
    assert gpu["vbios"] == {"observed": "92.00.45.00.03", "expected": None, "status": "unpinned"}
    npu = nodes["npu1"]["components"]
    assert {c: npu[c]["status"] for c in ("ascend_driver", "ascend_firmware", "cann")} == dict.fromkeys(
        ("ascend_driver", "ascend_firmware", "cann"), "ok")
    # Storage nodes run no Kubernetes: nothing pinned, nothing missing.
    assert nodes["stor1"]["components"]["kubelet"] == {"observed": "", "expected": None, "status": "unpinned"}
    assert all(counts["changed"] == 0 for counts in summary["hosts"].values()), summary["hosts"]


def test_a_driver_off_the_baseline_is_drift_published_as_metrics_and_strict_mode_fails(k8s_cluster):  # noqa: ARG001
    """The daily metrics run (AWX schedule: day2_report_textfile_dir) with another driver pin."""
    baseline = {**BASELINE, "gpu_nvidia": {"nvidia_driver": "535.161.08"}}
    textfile = "/var/lib/node_exporter/textfile/ai_l1_fleet_compliance.prom"
    try:
        code, summary, output = run_report("--node", "gpu_nvidia", "-e", json.dumps({"fleet_baseline": baseline}),
                                           "-e", "day2_report_strict=true",
                                           "-e", f"day2_report_textfile_dir={textfile.rsplit('/', 1)[0]}")
        metrics = {host: on(host, f"cat {textfile}").stdout for host in ("gpu1", "gpu2", "npu1")}
    finally:
        for host in ("gpu1", "gpu2", "npu1"):
            on(host, f"rm -f {textfile}")
    assert code == 2, output
    driver = BASELINE["gpu_nvidia"]["nvidia_driver"]
    for host in ("gpu1", "gpu2"):
        assert (f'ai_l1_fleet_component_drift{{component="nvidia_driver",observed="{driver}",'
                f'expected="535.161.08"}} 1') in metrics[host].splitlines(), metrics[host]
        assert 'ai_l1_fleet_component_drift{component="kubelet"' in metrics[host]
    assert metrics["npu1"] == "", "a node outside --node got metrics"
    report = summary["data"]["compliance"]
    assert sorted(report["nodes"]) == ["gpu1", "gpu2"]
    assert [(d["node"], d["component"], d["expected"]) for d in report["drift"]] == [
        ("gpu1", "nvidia_driver", ["535.161.08"]), ("gpu2", "nvidia_driver", ["535.161.08"])]
    assert {d["observed"] for d in report["drift"]} == {BASELINE["gpu_nvidia"]["nvidia_driver"]}
    assert [f["msg"] for f in summary["failures"]] == ["2 of 2 nodes differ from the baseline"]
