"""The collection's one runner for vendor CLIs and sysfs reads (plugins/module_utils/device_io.py):
argument formats, both back ends (AnsibleModule.run_command under coreutils' timeout, and subprocess
outside Ansible) on the same table of commands, the error text, and the attribute readers."""

import os
import sys

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args
from ansible_collections.ai_platform.l1.plugins.module_utils import device_io, mlnx_qos, npu_smi
from ansible_collections.ai_platform.l1.plugins.module_utils.device_io import Arg, CliError, CliRunner


@pytest.mark.parametrize(("fmt", "value", "words"), [
    (Arg.fixed("info"), None, ["info"]),
    (Arg.fixed("mig", "-lgi"), "anything", ["mig", "-lgi"]),
    (Arg.opt_val("-i"), 3, ["-i", "3"]),
    (Arg.opt_val("-i"), 0, ["-i", "0"]),
    (Arg.opt_val("-i"), None, []),
    (Arg.opt_eq_val("--format"), "csv,noheader", ["--format=csv,noheader"]),
    (Arg.opt_eq_val("--format"), None, []),
    (Arg.flag("-l"), True, ["-l"]),
    (Arg.flag("-l"), False, []),
    (Arg.flag("-l"), None, []),
    (Arg.joined("--pfc"), [0, 0, 0, 1, 0, 0, 0, 0], ["--pfc", "0,0,0,1,0,0,0,0"]),
    (Arg.joined("--tsa", ":"), ["ets", "strict"], ["--tsa", "ets:strict"]),
    (Arg.joined("--pfc"), None, []),
    (Arg.words(), ["mig", "-cgi", "9,9"], ["mig", "-cgi", "9,9"]),
    (Arg.words(), 7, ["7"]),
    (Arg.words(), None, []),
])
def test_argument_formats(fmt, value, words):
    assert fmt(value) == words


@pytest.mark.parametrize(("formats", "order", "values", "argv"), [
    (npu_smi.ARG_FORMATS, npu_smi.INFO_ARGS, {}, []),
    (npu_smi.ARG_FORMATS, npu_smi.INFO_ARGS, {"list": True}, ["-l"]),
    (npu_smi.ARG_FORMATS, npu_smi.INFO_ARGS, {"map": True}, ["-m"]),
    (npu_smi.ARG_FORMATS, npu_smi.INFO_ARGS, {"type": "topo"}, ["-t", "topo"]),
    # The order is the format table's, not the call's: the fake npu-smi and the messages read it.
    (npu_smi.ARG_FORMATS, npu_smi.INFO_ARGS, {"chip": 0, "npu": 3, "type": "health"},
     ["-t", "health", "-i", "3", "-c", "0"]),
    (npu_smi.ARG_FORMATS, "type npu", {"type": "board", "npu": 0}, ["-t", "board", "-i", "0"]),
    (mlnx_qos.ARG_FORMATS, "interface", {"interface": "ens1f0"}, ["-i", "ens1f0"]),
    (mlnx_qos.ARG_FORMATS, "trust", {"trust": "dscp"}, ["--trust", "dscp"]),
    (mlnx_qos.ARG_FORMATS, "dscp2prio", {"dscp2prio": (26, 3)}, ["--dscp2prio", "set,26,3"]),
    (mlnx_qos.ARG_FORMATS, "tsa tcbw", {"tsa": ["ets"] * 2 + ["strict"] * 6, "tcbw": None},
     ["--tsa", "ets,ets,strict,strict,strict,strict,strict,strict"]),
    (mlnx_qos.ARG_FORMATS, ["prio_tc"], {"prio_tc": list(range(8))}, ["--prio_tc", "0,1,2,3,4,5,6,7"]),
])
def test_format_args(formats, order, values, argv):
    assert device_io.format_args(formats, order, values) == argv


def test_format_args_names_an_unknown_argument():
    with pytest.raises(KeyError, match=r"no argument format for 'tpye' \(have: chip, list, map, npu, type\)"):
        device_io.format_args(npu_smi.ARG_FORMATS, "tpye npu", {})


@pytest.fixture(params=["module", "subprocess"])
def backend(request):
    """None (subprocess) or a real AnsibleModule (run_command, get_bin_path)."""
    if request.param == "subprocess":
        return None
    with patch_module_args({}):
        return AnsibleModule(argument_spec={})


def script(tmp_path, name, body):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


class Fails(str):
    """The CliError message a run must raise."""


# (shell body, ok codes, expected stdout or Fails(the CliError message))
RUNS = [
    ("echo 'NPU ok'\n", (0,), "NPU ok\n"),
    ("echo \"$LC_ALL\"\n", (0,), "C\n"),  # vendor tools run in the C locale
    ("echo nothing here; exit 6\n", (0, 6), "nothing here\n"),  # nvidia-smi mig -lgi: 6 is "none"
    ("echo 'dcmi model initialized failed' >&2; echo table; exit 255\n", (0,),
     Fails("`npu-smi info -t board -i 0` failed with exit code 255: dcmi model initialized failed")),
    ("echo 'Unable to enable MIG Mode'; exit 6\n", (0,),
     Fails("`npu-smi info -t board -i 0` failed with exit code 6: Unable to enable MIG Mode")),
    ("exit 3\n", (0,), Fails("`npu-smi info -t board -i 0` failed with exit code 3: no output")),
    ("exec sleep 30\n", (0,), Fails("`npu-smi info -t board -i 0` did not finish within 1 seconds")),
]


@pytest.mark.parametrize(("body", "ok", "expected"), RUNS, ids=[f"run{i}" for i in range(len(RUNS))])
def test_runner_on_both_back_ends(backend, tmp_path, body, ok, expected):
    runner = CliRunner(backend, script(tmp_path, "tool", body), name="npu-smi", timeout=1,
                       arg_formats=npu_smi.ARG_FORMATS)
    args = ["info"] + runner.args("type npu", type="board", npu=0)
    if isinstance(expected, Fails):
        with pytest.raises(CliError) as exc:
            runner.run(args, ok=ok)
        assert str(exc.value) == expected
        assert exc.value.command == "npu-smi info -t board -i 0"
        return
    assert runner.run(args, ok=ok) == expected


def test_error_keeps_the_whole_output_and_cuts_the_detail(backend, tmp_path):
    long = "x" * 700
    runner = CliRunner(backend, script(tmp_path, "tool", f"echo out; echo {long}END >&2; exit 2\n"), name="tool")
    with pytest.raises(CliError) as exc:
        runner.run([])
    err = exc.value
    assert (err.rc, err.stdout, err.timed_out) == (2, "out\n", False)
    assert err.stderr == long + "END\n"
    assert err.detail == (long + "END")[-500:]
    assert err.result() == {"rc": 2, "stdout": "out\n", "stderr": long + "END\n"}


@pytest.mark.parametrize("kind", ["missing", "not-executable"])
def test_a_command_that_cannot_run(backend, tmp_path, kind):
    path = tmp_path / "npu-smi"
    if kind == "not-executable":
        path.write_text("#!/bin/sh\necho never\n")
        path.chmod(0o644)
    runner = CliRunner(backend, str(path), timeout=5)
    with pytest.raises(CliError) as exc:
        runner.run(["info"])
    assert exc.value.rc is None and not exc.value.timed_out
    assert str(exc.value).startswith("`npu-smi info` could not be run: ")
    result = runner.call(["info"])
    assert (result.rc, result.started) == (device_io.NOT_RUN_RC, False)


def test_display_and_command_line_quote_like_a_shell():
    runner = CliRunner(None, "/opt/mellanox bin/mlnx_qos", name="mlnx_qos")
    assert runner.display(["-i", "ens1f0", "--tsa", "ets,strict"]) == "mlnx_qos -i ens1f0 --tsa ets,strict"
    assert runner.command_line(["-i", "eth 0"]) == "'/opt/mellanox bin/mlnx_qos' -i 'eth 0'"


def test_environment_can_be_replaced(backend, tmp_path, monkeypatch):
    monkeypatch.delenv("LC_ALL", raising=False)
    tool = script(tmp_path, "tool", 'echo "${LC_ALL:-unset} $AI_L1_X"\n')
    runner = CliRunner(backend, tool, environ={"AI_L1_X": "1"})
    assert runner.run([]) == "unset 1\n"


@pytest.mark.parametrize(("argv", "expected"), [
    (["definitely-not-a-tool-ai-l1"], (127, "", "definitely-not-a-tool-ai-l1 not found")),
    (["sh", "-c", "echo kernel; echo warn >&2; exit 1"], (1, "kernel\n", "warn\n")),
    (["sh", "-c", "exec sleep 30"], (124, "", "sh did not finish within 1 seconds")),
])
def test_tool_runner_answers_and_never_raises(backend, argv, expected):
    assert device_io.tool_runner(backend, timeout=1)(argv) == expected


def test_which(backend, tmp_path):
    tool = script(tmp_path, "ai-l1-tool", "exit 0\n")
    assert device_io.which(backend, "ai-l1-tool", [str(tmp_path)]) == tool
    assert device_io.which(backend, "ai-l1-no-such-tool", [str(tmp_path)]) is None
    assert device_io.which(backend, os.path.basename(sys.executable), []) is not None


# ------------------------------------------------------------------ sysfs


@pytest.mark.parametrize(("content", "strict", "expected"), [
    (b"100000\n", True, "100000"),
    (b"  up \n", False, "up"),
    (b"", True, ""),
    (None, True, None),  # missing
    (b"\xff\xfe\x00garbage", False, None),
    (b"\xff\xfe\x00garbage", True, ValueError("does not hold text (b'\\xff\\xfe\\x00garbage'): is the driver broken?")),
])
def test_read_attr(tmp_path, content, strict, expected):
    path = tmp_path / "speed"
    if content is not None:
        path.write_bytes(content)
    if isinstance(expected, ValueError):
        with pytest.raises(ValueError) as exc:
            device_io.read_attr(str(path), strict=strict)
        assert str(exc.value) == f"{path} {expected}"
    else:
        assert device_io.read_attr(str(path), strict=strict) == expected


def test_read_attr_of_a_directory_is_none(tmp_path):
    assert device_io.read_attr(str(tmp_path)) is None
    assert device_io.read_file(str(tmp_path / "missing")) is None


def test_list_dir(tmp_path):
    for name in ("mlx5_1", "mlx5_0", "ib0"):
        (tmp_path / name).mkdir()
    (tmp_path / "file").write_text("x")
    assert device_io.list_dir(str(tmp_path)) == ["file", "ib0", "mlx5_0", "mlx5_1"]
    assert device_io.list_dir(str(tmp_path / "missing")) == []
    assert device_io.list_dir(str(tmp_path / "file")) == []
