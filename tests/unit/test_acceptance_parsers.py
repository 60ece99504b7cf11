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
