"""The lab substrate: `labctl up` on a running lab creates nothing, and a failed bring-up
leaves nothing behind. The site rollout itself (first run, then a second run that changes
nothing on any host) is tested once, on the same lab, in test_kubernetes.py.

Needs root podman and the node image (`make image`). The lab is the session's shared one
(tests/integration/conftest.py).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from conftest import INV, LABCTL, group_hosts, sh, tail

FIXTURES = Path(__file__).resolve().parent / "lab_fixtures"


def leftovers(lab_name: str) -> list[str]:
    label = f"label=ai-l1-lab.name={lab_name}"
    found = []
    for kind in (["ps", "-a"], ["volume", "ls"], ["network", "ls"]):
        out = subprocess.run(["podman", *kind, "--filter", label, "--format", "{{.Names}}"
                              if kind[0] == "ps" else "{{.Name}}"],
                             capture_output=True, text=True, check=True).stdout.split()
        found += [f"{kind[0]}:{name}" for name in out]
    return found


@pytest.fixture(scope="module")
def lab(lab_nodes):
    """The shared lab (tests/integration/conftest.py), removed at the end of the session."""
    return lab_nodes


def test_failed_profile_hook_leaves_no_node_behind():
    inventory = FIXTURES / "failing_lab.yml"
    try:
        proc = sh(*LABCTL, "-i", inventory, "--profiles", FIXTURES / "profiles", "up",
                  timeout=600)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0, f"labctl up succeeded with a failing hook:\n{out}"
        assert "node bad1, step profile hook" in out, out
        assert "simulated hardware install failure on ai-l1-failtest-bad1" in out, out
        # ok1 came up fine in the same run: it is removed too.
        assert "ai-l1-failtest-ok1" in out, out
        assert leftovers("ai-l1-failtest") == []
    finally:
        sh(*LABCTL, "-i", inventory, "down")


def test_up_again_changes_nothing(lab):
    proc = sh(*LABCTL, "up")
    assert proc.returncode == 0, tail(proc)
    # Every node of the lab inventory, the storage node included.
    assert f"{len(group_hosts(INV))} nodes (0 created)" in proc.stdout, proc.stdout
