"""lab/labctl.py's network cleanup: a network still held for a moment by a container being removed
is removed on a later try, and one that stays is named (it once stayed silently after a failed
`labctl up` under load, and the next test found it)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

LABCTL = Path(__file__).resolve().parents[2] / "lab" / "labctl.py"


@pytest.fixture(name="labctl")
def fixture_labctl(monkeypatch):
    spec = importlib.util.spec_from_file_location("labctl_network_under_test", LABCTL)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module.time, "sleep", lambda _s: None)
    return module


def fake_podman(busy_for: int):
    """`network rm` fails busy_for times ("network is being used"), then removes the network."""
    calls = []
    state = {"exists": True, "busy": busy_for}

    def podman(*args, check=True, timeout=None, input_text=None):  # noqa: ARG001
        calls.append(args)
        if args[:2] == ("network", "rm"):
            if state["busy"]:
                state["busy"] -= 1
                return subprocess.CompletedProcess(args, 2, "", "Error: network lab is being used")
            state["exists"] = False
            return subprocess.CompletedProcess(args, 0, "lab\n", "")
        if args[:2] == ("network", "exists"):
            return subprocess.CompletedProcess(args, 0 if state["exists"] else 1, "", "")
        raise AssertionError(args)

    return podman, calls


def test_a_network_held_for_a_moment_is_removed_on_a_later_try(labctl, monkeypatch, capsys):
    podman, calls = fake_podman(busy_for=3)
    monkeypatch.setattr(labctl, "podman", podman)
    assert labctl.remove_network("lab") is True
    assert [c[:2] for c in calls].count(("network", "rm")) == 4
    assert "not removed" not in capsys.readouterr().err


def test_a_network_that_stays_is_named_with_podmans_message(labctl, monkeypatch, capsys):
    podman, calls = fake_podman(busy_for=100)
    monkeypatch.setattr(labctl, "podman", podman)
    assert labctl.remove_network("lab", tries=3) is False
    assert [c[:2] for c in calls].count(("network", "rm")) == 3
    captured = capsys.readouterr()
    assert "network lab not removed: Error: network lab is being used" in captured.out + captured.err
