"""The rdma_network role's switch step through ansible-playbook, against two simulated switches.

Checks what only a real run shows: the password stays out of the output even at -vvv (no_log),
the second run is unchanged, and the diff the user sees names the repaired PFC priority.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests/hardware/switch"))
from fake_switch import FakeSwitch  # noqa: E402

PASSWORD = "play-s3cret"
PLAY = """
- name: Leaf switches through the role
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Switch step of rdma_network
      ansible.builtin.include_role:
        name: rdma_network
        tasks_from: switches
"""


@pytest.fixture
def switches():
    onyx = FakeSwitch("onyx", host="leaf1", password=PASSWORD)
    nvue = FakeSwitch("cumulus", host="leaf2", username="cumulus", password=PASSWORD)
    onyx.start()
    nvue.start()
    yield onyx, nvue
    onyx.stop()
    nvue.stop()


def play(tmp_path, switches, *extra):
    onyx, nvue = switches
    extra_vars = {"rdma_network_switches": [
        dict(name="leaf1", host="127.0.0.1", port=onyx.port, device_type="mellanox_mlnxos",
             username="admin", password=PASSWORD),
        dict(name="leaf2", host="127.0.0.1", port=nvue.port, device_type="cumulus_linux",
             username="cumulus", password=PASSWORD)]}
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "vars.json").write_text(json.dumps(extra_vars))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_NOCOLOR="1", ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
         str(tmp_path / "play.yml"), "-e", "@" + str(tmp_path / "vars.json"), *extra],
        capture_output=True, text=True, env=env, cwd=ROOT, check=False)


def test_role_switch_step(tmp_path, switches):
    onyx, nvue = switches
    first = play(tmp_path, switches, "-vvv", "--diff")
    out = first.stdout + first.stderr
    assert first.returncode == 0, out
    assert "changed=1" in out
    assert PASSWORD not in out
    assert "nv set qos roce mode lossless" in nvue.state.running
    assert "roce lossless" in onyx.state.running

    second = play(tmp_path, switches)
    assert second.returncode == 0 and "changed=0" in second.stdout, second.stdout

    onyx.state.running.remove("dcb priority-flow-control priority 3 enable")
    third = play(tmp_path, switches, "--diff")
    assert third.returncode == 0 and "changed=1" in third.stdout, third.stdout
    assert "+dcb priority-flow-control priority 3 enable" in third.stdout
    plus = [line for line in third.stdout.splitlines() if line.startswith("+") and not line.startswith("+++")]
    minus = [line for line in third.stdout.splitlines() if line.startswith("-") and not line.startswith("---")]
    assert plus == ["+dcb priority-flow-control priority 3 enable"] and minus == [], third.stdout
