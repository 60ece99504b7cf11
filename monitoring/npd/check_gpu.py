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
and the remediation receiver read: this file is not run alone. The script NPD runs, the
ConfigMap's check_gpu.py (monitoring/generate.py), is the collection's
plugins/module_utils/accelerator_health.py followed by this file, because it runs with the
node's python3, where the collection is not. The condition GPUError is set
for a failed GPU; a degraded one (an XID in neither list) is named in the OK message.

GPUHealthy (--node-condition, the L2 contract's Node condition): NPD sets a condition True only
for a problem, so the healthy-is-True condition is written here, with NPD's own credentials
(check_gpu.sh hands the ServiceAccount token and CA over: the check runs chrooted into the
node's root): True with the OK message, False with the failure as reason GPUCardFailure,
nothing when the check cannot tell. The Node is read from the API server's cache
(resourceVersion=0) and patched only when the condition changes, so a fleet does not write
a Node every invoke interval. A failed API call is reported on stderr; the exit code stays
what NPD's GPUError needs.
"""

import argparse
import ctypes
import datetime
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import urllib.request

EXIT_OK, EXIT_PROBLEM, EXIT_UNKNOWN = 0, 1, 2

# OK, DEGRADED, FAILED, CRITICAL_XIDS, XidPolicy and HealthView come from the collection's
# plugins/module_utils/accelerator_health.py, which the ConfigMap's check_gpu.py carries
# ahead of this file (monitoring/generate.py): the node's python3 has no collection to import.

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


def api_request(method, path, body=None):
    """One call to the API server as NPD's ServiceAccount (GPU_CHECK_API_TOKEN and _CA from
    check_gpu.sh; GPU_CHECK_API_URL overrides the in-cluster address)."""
    env = os.environ
    base = env.get("GPU_CHECK_API_URL") or \
        f"https://{env['KUBERNETES_SERVICE_HOST']}:{env.get('KUBERNETES_SERVICE_PORT', '443')}"
    headers = {"Accept": "application/json"}
    if env.get("GPU_CHECK_API_TOKEN"):
        headers["Authorization"] = f"Bearer {env['GPU_CHECK_API_TOKEN']}"
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/strategic-merge-patch+json"
    context = ssl.create_default_context(cadata=env["GPU_CHECK_API_CA"]) if env.get("GPU_CHECK_API_CA") else None
    request = urllib.request.Request(base + path, data=data, method=method, headers=headers)
    with urllib.request.urlopen(request, timeout=5, context=context) as resp:  # noqa: S310 (the API server)
        return json.loads(resp.read() or b"{}")


def report_condition(kind, node, status, reason, message):
    """Set the Node condition `kind` unless it already says the same; True when it was written."""
    current = api_request("GET", f"/api/v1/nodes/{node}?resourceVersion=0")
    conditions = {c.get("type"): c for c in (current.get("status") or {}).get("conditions") or []}
    old = conditions.get(kind) or {}
    if (old.get("status"), old.get("reason"), old.get("message")) == (status, reason, message):
        return False
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    condition = {"type": kind, "status": status, "reason": reason, "message": message, "lastHeartbeatTime": now,
                 "lastTransitionTime": now if old.get("status") != status else old.get("lastTransitionTime", now)}
    api_request("PATCH", f"/api/v1/nodes/{node}/status", {"status": {"conditions": [condition]}})
    return True


def verdict(view, unknown):
    """(exit code, message, the healthy condition's status and reason or None when unknown)."""
    if view.state == FAILED:
        return EXIT_PROBLEM, "; ".join(view.reasons_at(FAILED)), ("False", "GPUCardFailure")
    if unknown:
        return EXIT_UNKNOWN, "; ".join(unknown), None
    if view.state == DEGRADED:
        return (EXIT_OK, "GPUs have no XID or double-bit ECC errors that need service; degraded: "
                + "; ".join(view.reasons_at(DEGRADED)), ("True", "GPUIsHealthy"))
    return EXIT_OK, "GPUs have no XID or double-bit ECC errors", ("True", "GPUIsHealthy")


def main(argv=None):
    parser = argparse.ArgumentParser(description="NPD GPU check (0 OK, 1 problem, 2 unknown)")
    parser.add_argument("--check", choices=("all", "xid", "ecc"), default="all")
    parser.add_argument("--xid", help="comma-separated XID codes that are problems (default: the XID policy's "
                        f"critical list, {','.join(map(str, CRITICAL_XIDS))})")
    parser.add_argument("--kernel-log", help="read kernel messages from this file")
    parser.add_argument("--nvml", default="libnvidia-ml.so.1", help="NVML library to load")
    parser.add_argument("--node-condition", metavar="TYPE",
                        help="also set this healthy-is-True condition on the Node NODE_NAME (e.g. GPUHealthy)")
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
    code, message, healthy = verdict(view, unknown)
    print(message)
    if args.node_condition and healthy:
        try:
            report_condition(args.node_condition, os.environ["NODE_NAME"], *healthy, message)
        except Exception as exc:  # noqa: BLE001 (GPUError, the exit code, must not depend on it)
            print(f"setting {args.node_condition} failed: {exc}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
