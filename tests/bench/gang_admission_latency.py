#!/usr/bin/env python3
"""Admission latency of a gang job through Kueue on the lab (issue 15).

    python tests/bench/gang_admission_latency.py [-n 5] [--pods 2] [--gpus 8]

Needs the lab up with the queues deployed (make lab). N times: submits the gang job of
tests/integration/test_queues.py (PODS Pods x GPUS GPUs, one per A100 node) to ai-platform-team's
LocalQueue, polls through the API every 50 ms, and records from the Job's creation:
  admitted   the Workload's Admitted condition is True (Kueue reserved quota for all Pods at once)
  scheduled  every Pod has a node
  running    every Pod is Running
then deletes the Job and waits until its Pods are gone. Prints each sample and p50/max.
No assertion: the figures are printed.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
sys.path.insert(0, str(ROOT / "collections"))  # test_queues imports the collection (pytest.ini does it for pytest)
from remediation_lab import fetch_kubeconfig  # noqa: E402
from test_queues import condition, delete_job, gang_job, job_pods, workload  # noqa: E402


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=5, help="samples (default 5)")
    parser.add_argument("--pods", type=int, default=2)
    parser.add_argument("--gpus", type=int, default=8)
    args = parser.parse_args()
    from kubernetes import client, config  # noqa: PLC0415

    kubeconfig = fetch_kubeconfig(ROOT / "inventories" / "lab", "cp1", Path(tempfile.mkdtemp()) / "admin.conf")
    api = config.new_client_from_config(str(kubeconfig))

    class Kube:
        core, batch, custom = client.CoreV1Api(api), client.BatchV1Api(api), client.CustomObjectsApi(api)
        ApiException = client.ApiException

    ns, names = "ai-platform", ("admitted", "scheduled", "running")
    samples: dict[str, list[float]] = {k: [] for k in names}
    for i in range(args.n):
        job = f"bench-gang-{i}"
        t0 = time.monotonic()
        Kube.batch.create_namespaced_job(ns, gang_job(job, ns, "ai-platform-team", pods=args.pods, gpus=args.gpus))
        seen: dict[str, float] = {}
        deadline = t0 + 300
        while len(seen) < len(names) and time.monotonic() < deadline:
            now = time.monotonic() - t0
            if "admitted" not in seen and condition(workload(Kube, ns, job), "Admitted").get("status") == "True":
                seen["admitted"] = now
            pods = job_pods(Kube, ns, job)
            if len(pods) == args.pods:
                if "scheduled" not in seen and all(p.spec.node_name for p in pods):
                    seen["scheduled"] = now
                if "running" not in seen and all(p.status.phase == "Running" for p in pods):
                    seen["running"] = now
            time.sleep(0.05)
        delete_job(Kube, ns, job)
        if len(seen) < len(names):
            print(f"sample {i}: timed out ({seen})", file=sys.stderr)
            return 1
        for k in names:
            samples[k].append(seen[k])
        print(f"sample {i}: " + ", ".join(f"{k} {seen[k]:.2f}s" for k in names), flush=True)
    print(f"\ngang job {args.pods} Pods x {args.gpus} GPUs through Kueue, {args.n} samples, from Job creation:")
    for k in names:
        print(f"  {k:<10} p50 {pct(samples[k], 50):6.2f}s   max {max(samples[k]):6.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
