"""The lab substrate: `labctl up` on a running lab creates nothing, and a failed bring-up
leaves nothing behind. The site rollout itself (first run, then a second run that changes
nothing on any host) is tested once, on the same lab, in test_kubernetes.py.

Needs root podman and the node image (`make image`). The lab is removed at the end
unless AI_L1_KEEP_LAB=1.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
LABCTL = [sys.executable, str(REPO / "lab" / "labctl.py")]
LAB_INVENTORY = REPO / "inventories" / "lab"
FIXTURES = Path(__file__).resolve().parent / "lab_fixtures"
ENV = {
    **os.environ,
    "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
    "ANSIBLE_FORCE_COLOR": "0",
    "ANSIBLE_NOCOLOR": "1",
    "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
}
RECAP = re.compile(
    r"^(?P<host>\S+)\s*:\s*ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+"
    r"unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)",
    re.MULTILINE,
)


def sh(*cmd: str | Path, timeout: int = 3600) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], cwd=REPO, env=ENV, capture_output=True,
                          text=True, timeout=timeout, check=False)


def tail(proc: subprocess.CompletedProcess, lines: int = 60) -> str:
    return "\n".join((proc.stdout + proc.stderr).splitlines()[-lines:])


def lab_hosts() -> set[str]:
    hosts: set[str] = set()

    def walk(group: dict) -> None:
        hosts.update((group.get("hosts") or {}).keys())
        for child in (group.get("children") or {}).values():
            walk(child or {})

    walk(yaml.safe_load((LAB_INVENTORY / "hosts.yml").read_text())["all"])
    return hosts


def recap(output: str) -> dict[str, dict[str, int]]:
    return {m["host"]: {k: int(m[k]) for k in ("ok", "changed", "unreachable", "failed")}
            for m in RECAP.finditer(output)}


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
    assert f"{len(lab_hosts())} nodes (0 created)" in proc.stdout, proc.stdout
