"""lab/labctl.py's CPU group: the lab's nodes weighted together against the host's other work
(`lab_cpu_shares`), so a test stage beside the lab cannot starve its etcd."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

LABCTL = Path(__file__).resolve().parents[2] / "lab" / "labctl.py"


@pytest.fixture(name="labctl")
def fixture_labctl(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("labctl_under_test", LABCTL)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "CGROUP_ROOT", tmp_path / "cgroup")
    return module


def inventory(tmp_path, extra: str = "") -> Path:
    path = tmp_path / "hosts.yml"
    path.write_text("all:\n  vars:\n    lab_name: t\n" + extra
                    + "  hosts:\n    n1: {ansible_host: 10.0.0.2, lab_hardware_profile: control_plane}\n")
    return path


def test_the_inventory_gives_the_weight(labctl, tmp_path):
    assert labctl.lab_from_inventory(inventory(tmp_path)).cpu_shares is None
    assert labctl.lab_from_inventory(inventory(tmp_path, "    lab_cpu_shares: 8192\n")).cpu_shares == 8192


@pytest.mark.parametrize("value", ["1", "262145", "'8192'", "true", "1.5"])
def test_a_weight_out_of_range_or_not_a_number_is_refused(labctl, tmp_path, value):
    with pytest.raises(labctl.LabError, match="lab_cpu_shares must be a whole number from 2 to 262144"):
        labctl.lab_from_inventory(inventory(tmp_path, f"    lab_cpu_shares: {value}\n"))


def lab(labctl, shares):
    return labctl.Lab("t", "t-lab", None, [], cpu_shares=shares)


def test_cgroup_v1_gets_cpu_shares(labctl, tmp_path):
    parent = labctl.cpu_group(lab(labctl, 8192), {"cgroupManager": "cgroupfs", "cgroupVersion": "v1"})
    assert parent == "/ai-l1-lab-t"
    assert (tmp_path / "cgroup" / "cpu" / "ai-l1-lab-t" / "cpu.shares").read_text() == "8192\n"


@pytest.mark.parametrize(("shares", "weight"), [(2, 1), (1024, 39), (8192, 313), (262144, 10000)])
def test_cgroup_v2_gets_the_equivalent_cpu_weight(labctl, tmp_path, shares, weight):
    parent = labctl.cpu_group(lab(labctl, shares), {"cgroupManager": "cgroupfs", "cgroupVersion": "v2"})
    assert parent == "/ai-l1-lab-t"
    assert (tmp_path / "cgroup" / "ai-l1-lab-t" / "cpu.weight").read_text() == f"{weight}\n"


def test_no_weight_or_systemds_manager_keeps_podmans_default(labctl, tmp_path, capsys):
    assert labctl.cpu_group(lab(labctl, None), {"cgroupManager": "cgroupfs", "cgroupVersion": "v1"}) is None
    assert labctl.cpu_group(lab(labctl, 8192), {"cgroupManager": "systemd", "cgroupVersion": "v2"}) is None
    assert "not applied: podman's cgroup manager is systemd" in capsys.readouterr().out
    assert not (tmp_path / "cgroup").exists()


def test_new_nodes_start_in_the_group(labctl, monkeypatch):
    calls = []
    monkeypatch.setattr(labctl, "podman", lambda *args, **_kw: calls.append(args)
                        or subprocess.CompletedProcess(args, 0, "", ""))
    node = labctl.Node("n1", "t-n1", "control_plane", ip="10.0.0.2")
    grouped = lab(labctl, 8192)
    grouped.cgroup_parent = "/ai-l1-lab-t"
    labctl.create_node(node, grouped, "img")
    labctl.create_node(node, lab(labctl, None), "img")
    with_group, without = (list(c) for c in calls if c[0] == "run")
    assert with_group[with_group.index("--cgroup-parent") + 1] == "/ai-l1-lab-t"
    assert "--cgroup-parent" not in without
