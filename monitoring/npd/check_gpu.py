#!/usr/bin/env python3
"""Node Problem Detector custom plugin: GPU XID and double-bit ECC check.

Exit codes follow NPD's custom-plugin protocol: 0 OK, 1 problem, 2 unknown. The first
line of stdout is the condition message (NPD truncates it to max_output_length).

- XID: kernel messages since boot (`journalctl -k -b`, else `dmesg`, or --kernel-log)
  are searched for `NVRM: Xid (PCI:<bus>): <code>`. Only codes that mean the GPU needs a
  reset or replacement count (--xid); application faults such as 13/31/43 do not.
- ECC: NVML's volatile uncorrected (double-bit) count per GPU, read with ctypes from
  libnvidia-ml.so.1 so the plugin needs nothing but python3 on the node. Volatile
  counts reset at driver reload, so the condition clears after the GPU is serviced.
  A GPU that NVML reports lost is a problem too.
"""

import argparse
import ctypes
import re
import shutil
import subprocess
import sys

OK, PROBLEM, UNKNOWN = 0, 1, 2

# XIDs that need a GPU reset, a reboot or an RMA (NVIDIA XID catalogue): 48 DBE, 63/64
# row remapping, 74 NVLink, 79 fallen off the bus, 92 high SBE rate, 94/95 contained /
# uncontained ECC, 119/120 GSP, 140 unrecovered ECC.
DEFAULT_XIDS = "48,63,64,74,79,92,94,95,119,120,140"
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


def xid_problems(text, codes):
    found = {}
    for bus, code in XID_RE.findall(text):
        if int(code) in codes:
            found.setdefault(bus.lower(), [])
            if int(code) not in found[bus.lower()]:
                found[bus.lower()].append(int(code))
    return [f"XID {','.join(map(str, c))} on PCI {bus}" for bus, c in sorted(found.items())]


def ecc_problems(libname):
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
        problems = []
        for index in range(count.value):
            handle = ctypes.c_void_p()
            ret = lib.nvmlDeviceGetHandleByIndex_v2(index, ctypes.byref(handle))
            if ret == NVML_ERROR_GPU_IS_LOST:
                problems.append(f"GPU {index} lost")
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
                problems.append(f"GPU {index} lost")
            elif ret != NVML_SUCCESS:
                raise Unknown(f"GPU {index}: NVML ECC error {ret}")
            elif dbe.value:
                problems.append(f"GPU {index} DBE ECC {dbe.value}")
        return problems
    finally:
        lib.nvmlShutdown()


def main(argv=None):
    parser = argparse.ArgumentParser(description="NPD GPU check (0 OK, 1 problem, 2 unknown)")
    parser.add_argument("--check", choices=("all", "xid", "ecc"), default="all")
    parser.add_argument("--xid", default=DEFAULT_XIDS, help="comma-separated XID codes that are problems")
    parser.add_argument("--kernel-log", help="read kernel messages from this file")
    parser.add_argument("--nvml", default="libnvidia-ml.so.1", help="NVML library to load")
    args = parser.parse_args(argv)
    try:
        codes = {int(c) for c in args.xid.split(",") if c.strip()}
    except ValueError:
        print(f"bad --xid list: {args.xid}")
        return UNKNOWN
    problems, unknown = [], []
    checks = {"xid": lambda: xid_problems(kernel_log(args.kernel_log), codes), "ecc": lambda: ecc_problems(args.nvml)}
    for name, check in checks.items():
        if args.check not in ("all", name):
            continue
        try:
            problems += check()
        except Unknown as exc:
            unknown.append(str(exc))
    if problems:
        print("; ".join(problems))
        return PROBLEM
    if unknown:
        print("; ".join(unknown))
        return UNKNOWN
    print("GPUs have no XID or double-bit ECC errors")
    return OK


if __name__ == "__main__":
    sys.exit(main())
