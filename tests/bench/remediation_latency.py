#!/usr/bin/env python3
"""Webhook -> Node cordoned latency of the remediation receiver on the lab (issue 8, item 6).

    python tests/bench/remediation_latency.py [-n 15] [--node gpu1] [--no-precordon]

Needs the lab cluster up (make lab). Starts the receiver (its own process, the lab's admin
kubeconfig, the real isolate playbook through ansible-runner), then N times: posts a
GPUXidError (XID 79) webhook for the node, polls the Node through the API server every 50 ms
until spec.unschedulable, waits for the job to finish, and puts the node back (uncordon,
isolation taint/label/annotations off).
Prints each sample and p50/p90/p99 (nearest rank) of "cordoned" and of "run finished".
Target on the lab: p50 <= 5 s, p99 <= 15 s. No assertion: the figures are printed.
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from remediation_lab import Api, Receiver, alert, fetch_kubeconfig  # noqa: E402

INVENTORY = ROOT / "inventories" / "lab"


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def interrupt(_signum, _frame):
    raise KeyboardInterrupt


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=15, help="injections (default 15)")
    parser.add_argument("--node", default="gpu1")
    parser.add_argument("--no-precordon", action="store_true",
                        help="let the playbook do the cordon (run.precordon false)")
    parser.add_argument("--json", type=Path, help="also write the samples here")
    args = parser.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="remediation-bench-"))
    kubeconfig = fetch_kubeconfig(INVENTORY, "cp1", tmp / "admin.conf")
    api = Api(kubeconfig)
    snapshot = api.snapshot([args.node])
    if snapshot[args.node]["unschedulable"]:
        print(f"{args.node} is cordoned already: the benchmark needs it schedulable", file=sys.stderr)
        return 2
    cfg = {"state_dir": str(tmp / "state"), "kubernetes": {"kubeconfig": str(kubeconfig)},
           "ceiling": {"max_fraction": 0.67, "pools": {"lab-workers": ["gpu1", "gpu2", "npu1"]}},
           "rate_limit": {"max_runs": args.n + 5, "window_s": 3600},
           "run": {"inventory": str(INVENTORY), "workers": 1, "timeout_s": 600, "precordon": not args.no_precordon,
                   "extravars": {"day2_drain_timeout": 120}}}
    receiver = Receiver(tmp, cfg)
    # timeout(1)/kill send SIGTERM: leave through `finally` (the node is put back)
    signal.signal(signal.SIGTERM, interrupt)
    receiver.start()
    cordoned, finished = [], []
    try:
        for i in range(1, args.n + 1):
            t0 = time.monotonic()
            [d] = receiver.post_alerts(alert("GPUXidError", args.node, xid=79))
            if d["decision"] != "queued":
                print(f"injection {i}: {d['decision']}: {d['reason']}", file=sys.stderr)
                return 1
            while not api.node(args.node).spec.unschedulable:
                if time.monotonic() - t0 > 120:
                    print(f"injection {i}: not cordoned after 120 s", file=sys.stderr)
                    return 1
                time.sleep(0.05)
            cordoned.append(time.monotonic() - t0)
            job = receiver.wait_job(d["job_id"], timeout=300)
            finished.append(time.monotonic() - t0)
            print(f"{i:3d}  cordoned {cordoned[-1]:6.2f} s   run {job['state']} ({job['status']}) "
                  f"{finished[-1]:6.1f} s", flush=True)
            api.restore(snapshot)
            time.sleep(1)
    except KeyboardInterrupt:
        print(f"interrupted after {len(cordoned)} samples", file=sys.stderr)
    finally:
        receiver.stop()
        receiver.settle()  # a detached run still going would isolate the node after the restore
        api.restore(snapshot)
    if not cordoned:
        return 1
    mode = "playbook cordon" if args.no_precordon else "precordon"
    print(f"\nwebhook -> Node cordoned ({mode}), n={len(cordoned)}: p50 {pct(cordoned, 50):.2f} s  "
          f"p90 {pct(cordoned, 90):.2f} s  p99 {pct(cordoned, 99):.2f} s  max {max(cordoned):.2f} s  "
          "(target p50 <= 5 s, p99 <= 15 s)")
    print(f"webhook -> isolation run finished, n={len(finished)}: p50 {pct(finished, 50):.1f} s  "
          f"p99 {pct(finished, 99):.1f} s")
    if args.json:
        args.json.write_text(json.dumps({"mode": mode, "cordoned_s": cordoned, "finished_s": finished}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
