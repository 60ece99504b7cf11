"""ai_platform.l1.gpu_info through Ansible's module interface, against the fake NVML.

The real pynvml runs against tests/hardware/nvml's fake libnvidia-ml.so.1 (built here
with gcc) loaded through LD_LIBRARY_PATH; nothing in pynvml is mocked. Helper tools the
module calls (systemctl, journalctl, dmesg) are small fakes on PATH.
"""

import copy
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COLLECTIONS = ROOT / "collections"
MODULE = COLLECTIONS / "ansible_collections/ai_platform/l1/plugins/modules/gpu_info.py"
NVML_DIR = ROOT / "tests/hardware/nvml"
SCENARIOS = NVML_DIR / "scenarios"

sys.path.insert(0, str(COLLECTIONS))
from ansible_collections.ai_platform.l1.plugins.module_utils import nvml  # noqa: E402


@pytest.fixture(scope="session")
def fake_nvml_dir():
    if shutil.which("gcc") is None:
        pytest.fail("gcc is missing: it is needed to build the fake libnvidia-ml.so.1 (apt-get install gcc)")
    proc = subprocess.run(
        ["bash", str(NVML_DIR / "build.sh")], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, "building the fake NVML failed:\n" + proc.stderr
    out = Path(proc.stdout.strip().splitlines()[-1])
    assert (out / "libnvidia-ml.so.1").is_file()
    return out


@pytest.fixture(scope="session")
def fake_bin(tmp_path_factory):
    """systemctl/journalctl/dmesg fakes driven by environment variables."""
    d = tmp_path_factory.mktemp("fakebin")
    scripts = {
        "systemctl": """\
            #!/bin/sh
            case "${FAKE_FM_STATE:-running}" in
              running) printf 'LoadState=loaded\\nActiveState=active\\nSubState=running\\n' ;;
              inactive) printf 'LoadState=loaded\\nActiveState=inactive\\nSubState=dead\\n' ;;
              failed) printf 'LoadState=loaded\\nActiveState=failed\\nSubState=failed\\n' ;;
              not-installed) printf 'LoadState=not-found\\nActiveState=inactive\\nSubState=dead\\n' ;;
            esac
            """,
        "journalctl": """\
            #!/bin/sh
            [ -n "$FAKE_JOURNAL_FAIL" ] && { echo "No journal files were found." >&2; exit 1; }
            [ -n "$FAKE_JOURNAL" ] && cat "$FAKE_JOURNAL"
            exit 0
            """,
        "dmesg": """\
            #!/bin/sh
            [ -n "$FAKE_DMESG" ] && cat "$FAKE_DMESG"
            exit 0
            """,
    }
    for name, body in scripts.items():
        path = d / name
        path.write_text(textwrap.dedent(body))
        path.chmod(0o755)
    return d


def run_module(lib_dir, fake_bin, scenario, args=None, env=None, *, tmp_path, python_path_extra=None):
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args or {}}))
    run_env = {
        "PATH": "%s:/usr/bin:/bin" % fake_bin,
        "PYTHONPATH": os.pathsep.join(filter(None, [python_path_extra, str(COLLECTIONS)])),
        "LD_LIBRARY_PATH": str(lib_dir),
        "AI_L1_FAKE_NVML_SCENARIO": str(SCENARIOS / ("%s.conf" % scenario)),
        "LANG": "C.UTF-8",
    }
    run_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, str(MODULE), str(args_file)], capture_output=True, text=True, env=run_env, check=False
    )
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    try:
        return json.loads(proc.stdout)
    except ValueError:
        pytest.fail("module printed no JSON (rc %s):\n%s\n%s" % (proc.returncode, proc.stdout, proc.stderr))


# ----------------------------------------------------------------- expected facts

NO_ECC = {"dbe_volatile": 0, "dbe_aggregate": 0, "sbe_volatile": 0, "sbe_aggregate": 0}
NO_ROWS = {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
A100_PROFILES = ["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"]
A100_PCIE_PROFILES = ["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
H100_PROFILES = ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]
H200_PROFILES = ["1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"]


def instance(profile, profile_id, gi_id, start, size):
    return {
        "profile": profile, "profile_id": profile_id, "gi_id": gi_id,
        "placement_start": start, "placement_size": size,
    }


A100_MIXED = [
    instance("2g.20gb", 14, 3, 0, 2),
    instance("2g.20gb", 14, 4, 2, 2),
    instance("3g.40gb", 9, 2, 4, 4),
]
A100_FULL = [instance("7g.80gb", 0, 0, 0, 8)]


def gpu(index, uuid, pci, **over):
    g = {
        "index": index, "name": "", "uuid": uuid, "vbios_version": "92.00.45.00.03", "pci_bus_id": pci,
        "memory_total_mib": 81920, "memory_used_mib": 0, "temperature_c": 30,
        "power_draw_w": 60.0, "power_limit_w": 400.0, "persistence_mode": True,
        "compute_capability": "8.0",
        "mig": {"capable": False, "current": False, "pending": False, "profiles": [], "instances": []},
        "nvlink": {"links_active": 0, "remote_nvswitch": False},
        "ecc": dict(NO_ECC), "remapped_rows": dict(NO_ROWS), "retired_pages": None,
        "xid_errors": [], "errors": [],
    }
    g.update(over)
    return g


def system(count, topology, gpus, *, fm_required=False, fm_state="n/a", problems=(), driver="550.54.15", cuda="12.4"):
    return {
        "present": True, "reason": "", "driver_version": driver, "cuda_driver_version": cuda,
        "count": count, "topology": topology,
        "fabric_manager": {"required": fm_required, "state": fm_state},
        "gpus": gpus, "health": {"ok": not problems, "problems": list(problems)},
    }


A100_PCI = ["07", "0F", "47", "4E", "87", "90", "B7", "BD"]
EXPECT_A100 = system(8, "nvswitch", [
    gpu(
        i, "GPU-7d5a3c1e-2b4f-4e8a-9c61-0a1b2c3d4e5%d" % i, "00000000:%s:00.0" % A100_PCI[i],
        name="NVIDIA A100-SXM4-80GB", temperature_c=34 if i == 7 else 31, power_draw_w=62.125,
        memory_used_mib=512 if i == 7 else 0,
        mig={"capable": True, "current": True, "pending": True, "profiles": A100_PROFILES,
             "instances": A100_FULL if i == 4 else A100_MIXED},
        nvlink={"links_active": 12, "remote_nvswitch": True},
    )
    for i in range(8)
], fm_required=True, fm_state="running")

H100_PCI = ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]
H100_GPUS = [
    gpu(
        i, "GPU-3f1c9a20-5e6d-4b7c-8a9b-1c2d3e4f5a6%d" % i, "00000000:%s:00.0" % H100_PCI[i],
        name="NVIDIA H100 80GB HBM3", vbios_version="96.00.99.00.01", memory_total_mib=81559, memory_used_mib=1,
        temperature_c=29,
        power_draw_w=71.342, power_limit_w=700.0, compute_capability="9.0",
        mig={"capable": True, "current": False, "pending": False, "profiles": H100_PROFILES, "instances": []},
        nvlink={"links_active": 18, "remote_nvswitch": True},
    )
    for i in range(8)
]
EXPECT_H100 = system(8, "nvswitch", H100_GPUS, fm_required=True, fm_state="running")

L40S_PCI = ["1B", "1C", "3D", "3E", "9B", "9C", "BB", "BC"]
EXPECT_L40S = system(8, "pcie", [
    gpu(
        i, "GPU-a1b2c3d4-0001-4000-8000-00000000a00%d" % i, "00000000:%s:00.0" % L40S_PCI[i],
        name="NVIDIA L40S", memory_total_mib=46068, temperature_c=27, power_draw_w=34.567,
        power_limit_w=350.0, compute_capability="8.9",
    )
    for i in range(8)
])

XID_48 = {
    "xid": 48, "pci_bus_id": "00000000:07:00.0", "timestamp": "2024-05-01T10:15:44.551210+00:00",
    "message": "pid=5512, name=python3, An uncorrectable double bit error (DBE) has been detected on GPU "
               "in the framebuffer at partition 3, subpartition 0.",
}
XID_79 = {
    "xid": 79, "pci_bus_id": "00000000:07:00.0", "timestamp": "2024-05-01T10:15:45.002233+00:00",
    "message": "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
}
XID_13 = {
    "xid": 13, "pci_bus_id": "00000000:0A:00.0", "timestamp": "2024-05-01T10:01:02.104512+00:00",
    "message": "pid=4121, name=python3, Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address",
}
A100_PCIE = dict(
    name="NVIDIA A100 80GB PCIe", temperature_c=40, power_draw_w=45.0, power_limit_w=300.0,
    persistence_mode=False,
    mig={"capable": True, "current": False, "pending": False, "profiles": A100_PCIE_PROFILES, "instances": []},
    nvlink={"links_active": 12, "remote_nvswitch": False},
)
EXPECT_XID = system(2, "nvlink-fullmesh", [
    gpu(0, "GPU-0e9f8d7c-6b5a-4938-8271-605f4e3d2c10", "00000000:07:00.0", **dict(
        A100_PCIE,
        ecc={"dbe_volatile": 2, "dbe_aggregate": 3, "sbe_volatile": 5, "sbe_aggregate": 17},
        remapped_rows={"correctable": 1, "uncorrectable": 2, "pending": False, "failure": True},
        xid_errors=[XID_48, XID_79],
    )),
    gpu(1, "GPU-0e9f8d7c-6b5a-4938-8271-605f4e3d2c11", "00000000:0A:00.0", **dict(A100_PCIE, xid_errors=[XID_13])),
], driver="535.161.08", cuda="12.2", problems=[
    "GPU 0 (00000000:07:00.0): 2 volatile double-bit ECC errors",
    "GPU 0 (00000000:07:00.0): row remapping failed (replace the GPU)",
    "GPU 0 (00000000:07:00.0): XID 48 seen 1 time(s), last 2024-05-01T10:15:44.551210+00:00: " + XID_48["message"],
    "GPU 0 (00000000:07:00.0): XID 79 seen 1 time(s), last 2024-05-01T10:15:45.002233+00:00: " + XID_79["message"],
    "XID 79 on PCI 00000000:99:00.0, a device NVML does not list: pid=1, GPU has fallen off the bus.",
])

BRIDGED_PCI = ["17", "31", "B1", "CA"]
EXPECT_BRIDGED = system(4, "nvlink-partial", [
    gpu(
        i, "GPU-5c4b3a29-1807-4f6e-9d5c-4b3a2918070%d" % i, "00000000:%s:00.0" % BRIDGED_PCI[i],
        **dict(A100_PCIE, temperature_c=36, power_draw_w=52.0, persistence_mode=True,
               mig={"capable": True, "current": False, "pending": True, "profiles": A100_PCIE_PROFILES,
                    "instances": []})
    )
    for i in range(4)
])

EXPECT_H200 = system(1, "single", [
    gpu(0, "GPU-c0ffee00-1234-4567-89ab-cdef01234567", "00000000:00:05.0",
        name="NVIDIA H200", memory_total_mib=143771, memory_used_mib=1, temperature_c=33,
        power_draw_w=None, power_limit_w=700.0, persistence_mode=False, compute_capability="9.0",
        mig={"capable": True, "current": False, "pending": False, "profiles": H200_PROFILES, "instances": []}),
], driver="570.124.06", cuda="12.8")

LOST = gpu(1, "", "", vbios_version="", memory_total_mib=None, memory_used_mib=None, temperature_c=None,
           power_draw_w=None, power_limit_w=None, persistence_mode=None, compute_capability="",
           ecc={"dbe_volatile": None, "dbe_aggregate": None, "sbe_volatile": None, "sbe_aggregate": None},
           remapped_rows=None, errors=["handle: GPU is lost"])
EXPECT_GARBLED = system(2, "pcie", [
    gpu(0, "GPU-bad00000-0000-4000-8000-000000000000", "00000000:07:00.0",
        name="NVIDIA \ufffd\ufffdA100", memory_total_mib=0,
        ecc={"dbe_volatile": None, "dbe_aggregate": None, "sbe_volatile": None, "sbe_aggregate": None},
        remapped_rows=None, errors=["name: not valid UTF-8"]),
    LOST,
], cuda="", problems=[
    "GPU 0 (00000000:07:00.0): NVML query failed: name: not valid UTF-8",
    "GPU 1 (unknown PCI address): NVML query failed: handle: GPU is lost",
    "NVML query failed: cuda driver version: Unknown Error",
])


def absent(reason):
    return {
        "present": False, "reason": reason, "driver_version": "", "cuda_driver_version": "", "count": 0,
        "topology": "", "fabric_manager": {"required": False, "state": "n/a"}, "gpus": [],
        "health": {"ok": True, "problems": []},
    }


XID_LOG = str(SCENARIOS / "a100-pcie-2x-xid79.kern.log")
CASES = [
    ("a100-8x-nvswitch-mig", {}, {}, EXPECT_A100),
    ("h100-8x-nvswitch", {}, {}, EXPECT_H100),
    ("l40s-8x-pcie", {}, {}, EXPECT_L40S),
    ("a100-pcie-2x-xid79", {"xid_source": "file", "xid_log_path": XID_LOG, "xid_window": 0}, {}, EXPECT_XID),
    ("a100-pcie-4x-bridged", {}, {}, EXPECT_BRIDGED),
    ("h200-1x-vm", {}, {}, EXPECT_H200),
    ("garbled-2x", {}, {}, EXPECT_GARBLED),
    ("no-driver", {}, {}, absent("NVIDIA kernel driver is not loaded (NVML: Driver Not Loaded)")),
    ("does-not-exist", {}, {}, absent("NVIDIA kernel driver is not loaded (NVML: Driver Not Loaded)")),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_scenario_full_facts(fake_nvml_dir, fake_bin, tmp_path, case):
    scenario, args, env, expected = case
    result = run_module(fake_nvml_dir, fake_bin, scenario, args, env, tmp_path=tmp_path)
    assert result.get("failed") is not True, result.get("msg")
    assert result["changed"] is False
    assert result["gpu_info"] == expected


def test_check_mode_reads_the_same(fake_nvml_dir, fake_bin, tmp_path):
    args = {"_ansible_check_mode": True}
    result = run_module(fake_nvml_dir, fake_bin, "a100-8x-nvswitch-mig", args, {}, tmp_path=tmp_path)
    assert result["changed"] is False
    assert result["gpu_info"] == EXPECT_A100


@pytest.mark.parametrize("state", ["inactive", "failed", "not-installed"])
def test_fabric_manager_not_running_is_a_problem(fake_nvml_dir, fake_bin, tmp_path, state):
    result = run_module(fake_nvml_dir, fake_bin, "h100-8x-nvswitch", {}, {"FAKE_FM_STATE": state}, tmp_path=tmp_path)
    expected = copy.deepcopy(EXPECT_H100)
    expected["fabric_manager"]["state"] = state
    expected["health"] = {"ok": False, "problems": ["NVSwitch present but the fabric manager is %s" % state]}
    assert result["gpu_info"] == expected


def test_library_not_found_is_absent(fake_bin, tmp_path):
    empty = tmp_path / "nolib"
    empty.mkdir()
    result = run_module(empty, fake_bin, "a100-8x-nvswitch-mig", {}, {}, tmp_path=tmp_path)
    assert result["gpu_info"] == absent("NVML library libnvidia-ml.so.1 not found (NVIDIA driver not installed)")


@pytest.mark.parametrize("scenario,reason", [
    ("no-driver", "NVIDIA kernel driver is not loaded (NVML: Driver Not Loaded)"),
    (None, "NVML library libnvidia-ml.so.1 not found (NVIDIA driver not installed)"),
])
def test_required_fails_with_reason(fake_nvml_dir, fake_bin, tmp_path, scenario, reason):
    lib = fake_nvml_dir if scenario else tmp_path
    result = run_module(lib, fake_bin, scenario or "x", {"required": True}, {}, tmp_path=tmp_path)
    assert result["failed"] is True
    assert result["msg"] == "NVIDIA GPUs required but not usable: " + reason
    assert result["gpu_info"] == absent(reason)


def test_missing_pynvml_names_the_package(fake_nvml_dir, fake_bin, tmp_path):
    blocker = tmp_path / "block"
    blocker.mkdir()
    (blocker / "pynvml.py").write_text("raise ImportError('No module named pynvml')\n")
    result = run_module(
        fake_nvml_dir, fake_bin, "a100-8x-nvswitch-mig", {}, {}, tmp_path=tmp_path, python_path_extra=str(blocker)
    )
    assert result["failed"] is True
    assert "nvidia-ml-py" in result["msg"]


def test_file_source_needs_a_path(fake_nvml_dir, fake_bin, tmp_path):
    result = run_module(fake_nvml_dir, fake_bin, "a100-8x-nvswitch-mig", {"xid_source": "file"}, {}, tmp_path=tmp_path)
    assert result["failed"] is True
    assert "xid_log_path" in result["msg"]


def test_unreadable_log_warns_and_keeps_facts(fake_nvml_dir, fake_bin, tmp_path):
    args = {"xid_source": "file", "xid_log_path": str(tmp_path / "missing.log")}
    result = run_module(fake_nvml_dir, fake_bin, "l40s-8x-pcie", args, {}, tmp_path=tmp_path)
    assert result["gpu_info"] == EXPECT_L40S
    # ansible-core 2.19 returns structured warnings from a directly run module; older ones strings.
    assert any("cannot read the kernel log (file)" in json.dumps(w) for w in result["warnings"])


def _iso(stamp):
    return datetime.fromtimestamp(stamp, timezone.utc).isoformat()


def test_xid_window_and_ignore_list(fake_nvml_dir, fake_bin, tmp_path):
    now = time.time()
    log = tmp_path / "kern.log"
    log.write_text("\n".join([
        "%s host kernel: NVRM: Xid (PCI:0000:07:00): 79, pid=1, GPU has fallen off the bus." % _iso(now - 2 * 86400),
        "%s host kernel: NVRM: Xid (PCI:0000:0f:00): 31, pid=9, name=train, Ch 00000008, MMU Fault" % _iso(now - 600),
        "%s host kernel: NVRM: Xid (PCI:0000:0f:00): 74, pid=9, NVLink: fatal error detected" % _iso(now - 60),
        "",
    ]))
    args = {"xid_source": "file", "xid_log_path": str(log), "xid_window": 3600}
    info = run_module(fake_nvml_dir, fake_bin, "a100-8x-nvswitch-mig", args, {}, tmp_path=tmp_path)["gpu_info"]
    assert info["gpus"][0]["xid_errors"] == []  # two days old: outside the window
    assert [x["xid"] for x in info["gpus"][1]["xid_errors"]] == [31, 74]
    assert len(info["health"]["problems"]) == 1  # 31 is an application XID, ignored by default
    assert info["health"]["problems"][0].startswith("GPU 1 (00000000:0F:00.0): XID 74 seen 1 time(s)")
    args["xid_ignore"] = [74]
    info = run_module(fake_nvml_dir, fake_bin, "a100-8x-nvswitch-mig", args, {}, tmp_path=tmp_path)["gpu_info"]
    assert info["health"]["problems"][0].startswith("GPU 1 (00000000:0F:00.0): XID 31 seen 1 time(s)")


def test_auto_reads_the_journal_then_falls_back_to_dmesg(fake_nvml_dir, fake_bin, tmp_path):
    now = time.time()
    journal = tmp_path / "journal.json"
    journal.write_text(json.dumps({
        "__REALTIME_TIMESTAMP": str(int((now - 30) * 1e6)),
        "MESSAGE": "NVRM: Xid (PCI:0000:47:00): 79, pid=7, GPU has fallen off the bus.",
    }) + "\n")
    dmesg = tmp_path / "dmesg.txt"
    dmesg.write_text(
        "%s NVRM: Xid (PCI:0000:4e:00): 94, pid=3, Contained ECC error\n" % _iso(now - 30).replace(".", ",")
    )
    env = {"FAKE_JOURNAL": str(journal), "FAKE_DMESG": str(dmesg)}
    info = run_module(fake_nvml_dir, fake_bin, "a100-8x-nvswitch-mig", {}, env, tmp_path=tmp_path)["gpu_info"]
    assert [x["xid"] for x in info["gpus"][2]["xid_errors"]] == [79]
    assert info["gpus"][3]["xid_errors"] == []
    env["FAKE_JOURNAL_FAIL"] = "1"
    info = run_module(fake_nvml_dir, fake_bin, "a100-8x-nvswitch-mig", {}, env, tmp_path=tmp_path)["gpu_info"]
    assert info["gpus"][2]["xid_errors"] == []
    assert [x["xid"] for x in info["gpus"][3]["xid_errors"]] == [94]
    assert info["gpus"][3]["xid_errors"][0]["pci_bus_id"] == "00000000:4E:00.0"


def test_through_ansible_adhoc(fake_nvml_dir, fake_bin, tmp_path):
    """The whole AnsiballZ path: ansible localhost -m ai_platform.l1.gpu_info."""
    ansible = Path(sys.executable).parent / "ansible"
    env = dict(os.environ)
    env.update({
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "LD_LIBRARY_PATH": str(fake_nvml_dir),
        "AI_L1_FAKE_NVML_SCENARIO": str(SCENARIOS / "a100-8x-nvswitch-mig.conf"),
        "PATH": "%s:%s" % (fake_bin, env.get("PATH", "")),
        # The tree callback writes each host's result as JSON: no parsing of screen output.
        "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1",
        "ANSIBLE_CALLBACKS_ENABLED": "ansible.builtin.tree",
        "ANSIBLE_CALLBACK_TREE_DIR": str(tmp_path / "tree"),
    })
    proc = subprocess.run(
        [str(ansible), "localhost", "-i", "localhost,", "-c", "local",
         "-e", "ansible_python_interpreter=%s" % sys.executable, "-m", "ai_platform.l1.gpu_info"],
        capture_output=True, text=True, env=env, cwd=str(ROOT), check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((tmp_path / "tree" / "localhost").read_text())
    assert result["gpu_info"] == EXPECT_A100


# ----------------------------------------------------------------- fake nvidia-smi


def test_fake_nvidia_smi_agrees_with_nvml(fake_nvml_dir):
    env = {"LD_LIBRARY_PATH": str(fake_nvml_dir),
           "AI_L1_FAKE_NVML_SCENARIO": str(SCENARIOS / "a100-8x-nvswitch-mig.conf")}
    smi = str(fake_nvml_dir / "nvidia-smi")
    listing = subprocess.run([smi, "-L"], capture_output=True, text=True, env=env, check=True).stdout
    gpus = [line for line in listing.splitlines() if line.startswith("GPU ")]
    assert gpus[0] == "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-7d5a3c1e-2b4f-4e8a-9c61-0a1b2c3d4e50)"
    assert len(gpus) == 8
    assert sum("MIG 3g.40gb" in line for line in listing.splitlines()) == 7
    csv = subprocess.run(
        [smi, "--query-gpu=index,name,memory.total,driver_version,mig.mode.current,power.limit",
         "--format=csv,noheader"], capture_output=True, text=True, env=env, check=True,
    ).stdout.splitlines()
    assert csv[0] == "0, NVIDIA A100-SXM4-80GB, 81920 MiB, 550.54.15, Enabled, 400.00 W"
    assert len(csv) == 8
    env["AI_L1_FAKE_NVML_SCENARIO"] = str(SCENARIOS / "no-driver.conf")
    proc = subprocess.run([smi], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 9
    assert "couldn't communicate with the NVIDIA driver" in proc.stdout


# ----------------------------------------------------------------- pure helpers


@pytest.mark.parametrize("count,switch,ok,pairs,expected", [
    (0, False, 0, 0, ""),
    (1, True, 0, 0, "single"),
    (8, True, 28, 28, "nvswitch"),
    (8, True, 0, 28, "nvswitch"),
    (4, False, 6, 6, "nvlink-fullmesh"),
    (4, False, 2, 6, "nvlink-partial"),
    (8, False, 0, 28, "pcie"),
])
def test_classify_topology(count, switch, ok, pairs, expected):
    assert nvml.classify_topology(count, switch, ok, pairs) == expected


@pytest.mark.parametrize("value,expected", [(12040, "12.4"), (12020, "12.2"), (11080, "11.8"), (0, ""), (None, "")])
def test_cuda_version_text(value, expected):
    assert nvml.cuda_version_text(value) == expected


def test_parse_timestamp_forms():
    utc = datetime(2024, 5, 1, 10, 15, 45, tzinfo=timezone.utc).timestamp()
    assert nvml.parse_timestamp("2024-05-01T10:15:45+00:00 h kernel: x") == utc
    assert nvml.parse_timestamp("2024-05-01T10:15:45,500000+00:00 NVRM") == utc + 0.5
    assert nvml.parse_timestamp("2024-05-01T12:15:45.000000+0200 NVRM") == utc
    assert nvml.parse_timestamp("[  100.5] NVRM: Xid", boot_time=1000.0) == 1100.5
    assert nvml.parse_timestamp("[  100.5] NVRM: Xid") is None
    now = time.mktime((2024, 5, 2, 0, 0, 0, 0, 0, -1))
    assert nvml.parse_timestamp("May  1 10:15:45 h kernel: x", now=now) == time.mktime(
        (2024, 5, 1, 10, 15, 45, 0, 0, -1))
    # December lines read in January belong to the previous year.
    jan = time.mktime((2025, 1, 2, 0, 0, 0, 0, 0, -1))
    assert time.localtime(nvml.parse_timestamp("Dec 31 23:00:00 h kernel: x", now=jan)).tm_year == 2024
    assert nvml.parse_timestamp("garbage") is None


def test_xid_regex_variants():
    entries = [
        (None, "NVRM: Xid (PCI:0000:07:00): 79, pid=..., GPU has fallen off the bus."),
        (None, "kernel: NVRM: Xid (PCI:0001:b1:00.0): 119, pid=2, Timeout waiting for RPC from GSP!"),
        (None, "NVRM: GPU at PCI:0000:07:00: GPU-uuid"),
    ]
    found = nvml.parse_xid_lines(entries)
    assert [(x["xid"], x["pci_bus_id"], x["timestamp"]) for x in found] == [
        (79, "00000000:07:00.0", ""), (119, "00000001:B1:00.0", ""),
    ]
    assert found[0]["message"] == "pid=..., GPU has fallen off the bus."


# ----------------------------------------------------------------- kernel log regressions


def test_gpu_fallen_off_the_bus_without_xid_counts_as_xid_79(fake_nvml_dir, fake_bin, tmp_path):
    now = time.time()
    log = tmp_path / "kern.log"
    log.write_text("".join([
        "%s host kernel: NVRM: GPU at PCI:0000:07:00: GPU-7d5a3c1e\n" % _iso(now - 120),
        "%s host kernel: NVRM: GPU 0000:0f:00.0: GPU has fallen off the bus.\n" % _iso(now - 60),
        # the driver's usual pair for one event: counted once
        "%s host kernel: NVRM: Xid (PCI:0000:47:00): 79, pid=7, GPU has fallen off the bus.\n" % _iso(now - 30),
        "%s host kernel: NVRM: GPU 0000:47:00.0: GPU has fallen off the bus.\n" % _iso(now - 30),
    ]))
    args = {"xid_source": "file", "xid_log_path": str(log)}
    info = run_module(fake_nvml_dir, fake_bin, "a100-8x-nvswitch-mig", args, {}, tmp_path=tmp_path)["gpu_info"]
    assert info["gpus"][0]["xid_errors"] == []
    assert [(x["xid"], x["message"]) for x in info["gpus"][1]["xid_errors"]] == [
        (79, "GPU 0000:0f:00.0: GPU has fallen off the bus.")]
    assert [x["xid"] for x in info["gpus"][2]["xid_errors"]] == [79]
    assert info["health"]["ok"] is False
    assert [p.split(",")[0] for p in info["health"]["problems"]] == [
        "GPU 1 (00000000:0F:00.0): XID 79 seen 1 time(s)", "GPU 2 (00000000:47:00.0): XID 79 seen 1 time(s)"]


SXID_LINES = [
    "nvidia-nvswitch0: SXid (PCI:0000:c5:00.0): 24007, Fatal, Link 44 sourcetrack timeout error (First)",
    "nvidia-nvswitch0: SXid (PCI:0000:c5:00.0): 24007, Severity 1 Engine instance 44 Sub-engine instance 00",
    "nvidia-nvswitch0: SXid (PCI:0000:c5:00.0): 24007, Data {0x00000000, 0x00000000, 0x00000000}",
]


def test_nvswitch_sxid_is_a_health_problem(fake_nvml_dir, fake_bin, tmp_path):
    stamp = int(time.time()) - 60
    log = tmp_path / "kern.log"
    log.write_text("".join("%s host kernel: %s\n" % (_iso(stamp), line) for line in SXID_LINES))
    args = {"xid_source": "file", "xid_log_path": str(log)}
    info = run_module(fake_nvml_dir, fake_bin, "a100-8x-nvswitch-mig", args, {}, tmp_path=tmp_path)["gpu_info"]
    assert all(g["xid_errors"] == [] for g in info["gpus"])  # an NVSwitch is no GPU
    assert info["health"] == {"ok": False, "problems": [
        "NVSwitch (00000000:C5:00.0): SXid 24007 seen 1 time(s), last %s: "
        "Fatal, Link 44 sourcetrack timeout error (First)" % _iso(stamp)]}
    args["xid_ignore"] = [24007]
    info = run_module(fake_nvml_dir, fake_bin, "a100-8x-nvswitch-mig", args, {}, tmp_path=tmp_path)["gpu_info"]
    assert info["health"] == {"ok": True, "problems": []}


def test_parse_timestamp_dmesg_T_decode_and_kernel_tag():
    ctime = time.mktime((2026, 12, 1, 10, 0, 0, 0, 0, -1))  # dmesg -T prints local time
    assert nvml.parse_timestamp("[Tue Dec  1 10:00:00 2026] NVRM: Xid (PCI:0000:07:00): 79, x") == ctime
    assert nvml.parse_timestamp("kern  :warn  : [Tue Dec  1 10:00:00 2026] NVRM: Xid") == ctime
    for line in ("kern  :warn  : [  123.456] NVRM: Xid (PCI:0000:07:00): 79, x",
                 "kernel: [  123.456] NVRM: Xid (PCI:0000:07:00): 79, x",
                 "<4>[  123.456] NVRM: Xid (PCI:0000:07:00): 79, x"):
        assert nvml.parse_timestamp(line, boot_time=1000.0) == pytest.approx(1123.456), line
    utc = datetime(2026, 12, 1, 10, 0, 0, tzinfo=timezone.utc).timestamp()
    assert nvml.parse_timestamp("kern  :warn  : 2026-12-01T10:00:00,000000+00:00 NVRM") == utc
    assert nvml.parse_timestamp("kernel: NVRM: Xid (PCI:0000:07:00): 79, x", boot_time=1000.0) is None


def test_xids_of_dmesg_T_decode_and_kernel_tag_lines_age_out(tmp_path, monkeypatch):
    now = time.mktime((2026, 12, 3, 10, 0, 0, 0, 0, -1))
    monkeypatch.setattr(nvml, "_boot_time", lambda: now - 1000.0)
    log = tmp_path / "kern.log"
    log.write_text("".join([
        "[Tue Dec  1 10:00:00 2026] NVRM: Xid (PCI:0000:07:00): 79, pid=1, old\n",
        "[Thu Dec  3 09:59:00 2026] NVRM: Xid (PCI:0000:07:00): 94, pid=1, new\n",
        "kern  :warn  : [  100.000] NVRM: Xid (PCI:0000:07:00): 48, pid=1, old\n",
        "kern  :warn  : [  990.000] NVRM: Xid (PCI:0000:07:00): 63, pid=1, new\n",
        "kernel: [  200.000] NVRM: Xid (PCI:0000:07:00): 74, pid=1, old\n",
        "kernel: [  995.000] NVRM: Xid (PCI:0000:07:00): 92, pid=1, new\n",
    ]))
    xids, used, error = nvml.read_xids("file", str(log), window=60, now=now)
    assert (used, error) == ("file", "")
    assert [(x["xid"], x["message"]) for x in xids] == [(94, "pid=1, new"), (63, "pid=1, new"), (92, "pid=1, new")]
    assert all(x["timestamp"] for x in xids)


def test_read_xids_skips_malformed_records(tmp_path):
    """A journal record that is no object and absurd times give no traceback: skipped, or kept undated."""
    xid = "NVRM: Xid (PCI:0000:07:00): 48, pid=1, DBE"
    journal = "\n".join([
        "[1, 2, 3]", '"a string"', "null",
        json.dumps({"MESSAGE": xid, "__REALTIME_TIMESTAMP": "9" * 400}),
        json.dumps({"MESSAGE": xid, "__REALTIME_TIMESTAMP": str(10 ** 20)}),
    ])

    def runner(args):
        if args[0] == "journalctl":
            return 0, journal, ""
        if "--time-format" in args:
            return 1, "", "dmesg: unknown time format"
        return 0, "[99999999999999999999999.000000] %s\n[1e400] %s\n" % (xid, xid), ""

    found, used, error = nvml.read_xids("journal", runner=runner, now=1e9)
    assert (used, error) == ("journal", "")
    assert [(x["xid"], x["timestamp"]) for x in found] == [(48, ""), (48, "")]
    found, used, error = nvml.read_xids("dmesg", runner=runner, now=1e9)
    assert (used, error) == ("dmesg", "")
    assert [(x["xid"], x["timestamp"]) for x in found] == [(48, ""), (48, "")]
    log = tmp_path / "kern.log"
    log.write_text("9999-12-31T23:59:59-23:59 %s\n0000-01-01T00:00:00 %s\n" % (xid, xid))
    found, _used, error = nvml.read_xids("file", str(log), window=0)
    assert error == "" and [x["timestamp"] for x in found] == ["", ""]
