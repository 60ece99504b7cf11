"""The rdma_network role's switch step through ansible-playbook, against two simulated switches.

Checks what only a real run shows: the password stays out of the output even at -vvv (no_log),
the second run is unchanged, and the diff the user sees names the repaired PFC priority.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

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


def play(tmp_path, switch_specs, *extra, **role_vars):
    extra_vars = dict({"rdma_network_switches": switch_specs}, **role_vars)
    (tmp_path / "play.yml").write_text(PLAY)
    (tmp_path / "vars.json").write_text(json.dumps(extra_vars))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORCE_COLOR="0",
               ANSIBLE_NOCOLOR="1", ANSIBLE_PYTHON_INTERPRETER=sys.executable)
    return subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
         str(tmp_path / "play.yml"), "-e", "@" + str(tmp_path / "vars.json"), *extra],
        capture_output=True, text=True, env=env, cwd=ROOT, check=False)


def test_role_switch_step(tmp_path, switch_pair, switch_spec, fake_switch):
    onyx, nvue = switch_pair
    old = fake_switch("onyx", host="leaf3", release="3.6.8190")  # no roce command: explicit lines
    switches = [switch_spec(onyx), switch_spec(nvue), switch_spec(old, interfaces=["1/1-1/4"])]
    first = play(tmp_path, switches, "-vvv", "--diff")
    out = first.stdout + first.stderr
    assert first.returncode == 0, out
    assert "changed=1" in out
    assert PASSWORD not in out
    assert "nv set qos roce mode lossless" in nvue.state.running
    assert "roce lossless" in onyx.state.running
    assert old.state.ports["1/4"]["trust"] == "L3" and "roce lossless" not in old.state.running

    second = play(tmp_path, switches)
    assert second.returncode == 0 and "changed=0" in second.stdout, second.stdout

    onyx.state.running.remove("dcb priority-flow-control priority 3 enable")
    old.state.onyx_config("no dcb priority-flow-control priority 3 enable")
    third = play(tmp_path, switches, "--diff")
    assert third.returncode == 0 and "changed=1" in third.stdout, third.stdout
    plus = [line for line in third.stdout.splitlines() if line.startswith("+") and not line.startswith("+++")]
    minus = [line for line in third.stdout.splitlines() if line.startswith("-") and not line.startswith("---")]
    # the same priority repaired on the new Onyx and on the old one; nothing else differs
    assert plus == ["+dcb priority-flow-control priority 3 enable"] * 2 and minus == [], third.stdout


def test_role_known_hosts_file_pins_the_switches(tmp_path, switch_pair, switch_spec, fake_switch):
    """rdma_network_switch_known_hosts_file reaches switch_roce: the switches in it are trusted,
    one that is not is refused before its login."""
    onyx, nvue = switch_pair
    stranger = fake_switch("onyx", host="leaf9")
    known = tmp_path / "leaf_known_hosts"
    known.write_text(onyx.known_hosts() + nvue.known_hosts())
    switches = [switch_spec(sw, ssh_host_key_fingerprints=[]) for sw in (onyx, nvue)]
    ok = play(tmp_path, switches, rdma_network_switch_known_hosts_file=str(known))
    assert ok.returncode == 0 and "changed=1" in ok.stdout, ok.stdout + ok.stderr

    refused = play(tmp_path, switches + [switch_spec(stranger, ssh_host_key_fingerprints=[])],
                   rdma_network_switch_known_hosts_file=str(known))
    out = refused.stdout + refused.stderr
    assert refused.returncode != 0, out
    assert "no trusted SSH host key for 127.0.0.1" in " ".join(out.split()), out
    assert stranger.state.connections == 0 and PASSWORD not in out
