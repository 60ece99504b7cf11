#!/usr/bin/env python3
"""Simulated dcgm-exporter for the lab: serves /metrics in dcgm-exporter's format and labels
(gpu, UUID, device, modelName, Hostname) from the fake NVML scenario (libnvidia-ml.so.1 via
ctypes) and the XIDs in a kernel log.

XID injection: append an `NVRM: Xid (PCI:<bus>): <code>, ...` line to --kernel-log; the
GPU with that PCI bus reports it as DCGM_FI_DEV_XID_ERRORS (the last XID code, as DCGM).
Test tooling only: production uses NVIDIA's dcgm-exporter.
"""

import argparse
import ctypes
import re
import socket
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

XID_RE = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F]+:[0-9a-fA-F]+:[0-9a-fA-F]+)[^)]*\): (\d+)")


class PciInfo(ctypes.Structure):
    _fields_ = [("busIdLegacy", ctypes.c_char * 16), ("domain", ctypes.c_uint), ("bus", ctypes.c_uint),
                ("device", ctypes.c_uint), ("pciDeviceId", ctypes.c_uint), ("pciSubSystemId", ctypes.c_uint),
                ("busId", ctypes.c_char * 32)]


class Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


def last_xids(path):
    """{'0000:07:00': 79} from the kernel log: the last XID per PCI bus."""
    xids = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for bus, code in XID_RE.findall(handle.read()):
                xids[bus.lower()] = int(code)
    except OSError:
        pass
    return xids


def read_gpus(lib):
    if lib.nvmlInit_v2() != 0:
        return None
    try:
        count = ctypes.c_uint()
        lib.nvmlDeviceGetCount_v2(ctypes.byref(count))
        gpus = []
        for i in range(count.value):
            h = ctypes.c_void_p()
            if lib.nvmlDeviceGetHandleByIndex_v2(i, ctypes.byref(h)) != 0:
                continue
            name, uuid = ctypes.create_string_buffer(96), ctypes.create_string_buffer(96)
            lib.nvmlDeviceGetName(h, name, 96)
            lib.nvmlDeviceGetUUID(h, uuid, 96)
            pci, mem = PciInfo(), Memory()
            lib.nvmlDeviceGetPciInfo_v3(h, ctypes.byref(pci))
            lib.nvmlDeviceGetMemoryInfo(h, ctypes.byref(mem))
            temp, power, limit = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint()
            lib.nvmlDeviceGetTemperature(h, 0, ctypes.byref(temp))
            lib.nvmlDeviceGetPowerUsage(h, ctypes.byref(power))
            lib.nvmlDeviceGetEnforcedPowerLimit(h, ctypes.byref(limit))
            dbe, sbe = ctypes.c_ulonglong(), ctypes.c_ulonglong()
            lib.nvmlDeviceGetTotalEccErrors(h, 1, 0, ctypes.byref(dbe))
            lib.nvmlDeviceGetTotalEccErrors(h, 0, 0, ctypes.byref(sbe))
            bus = pci.busId.decode(errors="replace").lower()
            gpus.append({
                "gpu": i, "UUID": uuid.value.decode(errors="replace"), "modelName": name.value.decode(errors="replace"),
                "bus": bus[4:] if len(bus) > 12 else bus,  # 00000000:07:00.0 -> 0000:07:00.0
                "DCGM_FI_DEV_GPU_TEMP": temp.value, "DCGM_FI_DEV_POWER_USAGE": power.value / 1000,
                "DCGM_FI_DEV_POWER_MGMT_LIMIT": limit.value / 1000,
                "DCGM_FI_DEV_FB_USED": mem.used >> 20, "DCGM_FI_DEV_FB_FREE": mem.free >> 20,
                "DCGM_FI_DEV_GPU_UTIL": 0, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": dbe.value,
                "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": sbe.value,
            })
        return gpus
    finally:
        lib.nvmlShutdown()


def metrics(lib, kernel_log, hostname):
    gpus = read_gpus(lib) or []
    xids = last_xids(kernel_log)
    out = []
    names = ["DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_POWER_MGMT_LIMIT", "DCGM_FI_DEV_FB_USED",
             "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
             "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_XID_ERRORS"]
    for metric in names:
        kind = "counter" if "ECC" in metric else "gauge"
        out.append(f"# TYPE {metric} {kind}")
        for g in gpus:
            value = xids.get(g["bus"][:10], 0) if metric == "DCGM_FI_DEV_XID_ERRORS" else g[metric]
            labels = (f'gpu="{g["gpu"]}",UUID="{g["UUID"]}",device="nvidia{g["gpu"]}",'
                      f'modelName="{g["modelName"]}",Hostname="{hostname}"')
            out.append(f"{metric}{{{labels}}} {value}")
    return "\n".join(out) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", default="0.0.0.0:9400")
    parser.add_argument("--kernel-log", required=True)
    parser.add_argument("--hostname", default=socket.gethostname())
    parser.add_argument("--nvml", default="libnvidia-ml.so.1")
    parser.add_argument("--once", action="store_true", help="print the metrics and exit")
    args = parser.parse_args(argv)
    lib = ctypes.CDLL(args.nvml)
    if args.once:
        sys.stdout.write(metrics(lib, args.kernel_log, args.hostname))
        return 0

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            body = metrics(lib, args.kernel_log, args.hostname).encode()
            self.send_response(200 if self.path == "/metrics" else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    host, _, port = args.listen.rpartition(":")
    ThreadingHTTPServer((host, int(port)), Handler).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
