"""The label computation (module_utils/node_labels.py) and the accelerator_labels filter.

Facts are shaped like the seed's two example nodes (section 4.1.2): gpu_info as the
gpu_info contract defines it, npu_info as npu_info returns it, hw_info from node_hw_info on
the fake sysfs trees the lab profiles install. The results must equal the seed's label
sets exactly, with one documented exception (MIG profile separator, see below).
"""

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collections"))
sys.path.insert(0, str(ROOT / "tests/hardware/sysfs"))

import build_sysfs  # noqa: E402
from ansible.errors import AnsibleFilterError  # noqa: E402
from ansible_collections.ai_platform.l1.plugins.filter.accelerator_labels import accelerator_labels  # noqa: E402
from ansible_collections.ai_platform.l1.plugins.module_utils import node_labels as nl  # noqa: E402
from ansible_collections.ai_platform.l1.plugins.modules.node_hw_info import collect  # noqa: E402

# Seed L1-infrastructure-design.zh.md, section 4.1.2, verbatim.
SEED_A100 = {
    "accelerator": "nvidia",
    "accelerator-model": "A100-SXM-80GB",
    "accelerator-memory": "80Gi",
    "accelerator-count": "8",
    "accelerator-topology": "nvlink-fullmesh",
    "accelerator-mig-enabled": "true",
    "accelerator-mig-profiles": "1g.10gb,2g.20gb,3g.40gb,7g.80gb",
    "accelerator-driver-version": "550.54.15",
    "accelerator-cuda-version": "12.4",
    "node-type": "gpu-compute",
    "network.bandwidth": "100Gbps",
    "network.interface": "mlx5_0",
    "storage.local-nvme": "3.5Ti",
}
SEED_910B = {
    "accelerator": "huawei-ascend",
    "accelerator-model": "Ascend-910B",
    "accelerator-memory": "64Gi",
    "accelerator-count": "8",
    "accelerator-topology": "hccs-ring",
    "accelerator-driver-version": "23.0.rc1",
    "accelerator-cann-version": "7.0.0",
    "node-type": "gpu-compute",
    "network.bandwidth": "100Gbps",
    "storage.local-nvme": "1.8Ti",
}
# The one deliberate difference: a comma is not allowed in a Kubernetes label value, so the
# API server would reject the seed's value; the profiles are joined with "_" instead.
SEED_A100_VALID = dict(SEED_A100, **{"accelerator-mig-profiles": "1g.10gb_2g.20gb_3g.40gb_7g.80gb"})


def a100_gpu(index):
    return {
        "index": index, "name": "NVIDIA A100-SXM4-80GB", "uuid": f"GPU-{index:08d}",
        "pci_bus_id": f"0000:{index:02X}:00.0",
        "memory_total_mib": 81920, "memory_used_mib": 0, "temperature_c": 33, "power_draw_w": 60.0,
        "power_limit_w": 400.0, "persistence_mode": True, "compute_capability": "8.0",
        # NVML lists the profiles by profile id, not in the seed's order.
        "mig": {"capable": True, "current": True, "pending": True,
                "profiles": ["7g.80gb", "3g.40gb", "2g.20gb", "1g.10gb"], "instances": []},
        "nvlink": {"links_active": 12, "remote_nvswitch": True},
        "ecc": {"dbe_volatile": 0, "dbe_aggregate": 0, "sbe_volatile": 0, "sbe_aggregate": 0},
        "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
        "retired_pages": None, "xid_errors": [],
    }


A100_GPU_INFO = {
    "present": True, "reason": "", "driver_version": "550.54.15", "cuda_driver_version": "12.4", "count": 8,
    "topology": "nvswitch", "fabric_manager": {"required": True, "state": "running"},
    "gpus": [a100_gpu(i) for i in range(8)], "health": {"ok": True, "problems": []},
}

NPU_910B_INFO = {
    "present": True, "reason": "", "npu_smi_version": "23.0.rc1", "driver_version": "23.0.rc1",
    "firmware_version": "7.0.0.5.242", "cann_version": "7.0.0", "chip_name": "Ascend 910B3", "chip_model": "910B",
    "npu_count": 8, "chip_count": 8, "chips_per_npu": 1, "hbm_total_mb": 65536, "topology": "hccs-fullmesh",
    "topology_links": {"HCCS": 28}, "chips": [], "npus": [], "health": {"ok": True, "problems": []},
}


@pytest.fixture(scope="module")
def hw(tmp_path_factory):
    """node_hw_info facts of the lab's fake sysfs trees, per profile."""
    result = {}
    for profile in ("a100", "ascend_910b", "control_plane"):
        root = tmp_path_factory.mktemp(profile)
        build_sysfs.build(str(root), profile)
        result[profile] = collect(str(root))
    return result


def test_a100_node_equals_the_seed(hw):
    labels = nl.compute_labels(gpu_info=A100_GPU_INFO, hw_info=hw["a100"], node_type="gpu-compute")
    assert labels == SEED_A100_VALID
    assert {k: v for k, v in labels.items() if k != "accelerator-mig-profiles"} == \
        {k: v for k, v in SEED_A100.items() if k != "accelerator-mig-profiles"}


def test_910b_node_equals_the_seed(hw):
    assert nl.compute_labels(npu_info=NPU_910B_INFO, hw_info=hw["ascend_910b"]) == SEED_910B


def test_registered_results_are_accepted(hw):
    registered = {"changed": False, "npu_info": NPU_910B_INFO}
    assert nl.compute_labels(npu_info=registered, hw_info={"changed": False, "hw_info": hw["ascend_910b"]}) == SEED_910B


def test_the_seed_comma_value_is_not_a_valid_label_value():
    assert not nl.is_valid_label_value(SEED_A100["accelerator-mig-profiles"])
    for labels in (SEED_A100_VALID, SEED_910B):
        assert all(nl.is_valid_label_value(v) for v in labels.values())


def test_every_value_is_valid_even_for_odd_facts(hw):
    gpu = copy.deepcopy(A100_GPU_INFO)
    gpu["driver_version"] = "550.54.15 (beta) / ünïcode"
    gpu["cuda_driver_version"] = "-12.4-"
    gpu["gpus"][0]["name"] = "NVIDIA Super/GPU (rev. 2) " + "X" * 80
    gpu["gpus"][0]["mig"]["profiles"] = ["1g.10gb+me", "1g.10gb", "odd profile!"]
    labels = nl.compute_labels(gpu_info=gpu, hw_info=hw["a100"], node_type="gpu compute/training", gfd_labels=True)
    bad = {k: v for k, v in labels.items() if not nl.is_valid_label_value(v)}
    assert not bad
    assert labels["accelerator-mig-profiles"] == "1g.10gb_1g.10gb-me_odd-profile"
    assert labels["accelerator-driver-version"] == "550.54.15-beta-n-code"
    assert labels["node-type"] == "gpu-compute-training"


@pytest.mark.parametrize("value,expected", [
    ("A100-SXM-80GB", "A100-SXM-80GB"),
    ("", ""),
    (None, ""),
    (True, "true"),
    (8, "8"),
    ("-leading.and.trailing_", "leading.and.trailing"),
    ("__--..", ""),
    ("a b\tc\nd", "a-b-c-d"),
    ("1g.10gb,2g.20gb", "1g.10gb-2g.20gb"),
    ("昇腾910B", "910B"),
    ("a" * 62 + "-b", "a" * 62),
    ("x" * 100, "x" * 63),
    ("ok/../../etc/passwd", "ok-..-..-etc-passwd"),
    ("$(rm -rf /)", "rm-rf"),
    ("v1.2.3+build.7", "v1.2.3-build.7"),
])
def test_sanitize_label_value(value, expected):
    assert nl.sanitize_label_value(value) == expected
    assert nl.is_valid_label_value(nl.sanitize_label_value(value))


@pytest.mark.parametrize("value,valid", [
    ("", True), ("a", True), ("a-b_c.d", True), ("-a", False), ("a-", False), ("a,b", False),
    ("a" * 63, True), ("a" * 64, False), ("ä", False), (None, False), (5, False),
])
def test_is_valid_label_value(value, valid):
    assert nl.is_valid_label_value(value) is valid


@pytest.mark.parametrize("name,mib,model", [
    ("NVIDIA A100-SXM4-80GB", 81920, "A100-SXM-80GB"),
    ("NVIDIA A100-SXM4-40GB", 40960, "A100-SXM-40GB"),
    ("NVIDIA A100-PCIE-40GB", 40960, "A100-PCIE-40GB"),
    ("NVIDIA A100 80GB PCIe", 81920, "A100-PCIE-80GB"),
    ("NVIDIA A800-SXM4-80GB", 81920, "A800-SXM-80GB"),
    ("NVIDIA H100 80GB HBM3", 81559, "H100-SXM-80GB"),
    ("NVIDIA H100 PCIe", 81559, "H100-PCIE-80GB"),
    ("NVIDIA H100 NVL", 95830, "H100-NVL-94GB"),
    ("NVIDIA H800", 81559, "H800-SXM-80GB"),
    ("NVIDIA H200", 143771, "H200-SXM-141GB"),
    ("NVIDIA L40S", 46068, "L40S-PCIE-48GB"),
    ("NVIDIA L4", 23034, "L4-PCIE-24GB"),
    ("Tesla V100-SXM2-32GB", 32768, "V100-SXM-32GB"),
    ("Tesla T4", 15360, "T4-PCIE-16GB"),
    ("NVIDIA GeForce RTX 4090", 24564, "GeForce-RTX-4090-24GB"),
    ("NVIDIA Mystery", None, "Mystery"),
])
def test_normalize_gpu_model(name, mib, model):
    assert nl.normalize_gpu_model(name, mib) == model


@pytest.mark.parametrize("mbps,text", [(100000, "100Gbps"), (200000, "200Gbps"), (25000, "25Gbps"),
                                       (2500, "2.5Gbps"), (1000, "1Gbps"), (400000, "400Gbps")])
def test_format_bandwidth(mbps, text):
    assert nl.format_bandwidth(mbps) == text


@pytest.mark.parametrize("size,text", [
    (2 * 1920383410176, "3.5Ti"),   # 3.49 TiB
    (2000398934016, "1.8Ti"),       # 1.82 TiB
    (1920383410176, "1.7Ti"),       # 1.75 TiB rounds half away... to 1.7 (1.7466)
    (4 * (1 << 40), "4Ti"),
    (8 * 3840755982336, "27.9Ti"),
    (960197124096, "894Gi"),
    ((1 << 40) - (1 << 30), "1Ti"),  # 0.999 TiB shows as 1.0 -> "1Ti"
])
def test_format_storage(size, text):
    assert nl.format_storage(size) == text


@pytest.mark.parametrize("topology,label", [
    ("nvswitch", "nvlink-fullmesh"), ("nvlink-fullmesh", "nvlink-fullmesh"),
    ("nvlink-partial", "nvlink-partial"), ("pcie", "pcie"), ("single", "single"),
])
def test_nvidia_topology_labels(topology, label):
    gpu = dict(A100_GPU_INFO, topology=topology)
    assert nl.compute_labels(gpu_info=gpu)["accelerator-topology"] == label


@pytest.mark.parametrize("topology,label", [
    ("hccs-fullmesh", "hccs-ring"), ("hccs-switch", "hccs-switch"), ("hccs-partial", "hccs-partial"),
    ("pcie", "pcie"), ("single", "single"),
])
def test_ascend_topology_labels(topology, label):
    npu = dict(NPU_910B_INFO, topology=topology)
    assert nl.compute_labels(npu_info=npu)["accelerator-topology"] == label


def test_unknown_topology_is_refused():
    with pytest.raises(ValueError, match="npu_info topology 'unknown' is not one of"):
        nl.compute_labels(npu_info=dict(NPU_910B_INFO, topology="unknown"))
    with pytest.raises(ValueError, match="gpu_info topology 'weird'"):
        nl.compute_labels(gpu_info=dict(A100_GPU_INFO, topology="weird"))


def test_a3_counts_dies_and_has_no_mig_keys(hw):
    npu = dict(NPU_910B_INFO, chip_model="910C", chip_count=16, chips_per_npu=2, topology="hccs-switch",
               driver_version="24.1.rc3", cann_version="8.0.0")
    labels = nl.compute_labels(npu_info=npu, hw_info=hw["ascend_910b"])
    assert labels["accelerator-model"] == "Ascend-910C"
    assert labels["accelerator-count"] == "16"
    assert not any(k.startswith("accelerator-mig") or k == "accelerator-cuda-version" for k in labels)


def test_long_mig_profile_lists_keep_whole_profiles():
    gpu = copy.deepcopy(A100_GPU_INFO)
    gpu["gpus"][0]["mig"]["profiles"] = ["%dg.%dgb" % (n, 100 + n) for n in range(1, 12)]
    value = nl.compute_labels(gpu_info=gpu)["accelerator-mig-profiles"]
    assert value == "_".join("%dg.%dgb" % (n, 100 + n) for n in range(1, 8))
    assert len(value) <= 63


def test_gpu_without_mig_says_false_and_lists_no_profiles():
    gpu = copy.deepcopy(A100_GPU_INFO)
    for g in gpu["gpus"]:
        g["name"] = "NVIDIA L40S"
        g["memory_total_mib"] = 46068
        g["mig"] = {"capable": False, "current": False, "pending": False, "profiles": [], "instances": []}
    gpu["topology"] = "pcie"
    labels = nl.compute_labels(gpu_info=gpu)
    assert labels["accelerator-mig-enabled"] == "false"
    assert "accelerator-mig-profiles" not in labels
    assert labels["accelerator-model"] == "L40S-PCIE-48GB"
    assert labels["accelerator-memory"] == "45Gi"


def test_gfd_labels_only_behind_the_flag(hw):
    plain = nl.compute_labels(gpu_info=A100_GPU_INFO, hw_info=hw["a100"])
    assert not any(k.startswith("nvidia.com/") for k in plain)
    labels = nl.compute_labels(gpu_info=A100_GPU_INFO, hw_info=hw["a100"], gfd_labels=True)
    gfd = {k: v for k, v in labels.items() if k.startswith("nvidia.com/")}
    assert gfd == {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
        "nvidia.com/gpu.memory": "81920",
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.family": "ampere",
        "nvidia.com/gpu.compute.major": "8",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/cuda.driver-version.major": "550",
        "nvidia.com/cuda.driver-version.minor": "54",
        "nvidia.com/cuda.driver-version.revision": "15",
        "nvidia.com/cuda.driver-version.full": "550.54.15",
        "nvidia.com/cuda.runtime-version.major": "12",
        "nvidia.com/cuda.runtime-version.minor": "4",
        "nvidia.com/cuda.runtime-version.full": "12.4",
        "nvidia.com/mig.capable": "true",
        "nvidia.com/mig.strategy": "single",
    }
    assert set(gfd) <= set(nl.GFD_KEYS)
    assert {k: v for k, v in labels.items() if not k.startswith("nvidia.com/")} == SEED_A100_VALID
    assert nl.compute_labels(npu_info=NPU_910B_INFO, hw_info=hw["ascend_910b"], gfd_labels=True) == SEED_910B


def test_node_without_accelerator(hw):
    absent_gpu = {"present": False, "reason": "libnvidia-ml.so.1 not found", "gpus": []}
    absent_npu = {"present": False, "reason": "npu-smi not found"}
    labels = nl.compute_labels(gpu_info=absent_gpu, npu_info=absent_npu, hw_info=hw["control_plane"],
                               node_type="control-plane")
    assert labels == {"node-type": "control-plane", "network.bandwidth": "25Gbps"}
    assert nl.compute_labels() == {"node-type": "gpu-compute"}


def test_both_vendors_is_refused():
    with pytest.raises(ValueError, match="both NVIDIA GPUs and Ascend NPUs"):
        nl.compute_labels(gpu_info=A100_GPU_INFO, npu_info=NPU_910B_INFO)


def test_missing_versions_leave_keys_out():
    labels = nl.compute_labels(npu_info=dict(NPU_910B_INFO, cann_version="", driver_version=""))
    assert "accelerator-cann-version" not in labels and "accelerator-driver-version" not in labels


def test_only_standard_keys_come_out(hw):
    labels = nl.compute_labels(gpu_info=A100_GPU_INFO, hw_info=hw["a100"])
    assert set(labels) <= set(nl.STANDARD_KEYS)


# ---- with the real gpu_info module on the NVIDIA engineer's fake NVML --------------------

NVML = ROOT / "tests/hardware/nvml"
GPU_SCENARIOS = {
    "a100-8x-nvswitch-mig": SEED_A100_VALID,
    "h100-8x-nvswitch": {"accelerator-model": "H100-SXM-80GB", "accelerator-memory": "80Gi",
                         "accelerator-topology": "nvlink-fullmesh", "accelerator-mig-enabled": "false",
                         "accelerator-mig-profiles": "1g.10gb_1g.10gb-me_1g.20gb_2g.20gb_3g.40gb_4g.40gb_7g.80gb"},
    "l40s-8x-pcie": {"accelerator-model": "L40S-PCIE-48GB", "accelerator-memory": "45Gi",
                     "accelerator-topology": "pcie", "accelerator-mig-enabled": "false"},
    "h200-1x-vm": {"accelerator-model": "H200-SXM-141GB", "accelerator-count": "1", "accelerator-topology": "single"},
}


@pytest.fixture(scope="module")
def fake_nvml():
    if not (NVML / "build.sh").is_file():
        pytest.fail("tests/hardware/nvml/build.sh is missing: the fake NVML the GPU label checks run on")
    proc = subprocess.run(["bash", str(NVML / "build.sh")], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, "building the fake NVML failed (is gcc installed?):\n" + proc.stderr
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("scenario", sorted(GPU_SCENARIOS))
def test_gpu_info_on_fake_nvml_labels(fake_nvml, hw, tmp_path, scenario):
    """gpu_info's real output (pynvml on the fake NVML) feeds the label computation unchanged."""
    args = tmp_path / "args.json"
    args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {}}))
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT / "collections"), "LD_LIBRARY_PATH": fake_nvml,
           "AI_L1_FAKE_NVML_SCENARIO": str(NVML / "scenarios" / f"{scenario}.conf"), "LANG": "C.UTF-8"}
    module = ROOT / "collections/ansible_collections/ai_platform/l1/plugins/modules/gpu_info.py"
    proc = subprocess.run([sys.executable, str(module), str(args)], capture_output=True, text=True, env=env,
                          check=False)
    result = json.loads(proc.stdout)
    assert result["gpu_info"]["present"] is True, result
    hw_info = hw["a100"] if scenario.startswith("a100") else None
    labels = nl.compute_labels(gpu_info=result, hw_info=hw_info)
    if scenario == "a100-8x-nvswitch-mig":
        assert labels == SEED_A100_VALID
    else:
        assert {k: labels.get(k) for k in GPU_SCENARIOS[scenario]} == GPU_SCENARIOS[scenario]
    assert all(nl.is_valid_label_value(v) for v in labels.values())


# ---- the filter plugin ----------------------------------------------------------------


def test_filter_function(hw):
    facts = {"npu_info": {"npu_info": NPU_910B_INFO}, "hw_info": {"hw_info": hw["ascend_910b"]}}
    assert accelerator_labels(facts) == SEED_910B
    assert accelerator_labels(facts, node_type="inference")["node-type"] == "inference"


@pytest.mark.parametrize("facts,message", [
    ("not a dict", "expects a dict with gpu_info/npu_info/hw_info, got str"),
    ({"gpu": {}}, "unknown keys gpu (expected gpu_info, npu_info, hw_info)"),
    ({"gpu_info": A100_GPU_INFO, "npu_info": NPU_910B_INFO}, "both NVIDIA GPUs and Ascend NPUs"),
])
def test_filter_errors(facts, message):
    with pytest.raises(AnsibleFilterError, match=None) as exc:
        accelerator_labels(facts)
    assert message in str(exc.value)


def test_filter_by_fqcn_in_a_play(tmp_path, hw):
    """The filter resolves by its FQCN from a plain checkout (ansible.cfg collections_path)."""
    facts = {"npu_info": NPU_910B_INFO, "hw_info": hw["ascend_910b"]}
    (tmp_path / "facts.json").write_text(json.dumps(facts))
    playbook = tmp_path / "labels.yml"
    playbook.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.copy:\n"
        "        dest: " + str(tmp_path / "labels.json") + "\n"
        "        content: \"{{ facts | ai_platform.l1.accelerator_labels | to_json }}\"\n"
        "      vars:\n"
        "        facts: \"{{ lookup('ansible.builtin.file', '" + str(tmp_path / "facts.json") + "') | from_json }}\"\n"
    )
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    command = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
               "-e", f"ansible_python_interpreter={sys.executable}", str(playbook)]
    proc = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads((tmp_path / "labels.json").read_text()) == SEED_910B
