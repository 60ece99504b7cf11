#!/usr/bin/env python3
"""Time one gpu_info call on the 8-GPU A100 scenario of the fake NVML.

    python tests/bench/bench_gpu_info.py [-n 20] [--scenario a100-8x-nvswitch-mig]

Prints the median (and min/max) of N runs of:
  nvml_in_process    module_utils.nvml.collect_nvml(): the NVML calls through pynvml
  gpu_info_in_process  module_utils.nvml.gpu_info(): NVML + kernel log (none) + systemd
  module_run         the module file run as Ansible runs it, in a new Python process
                     (interpreter start, AnsibleModule, pynvml import, JSON out)
  nvidia_smi_query   the fake nvidia-smi --query-gpu, for comparison
No assertions: the fake's speed says little about a real driver's; tests/device/gpu_check.py
measures the real one. The NVML calls are in-process library calls, so this measures our
Python side (roughly 600 pynvml calls for 8 GPUs).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COLLECTIONS = ROOT / "collections"
MODULE = COLLECTIONS / "ansible_collections/ai_platform/l1/plugins/modules/gpu_info.py"
SCENARIOS = ROOT / "tests/hardware/nvml/scenarios"
sys.path.insert(0, str(COLLECTIONS))
# Loading pynvml does not load libnvidia-ml yet: that happens at nvmlInit, after the re-exec.
from ansible_collections.ai_platform.l1.plugins.module_utils import nvml  # noqa: E402


def build():
    proc = subprocess.run(
        ["bash", str(ROOT / "tests/hardware/nvml/build.sh")], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        sys.exit("building the fake NVML failed (is gcc installed?):\n" + proc.stderr)
    return Path(proc.stdout.strip().splitlines()[-1])


def stats(samples):
    return {
        "median_ms": round(statistics.median(samples) * 1000, 2),
        "min_ms": round(min(samples) * 1000, 2),
        "max_ms": round(max(samples) * 1000, 2),
        "n": len(samples),
    }


def timed_runs(fn, n):
    out = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=20)
    parser.add_argument("--scenario", default="a100-8x-nvswitch-mig")
    opts = parser.parse_args()

    lib = build()
    scenario = SCENARIOS / ("%s.conf" % opts.scenario)
    if "LD_LIBRARY_PATH" not in os.environ or os.environ.get("AI_L1_FAKE_NVML_SCENARIO") != str(scenario):
        # dlopen reads LD_LIBRARY_PATH at process start: re-exec with it set.
        env = dict(os.environ, LD_LIBRARY_PATH=str(lib), AI_L1_FAKE_NVML_SCENARIO=str(scenario))
        os.execve(sys.executable, [sys.executable, __file__, *sys.argv[1:]], env)

    first = nvml.collect_nvml()
    assert first["present"] and first["count"] == 8, first["reason"]
    results = {
        "nvml_in_process": stats(timed_runs(nvml.collect_nvml, opts.n)),
        "gpu_info_in_process": stats(timed_runs(lambda: nvml.gpu_info(xid_source="none"), opts.n)),
    }
    with tempfile.TemporaryDirectory() as tmp:
        args = Path(tmp) / "args.json"
        args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"xid_source": "none"}}))
        env = dict(os.environ, PYTHONPATH=str(COLLECTIONS))

        def module_run():
            proc = subprocess.run([sys.executable, str(MODULE), str(args)], capture_output=True, env=env, check=False)
            assert proc.returncode == 0, proc.stdout + proc.stderr

        results["module_run"] = stats(timed_runs(module_run, opts.n))

        def smi():
            subprocess.run(
                [str(lib / "nvidia-smi"), "--query-gpu=index,name,memory.total,memory.used,temperature.gpu,"
                 "power.draw,mig.mode.current", "--format=csv"], capture_output=True, check=True,
            )

        results["nvidia_smi_query"] = stats(timed_runs(smi, opts.n))
    print(json.dumps({"scenario": opts.scenario, "gpus": first["count"], "results": results}, indent=2))


if __name__ == "__main__":
    main()
