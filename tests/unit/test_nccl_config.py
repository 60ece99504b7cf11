"""ai_platform.l1.nccl_config and roce_sysfs on the a100 profile's fake sysfs tree (with its RoCE parts)."""

import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.ai_platform.l1.plugins.module_utils import rdma_sysfs
from ansible_collections.ai_platform.l1.plugins.modules import nccl_config, roce_sysfs

ROOT = Path(__file__).resolve().parents[2]
HW = ROOT / "tests/hardware"


@pytest.fixture
def run(run_module):
    return run_module


def test_nccl_conf_from_the_host(run, sysfs, tmp_path):
    conf = tmp_path / "nccl.conf"
    check = run(nccl_config, check_mode=True, path=str(conf), sysfs_root=str(sysfs))
    assert check["changed"] and not conf.exists()
    first = run(nccl_config, path=str(conf), sysfs_root=str(sysfs))
    assert first["_rc"] == 0, first
    assert first["changed"]
    lines = conf.read_text().splitlines()
    assert lines[0].startswith("#")
    values = dict(line.split("=", 1) for line in lines[1:])
    assert values == {
        "NCCL_IB_HCA": "mlx5_0",            # mlx5_1's port is down
        "NCCL_IB_GID_INDEX": "3",           # the IPv4 RoCE v2 entry, as in the seed
        "NCCL_SOCKET_IFNAME": "ens1f0",
        "NCCL_IB_DISABLE": "0", "NCCL_IB_TIMEOUT": "22", "NCCL_IB_RETRY_CNT": "7", "NCCL_IB_SL": "3",
        "NCCL_IB_QPS_PER_CONNECTION": "8", "NCCL_NET_GDR_LEVEL": "3", "NCCL_NET_GDR_READ": "1",
        "NCCL_P2P_DISABLE": "0",
    }
    assert "NCCL_DEBUG" not in conf.read_text().replace("# ", "").split("\n", 1)[1]
    assert oct(conf.stat().st_mode & 0o777) == "0o644"
    second = run(nccl_config, path=str(conf), sysfs_root=str(sysfs))
    assert not second["changed"] and second["diff"]["before"] == second["diff"]["after"]


def test_overrides_and_dropping_a_key(run, sysfs, tmp_path):
    conf = tmp_path / "nccl.conf"
    result = run(nccl_config, path=str(conf), sysfs_root=str(sysfs), hca=["mlx5_0", "mlx5_1"], gid_index=1,
                 socket_ifname="eno1", settings={"NCCL_IB_TIMEOUT": 20, "NCCL_P2P_DISABLE": None, "NCCL_IB_TC": 106})
    assert result["_rc"] == 0, result
    text = conf.read_text()
    assert "NCCL_IB_HCA=mlx5_0,mlx5_1\n" in text and "NCCL_IB_GID_INDEX=1\n" in text
    assert "NCCL_SOCKET_IFNAME=eno1\n" in text and "NCCL_IB_TIMEOUT=20\n" in text and "NCCL_IB_TC=106\n" in text
    assert "NCCL_P2P_DISABLE" not in text


@pytest.mark.parametrize("args, match", [
    (dict(settings={"NCCL_DEBUG": "INFO"}), "debug variable"),
    (dict(settings={"NCCL_DEBUG_SUBSYS": "ALL"}), "debug variable"),
    (dict(settings={"CUDA_VISIBLE_DEVICES": "0"}), "not an NCCL_"),
    (dict(hca=["mlx5_9"]), r"hca \['mlx5_9'\] not found"),
])
def test_refused(run, sysfs, tmp_path, args, match):
    conf = tmp_path / "nccl.conf"
    result = run(nccl_config, path=str(conf), sysfs_root=str(sysfs), **args)
    assert result["failed"] and __import__("re").search(match, result["msg"]), result
    assert not conf.exists()


def test_no_roce_v2_gid(run, tmp_path):
    root = tmp_path / "sys"
    subprocess.run([sys.executable, str(HW / "sysfs/build_sysfs.py"), str(root), "--profile", "a100"], check=True)
    subprocess.run([sys.executable, str(HW / "nic/build_roce_sysfs.py"), str(root),
                    "--ports", "mlx5_0=ens1f0:up:,mlx5_1=ens1f1:down:"], check=True)
    result = run(nccl_config, path=str(tmp_path / "nccl.conf"), sysfs_root=str(root))
    assert result["failed"] and "no RoCE v2 GID with an IPv4 address" in result["msg"]


def test_roce_sysfs_ecn_tos_tc(run, sysfs):
    args = dict(interface="ens1f0", ecn_priorities=[3], roce_tos=106, traffic_class=106, sysfs_root=str(sysfs))
    check = run(roce_sysfs, check_mode=True, **args)
    assert check["changed"] and len(check["changes"]) == 4
    assert (sysfs / "class/net/ens1f0/ecn/roce_np/enable/3").read_text().strip() == "0"
    first = run(roce_sysfs, **args)
    assert first["_rc"] == 0 and first["changed"] and first["ib_device"] == "mlx5_0", first
    for side in ("roce_np", "roce_rp"):
        assert (sysfs / f"class/net/ens1f0/ecn/{side}/enable/3").read_text().strip() == "1"
        assert (sysfs / f"class/net/ens1f0/ecn/{side}/enable/4").read_text().strip() == "0"
    assert (sysfs / "kernel/config/rdma_cm/mlx5_0/ports/1/default_roce_tos").read_text().strip() == "106"
    assert (sysfs / "class/infiniband/mlx5_0/tc/1/traffic_class").read_text().strip() == "106"
    assert not run(roce_sysfs, **args)["changed"]
    # drift: ECN of priority 3 turned off on the reaction point only
    (sysfs / "class/net/ens1f0/ecn/roce_rp/enable/3").write_text("0\n")
    third = run(roce_sysfs, **args)
    assert third["changed"] and len(third["changes"]) == 1 and "roce_rp/enable/3: 0 -> 1" in third["changes"][0]


def test_roce_sysfs_reads_mlx5_traffic_class_format(run, sysfs):
    """mlx5 reads tc/1/traffic_class back as `Global tclass=N`; that is N, not a difference."""
    (sysfs / "class/infiniband/mlx5_0/tc/1/traffic_class").write_text("Global tclass=106\n")
    result = run(roce_sysfs, interface="ens1f0", traffic_class=106, sysfs_root=str(sysfs))
    assert result["_rc"] == 0 and not result["changed"], result
    (sysfs / "class/infiniband/mlx5_0/tc/1/traffic_class").write_text("Global tclass=104\n")
    result = run(roce_sysfs, interface="ens1f0", traffic_class=106, sysfs_root=str(sysfs))
    assert result["changes"] == ["%s: 104 -> 106" % (sysfs / "class/infiniband/mlx5_0/tc/1/traffic_class")]


@pytest.mark.parametrize("args, match", [
    (dict(interface="eno1"), "not the interface of any RDMA device"),
    (dict(interface="ens1f0", ecn_priorities=[8]), r"\[8\] out of 0..7"),
    (dict(interface="ens1f0", roce_tos=256), "roce_tos must be 0..255"),
    (dict(interface="ens1f0", ecn_priorities=[3, -1]), r"\[-1\] out of 0..7"),
])
def test_roce_sysfs_refused(run, sysfs, args, match):
    def tree():
        return {p: p.read_text() for p in sysfs.rglob("*") if p.is_file()}
    before = tree()
    result = run(roce_sysfs, sysfs_root=str(sysfs), **dict(args, ecn_priorities=args.get("ecn_priorities", [3]),
                                                           roce_tos=args.get("roce_tos", 106)))
    assert result["failed"] and __import__("re").search(match, result["msg"]), result
    assert tree() == before  # refused before anything was written


def left_out(root):
    """The warnings of discovery on a tree (read from build: in-process module runs share theirs)."""
    warnings = []
    params = dict(hca=None, gid_index=None, socket_ifname=None, settings={}, sysfs_root=str(root), path="x")
    nccl_config.build(params, nccl_config.discover(str(root)), warnings)
    return warnings


def two_port_tree(tmp_path, ports, infiniband=()):
    """The a100 tree with the given RoCE ports; the devices in `infiniband` turned into InfiniBand ports."""
    root = tmp_path / "sys"
    subprocess.run([sys.executable, str(HW / "sysfs/build_sysfs.py"), str(root), "--profile", "a100"], check=True)
    subprocess.run([sys.executable, str(HW / "nic/build_roce_sysfs.py"), str(root), "--ports", ports], check=True)
    for ib in infiniband:
        port = root / "class/infiniband" / ib / "ports/1"
        (port / "link_layer").write_text("InfiniBand\n")
        # An IB port's GID table: the subnet prefix and port GUID at 0, no RoCE entries.
        for n in range(16):
            (port / "gids" / str(n)).write_text(
                ("fe80:0000:0000:0000:b859:9f03:00d4:%04x\n" % n) if n == 0 else "0000:" * 7 + "0000\n")
            (port / "gid_attrs/types" / str(n)).write_text("IB/RoCE v1\n" if n == 0 else "\n")
    return root


def nccl_values(conf):
    return dict(line.split("=", 1) for line in conf.read_text().splitlines()[1:])


@pytest.mark.parametrize("infiniband, roce", [("mlx5_0", "mlx5_1"), ("mlx5_1", "mlx5_0")])
def test_nccl_hca_takes_the_roce_ports_of_a_mixed_host(run, tmp_path, infiniband, roce):
    """One InfiniBand and one RoCE port: NCCL_IB_GID_INDEX=3 exists on the RoCE port only."""
    root = two_port_tree(tmp_path, "mlx5_0=ens1f0:up:10.89.100.21,mlx5_1=ens1f1:up:10.89.101.21", [infiniband])
    conf = tmp_path / "nccl.conf"
    result = run(nccl_config, path=str(conf), sysfs_root=str(root))
    assert result["_rc"] == 0, result
    values = nccl_values(conf)
    ifname = {"mlx5_0": "ens1f0", "mlx5_1": "ens1f1"}[roce]
    assert (values["NCCL_IB_HCA"], values["NCCL_IB_GID_INDEX"], values["NCCL_SOCKET_IFNAME"]) == (roce, "3", ifname)
    assert left_out(root) == [
        "NCCL_IB_HCA leaves out the active port of %s: its link layer is InfiniBand, not Ethernet" % infiniband]


def test_nccl_hca_leaves_out_roce_ports_without_the_gid(run, tmp_path):
    """A RoCE port without an IPv4 GID has no entry at the chosen index: it is left out."""
    root = two_port_tree(tmp_path, "mlx5_0=ens1f0:up:10.89.100.21,mlx5_1=ens1f1:up:")
    conf = tmp_path / "nccl.conf"
    result = run(nccl_config, path=str(conf), sysfs_root=str(root))
    assert result["_rc"] == 0, result
    assert nccl_values(conf)["NCCL_IB_HCA"] == "mlx5_0" and nccl_values(conf)["NCCL_IB_GID_INDEX"] == "3"
    assert left_out(root) == [
        "NCCL_IB_HCA leaves out the active port of mlx5_1: it has no RoCE v2 GID with an IPv4 address"]


def test_nccl_hca_of_an_infiniband_host_has_no_gid_index(run, tmp_path):
    root = two_port_tree(tmp_path, "mlx5_0=ens1f0:up:10.89.100.21,mlx5_1=ens1f1:up:10.89.101.21",
                         ["mlx5_0", "mlx5_1"])
    conf = tmp_path / "nccl.conf"
    result = run(nccl_config, path=str(conf), sysfs_root=str(root))
    assert result["_rc"] == 0 and left_out(root) == [], result
    values = nccl_values(conf)
    assert values["NCCL_IB_HCA"] == "mlx5_0,mlx5_1" and "NCCL_IB_GID_INDEX" not in values


@pytest.mark.parametrize("ports, infiniband, match", [
    ("mlx5_0=ens1f0:up:10.89.100.21,mlx5_1=ens1f1:up:10.89.101.21", ["mlx5_1"],
     r"mixes link layers \(Ethernet, InfiniBand\)"),
    ("mlx5_0=ens1f0:up:10.89.100.21,mlx5_1=ens1f1:up:", [],
     r"hca \['mlx5_1'\]: no IPv4 RoCE v2 GID at index 3, the one of mlx5_0"),
])
def test_nccl_given_hca_must_fit_one_gid_index(run, tmp_path, ports, infiniband, match):
    root = two_port_tree(tmp_path, ports, infiniband)
    conf = tmp_path / "nccl.conf"
    result = run(nccl_config, path=str(conf), sysfs_root=str(root), hca=["mlx5_0", "mlx5_1"])
    assert result["failed"] and __import__("re").search(match, result["msg"]), result
    assert not conf.exists()
    # with the GID index given, the choice is the user's
    assert run(nccl_config, path=str(conf), sysfs_root=str(root), hca=["mlx5_0", "mlx5_1"], gid_index=3)["_rc"] == 0


def test_non_utf8_sysfs_values_are_refused(run, sysfs, tmp_path):
    """Bytes that are not text in an attribute: a refusal naming the file, nothing written."""
    tclass = sysfs / "class/infiniband/mlx5_0/tc/1/traffic_class"
    tclass.write_bytes(b"Global tclass=\xff\xfe\n")
    with pytest.raises(ValueError, match="traffic_class does not hold text"):
        rdma_sysfs.read_setting(str(tclass))
    result = run(roce_sysfs, interface="ens1f0", ecn_priorities=[3], traffic_class=106, sysfs_root=str(sysfs))
    assert result["failed"] and "cannot read the current settings of ens1f0" in result["msg"], result
    assert "traffic_class does not hold text" in result["msg"]
    assert (sysfs / "class/net/ens1f0/ecn/roce_np/enable/3").read_text().strip() == "0"  # nothing written
    (sysfs / "class/infiniband/mlx5_0/ports/1/state").write_bytes(b"4: ACT\xc3IVE\n")
    result = run(nccl_config, path=str(tmp_path / "nccl.conf"), sysfs_root=str(sysfs))
    assert result["failed"] and "ports/1/state does not hold text" in result["msg"], result
