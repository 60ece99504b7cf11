"""The one accelerator-facts layer (plugins/module_utils/accelerator_health.py): the XID policy and
the health view, table-tested, and each of its readers held to it: gpu_info (nvml), npu_info, the
Node Problem Detector GPU plugin (its ConfigMap script: accelerator_health.py followed by
monitoring/npd/check_gpu.py) and the remediation receiver (day2/ai_l1_day2, importing it from the collection)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ai_l1_day2 import collection
from ai_l1_day2.remediation import config as config_mod
from ai_l1_day2.remediation.service import Service
from ai_l1_day2.remediation.store import Store
from ansible_collections.ai_platform.l1.plugins.module_utils import accelerator_health as ah
from ansible_collections.ai_platform.l1.plugins.module_utils import nvml
from ansible_collections.ai_platform.l1.plugins.modules import gpu_info
from remediation_fakes import FakeExecutor, FakeNodes, alert, make_config, payload

ROOT = Path(__file__).resolve().parents[2]
MODULE_UTILS = ROOT / "collections/ansible_collections/ai_platform/l1/plugins/module_utils"
NPD_CONFIGMAP = ROOT / "monitoring/kubernetes/npd-gpu-configmap.yaml"

DEFAULT = ah.XidPolicy()


# ------------------------------------------------------------------ the XID policy


@pytest.mark.parametrize(("policy", "code", "state"), [
    *[(DEFAULT, code, ah.OK) for code in (13, 31, 43, 45, 68, 109)],  # NVIDIA's device plugin ignores these
    *[(DEFAULT, code, ah.FAILED) for code in (48, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140)],
    (DEFAULT, 32, ah.DEGRADED),  # in neither list
    (DEFAULT, 0, ah.DEGRADED),
    (ah.XidPolicy(ignore=[79]), 79, ah.OK),  # ignore wins over critical
    (ah.XidPolicy(ignore=[79]), 13, ah.DEGRADED),  # an explicit ignore list replaces the default one
    (ah.XidPolicy(ignore=[]), 13, ah.DEGRADED),
    (ah.XidPolicy(critical=[13]), 13, ah.FAILED),  # critical on purpose: out of the default ignore list
    (ah.XidPolicy(critical=[13]), 31, ah.OK),  # the rest of the default ignore list stays
    (ah.XidPolicy(critical=[13]), 79, ah.DEGRADED),  # the explicit critical list replaces the default
    (ah.XidPolicy(ignore=[13], critical=[13]), 13, ah.OK),  # both explicit: ignore wins
])
def test_xid_policy(policy, code, state):
    assert policy.state(code) == state
    assert policy.signal(code) == {ah.OK: None, ah.DEGRADED: "xid", ah.FAILED: "xid-critical"}[state]


def test_default_lists():
    assert ah.APPLICATION_XIDS == (13, 31, 43, 45, 68, 109)
    assert not set(ah.APPLICATION_XIDS) & set(ah.CRITICAL_XIDS)
    assert set(ah.SIGNALS.values()) <= set(ah.STATES)


# ------------------------------------------------------------------ the health view


@pytest.mark.parametrize(("adds", "state", "reasons"), [
    ([], ah.OK, []),
    ([("xid", "XID 32")], ah.DEGRADED, ["XID 32"]),
    ([("xid", "XID 32"), ("ecc-dbe", "DBE"), ("sxid", "SXid")], ah.FAILED, ["XID 32", "DBE", "SXid"]),
    ([("gpu-lost", "lost"), ("gpu-lost", "lost")], ah.FAILED, ["lost"]),  # a reason once
    ([("npu-warning", "w")], ah.DEGRADED, ["w"]),
    ([("npu-alarm", "a"), ("npu-warning", "w")], ah.FAILED, ["a", "w"]),
])
def test_health_view(adds, state, reasons):
    view = ah.HealthView()
    for signal, text in adds:
        view.add(signal, text)
    assert (view.state, view.reasons) == (state, reasons)
    assert view.as_dict() == {"state": state, "reasons": reasons}
    assert view.legacy() == {"ok": not reasons, "problems": reasons}
    assert sorted(view.reasons_at(ah.FAILED) + view.reasons_at(ah.DEGRADED)) == sorted(reasons)
    assert ah.HealthView().extend(view).items() == view.items()


def test_health_view_refuses_unknown_signals_and_states():
    with pytest.raises(KeyError):
        ah.HealthView().add("no-such-signal", "x")
    with pytest.raises(ValueError, match="unknown health state 'broken'"):
        ah.HealthView([("broken", "x")])


@pytest.mark.parametrize(("states", "worst"), [
    ([], ah.OK), ([ah.OK, ah.OK], ah.OK), ([ah.DEGRADED, ah.OK], ah.DEGRADED),
    ([ah.OK, ah.FAILED, ah.DEGRADED], ah.FAILED),
])
def test_worst(states, worst):
    assert ah.worst(states) == worst


# ------------------------------------------------------------------ a GPU (gpu_info's facts)


def gpu(**over):
    g = {"index": 0, "pci_bus_id": "00000000:07:00.0", "errors": [],
         "ecc": {"dbe_volatile": 0}, "remapped_rows": None, "retired_pages": None, "xid_errors": []}
    g.update(over)
    return g


def xid(code, ts="2024-05-01T10:15:45+00:00", message="m"):
    return {"xid": code, "pci_bus_id": "00000000:07:00.0", "timestamp": ts, "message": message}


G0 = "GPU 0 (00000000:07:00.0)"
GPU_CASES = [
    ("healthy", gpu(), ah.OK, []),
    ("ecc", gpu(ecc={"dbe_volatile": 2}), ah.FAILED, [f"{G0}: 2 volatile double-bit ECC errors"]),
    ("ecc-unsupported", gpu(ecc={"dbe_volatile": None}), ah.OK, []),
    ("remap-failure", gpu(remapped_rows={"failure": True, "pending": False}), ah.FAILED,
     [f"{G0}: row remapping failed (replace the GPU)"]),
    ("remap-pending", gpu(remapped_rows={"failure": False, "pending": True}), ah.DEGRADED,
     [f"{G0}: row remapping pending (reset the GPU)"]),
    ("retire-pending", gpu(retired_pages={"pending": True}), ah.DEGRADED,
     [f"{G0}: page retirement pending (reset the GPU)"]),
    ("lost", gpu(index=1, pci_bus_id="", errors=["handle: GPU is lost"]), ah.FAILED,
     ["GPU 1 (unknown PCI address): NVML query failed: handle: GPU is lost"]),
    ("query-failed", gpu(errors=["name: not valid UTF-8"]), ah.DEGRADED,
     [f"{G0}: NVML query failed: name: not valid UTF-8"]),
    ("application-xid", gpu(xid_errors=[xid(13), xid(31)]), ah.OK, []),
    ("other-xid", gpu(xid_errors=[xid(32, ts="")]), ah.DEGRADED,
     [f"{G0}: XID 32 seen 1 time(s), last at an unknown time: m"]),
    ("critical-xid", gpu(xid_errors=[xid(79, message="a"), xid(48), xid(79, message="b")]), ah.FAILED,
     [f"{G0}: XID 48 seen 1 time(s), last 2024-05-01T10:15:45+00:00: m",
      f"{G0}: XID 79 seen 2 time(s), last 2024-05-01T10:15:45+00:00: b"]),
]


@pytest.mark.parametrize(("g", "state", "reasons"), [c[1:] for c in GPU_CASES], ids=[c[0] for c in GPU_CASES])
def test_gpu_view(g, state, reasons):
    view = ah.gpu_view(g, DEFAULT)
    assert (view.state, view.reasons) == (state, reasons)


def sxid(code, message, pci="00000000:C5:00.0"):
    return {"xid": code, "pci_bus_id": pci, "timestamp": "", "message": message}


NODE_CASES = [
    ("fm-running", {"fabric_manager": {"required": True, "state": "running"}}, ah.OK, []),
    ("fm-down", {"fabric_manager": {"required": True, "state": "inactive"}}, ah.FAILED,
     ["NVSwitch present but the fabric manager is inactive"]),
    ("fm-not-needed", {"fabric_manager": {"required": False, "state": "n/a"}}, ah.OK, []),
    ("sxid-fatal", {"sxids": [sxid(24007, "Fatal, Link 44 ...")]}, ah.FAILED,
     ["NVSwitch (00000000:C5:00.0): SXid 24007 seen 1 time(s), last at an unknown time: Fatal, Link 44 ..."]),
    ("sxid-non-fatal", {"sxids": [sxid(20034, "Non-fatal, Link 3 ..."), sxid(20034, "Non-fatal, again")]},
     ah.DEGRADED,
     ["NVSwitch (00000000:C5:00.0): SXid 20034 seen 2 time(s), last at an unknown time: Non-fatal, again"]),
    ("orphan-critical", {"orphan_xids": [xid(79) | {"pci_bus_id": "00000000:99:00.0", "message": "gone"}]},
     ah.FAILED, ["XID 79 on PCI 00000000:99:00.0, a device NVML does not list: gone"]),
    ("orphan-ignored", {"orphan_xids": [xid(43)]}, ah.OK, []),
    ("system-error", {"system_errors": ["cuda driver version: Unknown Error"]}, ah.DEGRADED,
     ["NVML query failed: cuda driver version: Unknown Error"]),
]


@pytest.mark.parametrize(("kwargs", "state", "reasons"), [c[1:] for c in NODE_CASES], ids=[c[0] for c in NODE_CASES])
def test_nvidia_view(kwargs, state, reasons):
    view = ah.nvidia_view([gpu()], DEFAULT, **kwargs)
    assert (view.state, view.reasons) == (state, reasons)


def test_nvml_health_is_the_view_legacy_form():
    result = {"gpus": [gpu(ecc={"dbe_volatile": 1}), gpu(index=1, xid_errors=[xid(13)])],
              "fabric_manager": {"required": False, "state": "n/a"}, "_system_errors": ["x: y"]}
    assert nvml.health(result, [13]) == {"ok": False, "problems": [
        f"{G0}: 1 volatile double-bit ECC errors", "NVML query failed: x: y"]}
    assert nvml.health(result, []) == {"ok": False, "problems": [
        f"{G0}: 1 volatile double-bit ECC errors",
        "GPU 1 (00000000:07:00.0): XID 13 seen 1 time(s), last 2024-05-01T10:15:45+00:00: m",
        "NVML query failed: x: y"]}
    assert nvml.health_view(result).state == ah.FAILED


def test_gpu_info_defaults_are_the_policy():
    doc = yaml.safe_load(gpu_info.DOCUMENTATION)
    assert doc["options"]["xid_ignore"]["default"] == list(ah.APPLICATION_XIDS)
    assert nvml.DEFAULT_XID_IGNORE == list(ah.APPLICATION_XIDS)


# ------------------------------------------------------------------ an NPU chip (npu_info's facts)


def chip(health="OK", codes=(), info="", **ecc):
    return {"npu_id": 3, "chip_id": 0, "health": health, "error_codes": list(codes), "error_information": info,
            "ecc": {"hbm_dbe": 0, "ddr_dbe": 0, **ecc}}


@pytest.mark.parametrize(("c", "state", "reasons"), [
    (chip(), ah.OK, []),
    (chip("Warning", ["80E01801"]), ah.DEGRADED, ["NPU 3 chip 0: health Warning, error 80E01801"]),
    (chip("Alarm", ["80E18005"], "task timeout"), ah.FAILED,
     ["NPU 3 chip 0: health Alarm, error 80E18005 (task timeout)"]),
    (chip("Critical"), ah.FAILED, ["NPU 3 chip 0: health Critical"]),
    (chip("UNKNOWN"), ah.FAILED, ["NPU 3 chip 0: health UNKNOWN"]),
    (chip(hbm_dbe=4), ah.FAILED, ["NPU 3 chip 0: 4 HBM double-bit ECC errors"]),
    (chip("Warning", ddr_dbe=1), ah.FAILED,
     ["NPU 3 chip 0: health Warning", "NPU 3 chip 0: 1 DDR double-bit ECC errors"]),
    (chip(hbm_dbe=None), ah.OK, []),  # NA on this chip
])
def test_npu_chip_view(c, state, reasons):
    view = ah.npu_chip_view(c)
    assert (view.state, view.reasons) == (state, reasons)


# ------------------------------------------------------------------ alerts (the remediation receiver)


@pytest.mark.parametrize(("name", "code", "state", "reasons"), [
    ("GPUXidError", 13, ah.OK, []),
    ("GPUXidError", 32, ah.DEGRADED, ["XID 32"]),
    ("GPUXidError", 79, ah.FAILED, ["XID 79"]),
    ("GPUXidError", None, ah.DEGRADED, ["XID of unknown code"]),
    ("GPUECCUncorrectableError", None, ah.FAILED, ["GPUECCUncorrectableError"]),
    ("GPURowRemapFailure", None, ah.FAILED, ["GPURowRemapFailure"]),
    ("GPUFallenOffBus", None, ah.FAILED, ["GPUFallenOffBus"]),
    ("GPUNodeUnavailable", None, ah.FAILED, ["GPUNodeUnavailable"]),
    ("SiteCustomAlert", None, ah.FAILED, ["SiteCustomAlert"]),
])
def test_alert_view(name, code, state, reasons):
    view = ah.alert_view(name, DEFAULT, code)
    assert (view.state, view.reasons) == (state, reasons)


class Clock:
    def __call__(self):
        return 1_000_000.0


@pytest.mark.parametrize(("alerts", "decisions"), [
    ([alert(xid=13)], [("ignored", "ok")]),
    ([alert(xid=32)], [("queued", "degraded")]),  # as before the view: every XID not ignored isolates
    ([alert(xid=79)], [("queued", "failed")]),
    ([alert(xid=None)], [("refused", "degraded")]),
    ([alert(name="GPUECCUncorrectableError", xid=None)], [("queued", "failed")]),
    ([alert(name="NotMapped", xid=None)], [("ignored", "")]),
    ([alert(xid=79, status="resolved")], [("ignored", "")]),
])
def test_receiver_decisions_carry_the_view(tmp_path, alerts, decisions):
    conf = make_config(tmp_path)
    svc = Service(conf, Store(conf.db_path, clock=Clock()), FakeNodes(), FakeExecutor(conf.jobs_dir), clock=Clock())
    got = svc.handle_payload(payload(*alerts))
    assert [(d["decision"], d["health"]) for d in got] == decisions


def test_receiver_policy_is_the_shared_one(tmp_path):
    assert config_mod.DEFAULT_XID_IGNORE == ah.APPLICATION_XIDS
    assert config_mod.accelerator_health is ah
    conf = make_config(tmp_path, xid={"ignore": [13, 79]})
    assert conf.xid_policy.state(79) == ah.OK and conf.xid_policy.state(48) == ah.FAILED


def test_receiver_finds_the_collection_in_its_project(tmp_path):
    """The receiver image and the systemd service put only day2 and the Python packages on
    PYTHONPATH; the collection is under $AI_L1_PROJECT_DIR/collections (ansible.cfg's
    collections_path). ai_l1_day2.collection adds it."""
    project = tmp_path / "project"
    target = project / "collections/ansible_collections/ai_platform/l1/plugins/module_utils"
    target.mkdir(parents=True)
    for name in ("accelerator_health.py", "device_io.py"):
        shutil.copy(MODULE_UTILS / name, target / name)
    code = ("import ai_l1_day2.collection as c; m = c.module_utils('accelerator_health'); "
            "print(m.__file__); print(m.XidPolicy().state(79))")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT / "day2"), "AI_L1_PROJECT_DIR": str(project)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                          check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(target / "accelerator_health.py"), "failed"]


def test_missing_module_utils_names_where_it_looked():
    with pytest.raises(ImportError, match=r"module_utils/no_such_helper\.py is not importable and not in .*"
                                          r"set AI_L1_PROJECT_DIR"):
        collection.module_utils("no_such_helper")


# ------------------------------------------------------------------ the NPD plugin


def npd_script():
    return yaml.safe_load(NPD_CONFIGMAP.read_text())["data"]["check_gpu.py"]


def test_npd_plugin_runs_the_collection_policy():
    script = npd_script()
    assert script.startswith((MODULE_UTILS / "accelerator_health.py").read_text())
    namespace = {"__name__": "not_main"}
    exec(compile(script, "check_gpu.py", "exec"), namespace)  # noqa: S102 (main() runs only as __main__)
    assert namespace["CRITICAL_XIDS"] == ah.CRITICAL_XIDS and namespace["SIGNALS"] == ah.SIGNALS


@pytest.mark.parametrize(("log", "args", "rc", "out"), [
    ("NVRM: Xid (PCI:0000:07:00): 32, pid=1, Invalid or corrupted push buffer stream\n", [], 0,
     "GPUs have no XID or double-bit ECC errors that need service; degraded: XID 32 on PCI 0000:07:00"),
    ("NVRM: Xid (PCI:0000:07:00): 43, pid=1, x\n", [], 0, "GPUs have no XID or double-bit ECC errors"),
    ("NVRM: Xid (PCI:0000:07:00): 32, x\nNVRM: Xid (PCI:0000:07:00): 94, x\n", [], 1, "XID 94 on PCI 0000:07:00"),
    ("NVRM: Xid (PCI:0000:07:00): 43, x\n", ["--xid", "43"], 1, "XID 43 on PCI 0000:07:00"),
    ("NVRM: Xid (PCI:0000:07:00): 43, x\n", ["--xid", "4x"], 2, "bad --xid list: 4x"),
])
def test_npd_plugin_reads_the_policy(tmp_path, log, args, rc, out):
    kern = tmp_path / "kern.log"
    kern.write_text(log)
    proc = subprocess.run([sys.executable, "-", "--check", "xid", "--kernel-log", str(kern), *args],
                          input=npd_script(), capture_output=True, text=True, check=False, timeout=300)
    assert (proc.returncode, proc.stdout.strip()) == (rc, out), proc.stderr
