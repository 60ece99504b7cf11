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
    (dict(rdma_network_ecn_red_min_threshold=25), "rdma_network_ecn_red_min_threshold (is 25) <= "
                                                  "rdma_network_ecn_red_max_threshold (is 24)"),
    (dict(rdma_network_ecn_red_probability=101), "rdma_network_ecn_red_probability 0..100 (is 101)"),
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


GPUDIRECT_PLAY = """
- name: rdma_network's GPUDirect plan from the kernel's modules
  hosts: localhost
  gather_facts: false
  vars_files: [{root}/roles/rdma_network/defaults/main.yml, {root}/roles/rdma_network/vars/main.yml]
  tasks:
    - name: Plan
      ansible.builtin.copy:
        content: >-
          {{{{ {{'load': rdma_network_gpudirect_load | bool,
                'skipped': rdma_network_status_skipped}} | to_json }}}}
        dest: "{out}"
        mode: "0644"
"""


@pytest.mark.parametrize("virt, modules, load, reason", [
    ("kvm", ["nvidia"], True, None),                                 # bare metal / VM with the driver: modprobe
    ("kvm", ["nvidia", "nvidia_peermem"], True, None),
    ("kvm", [], False, "the NVIDIA driver is not loaded"),       # no driver (rdma.yml alone)
    ("podman", [], False, "kernel modules belong to the host kernel in a container"),  # the lab
    ("podman", ["nvidia", "nvidia_peermem"], False, None),           # the host loaded it
])
def test_gpudirect_load_or_skip(tmp_path, virt, modules, load, reason):
    (tmp_path / "play.yml").write_text(GPUDIRECT_PLAY.format(root=ROOT, out=tmp_path / "plan.json"))
    facts = dict(virtualization_type=virt, virtualization_role="guest",
                 virtualization_tech_guest=[virt], virtualization_tech_host=[])
    extra = dict(rdma_network_interfaces=["ens1f0"], ansible_facts=facts,
                 rdma_network_gpudirect_state=dict(modules_present=modules))
    (tmp_path / "vars.json").write_text(json.dumps(extra))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    result = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
         str(tmp_path / "play.yml"), "-e", "@" + str(tmp_path / "vars.json")],
        capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["load"] is load
    if reason is None:
        assert plan["skipped"] == []
    else:
        assert plan["skipped"][0]["items"] == ["nvidia_peermem"] and reason in plan["skipped"][0]["reason"]
