"""The day-2 playbooks refuse bad requests on the controller before any node is contacted.

The inventory's hosts are on TEST-NET-1 (192.0.2.0/24, never routed): a run that tried to
reach one would report it unreachable, so every case also asserts that nothing was.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
INVENTORY = """
all:
  vars:
    ansible_connection: ssh
    ansible_ssh_common_args: -o ConnectTimeout=2
  children:
    k8s_control_plane:
      hosts:
        cp1: {ansible_host: 192.0.2.11}
        cp2: {ansible_host: 192.0.2.12}
        cp3: {ansible_host: 192.0.2.13}
    k8s_worker:
      children:
        gpu_nvidia:
          hosts:
            gpu1: {ansible_host: 192.0.2.21}
"""


@pytest.fixture(scope="module")
def inventory(tmp_path_factory):
    path = tmp_path_factory.mktemp("day2inv") / "hosts.yml"
    path.write_text(INVENTORY)
    return path


def play(inventory: Path, playbook: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(["ansible-playbook", "-i", str(inventory), str(REPO / "playbooks" / "day2" / playbook),
                           *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize(("playbook", "args", "message"), [
    ("drain.yml", [], "acts on named nodes only"),
    ("cordon.yml", [], "acts on named nodes only"),
    ("isolate.yml", ["--limit", "cp1"], "cp1 not in k8s_worker"),
    ("drain.yml", ["--limit", "gpu1", "-e", "day2_drain_timeout=soon"], "must be positive integers"),
    ("firmware_update.yml", ["-e", "day2_max_unavailable=0"], "must be positive integers"),
    ("remove_node.yml", ["--limit", "cp1,cp2", "-e", "day2_api_host=cp3"], "fewer than the quorum of 2"),
    ("isolate.yml", ["--limit", "gpu1", "-e", "day2_api_host=cp1", "-e", "day2_fault='xid 79!'"],
     "must name the fault as a Kubernetes label value"),
    ("add_node.yml", ["-e", '{"day2_new_nodes": ["cp2"]}'], "not workers: cp2"),
    ("mig_reconfigure.yml", ["--limit", "gpu1", "-e", "day2_api_host=cp1"], "Name the MIG layout with day2_mig_config"),
    ("mig_reconfigure.yml", ["--limit", "cp1", "-e", "day2_mig_config=all-balanced"], "cp1 not in gpu_nvidia"),
])
def test_refused_before_any_node_is_contacted(inventory, playbook, args, message):
    proc = play(inventory, playbook, *args)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    assert message in " ".join(out.split()), out[-3000:]
    assert "UNREACHABLE" not in out, out[-3000:]
