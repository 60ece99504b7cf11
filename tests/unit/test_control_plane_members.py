"""roles/k8s_control_plane's load balancer and VRRP configuration name every control plane, also in a
run limited to some of them (--limit, or a run after one was lost): a run on cp1 alone once rewrote
haproxy's backends to cp1 only and left keepalived without peers (found by test_dead_host.py). The
templates render for real through ansible-playbook, on cp1 of a three-member inventory whose other
members are outside the play."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROLE = REPO / "roles" / "k8s_control_plane"
INVENTORY = """
all:
  vars: {ansible_connection: local, ansible_python_interpreter: "%s"}
  hosts:
    cp1: {k8s_node_address: 10.0.0.11}
    cp2: {k8s_node_address: 10.0.0.12}
    cp3: {}
""" % sys.executable
PLAY = """
- hosts: "{{{{ run_on }}}}"
  gather_facts: false
  vars_files: [{role}/defaults/main.yml, {role}/vars/main.yml]
  tasks:
    - ansible.builtin.set_fact:
        k8s_control_plane__address: "{{{{ k8s_node_address }}}}"
    - ansible.builtin.copy:
        dest: "{{{{ out }}}}/{{{{ inventory_hostname }}}}.json"
        content: >-
          {{{{ {{'haproxy': lookup('ansible.builtin.template', '{role}/templates/haproxy.cfg.j2'),
               'keepalived': lookup('ansible.builtin.template', '{role}/templates/keepalived.conf.j2'),
               'unknown': k8s_control_plane__unknown_members}} | to_json }}}}
        mode: "0600"
      delegate_to: localhost
"""


def render(tmp_path: Path, run_on: str, cp3_address: str | None) -> dict:
    inventory = INVENTORY.replace("cp3: {}", f"cp3: {{k8s_node_address: {cp3_address}}}" if cp3_address else "cp3: {}")
    (tmp_path / "hosts.yml").write_text(inventory)
    (tmp_path / "play.yml").write_text(PLAY.format(role=ROLE))
    (tmp_path / "vars.json").write_text(json.dumps({
        "out": str(tmp_path), "run_on": run_on, "k8s_control_plane_members": ["cp1", "cp2", "cp3"],
        "k8s_control_plane_node_address": "10.0.0.11", "k8s_control_plane_vip": "10.0.0.10",
        "k8s_control_plane_vip_interface": "eth0", "k8s_control_plane_vrrp_password": "s3cret-password",
        "k8s_control_plane_vrrp_router_id": 51}))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(tmp_path / "hosts.yml"),
                           str(tmp_path / "play.yml"), "-e", f"@{tmp_path / 'vars.json'}"],
                          capture_output=True, text=True, check=False, cwd=REPO,
                          # a fact cache of its own: the repository's may hold a lab's cp3
                          env={**os.environ, "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(tmp_path / "facts")})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((tmp_path / "cp1.json").read_text())


@pytest.mark.parametrize("run_on", ["cp1", "cp1,cp2,cp3"])
def test_every_member_is_a_backend_and_a_peer_whoever_is_in_the_run(tmp_path, run_on):
    got = render(tmp_path, run_on, "10.0.0.13")
    assert got["unknown"] == []
    for host, address in (("cp1", "10.0.0.11"), ("cp2", "10.0.0.12"), ("cp3", "10.0.0.13")):
        assert f"server {host} {address}:6443" in got["haproxy"]
    peers = got["keepalived"].split("unicast_peer {", 1)[1].split("}", 1)[0].split()
    assert peers == ["10.0.0.12", "10.0.0.13"]
    assert "priority 150" in got["keepalived"]  # cp1: first in the members, whoever else runs


def test_a_member_outside_the_run_without_an_address_is_named(tmp_path):
    got = render(tmp_path, "cp1", None)
    assert got["unknown"] == ["cp3"]
