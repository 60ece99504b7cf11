"""The rdma_network role refuses bad input in its preflight, before any host or switch is touched.

Runs the role with ansible-playbook on localhost against a recording mlnx_qos stand-in and a
simulated switch: a refused run must leave both untouched.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = "role-s3cret"
PLAY = """
- name: rdma_network with bad input
  hosts: localhost
  gather_facts: false
  roles:
    - role: rdma_network
"""


def play(tmp_path, extra_vars):
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "vars.json").write_text(json.dumps(extra_vars))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
         str(tmp_path / "play.yml"), "-e", "@" + str(tmp_path / "vars.json")],
        capture_output=True, text=True, env=env, cwd=ROOT, check=False)


@pytest.mark.parametrize("bad, match", [
    (dict(rdma_network_priority=8), "priority must be 0..7 (is 8)"),
    (dict(rdma_network_priority=-1), "priority must be 0..7 (is -1)"),
    (dict(rdma_network_dscp=64), "DSCP 0..63 (is 64)"),
    (dict(rdma_network_switches="leaf"), "rdma_network_switches"),
    ("cisco", "device_type must be mellanox_mlnxos or cumulus_linux; not so on leaf9"),
    ("unpinned", "no SSH host key to check leaf9 against"),
])
def test_bad_input_refused_before_anything_is_touched(tmp_path, fake_switch, switch_spec, bad, match):
    marker = tmp_path / "mlnx_qos-ran"
    tool = tmp_path / "mlnx_qos"
    tool.write_text("#!/bin/sh\ntouch %s\nexit 1\n" % marker)
    tool.chmod(0o755)
    onyx = fake_switch("onyx", host="leaf1")
    extra = dict(rdma_network_interfaces=["ens1f0"], rdma_network_mlnx_qos_path=str(tool),
                 rdma_network_sysfs_root=str(tmp_path / "sys"), rdma_network_persist=False,
                 rdma_network_nccl_enabled=False, rdma_network_switches=[switch_spec(onyx)])
    if bad == "cisco":
        extra["rdma_network_switches"].append(switch_spec(onyx, name="leaf9", device_type="cisco_ios"))
    elif bad == "unpinned":
        extra["rdma_network_switches"].append(switch_spec(onyx, name="leaf9", ssh_host_key_fingerprints=[]))
    else:
        extra.update(bad)
    result = play(tmp_path, extra)
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert match in " ".join(out.split()), out
    assert not marker.exists()      # mlnx_qos never ran
    assert onyx.state.log == []     # the switch was never contacted
    assert onyx.state.connections == 0
    assert PASSWORD not in out
