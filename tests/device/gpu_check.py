#!/usr/bin/env python3
"""GPU check for a real NVIDIA machine: gpu_info and the label computation against real NVML.

Needs only python3, nvidia-ml-py (pynvml) and this repository checkout; no Ansible:

    python3 tests/device/gpu_check.py [--repeat 5] [--xid-source auto|journal|dmesg|none]

Prints one JSON document: the gpu_info facts, the labels from
plugins/module_utils/node_labels.py, the duration of one gpu_info call (first call and
the median of --repeat more, NVML-only and full: with the kernel log and systemd), and a
probe of raw NVML answers on GPU 0 so the fake NVML's assumptions can be checked against
a real driver. Exit status: 0 when GPUs were found, 1 when gpu_info says absent, 2 when
pynvml is missing.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time
import traceback
from importlib.metadata import version as dist_version

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "collections"))

try:
    import pynvml
except ImportError:
    print(json.dumps({"error": "pynvml is missing: pip install nvidia-ml-py (or the provided wheel)"}))
    sys.exit(2)

from ansible_collections.ai_platform.l1.plugins.module_utils import nvml  # noqa: E402

try:
    from ansible_collections.ai_platform.l1.plugins.module_utils import node_labels
except ImportError:
    node_labels = None
    NODE_LABELS_ERROR = traceback.format_exc(limit=1)
else:
    NODE_LABELS_ERROR = ""


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    value = fn(*args, **kwargs)
    return value, time.perf_counter() - start


def probe(index=0):
    """Raw answers of the NVML calls gpu_info relies on, for GPU `index`: value or error name."""
    out = {}

    def one(name, fn, *args):
        try:
            value = fn(*args)
        except pynvml.NVMLError as exc:
            out[name] = "error %s: %s" % (getattr(exc, "value", "?"), exc)
            return None
        except Exception as exc:  # noqa: BLE001 -- record, never stop the check
            out[name] = "exception: %r" % (exc,)
            return None
        out[name] = value if isinstance(value, (int, float, str, list, tuple, bool)) or value is None else str(value)
        return value

    pynvml.nvmlInit()
    try:
        one("nvmlSystemGetNVMLVersion", pynvml.nvmlSystemGetNVMLVersion)
        one("nvmlSystemGetCudaDriverVersion_v2", pynvml.nvmlSystemGetCudaDriverVersion_v2)
        handle = one("nvmlDeviceGetHandleByIndex", pynvml.nvmlDeviceGetHandleByIndex, index)
        if handle is None:
            return out
        out["nvmlDeviceGetHandleByIndex"] = "ok"
        one("nvmlDeviceGetTemperatureV", pynvml.nvmlDeviceGetTemperatureV, handle, 0)
        one("nvmlDeviceGetTemperature", pynvml.nvmlDeviceGetTemperature, handle, 0)
        one("nvmlDeviceGetPowerUsage", pynvml.nvmlDeviceGetPowerUsage, handle)
        one("nvmlDeviceGetMigMode", pynvml.nvmlDeviceGetMigMode, handle)
        one("nvmlDeviceGetMaxMigDeviceCount", pynvml.nvmlDeviceGetMaxMigDeviceCount, handle)
        # Whether profile info answers while MIG is disabled (the fake assumes it does).
        for idx in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, idx)
                out["gi_profile[%d]" % idx] = "%s id=%d slices=%d instances=%d mem=%d" % (
                    info.name.decode("utf-8", "replace") if isinstance(info.name, bytes) else info.name,
                    info.id, info.sliceCount, info.instanceCount, info.memorySizeMB)
            except pynvml.NVMLError as exc:
                out["gi_profile[%d]" % idx] = "error %s" % getattr(exc, "value", "?")
        for link in (0, 1, 17, 18, 35):
            one("nvmlDeviceGetNvLinkState[%d]" % link, pynvml.nvmlDeviceGetNvLinkState, handle, link)
        one("nvmlDeviceGetNvLinkRemoteDeviceType[0]", pynvml.nvmlDeviceGetNvLinkRemoteDeviceType, handle, 0)
        one("nvmlDeviceGetTotalEccErrors(dbe,volatile)", pynvml.nvmlDeviceGetTotalEccErrors, handle, 1, 0)
        one("nvmlDeviceGetRemappedRows", pynvml.nvmlDeviceGetRemappedRows, handle)
        one("nvmlDeviceGetRetiredPages(sbe)", pynvml.nvmlDeviceGetRetiredPages, handle, 0)
        one("nvmlDeviceGetRetiredPagesPendingStatus", pynvml.nvmlDeviceGetRetiredPagesPendingStatus, handle)
    finally:
        pynvml.nvmlShutdown()
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="timed repetitions after the first call")
    parser.add_argument("--xid-source", default="auto", choices=["auto", "journal", "dmesg", "none"])
    parser.add_argument("--xid-window", type=int, default=nvml.DEFAULT_XID_WINDOW)
    opts = parser.parse_args()

    def full():
        return nvml.gpu_info(xid_source=opts.xid_source, xid_window=opts.xid_window)

    (facts, warnings), first_full = timed(full)
    _, first_nvml = timed(nvml.collect_nvml)
    full_runs = [timed(full)[1] for _ in range(opts.repeat)]
    nvml_runs = [timed(nvml.collect_nvml)[1] for _ in range(opts.repeat)]

    report = {
        "host": platform.node(),
        "python": platform.python_version(),
        "pynvml_version": getattr(pynvml, "__version__", "") or _dist_version(),
        "gpu_info": facts,
        "warnings": warnings,
        "duration_s": {
            "full_first": round(first_full, 4),
            "nvml_first": round(first_nvml, 4),
            "full_median": round(statistics.median(full_runs), 4) if full_runs else None,
            "nvml_median": round(statistics.median(nvml_runs), 4) if nvml_runs else None,
            "repeat": opts.repeat,
        },
    }
    if node_labels is None:
        report["labels"] = None
        report["labels_error"] = "plugins/module_utils/node_labels.py is missing or fails to import: " + (
            NODE_LABELS_ERROR.strip().splitlines()[-1] if NODE_LABELS_ERROR else "")
    else:
        try:
            report["labels"] = node_labels.compute_labels(gpu_info=facts, node_type="gpu-compute")
        except Exception as exc:  # noqa: BLE001 -- report, the facts are still useful
            report["labels"] = None
            report["labels_error"] = "%s: %s" % (type(exc).__name__, exc)
    if facts["present"]:
        report["nvml_probe_gpu0"] = probe(0)
    print(json.dumps(report, indent=2, sort_keys=False, default=str))
    return 0 if facts["present"] else 1


def _dist_version():
    try:
        return dist_version("nvidia-ml-py")
    except Exception:  # noqa: BLE001
        return ""


if __name__ == "__main__":
    sys.exit(main())
