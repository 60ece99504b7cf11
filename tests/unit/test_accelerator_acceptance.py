"""ai_platform.l1.accelerator_acceptance through Ansible's module interface, with stand-ins for dcgmi,
all_reduce_perf and mpirun that print the outputs under tests/hardware/acceptance/outputs (or hang, or
print nothing): the verdict of a pass, a bandwidth below its threshold and a DCGM failure, and each
tool's failure as a failing check, never a module failure."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from ansible_collections.ai_platform.l1.plugins.modules import accelerator_acceptance as module
from test_acceptance_parsers import OUTPUTS, gpus, npus


def tool(tmp_path: Path, name: str, output: str | None = None, *, rc: int = 0, sleep: int = 0) -> str:
    """An executable that records its arguments, then prints `output` (a file under OUTPUTS) and exits rc."""
    path = tmp_path / name
    body = f'printf "%s " "$@" > {tmp_path / (name + ".args")}\n'
    if sleep:
        body += f"sleep {sleep}\n"
    if output:
        body += f"cat {OUTPUTS / output}\n"
    path.write_text(f"#!/bin/sh\n{body}exit {rc}\n")
    path.chmod(0o755)
    return str(path)


@pytest.fixture
def gate(run_module, tmp_path):
    def _gate(dcgm="dcgmi-diag-r1-dcgm3-pass.txt", nccl="all_reduce_perf-8xa100-pass.txt", facts=None, **args):
        base = dict(node="gpu1", vendor="nvidia", facts=facts or gpus(), expected_count=8, expected_model="A100-SXM4",
                    dcgmi_path=tool(tmp_path, "dcgmi", dcgm), nccl_tests_path=tool(tmp_path, "all_reduce_perf", nccl))
        return run_module(module, **dict(base, **args))
    return _gate


def failed(result):
    return {c["name"]: c["detail"] for c in result["acceptance"]["checks"] if not c["passed"]}


def test_a_healthy_node_passes_with_every_figure(gate, tmp_path):
    result = gate()
    assert result["_rc"] == 0 and result["changed"] is False
    verdict = result["acceptance"]
    assert verdict["passed"] is True and verdict["failed"] == [] and verdict["level"] == 1
    busbw = next(c for c in verdict["checks"] if c["name"] == "nccl-allreduce-busbw")
    assert (busbw["figure"], busbw["threshold"], busbw["unit"]) == (230.25, 184.0, "GB/s")  # the published A100 floor
    assert (tmp_path / "dcgmi.args").read_text().split() == ["diag", "-r", "1", "-j"]
    assert (tmp_path / "all_reduce_perf.args").read_text().split() == ["-b", "1M", "-e", "8G", "-f", "2", "-g", "8"]
    assert set(verdict["durations"]) == {"hardware", "dcgm", "bandwidth"}
    assert verdict["digest"].startswith("sha256:")


def test_bandwidth_below_the_threshold_fails_the_gate(gate):
    result = gate(nccl="all_reduce_perf-8xa100-nvlink-down.txt")
    assert result["_rc"] == 0 and result["acceptance"]["passed"] is False
    assert failed(result) == {"nccl-allreduce-busbw": "17.21 GB/s below the threshold 184.0",
                              "nccl-allreduce-correct": "all_reduce_perf found 2 wrong values"}


def test_a_dcgm_failure_fails_the_gate_in_dcgms_words(gate, tmp_path):
    result = gate(dcgm="dcgmi-diag-r2-dcgm3-memory-fail.txt", dcgm_level=2)
    assert result["acceptance"]["passed"] is False and result["acceptance"]["level"] == 2
    assert list(failed(result)) == ["dcgm-diag-r2 GPU Memory", "dcgm-diag-r2 Targeted Stress"]
    assert "Pending page retirements together with a DBE" in failed(result)["dcgm-diag-r2 GPU Memory"]
    assert (tmp_path / "dcgmi.args").read_text().split() == ["diag", "-r", "2", "-j"]


def test_a_tool_that_hangs_or_prints_no_report_is_a_failing_check(gate, tmp_path):
    hung = gate(dcgmi_path=tool(tmp_path, "slow-dcgmi", "dcgmi-diag-r1-dcgm3-pass.txt", sleep=30), dcgm_timeout=1)
    assert failed(hung) == {"dcgm-diag-r1": f"`{tmp_path}/slow-dcgmi diag -r 1 -j` did not finish within 1 seconds"}
    broken = gate(nccl_tests_path=tool(tmp_path, "broken", rc=1))
    assert failed(broken)["nccl-allreduce-busbw"].startswith(f"`{tmp_path}/broken -b 1M")
    assert "exited 1 without a report (no nccl-tests size table header" in failed(broken)["nccl-allreduce-busbw"]
    missing = gate(dcgmi_path=str(tmp_path / "absent"))
    assert "could not be run" in failed(missing)["dcgm-diag-r1"]


def test_hardware_faults_and_a_model_without_a_published_floor(gate):
    facts = gpus(name="NVIDIA L40S", links=0)
    facts["gpus"][0]["ecc"]["dbe_volatile"] = 1
    result = gate(facts=facts, expected_model="L40S", dcgm_level=0)
    assert failed(result) == {
        "ecc": "GPU 0: 1 uncorrectable ECC errors since the driver loaded",
        "nccl-allreduce-busbw": "no threshold for this node (set one in the inventory)"}
    assert "dcgm" not in result["acceptance"]["durations"]
    assert gate(facts=facts, expected_model="L40S", dcgm_level=0, bandwidth_threshold=20.0,
                bandwidth_test=False)["acceptance"]["failed"] == ["ecc"]


def test_ascend_node(run_module, tmp_path):
    base = dict(node="npu1", vendor="ascend", facts=npus(), expected_count=8, expected_model="910B",
                bandwidth_threshold=60.0, mpirun_path=tool(tmp_path, "mpirun", "hccl_test-8x910b-pass.txt"),
                hccl_test_path="/opt/hccl/all_reduce_test")
    ok = run_module(module, **base)
    assert ok["acceptance"]["passed"] is True and ok["acceptance"]["level"] == 0
    assert (tmp_path / "mpirun.args").read_text().split() == [
        "-n", "8", "/opt/hccl/all_reduce_test", "-b", "8K", "-e", "1G", "-f", "2", "-p", "8"]
    sick = copy.deepcopy(npus())
    sick["chips"][2]["health"] = "Critical"
    mpirun = tool(tmp_path, "mpirun2", "hccl_test-8x910b-check-failed.txt")
    bad = run_module(module, **dict(base, facts=sick, mpirun_path=mpirun))
    assert set(failed(bad)) == {"npu-health", "hccl-allreduce-bandwidth", "hccl-allreduce-correct"}


@pytest.mark.parametrize(("args", "message"), [
    (dict(expected_count=0), "expected_count must be at least 1"),
    (dict(dcgm_level=4), "value of dcgm_level must be one of"),
    (dict(bandwidth_timeout=0), "bandwidth_timeout must be at least 1 second"),
    (dict(vendor="amd"), "value of vendor must be one of"),
])
def test_bad_arguments_fail_the_module(gate, args, message):
    result = gate(**args)
    assert result["failed"] and message in result["msg"]


def test_check_mode_measures_the_same(gate):
    assert gate(check_mode=True)["acceptance"]["passed"] is True
