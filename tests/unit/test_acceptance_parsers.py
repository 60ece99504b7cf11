"""The acceptance gate's parsers and verdict (plugins/module_utils/acceptance.py), table-driven on the
tools' outputs under tests/hardware/acceptance/outputs/: every figure read, malformed input refused
with AcceptanceParseError (never another exception), unknown status words never read as a pass."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_collections.ai_platform.l1.plugins.module_utils import acceptance as acc

OUTPUTS = Path(__file__).resolve().parents[1] / "hardware" / "acceptance" / "outputs"


def read(name: str) -> str:
    return (OUTPUTS / name).read_text()


@pytest.mark.parametrize(("name", "expected", "tests", "failing"), [
    ("dcgmi-diag-r1-dcgm3-pass.txt", ("3.3.5", "550.54.15", acc.PASS), 9, {}),
    ("dcgmi-diag-r2-dcgm3-memory-fail.txt", ("3.3.5", "550.54.15", acc.FAIL), 4,
     {"GPU Memory": acc.FAIL, "Targeted Stress": acc.NOT_RUN}),
    ("dcgmi-diag-r2-dcgm4-pass.txt", ("4.2.3", "570.133.20", acc.PASS), 2, {}),
])
def test_dcgmi_diag_documents(name, expected, tests, failing):
    out = acc.parse_dcgmi_diag(read(name))
    assert (out["version"], out["driver_version"], out["status"]) == expected
    assert len(out["tests"]) == tests
    assert {t["name"]: t["status"] for t in out["tests"] if t["status"] in acc.FAILING} == failing


def test_a_failing_gpu_fails_its_test_and_keeps_dcgms_words():
    memory = next(t for t in acc.parse_dcgmi_diag(read("dcgmi-diag-r2-dcgm3-memory-fail.txt"))["tests"]
                  if t["name"] == "GPU Memory")
    assert memory["status"] == acc.FAIL and memory["gpus"] == [str(i) for i in range(8)]
    assert memory["messages"] == ["Pending page retirements together with a DBE were detected on GPU 3. "
                                  "Drain the GPU and reset it or reboot the node."]


def test_a_skipped_test_does_not_fail_and_the_dcgm4_entities_are_read():
    r1 = acc.parse_dcgmi_diag(read("dcgmi-diag-r1-dcgm3-pass.txt"))
    assert [t["status"] for t in r1["tests"] if t["name"] == "Inforom"] == [acc.SKIP]
    r4 = acc.parse_dcgmi_diag(read("dcgmi-diag-r2-dcgm4-pass.txt"))
    assert r4["tests"][1]["gpus"] == [str(i) for i in range(8)] and r4["tests"][1]["category"] == "Hardware"


@pytest.mark.parametrize(("word", "status"), [
    ("Pass", acc.PASS), ("PASS", acc.PASS), ("pass", acc.PASS), ("Fail", acc.FAIL), ("Warn", acc.WARN),
    ("SKIPPED", acc.SKIP), ("Skip", acc.SKIP), ("Not Run", acc.NOT_RUN), ("", acc.UNKNOWN),
    ("Inconclusive", acc.UNKNOWN), ("Passed", acc.UNKNOWN), (None, acc.UNKNOWN), (1, acc.UNKNOWN),
])
def test_status_words(word, status):
    assert acc.status_of(word) == status


def test_an_unknown_status_fails_the_test_it_belongs_to():
    doc = {"tests": [{"name": "memory", "results": [{"entity_id": 0, "status": "pass"},
                                                    {"entity_id": 1, "status": "Aborted"}]}]}
    out = acc.parse_dcgmi_diag(json.dumps(doc))
    assert out["status"] == acc.UNKNOWN and out["status"] in acc.FAILING


@pytest.mark.parametrize(("text", "message"), [
    ("", "no JSON document"),
    ("Error: unable to connect to the host engine", "no JSON document"),
    ("{not json}", "does not parse"),
    ("[1, 2]", "no JSON document"),
    ('{"DCGM GPU Diagnostic": {"version": "3.3.5"}}', 'no "test_categories" or "tests"'),
    ('{"DCGM GPU Diagnostic": {"test_categories": []}}', "has no test results"),
    ('{"tests": [{"name": "memory", "results": []}]}', "a test without a name or results"),
    ('{"tests": [{"results": [{"status": "Pass"}]}]}', "a test without a name or results"),
    ('{"DCGM Diagnostic": "oops"}', "not an object"),
])
def test_malformed_diag_output_is_refused(text, message):
    with pytest.raises(acc.AcceptanceParseError, match=message):
        acc.parse_dcgmi_diag(text)


@pytest.mark.parametrize(("name", "expected"), [
    ("all_reduce_perf-8xa100-pass.txt", (6, 230.25, 115.572, 0, 0)),
    ("all_reduce_perf-8xa100-nvlink-down.txt", (4, 17.21, 14.7103, 2, 2)),
    ("all_reduce_perf-old-error-column.txt", (4, 204.34, 182.504, 0, 0)),
])
def test_nccl_tests_reports(name, expected):
    """(rows, peak busbw, average busbw, wrong values, out of bounds values)."""
    out = acc.parse_nccl_tests(read(name))
    assert (len(out["rows"]), out["peak_busbw"], out["avg_busbw"], out["wrong"], out["out_of_bounds"]) == expected
    assert out["rows"][-1]["size"] == max(r["size"] for r in out["rows"])


def test_nccl_checks_off_count_no_wrong_values():
    text = read("all_reduce_perf-8xa100-pass.txt").replace("      0\n", "    N/A\n")
    out = acc.parse_nccl_tests(text)
    assert out["wrong"] == 0 and out["peak_busbw"] == 230.25


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda t: "", "no nccl-tests size table header"),
    (lambda t: "\n".join(line for line in t.splitlines() if not line.lstrip().startswith(tuple("0123456789"))),
     "has no measured sizes"),
    (lambda t: t.replace("229.88", "fast"), "busbw 'fast' is not a number"),
    (lambda t: t.replace("  8589934592    2147483648     float", "  8589934592     float"), "columns, the header"),
    (lambda t: "\n".join(line for line in t.splitlines() if "size         count" not in line),
     "no nccl-tests size table header"),
])
def test_malformed_nccl_reports_are_refused(mutate, message):
    with pytest.raises(acc.AcceptanceParseError, match=message):
        acc.parse_nccl_tests(mutate(read("all_reduce_perf-8xa100-pass.txt")))


def test_hccl_test_reports():
    ok = acc.parse_hccl_test(read("hccl_test-8x910b-pass.txt"))
    assert (len(ok["rows"]), ok["peak_alg_bandwidth"], ok["failed_checks"]) == (6, 77.69172, 0)
    assert ok["rows"][0] == {"size": 8192, "time_us": 50.41, "alg_bandwidth": 0.16251, "check": "success"}
    bad = acc.parse_hccl_test(read("hccl_test-8x910b-check-failed.txt"))
    assert (bad["peak_alg_bandwidth"], bad["failed_checks"]) == (14.4158, 2)
    null = acc.parse_hccl_test(read("hccl_test-8x910b-pass.txt").replace("success", "NULL"))
    assert null["failed_checks"] == 0


@pytest.mark.parametrize(("text", "message"), [
    ("", "no hccl_test header"),
    ("data_size(Bytes): | aveg_time(us): | alg_bandwidth(GB/s): | check_result:\n", "has no measured sizes"),
    ("data_size(Bytes): | aveg_time(us): | alg_bandwidth(GB/s): | check_result:\n8192 50.41 0.16 maybe\n",
     "is not \"data_size aveg_time alg_bandwidth check_result\""),
    ("data_size(Bytes): | aveg_time(us): | alg_bandwidth(GB/s): | check_result:\n8192 50.41 x success\n",
     "alg_bandwidth 'x' is not a number"),
])
def test_malformed_hccl_reports_are_refused(text, message):
    with pytest.raises(acc.AcceptanceParseError, match=message):
        acc.parse_hccl_test(text)


@pytest.mark.parametrize("parser", [acc.parse_dcgmi_diag, acc.parse_nccl_tests, acc.parse_hccl_test])
@pytest.mark.parametrize("junk", [None, 42, "\x00\xff", "#\n#\n", "{}", "}{", "| | |\n1 2 3"])
def test_no_input_gives_anything_but_a_parse_error(parser, junk):
    with pytest.raises(acc.AcceptanceParseError):
        parser(junk)


@pytest.mark.parametrize(("model", "count", "threshold"), [
    ("NVIDIA A100-SXM4-80GB", 8, 184.0), ("NVIDIA A100-SXM4-40GB", 8, 184.0), ("NVIDIA H100 80GB HBM3", 8, 368.0),
    ("NVIDIA H100-SXM5-80GB", 8, 368.0), ("NVIDIA A100-SXM4-80GB", 4, None), ("NVIDIA A100-PCIE-40GB", 8, None),
    ("NVIDIA H100 PCIe", 8, None), ("", 8, None), (None, 8, None),
])
def test_published_busbw_floors(model, count, threshold):
    assert acc.default_busbw_threshold(model, count) == threshold


def test_the_verdict_passes_only_when_every_check_passes_and_its_digest_follows_the_content():
    good = [acc.check("gpu-count", True, 8, 8), acc.at_least("nccl-busbw", 230.25, 184.0, unit="GB/s")]
    passed = acc.verdict("gpu1", good, level=2)
    assert passed["passed"] is True and passed["failed"] == []
    assert passed["digest"].startswith("sha256:") and len(passed["digest"]) == 71
    assert acc.verdict("gpu1", good, level=2)["digest"] == passed["digest"]
    low = acc.verdict("gpu1", [good[0], acc.at_least("nccl-busbw", 17.21, 184.0, unit="GB/s")], level=2)
    assert low["passed"] is False and low["failed"] == ["nccl-busbw"]
    assert low["checks"][1]["detail"] == "17.21 GB/s below the threshold 184.0"
    assert low["digest"] != passed["digest"]
    assert acc.verdict("gpu1", [], level=2)["passed"] is False


@pytest.mark.parametrize(("figure", "threshold", "detail"), [
    (None, 184.0, "no figure measured"), (230.0, None, "no threshold for this node"),
])
def test_a_bandwidth_check_without_a_figure_or_a_threshold_fails(figure, threshold, detail):
    result = acc.at_least("nccl-busbw", figure, threshold, unit="GB/s")
    assert result["passed"] is False and detail in result["detail"]


def gpus(count=8, name="NVIDIA A100-SXM4-80GB", links=12):
    from ansible_collections.ai_platform.l1.plugins.module_utils.nvml import _blank_gpu  # noqa: PLC0415

    out = []
    for i in range(count):
        gpu = _blank_gpu(i)
        gpu.update(name=name, nvlink={"links_active": links, "remote_nvswitch": True},
                   ecc={"dbe_volatile": 0, "dbe_aggregate": 0, "sbe_volatile": 0, "sbe_aggregate": 0},
                   remapped_rows={"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
                   retired_pages=None)
        out.append(gpu)
    return {"present": True, "reason": "", "count": count, "gpus": out}


def failed(checks):
    return {c["name"]: c["detail"] for c in checks if not c["passed"]}


def test_a_healthy_a100_node_passes_every_hardware_check():
    checks = acc.nvidia_hardware_checks(gpus(), 8, "A100-SXM4")
    assert [c["name"] for c in checks] == ["gpu-count", "gpu-model", "nvlink", "ecc", "row-remap"]
    assert failed(checks) == {}


@pytest.mark.parametrize(("change", "args", "expected"), [
    (lambda info: info["gpus"].pop() and info.update(count=7), {}, {"gpu-count": "7 GPUs, the inventory says 8"}),
    (lambda info: info["gpus"][2].update(name="NVIDIA A100-PCIE-40GB"), {}, {"gpu-model": "GPU 2 is not a A100-SXM4"}),
    (lambda info: info["gpus"][5]["nvlink"].update(links_active=11), {}, {"nvlink": "GPU 5 has 11 active NVLinks"}),
    (lambda info: None, {"min_nvlinks": 18},
     {"nvlink": "; ".join("GPU %d has 12 active NVLinks" % i for i in range(8))}),
    (lambda info: info["gpus"][1]["ecc"].update(dbe_volatile=3), {},
     {"ecc": "GPU 1: 3 uncorrectable ECC errors since the driver loaded"}),
    (lambda info: info["gpus"][4]["remapped_rows"].update(pending=True), {},
     {"row-remap": "GPU 4: remapped rows or retired pages wait for a GPU reset"}),
    (lambda info: info["gpus"][4]["remapped_rows"].update(failure=True), {},
     {"row-remap": "GPU 4: a row remapping failed (replace the GPU)"}),
])
def test_each_hardware_fault_fails_its_own_check(change, args, expected):
    info = gpus()
    change(info)
    assert failed(acc.nvidia_hardware_checks(info, 8, "A100-SXM4", **args)) == expected


def test_no_gpu_fails_every_hardware_check():
    info = {"present": False, "reason": "NVML initialisation failed: driver not loaded", "count": 0, "gpus": []}
    out = failed(acc.nvidia_hardware_checks(info, 8, "A100"))
    assert set(out) == {"gpu-count", "gpu-model", "nvlink", "ecc", "row-remap"}
    assert out["gpu-count"] == "0 GPUs, the inventory says 8 (NVML initialisation failed: driver not loaded)"


def npus(count=8, health="OK"):
    chips = [{"npu_id": i, "chip_id": 0, "health": health, "error_codes": [],
              "ecc": {"hbm_sbe": 0, "hbm_dbe": 0}} for i in range(count)]
    return {"present": True, "chip_count": count, "chip_model": "910B", "chips": chips,
            "topology": "hccs-fullmesh", "topology_links": {"HCCS": 28}}


def test_ascend_hardware_checks():
    assert failed(acc.ascend_hardware_checks(npus(), 8, "910B")) == {}
    sick = npus()
    sick["chips"][3].update(health="Alarm", error_codes=["80E18005"])
    sick["chips"][6]["ecc"]["hbm_dbe"] = 2
    sick.update(topology="hccs-partial", topology_links={"HCCS": 12, "SYS": 16})
    assert failed(acc.ascend_hardware_checks(sick, 8, "910B")) == {
        "npu-health": "NPU 3 chip 0: Alarm 80E18005",
        "hbm-ecc": "NPU 6 chip 0: 2 HBM double-bit errors",
        "hccs": 'device pairs by link kind {"HCCS": 12, "SYS": 16}'}
    assert set(failed(acc.ascend_hardware_checks(npus(4), 8, "910A"))) == {"npu-count", "npu-model"}
    assert "hccs" not in [c["name"] for c in acc.ascend_hardware_checks(npus(), 8, "910B", topology="")]


def test_tool_reports_become_checks():
    passed = acc.dcgm_checks(acc.parse_dcgmi_diag(read("dcgmi-diag-r1-dcgm3-pass.txt")), 1)
    assert [(c["name"], c["passed"]) for c in passed] == [("dcgm-diag-r1", True)]
    bad = acc.dcgm_checks(acc.parse_dcgmi_diag(read("dcgmi-diag-r2-dcgm3-memory-fail.txt")), 2)
    assert failed(bad) == {"dcgm-diag-r2 GPU Memory": "Pending page retirements together with a DBE were detected on "
                                                      "GPU 3. Drain the GPU and reset it or reboot the node.",
                           "dcgm-diag-r2 Targeted Stress": "DCGM reports not-run"}
    fast = acc.nccl_checks(acc.parse_nccl_tests(read("all_reduce_perf-8xa100-pass.txt")), 184.0)
    assert failed(fast) == {}
    slow = acc.nccl_checks(acc.parse_nccl_tests(read("all_reduce_perf-8xa100-nvlink-down.txt")), 184.0)
    assert failed(slow) == {"nccl-allreduce-busbw": "17.21 GB/s below the threshold 184.0",
                            "nccl-allreduce-correct": "all_reduce_perf found 2 wrong values"}
    hccl = acc.hccl_checks(acc.parse_hccl_test(read("hccl_test-8x910b-check-failed.txt")), 60.0)
    assert failed(hccl) == {"hccl-allreduce-bandwidth": "14.4158 GB/s below the threshold 60.0",
                            "hccl-allreduce-correct": "hccl_test check_result failed at 2 sizes"}
    assert failed(acc.hccl_checks(acc.parse_hccl_test(read("hccl_test-8x910b-pass.txt")), 60.0)) == {}
