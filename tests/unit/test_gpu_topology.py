"""`nvidia-smi topo -m` parsing (module_utils/gpu_topology) and what nccl_config derives from it.

Table-tests the parser on every capture in tests/hardware/nvml/topology (reconstructed in the real
format, see its README) and checks NCCL_IB_HCA / NCCL_NET_GDR_LEVEL against each machine's affinity.
"""

from pathlib import Path

import pytest
from ansible_collections.ai_platform.l1.plugins.module_utils import gpu_topology
from ansible_collections.ai_platform.l1.plugins.modules import nccl_config

ROOT = Path(__file__).resolve().parents[2]
HW = ROOT / "tests/hardware"
CAPTURES = HW / "nvml/topology"


def capture(name):
    return (CAPTURES / name).read_text()


def test_every_capture_is_tested():
    assert sorted(p.name for p in CAPTURES.glob("*.txt")) == sorted(EXPECTED)


EXPECTED = {
    "dgx-a100-8gpu-10nic.txt": dict(
        gpus=["GPU%d" % i for i in range(8)], nics=["mlx5_%d" % i for i in range(10)],
        cells={("GPU0", "GPU7"): "NV12", ("GPU0", "mlx5_0"): "PXB", ("GPU0", "mlx5_2"): "SYS",
               ("GPU7", "mlx5_9"): "PXB", ("mlx5_4", "mlx5_5"): "PIX", ("mlx5_0", "GPU1"): "PXB"},
        affinity={"GPU0": {"CPU Affinity": "48-63,176-191", "NUMA Affinity": "3", "GPU NUMA ID": "N/A"},
                  "GPU6": {"CPU Affinity": "80-95,208-223", "NUMA Affinity": "5", "GPU NUMA ID": "N/A"}},
        nearest={"mlx5_0": ("PXB", ["GPU0", "GPU1"]), "mlx5_3": ("PXB", ["GPU2", "GPU3"]),
                 "mlx5_4": ("SYS", ["GPU%d" % i for i in range(8)]), "mlx5_9": ("PXB", ["GPU6", "GPU7"])},
        hca="mlx5_0,mlx5_1,mlx5_2,mlx5_3,mlx5_6,mlx5_7,mlx5_8,mlx5_9",
        warnings=["NCCL_IB_HCA leaves out mlx5_4, mlx5_5: across the CPU sockets from every GPU (SYS)"]),
    "2socket-4x-a100-pcie-far-nic.txt": dict(
        gpus=["GPU0", "GPU1", "GPU2", "GPU3"], nics=["mlx5_0", "mlx5_1"],
        cells={("GPU0", "GPU1"): "NV12", ("GPU0", "GPU2"): "NODE", ("GPU2", "mlx5_0"): "NODE",
               ("GPU1", "mlx5_0"): "PIX", ("GPU3", "mlx5_1"): "SYS"},
        affinity={"GPU3": {"CPU Affinity": "0-31,64-95", "NUMA Affinity": "0"}},
        nearest={"mlx5_0": ("PIX", ["GPU0", "GPU1"]), "mlx5_1": ("SYS", ["GPU0", "GPU1", "GPU2", "GPU3"])},
        hca="mlx5_0",
        warnings=["NCCL_IB_HCA leaves out mlx5_1: across the CPU sockets from every GPU (SYS)"]),
    "seed-4gpu-2nic.txt": dict(
        gpus=["GPU0", "GPU1", "GPU2", "GPU3"], nics=["mlx5_0", "mlx5_1"],
        # the seed's own GPU matrix (4.4.2)
        cells={("GPU0", "GPU1"): "NV1", ("GPU0", "GPU2"): "NV1", ("GPU0", "GPU3"): "NV2", ("GPU1", "GPU2"): "NV2",
               ("GPU1", "GPU3"): "NV1", ("GPU2", "GPU3"): "NV1", ("GPU2", "mlx5_1"): "PHB", ("GPU2", "mlx5_0"): "SYS"},
        affinity={"GPU0": {"CPU Affinity": "0-31", "NUMA Affinity": "0", "GPU NUMA ID": "N/A"},
                  "GPU3": {"CPU Affinity": "64-95", "NUMA Affinity": "2", "GPU NUMA ID": "N/A"}},
        nearest={"mlx5_0": ("PHB", ["GPU0", "GPU1"]), "mlx5_1": ("PHB", ["GPU2", "GPU3"])},
        hca="mlx5_0,mlx5_1", warnings=[]),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_parse_capture(name):
    want = EXPECTED[name]
    topo = gpu_topology.parse(capture(name))
    assert topo["gpus"] == want["gpus"] and topo["nics"] == want["nics"]
    for (row, col), cell in want["cells"].items():
        assert topo["links"][row][col] == cell, (row, col)
        assert topo["links"][col][row] == cell, (col, row)   # the matrix is symmetric
    for gpu, aff in want["affinity"].items():
        assert topo["affinity"][gpu] == aff
    near = gpu_topology.nic_affinity(topo)
    for nic, (connection, gpus) in want["nearest"].items():
        assert (near[nic]["connection"], near[nic]["gpus"]) == (connection, gpus), nic


def test_parse_pasted_copy_without_tabs():
    """A copy pasted from a terminal has blanks for tabs (the seed's matrix is one)."""
    text = capture("seed-4gpu-2nic.txt").replace("\x1b[4m", "").replace("\x1b[0m", "")
    spaced = "\n".join("   ".join(c if c.strip() else "" for c in line.split("\t")) for line in text.splitlines())
    assert gpu_topology.parse(spaced)["links"] == gpu_topology.parse(text)["links"]


@pytest.mark.parametrize("text, match", [
    ("No devices were found\n", "no nvidia-smi topo -m header"),
    ("\tGPU0\tNIC0\tCPU Affinity\nGPU0\t X \tPIX\t0-7\nNIC0\tPIX\t X \n", "NIC0 has no entry in the NIC Legend"),
    ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNV4\t0-7\n", "no row for GPU1"),
    ("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \t0-7\nGPU1\tNV4\t X \t0-7\n", "'0-7' is not a connection type"),
])
def test_parse_refuses(text, match):
    with pytest.raises(ValueError, match=match):
        gpu_topology.parse(text)


@pytest.mark.parametrize("value, rank", [
    ("LOC", 0), ("PIX", 1), ("pxb", 2), ("PHB", 3), ("SYS", 4), (0, 0), ("3", 3), (4, 4), (5, 4)])
def test_gdr_level_rank(value, rank):
    assert gpu_topology.gdr_level_rank(value) == rank


@pytest.mark.parametrize("value", ["NODE", "6", "-1", "yes"])
def test_gdr_level_rank_refuses(value):
    with pytest.raises(ValueError):
        gpu_topology.gdr_level_rank(value)


def roce(ib):
    return dict(ib=ib, netdev="e" + ib, active=True, link_layer="Ethernet", gid_index=3)


def build(topo, nics, settings=None, hca=None):
    warnings = []
    params = dict(hca=hca, gid_index=None, socket_ifname=None, settings=settings or {}, path="/etc/nccl.conf",
                  sysfs_root="/sys")
    config = nccl_config.build(params, [roce(n) for n in nics], warnings, topo)
    return config, warnings


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_nccl_hca_and_the_seeds_gdr_level(name):
    """Far HCAs out of NCCL_IB_HCA; the seed's NCCL_NET_GDR_LEVEL=3 (PHB) holds for the HCAs kept."""
    topo = gpu_topology.parse(capture(name))
    config, warnings = build(topo, topo["nics"])
    assert config["NCCL_IB_HCA"] == EXPECTED[name]["hca"]
    assert config["NCCL_NET_GDR_LEVEL"] == "3"
    assert warnings == EXPECTED[name]["warnings"]


def test_given_far_hca_is_kept_with_a_warning():
    topo = gpu_topology.parse(capture("2socket-4x-a100-pcie-far-nic.txt"))
    config, warnings = build(topo, topo["nics"], hca=["mlx5_0", "mlx5_1"])
    assert config["NCCL_IB_HCA"] == "mlx5_0,mlx5_1"
    assert warnings == ["NCCL_IB_HCA holds mlx5_1 although it is across the CPU sockets from every GPU (SYS)",
                        "NCCL_NET_GDR_LEVEL=3 (PHB) disables GPUDirect RDMA on mlx5_1 (SYS) (nearest GPU at that "
                        "distance); NCCL_NET_GDR_LEVEL=SYS would enable it"]


def test_a_level_below_the_hcas_distance_is_named():
    """PXB on the seed's machine: its HCAs are PHB from their GPUs, GPUDirect RDMA would be off."""
    topo = gpu_topology.parse(capture("seed-4gpu-2nic.txt"))
    config, warnings = build(topo, topo["nics"], settings={"NCCL_NET_GDR_LEVEL": "PXB"})
    assert config["NCCL_NET_GDR_LEVEL"] == "PXB"
    assert warnings == ["NCCL_NET_GDR_LEVEL=PXB disables GPUDirect RDMA on every HCA: mlx5_0 (PHB), mlx5_1 (PHB) "
                        "(nearest GPU at that distance); NCCL_NET_GDR_LEVEL=PHB would enable it"]
    # LOC turns GPUDirect RDMA off on purpose: nothing to warn about
    assert build(topo, topo["nics"], settings={"NCCL_NET_GDR_LEVEL": "LOC"})[1] == []


def test_gpus_without_a_near_hca_are_named():
    """PXB on the two-socket box: GPU2/3 reach mlx5_0 through the host bridges only (NODE = PHB for NCCL)."""
    topo = gpu_topology.parse(capture("2socket-4x-a100-pcie-far-nic.txt"))
    _config, warnings = build(topo, topo["nics"], settings={"NCCL_NET_GDR_LEVEL": 2})
    assert warnings[1] == ("GPU2, GPU3: no HCA of NCCL_IB_HCA within NCCL_NET_GDR_LEVEL=2 (PXB); "
                           "their network traffic goes through host memory")


def test_every_hca_far_keeps_them_all():
    topo = gpu_topology.parse(capture("dgx-a100-8gpu-10nic.txt"))
    config, warnings = build(topo, ["mlx5_4", "mlx5_5"])
    assert config["NCCL_IB_HCA"] == "mlx5_4,mlx5_5"
    assert warnings[0] == ("NCCL_IB_HCA holds mlx5_4, mlx5_5 although they are across the CPU sockets "
                           "from every GPU (SYS)")
    assert "disables GPUDirect RDMA on every HCA" in warnings[1]
    assert "NCCL_NET_GDR_LEVEL=SYS would enable it" in warnings[1]


def test_bad_gdr_level_is_refused_with_or_without_topology():
    for topo in (None, gpu_topology.parse(capture("seed-4gpu-2nic.txt"))):
        with pytest.raises(ValueError, match="NCCL_NET_GDR_LEVEL 'NODE' is none of"):
            build(topo, ["mlx5_0"], settings={"NCCL_NET_GDR_LEVEL": "NODE"})


# --- the module on the lab's fake sysfs tree (a100 profile: mlx5_0 up, mlx5_1 down) ---

def fake_nvidia_smi(tmp_path, name, rc=0):
    tool = tmp_path / "nvidia-smi"
    tool.write_text('#!/bin/sh\n[ "$*" = "topo -m" ] || exit 2\ncat %s\nexit %d\n' % (CAPTURES / name, rc))
    tool.chmod(0o755)
    return str(tool)


@pytest.fixture
def warned(monkeypatch):
    """The module's warnings, collected as it warns (in-process runs share ansible's warning state)."""
    collected = []
    monkeypatch.setattr(nccl_config.AnsibleModule, "warn", lambda _self, msg: collected.append(msg))
    return collected


def test_module_runs_nvidia_smi_topo_in_the_lab(run_module, sysfs, tmp_path, warned):
    """The lab node: one active port (mlx5_0), the a100 profile's DGX-like capture."""
    conf = tmp_path / "nccl.conf"
    result = run_module(nccl_config, path=str(conf), sysfs_root=str(sysfs),
                        nvidia_smi=fake_nvidia_smi(tmp_path, "dgx-a100-8gpu-10nic.txt"))
    assert result["_rc"] == 0, result
    assert "NCCL_IB_HCA=mlx5_0\n" in conf.read_text() and "NCCL_NET_GDR_LEVEL=3\n" in conf.read_text()
    assert result["gpu_nic_affinity"]["mlx5_0"] == dict(connection="PXB", level="PXB", rank=2, gpus=["GPU0", "GPU1"])
    assert ("GPU2, GPU3, GPU4, GPU5, GPU6, GPU7: no HCA of NCCL_IB_HCA within NCCL_NET_GDR_LEVEL=3 (PHB); "
            "their network traffic goes through host memory") in warned


@pytest.mark.parametrize("case", [
    ("missing", "not found (is the NVIDIA driver installed?)"),
    ("failing", "topo -m failed (rc 9"),
    ("garbage", "cannot read the nvidia-smi topo -m output"),
])
def test_module_without_a_topology_warns_and_writes(run_module, sysfs, tmp_path, warned, case):
    how, match = case
    conf = tmp_path / "nccl.conf"
    if how == "missing":
        tool = "nvidia-smi-not-installed-here"
    elif how == "failing":
        tool = fake_nvidia_smi(tmp_path, "seed-4gpu-2nic.txt", rc=9)
    else:
        tool = str(tmp_path / "nvidia-smi")
        Path(tool).write_text("#!/bin/sh\necho No devices were found\n")
        Path(tool).chmod(0o755)
    result = run_module(nccl_config, path=str(conf), sysfs_root=str(sysfs), nvidia_smi=tool)
    assert result["_rc"] == 0 and result["gpu_nic_affinity"] is None, result
    assert any(match in w for w in warned), warned
    assert "NCCL_IB_HCA=mlx5_0\n" in conf.read_text()


def test_module_topology_text_and_nvidia_smi_exclusive(run_module, sysfs, tmp_path):
    result = run_module(nccl_config, path=str(tmp_path / "c"), sysfs_root=str(sysfs), nvidia_smi="nvidia-smi",
                        topology=capture("seed-4gpu-2nic.txt"))
    assert result["failed"] and "mutually exclusive" in result["msg"]
