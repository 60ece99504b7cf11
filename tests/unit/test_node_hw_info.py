"""ai_platform.l1.node_hw_info through Ansible's module interface, on fake sysfs trees.

The trees come from tests/hardware/sysfs/build_sysfs.py, the builder the lab profiles use,
so these tests also pin what the lab nodes will report.
"""

import json
import sys
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collections"))
sys.path.insert(0, str(ROOT / "tests/hardware/sysfs"))

import build_sysfs  # noqa: E402
from ansible_collections.ai_platform.l1.plugins.modules import node_hw_info  # noqa: E402


def run(capsys, **args):
    with patch_module_args(args), pytest.raises(SystemExit):
        node_hw_info.main()
    return json.loads(capsys.readouterr().out)


def tree(tmp_path, profile):
    root = tmp_path / "sys"
    build_sysfs.build(str(root), profile)
    return root


EXPECTED = {
    "a100": {
        "rdma": [
            {"ib_device": "mlx5_0", "netdev": "ens1f0", "speed_mbps": 100000, "operstate": "up"},
            {"ib_device": "mlx5_1", "netdev": "ens1f1", "speed_mbps": -1, "operstate": "down"},
        ],
        "nics": [
            {"name": "eno1", "speed_mbps": 1000, "operstate": "up"},
            {"name": "ens1f0", "speed_mbps": 100000, "operstate": "up"},
            {"name": "ens1f1", "speed_mbps": -1, "operstate": "down"},
        ],
        "network": {"interface": "mlx5_0", "netdev": "ens1f0", "speed_mbps": 100000},
        "nvme": {"devices": [{"name": "nvme0n1", "size_bytes": 1920383410176},
                             {"name": "nvme1n1", "size_bytes": 1920383410176}],
                 "total_bytes": 3840766820352},
    },
    "ascend_910b": {
        "rdma": [],
        "nics": [
            {"name": "enp125s0f0", "speed_mbps": 25000, "operstate": "up"},
            {"name": "enp189s0f0", "speed_mbps": 100000, "operstate": "up"},
        ],
        "network": {"interface": None, "netdev": "enp189s0f0", "speed_mbps": 100000},
        "nvme": {"devices": [{"name": "nvme0n1", "size_bytes": 2000398934016}], "total_bytes": 2000398934016},
    },
    "control_plane": {
        "rdma": [],
        "nics": [{"name": "eno1", "speed_mbps": 25000, "operstate": "up"}],
        "network": {"interface": None, "netdev": "eno1", "speed_mbps": 25000},
        "nvme": {"devices": [], "total_bytes": 0},
    },
}


@pytest.mark.parametrize("profile", sorted(EXPECTED))
def test_profile_facts(tmp_path, capsys, profile):
    result = run(capsys, sysfs_root=str(tree(tmp_path, profile)))
    assert result["changed"] is False
    assert result["hw_info"] == EXPECTED[profile]


def test_check_mode_reads_the_same(tmp_path, capsys):
    root = str(tree(tmp_path, "a100"))
    assert run(capsys, sysfs_root=root, _ansible_check_mode=True)["hw_info"] == run(capsys, sysfs_root=root)["hw_info"]


def test_rdma_nic_beats_a_faster_plain_nic(tmp_path, capsys):
    """The labels describe the RDMA fabric: a faster non-RDMA port must not win."""
    root = tree(tmp_path, "a100")
    (root / "class/net/eno1/speed").write_text("200000\n")
    assert run(capsys, sysfs_root=str(root))["hw_info"]["network"] == {
        "interface": "mlx5_0", "netdev": "ens1f0", "speed_mbps": 100000}


def test_fastest_rdma_nic_wins_and_ties_are_stable(tmp_path, capsys):
    root = tree(tmp_path, "a100")
    (root / "class/net/ens1f1/speed").write_text("100000\n")
    assert run(capsys, sysfs_root=str(root))["hw_info"]["network"]["interface"] == "mlx5_0"
    (root / "class/net/ens1f1/speed").write_text("200000\n")
    assert run(capsys, sysfs_root=str(root))["hw_info"]["network"]["interface"] == "mlx5_1"


def test_nvme_multipath_paths_hidden_and_odd_entries_are_not_counted(tmp_path, capsys):
    root = tree(tmp_path, "ascend_910b")
    for name, size in (("nvme0c0n1", "3907029168"), ("nvme1n1", "100"), ("nvme2n1", "garbage")):
        (root / "block" / name).mkdir()
        (root / "block" / name / "size").write_text(size + "\n")
    (root / "block/nvme1n1/hidden").write_text("1\n")
    nvme = run(capsys, sysfs_root=str(root))["hw_info"]["nvme"]
    assert nvme == {"devices": [{"name": "nvme0n1", "size_bytes": 2000398934016}], "total_bytes": 2000398934016}


def test_nothing_at_all_gives_empty_facts(tmp_path, capsys):
    (tmp_path / "class").mkdir()
    assert run(capsys, sysfs_root=str(tmp_path))["hw_info"] == {
        "rdma": [], "nics": [], "network": {"interface": None, "netdev": None, "speed_mbps": 0},
        "nvme": {"devices": [], "total_bytes": 0}}


def test_not_sysfs_fails_with_the_path(tmp_path, capsys):
    result = run(capsys, sysfs_root=str(tmp_path / "nope"))
    assert result["failed"] is True
    assert result["msg"] == f"{tmp_path / 'nope'} does not look like sysfs: it has neither class/ nor block/"
