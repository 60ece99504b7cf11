"""The fake libnvidia-ml.so.1 (tests/hardware/nvml) as NVIDIA's k8s-device-plugin v0.20.0
uses it: NVML event sets fed by the scenario (an XID appended at run time reaches a caller
blocked in nvmlEventSetWait), MIG device handles, and every NVML symbol on the plugin's
startup, health-check and allocation paths. Real pynvml loads the library through
LD_LIBRARY_PATH in a child process, as tests/unit/test_gpu_info.py does."""

import ctypes
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NVML_DIR = ROOT / "tests" / "hardware" / "nvml"
SCENARIOS = NVML_DIR / "scenarios"

# What k8s-device-plugin v0.20.0 (go-nvml, go-nvlib, go-gpuallocator, nvidia-container-toolkit
# nvcdi as vendored there) calls in libnvidia-ml.so.1. go-nvml binds lazily: a missing symbol
# kills the plugin at its first call ("undefined symbol: nvmlEventSetCreate").
PLUGIN_SYMBOLS = {
    # startup, migStrategy none (info.ResolvePlatform, rm.NewNVMLResourceManagers, BuildDevice)
    "startup": ["nvmlInit_v2", "nvmlShutdown", "nvmlErrorString", "nvmlDeviceGetCount_v2",
                "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetName", "nvmlDeviceGetMigMode",
                "nvmlDeviceGetUUID", "nvmlDeviceGetMinorNumber", "nvmlDeviceGetPciInfo_v3",
                "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetCudaComputeCapability"],
    # internal/rm/health.go
    "health": ["nvmlEventSetCreate", "nvmlEventSetFree", "nvmlDeviceGetHandleByUUID",
               "nvmlDeviceGetSupportedEventTypes", "nvmlDeviceRegisterEvents", "nvmlEventSetWait_v2",
               "nvmlDeviceGetDeviceHandleFromMigDeviceHandle", "nvmlDeviceGetGpuInstanceId",
               "nvmlDeviceGetComputeInstanceId"],
    # migStrategy single/mixed (go-nvlib VisitMigDevices, MigDevice.GetProfile, VisitMigProfiles)
    "mig": ["nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetMigDeviceHandleByIndex",
            "nvmlDeviceIsMigDeviceHandle", "nvmlDeviceGetAttributes_v2", "nvmlDeviceGetGpuInstanceById",
            "nvmlGpuInstanceGetComputeInstanceById", "nvmlGpuInstanceGetInfo", "nvmlComputeInstanceGetInfo_v2",
            "nvmlDeviceGetGpuInstanceProfileInfo", "nvmlGpuInstanceGetComputeInstanceProfileInfo"],
    # GetPreferredAllocation (go-gpuallocator links)
    "allocation": ["nvmlDeviceGetTopologyCommonAncestor", "nvmlDeviceGetNvLinkState",
                   "nvmlDeviceGetNvLinkRemotePciInfo_v2"],
    # deviceListStrategy cdi-* (nvcdi)
    "cdi": ["nvmlSystemGetDriverVersion", "nvmlSystemGetCudaDriverVersion", "nvmlDeviceGetIndex"],
}


@pytest.fixture(scope="module")
def fake_nvml_dir():
    if shutil.which("gcc") is None:
        pytest.fail("gcc is missing: it is needed to build the fake libnvidia-ml.so.1 (apt-get install gcc)")
    proc = subprocess.run(["bash", str(NVML_DIR / "build.sh")], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, "building the fake NVML failed:\n" + proc.stderr
    return Path(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def scenario(tmp_path):
    """A private copy of a shipped scenario: the tests append events to it."""
    def copy(name, extra=""):
        path = tmp_path / name
        path.write_text((SCENARIOS / name).read_text() + extra)
        return path
    return copy


def child_env(lib_dir, scenario_path, tmp_path):
    return {"PATH": os.environ["PATH"], "LD_LIBRARY_PATH": str(lib_dir), "LANG": "C.UTF-8",
            "AI_L1_FAKE_NVML_SCENARIO": str(scenario_path),
            "AI_L1_FAKE_NVML_STATE": str(tmp_path / "no-state")}


PRELUDE = """\
import ctypes, json, os, sys
import pynvml as n

def code(fn, *args):
    try:
        fn(*args)
        return 0
    except n.NVMLError as e:
        return e.value

def event(data):
    return {"type": data.eventType, "data": data.eventData, "gpu": n.nvmlDeviceGetIndex(data.device),
            "ptr": ctypes.cast(data.device, ctypes.c_void_p).value,
            "gi": data.gpuInstanceId, "ci": data.computeInstanceId}

def ptr(handle):
    return ctypes.cast(handle, ctypes.c_void_p).value

n.nvmlInit()
"""


def run_py(lib_dir, scenario_path, tmp_path, body):
    proc = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(body)], capture_output=True, text=True,
                          env=child_env(lib_dir, scenario_path, tmp_path), check=False, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_plugin_symbols_are_exported(fake_nvml_dir):
    lib = ctypes.CDLL(str(fake_nvml_dir / "libnvidia-ml.so.1"))
    missing = {path: [s for s in symbols if not hasattr(lib, s)] for path, symbols in PLUGIN_SYMBOLS.items()}
    assert {path: s for path, s in missing.items() if s} == {}


def test_xid_appended_while_waiting_is_one_event(fake_nvml_dir, scenario, tmp_path):
    """The device plugin's health check: XID events registered on GPU 2, a wait that times
    out, then an XID 79 appended to the scenario while the caller waits."""
    conf = scenario("a100-8x-nvswitch-mig.conf")
    body = PRELUDE + textwrap.dedent("""\
        gpu2 = n.nvmlDeviceGetHandleByIndex(2)
        out = {"supported": n.nvmlDeviceGetSupportedEventTypes(gpu2), "gpu2": ptr(gpu2)}
        s = n.nvmlEventSetCreate()
        n.nvmlDeviceRegisterEvents(gpu2, n.nvmlEventTypeXidCriticalError, s)
        out["quiet"] = code(n.nvmlEventSetWait_v2, s, 100)
        print("READY", flush=True)
        sys.stdin.readline()
        out["event"] = event(n.nvmlEventSetWait_v2(s, 10000))
        out["again"] = code(n.nvmlEventSetWait_v2, s, 200)
        out["free"] = code(n.nvmlEventSetFree, s)
        out["free_again"] = code(n.nvmlEventSetFree, s)
        print(json.dumps(out))
        """)
    child = subprocess.Popen([sys.executable, "-c", body], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=child_env(fake_nvml_dir, conf, tmp_path))
    try:
        first = child.stdout.readline()
        assert first.strip() == "READY", first + child.stderr.read()
        with conf.open("a") as handle:
            handle.write("gpu.2.xid.0=79\n")
        out, err = child.communicate("go\n", timeout=30)
    finally:
        child.kill()
    assert child.returncode == 0, out + err
    got = json.loads(out.strip().splitlines()[-1])
    assert got["supported"] & 0x8  # nvmlEventTypeXidCriticalError
    assert got["quiet"] == 10  # NVML_ERROR_TIMEOUT
    assert got["event"] == {"type": 0x8, "data": 79, "gpu": 2, "ptr": got["gpu2"], "gi": 0xFFFFFFFF,
                            "ci": 0xFFFFFFFF}
    assert got["again"] == 10  # delivered once
    assert got["free"] == 0
    assert got["free_again"] == 2  # INVALID_ARGUMENT: not a live set


def test_only_registered_devices_and_types_are_delivered(fake_nvml_dir, scenario, tmp_path):
    conf = scenario("a100-8x-nvswitch-mig.conf")
    got = run_py(fake_nvml_dir, conf, tmp_path, f"""\
        h = [n.nvmlDeviceGetHandleByIndex(i) for i in range(8)]
        s = n.nvmlEventSetCreate()
        n.nvmlDeviceRegisterEvents(h[0], n.nvmlEventTypeSingleBitEccError, s)
        n.nvmlDeviceRegisterEvents(h[3], n.nvmlEventTypeXidCriticalError | n.nvmlEventTypeDoubleBitEccError, s)
        other = n.nvmlEventSetCreate()
        n.nvmlDeviceRegisterEvents(h[3], n.nvmlEventTypeXidCriticalError, other)
        with open({str(conf)!r}, "a") as f:
            f.write("gpu.0.xid.0=79\\n"          # GPU 0 registered for SBE only
                    "gpu.1.xid.0=79\\n"          # GPU 1 not registered
                    "gpu.0.event.0=sbe\\n"
                    "gpu.3.xid.0=43,1,0\\n"      # attributed to GPU instance 1, compute instance 0
                    "gpu.3.event.0=dbe\\n")
        out = {{"events": []}}
        while True:
            try:
                out["events"].append(event(n.nvmlEventSetWait_v2(s, 150)))
            except n.NVMLError_Timeout:
                break
        out["other"] = event(n.nvmlEventSetWait_v2(other, 1000))
        out["other_again"] = code(n.nvmlEventSetWait_v2, other, 100)
        print(json.dumps(out))
        """)
    simple = [(e["gpu"], e["type"], e["data"], e["gi"], e["ci"]) for e in got["events"]]
    assert simple == [(0, 0x1, 0, 0xFFFFFFFF, 0xFFFFFFFF), (3, 0x8, 43, 1, 0), (3, 0x2, 0, 0xFFFFFFFF, 0xFFFFFFFF)]
    # every set keeps its own record of what it delivered
    assert (got["other"]["gpu"], got["other"]["data"], got["other_again"]) == (3, 43, 10)


def test_history_at_registration_is_not_delivered_unless_replayed(fake_nvml_dir, scenario, tmp_path):
    """As on the real driver, events before nvmlDeviceRegisterEvents are not recorded;
    event_replay=1 makes what the scenario already lists pending for every new set."""
    body = """\
        h = n.nvmlDeviceGetHandleByIndex(2)
        s = n.nvmlEventSetCreate()
        n.nvmlDeviceRegisterEvents(h, n.nvmlEventTypeXidCriticalError, s)
        got = []
        while True:
            try:
                got.append(n.nvmlEventSetWait_v2(s, 100).eventData)
            except n.NVMLError_Timeout:
                break
        print(json.dumps(got))
        """
    history = "gpu.2.xid.0=48\ngpu.*.xid.1=79\ngpu.2.xid.1=\n"  # the GPU's empty key removes the default
    assert run_py(fake_nvml_dir, scenario("a100-8x-nvswitch-mig.conf", history), tmp_path, body) == []
    replay = scenario("a100-8x-nvswitch-mig.conf", history + "event_replay=1\ngpu.*.xid.2=31\n")
    assert run_py(fake_nvml_dir, replay, tmp_path, body) == [48, 31]


def test_xid_from_the_simulated_kernel_log(fake_nvml_dir, scenario, tmp_path):
    """xid_kernel_log: the NVRM lines a fault injection appends for the fake dcgm-exporter
    and NPD also reach NVML event sets, matched to a GPU by PCI bus."""
    shutil.copy(SCENARIOS / "a100-pcie-2x-xid79.kern.log", tmp_path / "kern.log")
    conf = scenario("a100-pcie-2x-xid79.conf", "xid_kernel_log=kern.log\n")  # relative to the scenario
    got = run_py(fake_nvml_dir, conf, tmp_path, f"""\
        s = n.nvmlEventSetCreate()
        for i in range(2):
            n.nvmlDeviceRegisterEvents(n.nvmlDeviceGetHandleByIndex(i), n.nvmlEventTypeXidCriticalError, s)
        out = {{"before": code(n.nvmlEventSetWait_v2, s, 100)}}
        with open({str(tmp_path / "kern.log")!r}, "a") as f:
            f.write("2024-05-01T11:00:00.000000+00:00 gpu7 kernel: [ 4000.000000] NVRM: Xid (PCI:0000:0a:00): 79, "
                    "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\\n"
                    "2024-05-01T11:00:01.000000+00:00 gpu7 kernel: [ 4001.000000] NVRM: Xid (PCI:0000:99:00): 79, "
                    "pid=1, GPU has fallen off the bus.\\n")
        out["event"] = event(n.nvmlEventSetWait_v2(s, 2000))
        out["after"] = code(n.nvmlEventSetWait_v2, s, 100)
        with open({str(tmp_path / "kern.log")!r}, "a") as f:  # a line still being written
            f.write("2024-05-01T11:00:02.000000+00:00 gpu7 kernel: [ 4002.000000] NVRM: Xid (PCI:0000:07:00): 4")
        out["partial"] = code(n.nvmlEventSetWait_v2, s, 100)
        with open({str(tmp_path / "kern.log")!r}, "a") as f:
            f.write("8, pid=77, name=python3, An uncorrectable double bit error (DBE) has been detected.\\n")
        out["completed"] = n.nvmlEventSetWait_v2(s, 2000).eventData
        os.rename({str(tmp_path / "kern.log")!r}, {str(tmp_path / "kern.log.1")!r})  # rotated
        with open({str(tmp_path / "kern.log")!r}, "w") as f:
            f.write("2024-05-01T12:00:00.000000+00:00 gpu7 kernel: [ 10.000000] NVRM: Xid (PCI:0000:07:00.0): 94, "
                    "pid=9, name=python3, Contained ECC error.\\n")
        out["rotated"] = event(n.nvmlEventSetWait_v2(s, 2000))
        print(json.dumps(out))
        """)
    assert got["before"] == 10  # the log's earlier XIDs are history
    assert (got["event"]["gpu"], got["event"]["type"], got["event"]["data"]) == (1, 0x8, 79)
    assert got["after"] == 10  # PCI 99:00 is no GPU of the scenario
    assert got["partial"] == 10  # a line counts once its newline is there
    assert got["completed"] == 48
    assert (got["rotated"]["gpu"], got["rotated"]["data"]) == (0, 94)


def test_event_api_errors_and_v1_layout(fake_nvml_dir, scenario, tmp_path):
    conf = scenario("a100-8x-nvswitch-mig.conf", "gpu.1.supported_event_types=0x8\n")
    got = run_py(fake_nvml_dir, conf, tmp_path, f"""\
        h0, h1 = n.nvmlDeviceGetHandleByIndex(0), n.nvmlDeviceGetHandleByIndex(1)
        mig = n.nvmlDeviceGetMigDeviceHandleByIndex(h0, 0)
        s = n.nvmlEventSetCreate()
        out = {{"supported1": n.nvmlDeviceGetSupportedEventTypes(h1),
               "unsupported": code(n.nvmlDeviceRegisterEvents, h1, n.nvmlEventTypeDoubleBitEccError, s),
               "mig": code(n.nvmlDeviceRegisterEvents, mig, n.nvmlEventTypeXidCriticalError, s)}}
        n.nvmlDeviceRegisterEvents(h1, n.nvmlEventTypeXidCriticalError, s)
        with open({str(conf)!r}, "a") as f:  # an append under way: its line is not complete yet
            f.write("gpu.1.xid.7=9")
        out["partial"] = code(n.nvmlEventSetWait_v2, s, 100)
        with open({str(conf)!r}, "a") as f:
            f.write("4\\n")
        # nvmlEventSetWait (v1) fills the pre-MIG layout: device, eventType, eventData (24 bytes)
        buf = (ctypes.c_ubyte * 32)(*([0xAB] * 32))
        wait_v1 = n._nvmlGetFunctionPointer("nvmlEventSetWait")
        out["v1"] = wait_v1(s, ctypes.byref(buf), ctypes.c_uint(2000))
        out["v1_data"] = ctypes.cast(ctypes.byref(buf, 16), ctypes.POINTER(ctypes.c_ulonglong))[0]
        out["v1_tail"] = list(buf[24:])
        with open({str(conf)!r}, "a") as f:
            f.write("error.nvmlEventSetWait_v2=GPU_IS_LOST\\n")
        out["lost"] = code(n.nvmlEventSetWait_v2, s, 1000)
        n.nvmlEventSetFree(s)
        print(json.dumps(out))
        """)
    assert got["supported1"] == 0x8
    assert got["partial"] == 10  # not XID 9
    assert got["unsupported"] == 3  # NOT_SUPPORTED
    assert got["mig"] == 3  # no per-instance registration through MIG device handles
    assert (got["v1"], got["v1_data"], got["v1_tail"]) == (0, 94, [0xAB] * 8)
    assert got["lost"] == 15  # GPU_IS_LOST, injected while the set is in use


def test_mig_device_handles_match_nvidia_smi(fake_nvml_dir, tmp_path):
    """What go-nvlib reads for migStrategy mixed and the health check for a MIG device:
    handles by index, UUIDs as nvidia-smi -L prints them, the parent, GPU and compute
    instance IDs, attributes and the matching profiles."""
    conf = SCENARIOS / "a100-8x-nvswitch-mig.conf"
    got = run_py(fake_nvml_dir, conf, tmp_path, """\
        out = []
        for i in range(n.nvmlDeviceGetCount()):
            gpu = n.nvmlDeviceGetHandleByIndex(i)
            for j in range(n.nvmlDeviceGetMaxMigDeviceCount(gpu)):
                try:
                    m = n.nvmlDeviceGetMigDeviceHandleByIndex(gpu, j)
                except n.NVMLError_NotFound:
                    continue
                uuid = n.nvmlDeviceGetUUID(m)
                by_uuid = n.nvmlDeviceGetHandleByUUID(uuid)
                parent = n.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(by_uuid)
                gi_id, ci_id = n.nvmlDeviceGetGpuInstanceId(m), n.nvmlDeviceGetComputeInstanceId(m)
                gi = n.nvmlDeviceGetGpuInstanceById(parent, gi_id)
                ci_info = n.nvmlComputeInstanceGetInfo(n.nvmlGpuInstanceGetComputeInstanceById(gi, ci_id))
                ci_profile = n.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, ci_info.profileId, 0, version=1)
                attrs = n.nvmlDeviceGetAttributes_v2(m)
                out.append({"gpu": i, "index": n.nvmlDeviceGetIndex(m), "uuid": uuid,
                            "is_mig": n.nvmlDeviceIsMigDeviceHandle(m).value, "same": ptr(by_uuid) == ptr(m),
                            "parent": n.nvmlDeviceGetIndex(parent), "gi": gi_id, "ci": ci_id,
                            "gi_profile": n.nvmlGpuInstanceGetInfo(gi).profileId,
                            "ci_slices": ci_profile.sliceCount, "gi_slices": attrs.gpuInstanceSliceCount,
                            "memory_mb": attrs.memorySizeMB, "total_mib": n.nvmlDeviceGetMemoryInfo(m).total >> 20,
                            "name": n.nvmlDeviceGetName(m)})
        l40s_like = {"whole_gpu_is_mig": n.nvmlDeviceIsMigDeviceHandle(n.nvmlDeviceGetHandleByIndex(0)).value,
                     "attributes_of_gpu": code(n.nvmlDeviceGetAttributes_v2, n.nvmlDeviceGetHandleByIndex(0))}
        print(json.dumps({"migs": out, "gpu": l40s_like}))
        """)
    smi = subprocess.run([str(fake_nvml_dir / "nvidia-smi"), "-L"], capture_output=True, text=True, check=True,
                         env=child_env(fake_nvml_dir, conf, tmp_path)).stdout
    listed, gpu = [], -1
    for line in smi.splitlines():
        if line.startswith("GPU "):
            gpu += 1
        elif "MIG-" in line:
            listed.append((gpu, int(line.split("Device")[1].split(":")[0]), line.split("UUID: ")[1].rstrip(")")))
    migs = got["migs"]
    assert [(m["gpu"], m["index"], m["uuid"]) for m in migs] == listed
    assert len(listed) == 22  # 7 GPUs with 2g.20gb, 2g.20gb, 3g.40gb; GPU 4 with one 7g.80gb
    for m in migs:
        assert m["is_mig"] == 1 and m["same"] and m["parent"] == m["gpu"] and m["ci"] == 0
        assert m["ci_slices"] == m["gi_slices"]  # one compute instance spanning the GPU instance
        assert m["memory_mb"] == m["total_mib"]
    first = migs[0]
    assert (first["gi"], first["gi_profile"], first["gi_slices"], first["memory_mb"]) == (3, 14, 2, 19968)
    assert first["name"] == "NVIDIA A100-SXM4-80GB MIG 2g.20gb"
    whole = [m for m in migs if m["gpu"] == 4]
    assert [(m["gi"], m["gi_profile"], m["ci_slices"], m["memory_mb"]) for m in whole] == [(0, 0, 7, 80896)]
    assert got["gpu"] == {"whole_gpu_is_mig": 0, "attributes_of_gpu": 3}


@pytest.mark.parametrize(("name", "expect"), [
    ("h100-8x-nvswitch.conf", {"mig": 6, "arch": 9}),  # MIG capable, off: NOT_FOUND
    ("l40s-8x-pcie.conf", {"mig": 3, "arch": 8}),  # no MIG: NOT_SUPPORTED; Ada
    ("a100-pcie-2x-xid79.conf", {"mig": 6, "arch": 7}),
])
def test_mig_off_and_architecture(fake_nvml_dir, tmp_path, name, expect):
    got = run_py(fake_nvml_dir, SCENARIOS / name, tmp_path, """\
        h = n.nvmlDeviceGetHandleByIndex(0)
        print(json.dumps({"mig": code(n.nvmlDeviceGetMigDeviceHandleByIndex, h, 0),
                          "arch": n.nvmlDeviceGetArchitecture(h)}))
        """)
    assert got == expect


def test_nvlink_remote_ends(fake_nvml_dir, tmp_path):
    """go-gpuallocator counts the NVLinks between two GPUs by the remote PCI bus IDs."""
    body = """\
        count = n.nvmlDeviceGetCount()
        h = [n.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        bus = {n.nvmlDeviceGetPciInfo(x).busId: i for i, x in enumerate(h)}
        links = {}
        for i in range(count):
            for link in range(18):
                try:
                    if not n.nvmlDeviceGetNvLinkState(h[i], link):
                        continue
                    remote = n.nvmlDeviceGetNvLinkRemotePciInfo(h[i], link).busId
                except n.NVMLError as e:
                    links.setdefault(i, []).append(e.value)
                    break
                links.setdefault(i, []).append(bus.get(remote, remote))
        print(json.dumps(links))
        """
    bridged = run_py(fake_nvml_dir, SCENARIOS / "a100-pcie-4x-bridged.conf", tmp_path, body)
    # 12 links each to the bridged peer; link 12 is INVALID_ARGUMENT (go-gpuallocator skips it)
    assert bridged == {"0": [1] * 12 + [2], "1": [0] * 12 + [2], "2": [3] * 12 + [2], "3": [2] * 12 + [2]}
    switched = run_py(fake_nvml_dir, SCENARIOS / "h100-8x-nvswitch.conf", tmp_path, body)
    assert all(isinstance(b, str) and b.startswith("00000000:C") for ends in switched.values() for b in ends[:18])
    assert run_py(fake_nvml_dir, SCENARIOS / "l40s-8x-pcie.conf", tmp_path, body)["0"] == [3]  # NOT_SUPPORTED
