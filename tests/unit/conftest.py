"""Shared unit-test helpers (RDMA area: mlnx_qos, roce_sysfs, nccl_config, switch_roce tests).

- `run_module`: runs a collection module's main() in-process with the arguments a task passes,
  and returns its JSON result with `_rc` (exit code) and `_out` (raw stdout) added.
- `fake_switch(kind, **kw)`: starts a simulated switch over SSH (tests/hardware/switch) with the test
  module's PASSWORD; `switch_pair`: an Onyx one (leaf1, user admin) and a Cumulus NVUE one (leaf2,
  user cumulus). `switch_spec(sw, **kw)` turns one into a switch_roce `switches` entry that pins the
  fake's SSH host key (`ssh_host_key_fingerprints`), as switch_roce requires.
- `role_expression(tmp_path, role, content, **extra)` (a function): what a role's defaults and vars make of the Jinja
  expression `content` (a string), rendered by ansible-playbook on localhost with `extra` as -e vars.
- `sysfs`: the a100 profile's simulated sysfs tree with its RoCE NIC (mlx5_0 up, mlx5_1 down), built
  by tests/hardware's builders under tmp_path.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/hardware/switch"))
from fake_switch import FakeSwitch  # noqa: E402

HW = ROOT / "tests/hardware"


ROLE_PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  vars_files: [{role}/defaults/main.yml, {role}/vars/main.yml]
  tasks:
    - ansible.builtin.copy:
        dest: "{{{{ out }}}}"
        content: "{{{{ {content} }}}}"
        mode: "0600"
"""


def role_expression(tmp_path: Path, role: str, content: str, **extra) -> str:
    """What role's defaults and vars make of the Jinja expression `content`, rendered by ansible-playbook."""
    (tmp_path / "play.yml").write_text(ROLE_PLAY.format(role=ROOT / "roles" / role, content=content))
    out = tmp_path / "out"
    (tmp_path / "vars.json").write_text(json.dumps({"out": str(out), "ansible_python_interpreter": sys.executable,
                                                    **extra}))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,",
                           str(tmp_path / "play.yml"), "-e", f"@{tmp_path / 'vars.json'}"],
                          capture_output=True, text=True, check=False, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out.read_text()


@pytest.fixture
def sysfs(tmp_path):
    root = tmp_path / "sys"
    subprocess.run([sys.executable, str(HW / "sysfs/build_sysfs.py"), str(root), "--profile", "a100"], check=True)
    subprocess.run([sys.executable, str(HW / "nic/build_roce_sysfs.py"), str(root)], check=True)
    return root


@pytest.fixture
def run_module(capsys):
    def _run(module, check_mode=False, diff=True, **args):
        args = dict(args, _ansible_diff=diff)
        if check_mode:
            args["_ansible_check_mode"] = True
        with patch_module_args(args), pytest.raises(SystemExit) as exc:
            module.main()
        out = capsys.readouterr().out
        result = json.loads(out)
        result["_rc"] = exc.value.code
        result["_out"] = out
        return result
    return _run


@pytest.fixture
def fake_switch(request):
    """Factory: fake_switch(kind, host=..., **kw) starts a simulated switch, stopped after the test."""
    started = []

    def _start(kind, **kw):
        sw = FakeSwitch(kind, password=request.module.PASSWORD, **kw)
        sw.start()
        started.append(sw)
        return sw
    yield _start
    for sw in started:
        sw.stop()


@pytest.fixture
def switch_pair(fake_switch):
    return fake_switch("onyx", host="leaf1"), fake_switch("cumulus", host="leaf2", username="cumulus")


@pytest.fixture
def switch_spec(request):
    """Function making a switch_roce `switches` entry for a running fake switch."""
    def _spec(sw, **kw):
        dtype = "mellanox_mlnxos" if sw.state.kind == "onyx" else "cumulus_linux"
        return dict(dict(name=sw.state.host, host="127.0.0.1", port=sw.port, device_type=dtype,
                         username=sw.username, password=request.module.PASSWORD,
                         ssh_host_key_fingerprints=sw.fingerprints), **kw)
    return _spec


@pytest.fixture(autouse=True)
def _umask_restored():
    """A test that runs code setting the process umask (the receiver's serve() sets 027) must not
    hand it to the next test of the same worker: restore it after each test."""
    import os  # noqa: PLC0415

    old = os.umask(0o022)
    os.umask(old)
    yield
    os.umask(old)
