"""ai_platform.l1.mlnx_qos: parser table-tested on captured outputs, module run against the fake tool.

The module runs in-process (AnsibleModule reads its arguments as a task passes them) and calls
tests/hardware/nic/mlnx_qos_fake.py as its mlnx_qos, which keeps port state in a JSON file.
"""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ansible_collections.ai_platform.l1.plugins.module_utils import mlnx_qos as qos
from ansible_collections.ai_platform.l1.plugins.modules import mlnx_qos

ROOT = Path(__file__).resolve().parents[2]
NIC = ROOT / "tests/hardware/nic"
FAKE = NIC / "mlnx_qos_fake.py"
CAPTURED = NIC / "captured"
IDENT = {d: d // 8 for d in range(64)}
SEED_PFC = [0, 0, 0, 1, 0, 0, 0, 0]

OS, FW = "OS controlled", "Firmware controlled"


def capture(name):
    """A captured output without the `#` header a fixture may carry (mlnx_qos never prints `#`)."""
    text = (CAPTURED / name).read_text()
    return "".join(line for line in text.splitlines(True) if not line.startswith("#"))


# file -> expected parse (dcbx, trust, pfc, prio_tc, tsa, tcbw, dscp2prio); see captured/SOURCES.md
CAPTURES = {
    "ofed-4.2-ets-strict.txt": dict(
        dcbx=OS, trust="dscp", pfc=[1, 0, 1, 0, 0, 0, 1, 1], prio_tc=[1, 0, 2, 3, 4, 5, 6, 7],
        tsa=["ets"] * 6 + ["strict", "ets"], tcbw=[10] * 6 + [0, 40], dscp2prio=IDENT),
    "ofed-4.x-vendor-netarbiter.txt": dict(
        dcbx=OS, trust="dscp", pfc=SEED_PFC, prio_tc=[1, 0, 2, 3, 4, 5, 6, 7],
        tsa=["vendor"] * 8, tcbw=[0] * 8, dscp2prio=IDENT),
    "ofed-5.x-buffers-pcp.txt": dict(  # reconstructed, see its header
        dcbx=OS, trust="pcp", pfc=[0] * 8, prio_tc=[1, 0, 2, 3, 4, 5, 6, 7],
        tsa=["vendor"] * 8, tcbw=[0] * 8, dscp2prio={}),
    "ofed-5.x-fw-dcbx-ets-multiprio.txt": dict(
        dcbx=FW, trust="dscp", pfc=SEED_PFC, prio_tc=[0, 0, 0, 3, 0, 0, 6, 0],
        tsa=["ets", "vendor", "vendor", "ets", "vendor", "vendor", "vendor", "vendor"],
        tcbw=[50, 0, 0, 50, 0, 0, 0, 0], dscp2prio=IDENT),
    "ofed-23.10-ets-strict-prio5.txt": dict(
        dcbx=OS, trust="dscp", pfc=[0, 0, 0, 0, 0, 1, 0, 0], prio_tc=list(range(8)),
        tsa=["ets"] * 4 + ["strict"] * 4, tcbw=[9, 1, 80, 10, 0, 0, 0, 0], dscp2prio=IDENT),
    "ofed-5.x-dscp-wrapped-line.txt": dict(
        dcbx=OS, trust="dscp", pfc=SEED_PFC, prio_tc=[1, 0, 2, 3, 4, 5, 6, 7],
        tsa=["vendor"] * 8, tcbw=[0] * 8, dscp2prio={**IDENT, 30: 6}),
}


@pytest.mark.parametrize("name", sorted(CAPTURES))
def test_parse_captured(name):
    state = qos.parse(capture(name))
    for key, value in CAPTURES[name].items():
        assert state[key] == value, key


def test_every_capture_is_in_the_table():
    files = {p.name for p in CAPTURED.glob("*.txt")} - {"garbage-no-pfc.txt"}
    assert files == set(CAPTURES)


def test_reconstructed_capture_says_so():
    header = [line for line in (CAPTURED / "ofed-5.x-buffers-pcp.txt").read_text().splitlines() if line.startswith("#")]
    assert header and "RECONSTRUCTED" in header[0] and any("mlnx-tools" in line for line in header)


BASE = capture("ofed-5.x-buffers-pcp.txt")


# Output variants that mlnx-tools' python/mlnx_qos prints (pretty_print and its warnings) but no
# public capture shows: built from the base layout by the change the source makes.
@pytest.mark.parametrize("text, expected", [
    pytest.param("****** WARNING: lldpad service is running and may overwrite your settings ******\n\n" + BASE,
                 dict(trust="pcp", pfc=[0] * 8), id="lldpad-warning-first"),
    pytest.param(BASE.replace("tc: 3 ratelimit: unlimited, tsa: vendor",
                              "tc: 3 ratelimit: 25.0 Gbps, tsa: ets, bw: 100%"),
                 dict(tsa=["vendor"] * 3 + ["ets"] + ["vendor"] * 4, tcbw=[0, 0, 0, 100, 0, 0, 0, 0]),
                 id="ratelimited-tc"),
    pytest.param(BASE.replace("0,0,0,0,0,0,\n", "0,0,0,0,0,0,total_size=262016\n"),
                 dict(pfc=[0] * 8, prio_tc=[1, 0, 2, 3, 4, 5, 6, 7]), id="total-size-suffix"),
    pytest.param("".join(line for line in BASE.splitlines(True)
                         if not line.startswith(("Receive buffer", "\tbuffer")))
                 .replace("default priority:\n",
                          "default priority:\nBuffers commands are not supported on your system\n"),
                 dict(pfc=[0] * 8, tsa=["vendor"] * 8), id="no-buffer-support"),
    pytest.param(BASE.replace("Priority trust state: pcp", "Priority trust state is not supported on your system\n"
                              "Priority trust state: none"), dict(trust="none"), id="trust-not-supported"),
    pytest.param(capture("ofed-4.2-ets-strict.txt").replace("\t", "        "), dict(pfc=[1, 0, 1, 0, 0, 0, 1, 1]),
                 id="spaces-instead-of-tabs"),
])
def test_parse_documented_variants(text, expected):
    state = qos.parse(text)
    for key, value in expected.items():
        assert state[key] == value, key


@pytest.mark.parametrize("text, match", [
    ((CAPTURED / "garbage-no-pfc.txt").read_text(), "no PFC table"),
    ("PFC configuration:\n\tpriority 0 1 2 3 4 5 6 7\n\tenabled 0 0 0 1 0 0 0 0\n", "no traffic class"),
    ("\tpriority 0 1 2 3 4 5 6 7\n\tenabled 0 0 0 1 0 0 0 0\ntc: 0 ratelimit: unlimited, tsa: vendor\n"
     "\t priority:  0 1 2\n", r"priorities \[3, 4, 5, 6, 7\] are not assigned"),
    ("", "no PFC table"),
])
def test_parse_refuses(text, match):
    with pytest.raises(qos.MlnxQosError, match=match):
        qos.parse(text)


@pytest.fixture
def port(tmp_path, monkeypatch):
    state = tmp_path / "mlnx_qos.json"
    monkeypatch.setenv("AI_L1_FAKE_MLNX_QOS_STATE", str(state))
    subprocess.run([sys.executable, str(FAKE), "--init", "ens1f0", "ens1f1"], check=True)
    return state


@pytest.fixture
def run(run_module, port):
    def _run(**args):
        return run_module(mlnx_qos, **dict({"interface": "ens1f0", "mlnx_qos_path": str(FAKE)}, **args))
    return _run


SEED = dict(trust="dscp", pfc=SEED_PFC, dscp2prio=[{"dscp": 26, "priority": 3}])


def test_fake_output_parses_like_the_5x_capture(port):
    """The fake's factory state prints what the 5.x capture shows, so the module sees a real layout."""
    out = subprocess.run([sys.executable, str(FAKE), "-i", "ens1f0"], capture_output=True, text=True, check=True)
    fake = qos.parse(out.stdout)
    real = qos.parse(capture("ofed-5.x-buffers-pcp.txt"))
    assert {k: v for k, v in fake.items() if k != "dscp2prio"} == {k: v for k, v in real.items() if k != "dscp2prio"}


def test_seed_settings_fresh_then_idempotent(run, port):
    first = run(**SEED)
    assert first["_rc"] == 0, first
    assert first["changed"] is True
    assert "pfc priority 3: off -> on" in first["changes"]
    assert "trust: pcp -> dscp" in first["changes"]
    assert first["state"]["pfc"] == SEED_PFC and first["state"]["trust"] == "dscp"
    assert first["diff"]["after"]["pfc"]["priority 3"] == "on"
    stored = json.loads(port.read_text())["ens1f0"]
    assert stored["pfc"] == SEED_PFC and stored["trust"] == "dscp"
    assert json.loads(port.read_text())["ens1f1"]["pfc"] == [0] * 8  # other port untouched

    second = run(**SEED)
    assert second["changed"] is False
    assert second["changes"] == [] and second["commands"] == []
    assert second["diff"]["before"] == second["diff"]["after"]


def test_check_mode_reports_and_changes_nothing(run, port):
    before = port.read_text()
    result = run(check_mode=True, **SEED)
    assert result["changed"] is True
    assert result["state"]["pfc"] == SEED_PFC
    assert any("--pfc 0,0,0,1,0,0,0,0" in c for c in result["commands"])
    assert port.read_text() == before


def test_drift_names_exactly_the_priority(run, port):
    assert run(pfc=[0, 0, 0, 1, 1, 0, 0, 0])["changed"]
    # Someone turns PFC of priority 4 off by hand.
    subprocess.run([sys.executable, str(FAKE), "-i", "ens1f0", "--pfc", "0,0,0,1,0,0,0,0"],
                   check=True, capture_output=True)
    result = run(pfc=[0, 0, 0, 1, 1, 0, 0, 0])
    assert result["changed"] is True
    assert result["changes"] == ["pfc priority 4: off -> on"]
    before, after = result["diff"]["before"]["pfc"], result["diff"]["after"]["pfc"]
    assert [k for k in before if before[k] != after[k]] == ["priority 4"]
    assert not run(pfc=[0, 0, 0, 1, 1, 0, 0, 0])["changed"]


def test_ets_and_prio_tc(run, port):
    args = dict(prio_tc=[0, 0, 0, 3, 0, 0, 0, 0], tsa=["ets"] * 8, tcbw=[50, 0, 0, 50, 0, 0, 0, 0])
    first = run(**args)
    assert first["changed"], first
    assert "tc 3: bw 0% -> 50%" in first["changes"]
    assert first["state"]["prio_tc"] == args["prio_tc"]
    assert not run(**args)["changed"]


@pytest.mark.parametrize("args, match", [
    (dict(pfc=[0, 0, 0, 1]), "pfc must be a list of 8"),
    (dict(pfc=[0, 0, 0, 1, 0, 0, 0, 0, 0]), "pfc must be a list of 8"),
    (dict(pfc=[0, 0, 0, -1, 0, 0, 0, 0]), r"pfc\[3\] is -1"),
    (dict(trust="dscp", dscp2prio=[{"dscp": 26, "priority": -1}]), "priority for dscp 26 must be 0..7"),
    (dict(pfc=[0, 0, 0, 2, 0, 0, 0, 0]), r"pfc\[3\] is 2"),
    (dict(prio_tc=[0, 0, 0, 8, 0, 0, 0, 0]), r"prio_tc\[3\] is 8"),
    (dict(trust="dscp", dscp2prio=[{"dscp": 26, "priority": 9}]), "priority for dscp 26 must be 0..7"),
    (dict(trust="dscp", dscp2prio=[{"dscp": 64, "priority": 3}]), "dscp must be 0..63"),
    (dict(dscp2prio=[{"dscp": 26, "priority": 3}]), "needs trust: dscp"),
    (dict(tsa=["ets"] * 8, tcbw=[10] * 8), "add up to 100"),
    (dict(tsa=["fair"] * 8), "tsa must be"),
])
def test_bad_input_refused_before_anything_runs(run, port, args, match, tmp_path):
    # A tool that records being run: validation must fail before it is called.
    marker = tmp_path / "ran"
    tool = tmp_path / "mlnx_qos"
    tool.write_text("#!/bin/sh\ntouch %s\nexit 1\n" % marker)
    tool.chmod(0o755)
    result = run(mlnx_qos_path=str(tool), **args)
    assert result["_rc"] == 1 and result["failed"]
    assert "invalid QoS settings" in result["msg"]
    assert __import__("re").search(match, result["msg"]), result["msg"]
    assert not marker.exists()


def test_unknown_interface(run):
    result = run(interface="ens9f9", **SEED)
    assert result["failed"]
    assert "ens9f9" in result["msg"] and "rc 1" in result["msg"]


def test_unparseable_output(run, tmp_path):
    tool = tmp_path / "mlnx_qos"
    tool.write_text("#!/bin/sh\ncat %s\n" % (CAPTURED / "garbage-no-pfc.txt"))
    tool.chmod(0o755)
    result = run(mlnx_qos_path=str(tool), **SEED)
    assert result["failed"]
    assert "cannot parse the output of mlnx_qos -i ens1f0" in result["msg"]


def test_tool_that_ignores_the_set_is_reported(run, tmp_path):
    tool = tmp_path / "mlnx_qos"
    out = tmp_path / "out.txt"
    out.write_text(capture("ofed-5.x-buffers-pcp.txt"))
    tool.write_text("#!/bin/sh\ncat %s\n" % out)
    tool.chmod(0o755)
    result = run(mlnx_qos_path=str(tool), pfc=SEED_PFC)
    assert result["failed"]
    assert "did not take: pfc priority 3: off -> on" in result["msg"]


# Malformed values in an otherwise well-formed output: a refusal naming the line, no traceback.
@pytest.mark.parametrize("text, match", [
    pytest.param(BASE.replace("\t priority:  7", "\t priority:  7 9"),
                 r"traffic class 7 lists priority 9, not one of 0\.\.7: priority: 7 9", id="tc-priority-9"),
    pytest.param(capture("ofed-4.2-ets-strict.txt").replace("dscp:31,30,", "dscp:31,3 0,"),
                 r"DSCP map entry '3 0' is not a DSCP value 0\.\.63", id="dscp-space-inside"),
    pytest.param(capture("ofed-4.2-ets-strict.txt").replace("dscp:31,30,", "dscp:31,99,"),
                 r"DSCP map entry '99' is not a DSCP value", id="dscp-99"),
    pytest.param(capture("ofed-4.2-ets-strict.txt").replace("prio:7 dscp:", "prio:9 dscp:"),
                 r"DSCP map priority 9 out of 0\.\.7", id="dscp-prio-9"),
])
def test_parse_refuses_malformed_values(text, match):
    with pytest.raises(qos.MlnxQosError, match=match):
        qos.parse(text)


def test_malformed_values_fail_the_module_cleanly(run, tmp_path):
    tool = tmp_path / "mlnx_qos"
    out = tmp_path / "out.txt"
    out.write_text(BASE.replace("\t priority:  7", "\t priority:  7 9"))
    tool.write_text("#!/bin/sh\ncat %s\n" % out)
    tool.chmod(0o755)
    result = run(mlnx_qos_path=str(tool), **SEED)
    assert result["failed"] and "Traceback" not in result["_out"]
    assert "cannot parse the output of mlnx_qos -i ens1f0: traffic class 7 lists priority 9" in result["msg"]


@pytest.mark.parametrize("old, new", [
    ("\tprio:7 dscp:", "\tprio:0 dscp:" + " " * 5000 + "x\n\tprio:7 dscp:"),
    ("\tprio:7 dscp:", "\tprio:0 dscp:07," + " " * 5000 + "!\n\tprio:7 dscp:"),
    ("\t priority:  7", "\t priority:  " + "1" * 5000 + "x"),
], ids=["dscp-blanks", "dscp-list-blanks", "tc-priority-digits"])
def test_parse_is_linear_on_long_runs(old, new):
    """A long run of blanks (or digits) with a tail that does not fit is refused at once."""
    text = capture("ofed-4.2-ets-strict.txt")
    assert old in text
    start = time.monotonic()
    with pytest.raises(qos.MlnxQosError):
        qos.parse(text.replace(old, new, 1))
    assert time.monotonic() - start < 2
