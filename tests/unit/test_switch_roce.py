"""ai_platform.l1.switch_roce against simulated Onyx and Cumulus NVUE switches over SSH (netmiko).

tests/hardware/switch/fake_switch.py serves a real SSH session with switch state, so changed /
unchanged, drift repair, save and per-switch failures are checked on what the server holds.
"""

import json
import socket
import sys
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.ai_platform.l1.plugins.module_utils import switch_roce as sr
from ansible_collections.ai_platform.l1.plugins.modules import switch_roce

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/hardware/switch"))
from fake_switch import FakeSwitch  # noqa: E402

PASSWORD = "s3cret-pw"


@pytest.fixture(scope="module")
def switches():
    onyx = FakeSwitch("onyx", host="leaf1", password=PASSWORD)
    nvue = FakeSwitch("cumulus", host="leaf2", username="cumulus", password=PASSWORD)
    onyx.start()
    nvue.start()
    yield onyx, nvue
    onyx.stop()
    nvue.stop()


def spec(sw, **kw):
    dtype = "mellanox_mlnxos" if sw.state.kind == "onyx" else "cumulus_linux"
    return dict(dict(name=sw.state.host, host="127.0.0.1", port=sw.port, device_type=dtype,
                     username=sw.username, password=PASSWORD), **kw)


@pytest.fixture
def run(capsys):
    def _run(specs, check_mode=False, **args):
        args = dict({"switches": specs, "_ansible_diff": True, "timeout": 10}, **args)
        if check_mode:
            args["_ansible_check_mode"] = True
        with patch_module_args(args), pytest.raises(SystemExit) as exc:
            switch_roce.main()
        out = capsys.readouterr().out
        result = json.loads(out)
        result["_rc"] = exc.value.code
        result["_out"] = out
        return result
    return _run


def test_seed_settings_then_idempotent_then_drift(run, switches):
    onyx, nvue = switches
    specs = [spec(onyx), spec(nvue)]

    check = run(specs, check_mode=True)
    assert check["changed"] and check["_rc"] == 0, check
    assert "roce lossless" not in onyx.state.running  # check mode sent nothing
    assert "nv set qos roce mode lossless" not in nvue.state.running

    first = run(specs)
    assert first["_rc"] == 0, first
    assert first["changed"] is True
    by = {r["name"]: r for r in first["switches"]}
    assert "roce lossless" in onyx.state.running
    assert "dcb priority-flow-control priority 3 enable" in onyx.state.running
    assert onyx.state.saved == onyx.state.running  # configuration write
    assert "nv set qos roce mode lossless" in nvue.state.running
    assert "nv set qos pfc default-global switch-priority 3" in nvue.state.running
    assert nvue.state.saved == nvue.state.running  # nv config apply + save
    assert "PFC priority 3: on" in by["leaf1"]["changes"]
    assert "dcb priority-flow-control priority 3 enable" not in first["diff"]["before"]
    assert "dcb priority-flow-control priority 3 enable" in first["diff"]["after"]
    assert PASSWORD not in first["_out"]  # no_log

    second = run(specs)
    assert second["changed"] is False, second
    assert second["diff"]["before"] == second["diff"]["after"]
    assert all(r["commands"] == [] for r in second["switches"])

    # Drift by hand: PFC on priority 3 turned off on both switches.
    onyx.state.running.remove("dcb priority-flow-control priority 3 enable")
    nvue.state.running.remove("nv set qos pfc default-global switch-priority 3")
    nvue.state.pending = list(nvue.state.running)
    third = run(specs)
    assert third["changed"] is True
    for r in third["switches"]:
        assert r["changes"] == ["PFC priority 3: on"], r
    assert [r["commands"] for r in third["switches"]] == [
        ["dcb priority-flow-control priority 3 enable"],
        ["nv set qos pfc default-global switch-priority 3"]]
    assert "dcb priority-flow-control priority 3 enable" in onyx.state.running
    assert not run(specs)["changed"]


def test_moving_pfc_removes_the_old_priority(run, switches):
    onyx, nvue = switches
    result = run([spec(onyx), spec(nvue)], pfc_priorities=[4])
    assert result["_rc"] == 0, result
    for r in result["switches"]:
        assert sorted(r["changes"]) == ["PFC priority 3: off", "PFC priority 4: on"], r
    assert "dcb priority-flow-control priority 3 enable" not in onyx.state.running
    assert "nv set qos pfc default-global switch-priority 3" not in nvue.state.running
    assert "nv set qos pfc default-global switch-priority 4" in nvue.state.running
    assert run([spec(onyx), spec(nvue)])["changed"]  # back to the seed's priority 3


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_unreachable_and_silent_switches_do_not_stop_the_others(run, switches):
    onyx, nvue = switches
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)  # accepts TCP, never speaks SSH: a hung switch
    try:
        specs = [dict(spec(onyx), name="down", port=free_port()),
                 dict(spec(onyx), name="hung", port=silent.getsockname()[1]),
                 spec(nvue)]
        nvue.state.running.remove("nv set qos roce mode lossless")
        nvue.state.pending = list(nvue.state.running)
        result = run(specs, timeout=3)
    finally:
        silent.close()
    assert result["_rc"] == 1 and result["failed"]
    assert result["msg"].startswith("2 of 3 switches failed")
    by = {r["name"]: r for r in result["switches"]}
    assert by["down"]["failed"] and "down (127.0.0.1:" in by["down"]["msg"]
    assert by["hung"]["failed"] and by["hung"]["msg"]
    assert not by["leaf2"]["failed"] and by["leaf2"]["changed"]
    assert "nv set qos roce mode lossless" in nvue.state.running


def test_wrong_password_is_a_per_switch_failure(run, switches):
    onyx, _ = switches
    result = run([dict(spec(onyx), password="wrong")])
    assert result["failed"]
    assert "Authentication" in result["switches"][0]["msg"]
    assert "wrong" not in result["_out"]


@pytest.mark.parametrize("args, match", [
    (dict(pfc_priorities=[8]), "priority 8 is out of 0..7"),
    (dict(pfc_priorities=[-1]), "priority -1 is out of 0..7"),
    (dict(pfc_priorities=[]), "needs at least one PFC priority"),
])
def test_bad_input_refused_before_contacting_switches(run, switches, args, match):
    onyx, _ = switches
    seen = len(onyx.state.log)
    result = run([spec(onyx)], **args)
    assert result["failed"] and match in result["msg"]
    assert len(onyx.state.log) == seen


def test_unknown_device_type_refused(run, switches):
    onyx, _ = switches
    seen = len(onyx.state.log)
    result = run([spec(onyx, device_type="cisco_ios")])
    assert result["failed"] and "device_type" in result["msg"]
    assert len(onyx.state.log) == seen
    with pytest.raises(sr.SwitchRoceError, match="not supported"):
        sr.validate("arista_eos", "lossless", [3])


def test_plan_onyx_without_roce_command():
    wanted = sr.wanted_lines("mellanox_mlnxos", "lossless", [3], onyx_roce_command=False)
    assert wanted == ["dcb priority-flow-control enable force", "dcb priority-flow-control priority 3 enable"]
    current = sr.current_lines("mellanox_mlnxos", "roce lossy\ndcb priority-flow-control priority 5 enable\n", False)
    commands, removed, added = sr.plan("mellanox_mlnxos", current, wanted)
    assert commands == ["no dcb priority-flow-control priority 5 enable"] + wanted
