#!/usr/bin/env python3
"""Node Problem Detector custom plugin: GPU XID and double-bit ECC check.

Exit codes follow NPD's custom-plugin protocol: 0 OK, 1 problem, 2 unknown. The first
line of stdout is the condition message (NPD truncates it to max_output_length).

- XID: kernel messages since boot (`journalctl -k -b`, else `dmesg`, or --kernel-log)
  are searched for `NVRM: Xid (PCI:<bus>): <code>`. Only codes that mean the GPU needs a
  reset or replacement count (the XID policy's critical list, or --xid); application faults
  such as 13/31/43 do not.
- ECC: NVML's volatile uncorrected (double-bit) count per GPU, read with ctypes from
  libnvidia-ml.so.1 so the plugin needs nothing but python3 on the node. Volatile
  counts reset at driver reload, so the condition clears after the GPU is serviced.
  A GPU that NVML reports lost is a problem too.

The XID policy and the health view (ok / degraded / failed, with reasons) are the ones gpu_info
and the remediation receiver read: the block between the SHARED markers is copied from the
collection's plugins/module_utils/accelerator_health.py by monitoring/generate.py (this script
runs alone with the node's python3, where the collection is not). The condition GPUError is set
for a failed GPU; a degraded one (an XID in neither list) is named in the OK message.
"""

import argparse
import ctypes
import re
import shutil
import subprocess
import sys

EXIT_OK, EXIT_PROBLEM, EXIT_UNKNOWN = 0, 1, 2

# BEGIN SHARED accelerator health: the source is the collection's
# plugins/module_utils/accelerator_health.py; monitoring/generate.py copies these lines into
# monitoring/npd/check_gpu.py (standard library only, no imports).
OK, DEGRADED, FAILED = "ok", "degraded", "failed"
STATES = (OK, DEGRADED, FAILED)  # from good to bad

# Application XIDs (user-program faults): the NVIDIA device plugin ignores them for health.
APPLICATION_XIDS = (13, 31, 43, 45, 68, 109)
# XIDs that need a GPU reset, a reboot or an RMA (NVIDIA XID catalogue): 48 DBE, 63/64 row
# remapping, 74 NVLink, 79 fallen off the bus, 92 high SBE rate, 94/95 contained / uncontained
# ECC, 119/120 GSP, 140 unrecovered ECC.
CRITICAL_XIDS = (48, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140)

# Fault signal -> what it makes of the device. A reason names one signal.
SIGNALS = {
    "xid-critical": FAILED,  # an XID in the critical list
    "xid": DEGRADED,  # an XID in neither list (or one whose code is not known)
    "ecc-dbe": FAILED,  # uncorrectable (double-bit) ECC errors, GPU framebuffer or NPU HBM/DDR
    "row-remap-failure": FAILED,  # a row the GPU could not remap: replace it
    "row-remap-pending": DEGRADED,  # remapped rows wait for a GPU reset
    "page-retirement-pending": DEGRADED,  # retired pages wait for a GPU reset
    "gpu-lost": FAILED,  # NVML has no handle for it, or it fell off the bus
    "gpu-unavailable": FAILED,  # the node's GPU exporter stopped answering
    "query-failed": DEGRADED,  # a driver query failed for another reason
    "sxid-fatal": FAILED,  # a fatal NVSwitch error
    "sxid": DEGRADED,  # a non-fatal NVSwitch error
    "fabric-manager-down": FAILED,  # NVSwitch present, fabric manager not running
    "npu-warning": DEGRADED,  # npu-smi health Warning (minor)
    "npu-alarm": FAILED,  # npu-smi health Alarm (major) or Critical
    "npu-unknown": FAILED,  # npu-smi health UNKNOWN (device absent or not started)
    "alert": FAILED,  # an alert a receiver is configured to act on
}


def worst(states):
    """The worst of the states (ok for none)."""
    return max(states, key=STATES.index, default=OK)


class XidPolicy:
    """The ignore list and the critical list of XID codes; ignore wins over critical.

    ignore None: the application XIDs, less any code given in critical (listing a code as
    critical on purpose overrides the default ignore list, not one given explicitly).
    """

    def __init__(self, ignore=None, critical=None):
        self.critical = frozenset(CRITICAL_XIDS if critical is None else critical)
        if ignore is None:
            ignore = [c for c in APPLICATION_XIDS if critical is None or c not in self.critical]
        self.ignore = frozenset(ignore)

    def signal(self, code):
        """'xid-critical', 'xid', or None for an ignored code."""
        if code in self.ignore:
            return None
        return "xid-critical" if code in self.critical else "xid"

    def state(self, code):
        """ok (ignored), degraded or failed."""
        signal = self.signal(code)
        return OK if signal is None else SIGNALS[signal]


class HealthView:
    """The health of a device or a node: reasons, each with the state its signal gives.

    state is the worst reason's (ok without reasons); as_dict() is {state, reasons};
    legacy() the {ok, problems} form of gpu_info and npu_info (ok: no reason at all).
    """

    def __init__(self, reasons=()):
        self._reasons = []  # [(state, text)], in the order found, each text once
        for state, text in reasons:
            self._add(state, text)

    def _add(self, state, text):
        if state not in STATES:
            raise ValueError("unknown health state %r" % (state,))
        if state != OK and all(text != t for _s, t in self._reasons):
            self._reasons.append((state, text))

    def add(self, signal, text):
        """Add a reason for a fault signal (a key of SIGNALS); a text already there is not repeated."""
        self._add(SIGNALS[signal], text)
        return self

    def extend(self, other):
        for state, text in other.items():
            self._add(state, text)
        return self

    def items(self):
        return list(self._reasons)

    @property
    def state(self):
        return worst(s for s, _t in self._reasons)

    @property
    def reasons(self):
        return [t for _s, t in self._reasons]

    def reasons_at(self, state):
        return [t for s, t in self._reasons if s == state]

    def as_dict(self):
        return {"state": self.state, "reasons": self.reasons}

    def legacy(self):
        return {"ok": not self._reasons, "problems": self.reasons}


# END SHARED accelerator health

XID_RE = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+)")

NVML_SUCCESS, NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_GPU_IS_LOST = 0, 3, 15
NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC = 1, 0


class Unknown(Exception):
    """The check could not tell (no driver, no kernel log)."""


def kernel_log(path):
    if path:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except OSError as exc:
            raise Unknown(f"cannot read {path}: {exc.strerror}") from exc
    for cmd in (["journalctl", "-k", "-b", "-q", "--no-pager"], ["dmesg"]):
        if shutil.which(cmd[0]) is None:
            continue
        proc = subprocess.run(cmd, capture_output=True, text=True, errors="replace", check=False, timeout=15)
        if proc.returncode == 0 and proc.stdout.strip():
            return proc.stdout
    raise Unknown("no kernel log (journalctl -k, dmesg)")


def xid_view(text, policy):
    """One reason per PCI address and state: the codes the policy does not ignore, in log order."""
    found = {}
    for bus, code in XID_RE.findall(text):
        state = policy.state(int(code))
        if state == OK:
            continue
        codes = found.setdefault(bus.lower(), {}).setdefault(state, [])
        if int(code) not in codes:
            codes.append(int(code))
    view = HealthView()
    for bus, by_state in sorted(found.items()):
        for state, signal in ((FAILED, "xid-critical"), (DEGRADED, "xid")):
            if by_state.get(state):
                view.add(signal, f"XID {','.join(map(str, by_state[state]))} on PCI {bus}")
    return view


def ecc_view(libname):
    try:
        lib = ctypes.CDLL(libname)
    except OSError as exc:
        raise Unknown(f"NVML not loadable: {exc}") from exc
    if lib.nvmlInit_v2() != NVML_SUCCESS:
        raise Unknown("NVML init failed (driver not loaded?)")
    try:
        count = ctypes.c_uint()
        if lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) != NVML_SUCCESS:
            raise Unknown("NVML device count failed")
        view = HealthView()
        for index in range(count.value):
            handle = ctypes.c_void_p()
            ret = lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle))
            if ret == NVML_ERROR_GPU_IS_LOST:
                view.add("gpu-lost", f"GPU {index} lost")
                continue
            if ret != NVML_SUCCESS:
                raise Unknown(f"GPU {index}: NVML error {ret}")
            dbe = ctypes.c_ulonglong()
            ret = lib.nvmlDeviceGetTotalEccErrors(
                handle, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC, ctypes.byref(dbe)
            )
            if ret == NVML_ERROR_NOT_SUPPORTED:  # ECC off or not an ECC GPU: nothing to count
                continue
            if ret == NVML_ERROR_GPU_IS_LOST:
                view.add("gpu-lost", f"GPU {index} lost")
            elif ret != NVML_SUCCESS:
                raise Unknown(f"GPU {index}: NVML ECC error {ret}")
            elif dbe.value:
                view.add("ecc-dbe", f"GPU {index} DBE ECC {dbe.value}")
        return view
    finally:
        lib.nvmlShutdown()


def main(argv=None):
    parser = argparse.ArgumentParser(description="NPD GPU check (0 OK, 1 problem, 2 unknown)")
    parser.add_argument("--check", choices=("all", "xid", "ecc"), default="all")
    parser.add_argument("--xid", help="comma-separated XID codes that are problems (default: the XID policy's "
                        f"critical list, {','.join(map(str, CRITICAL_XIDS))})")
    parser.add_argument("--kernel-log", help="read kernel messages from this file")
    parser.add_argument("--nvml", default="libnvidia-ml.so.1", help="NVML library to load")
    args = parser.parse_args(argv)
    try:
        codes = None if args.xid is None else {int(c) for c in args.xid.split(",") if c.strip()}
    except ValueError:
        print(f"bad --xid list: {args.xid}")
        return EXIT_UNKNOWN
    policy = XidPolicy(critical=codes)
    view, unknown = HealthView(), []
    checks = {"xid": lambda: xid_view(kernel_log(args.kernel_log), policy), "ecc": lambda: ecc_view(args.nvml)}
    for name, check in checks.items():
        if args.check not in ("all", name):
            continue
        try:
            view.extend(check())
        except Unknown as exc:
            unknown.append(str(exc))
    if view.state == FAILED:
        print("; ".join(view.reasons_at(FAILED)))
        return EXIT_PROBLEM
    if unknown:
        print("; ".join(unknown))
        return EXIT_UNKNOWN
    if view.state == DEGRADED:
        print("GPUs have no XID or double-bit ECC errors that need service; degraded: "
              + "; ".join(view.reasons_at(DEGRADED)))
        return EXIT_OK
    print("GPUs have no XID or double-bit ECC errors")
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
