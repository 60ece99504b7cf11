#!/usr/bin/env python3
"""XID -> alert latency of the monitoring stack in the lab cluster (issue 14's benchmark).

    python tests/bench/fault_pipeline_latency.py [-n 5] [--keep]

Needs the lab cluster up (make lab). Deploys the stack with playbooks/monitoring.yml
(-e monitoring_k8s_enabled=true; a no-op when it is there), starts the Feishu stand-in on the
lab host, then N times, each on a GPU not used before (gpu1 and gpu2, 8 GPUs each): appends an
`NVRM: Xid ... 79` line to that node's simulated kernel log and times, from the append, the
exporter's value in Prometheus, GPUXidError firing and the alert in Alertmanager (and, on the
first injection per node, NPD's GPUError condition and the relay's critical message at the
Feishu sink: later XIDs of a node join its Alertmanager group, which is sent at group_interval).
Prints each sample and p50/max of every hop, with the rule's `for:`, the rule
group's interval and Alertmanager's group_wait beside them. No assertion: figures are printed.
The kernel logs, GPUError conditions and (without --keep) the stack are removed at the end.

Not measured yet: alert -> Node cordoned and XID -> drain complete (the remediation receiver is
not deployed in the cluster by a role yet).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from test_monitoring_k8s import (  # noqa: E402
    MON,
    Sink,
    api_get,
    cleanup,
    feishu_sink,
    node_condition,
    nvidia_nodes,
    on,
    prom,
    query,
    remove_condition,
    run_play,
)

SCENARIO = ROOT / "tests" / "hardware" / "nvml" / "scenarios" / "a100-8x-nvswitch-mig.conf"


def pci_buses() -> dict[int, str]:
    """GPU index -> the bus id the kernel log names (0000:47:00) from the lab's scenario."""
    buses = {}
    for line in SCENARIO.read_text().splitlines():
        key, _, value = line.partition("=")
        parts = key.split(".")
        if len(parts) == 3 and parts[0] == "gpu" and parts[2] == "pci_bus_id" and parts[1].isdigit():
            buses[int(parts[1])] = value.strip()[4:].lower().rsplit(".", 1)[0]
    return buses


def until(probe, timeout: float, interval: float = 1.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = probe()
        if value:
            return value
        time.sleep(interval)
    return None


def inject(node: str, gpu: int, bus: str, sink: Sink, first_on_node: bool) -> dict[str, float | None]:
    seen = len(sink.posts)
    t0 = time.monotonic()
    on(node, f"echo 'NVRM: Xid (PCI:{bus}): 79, pid=0, GPU has fallen off the bus.' >> /var/log/kern.log")
    sel = f'Hostname="{node}",gpu="{gpu}"'
    hops: dict[str, float | None] = {}

    def mark(name, probe, timeout, interval=1.0):
        hops[name] = time.monotonic() - t0 if until(probe, timeout, interval) else None

    mark("exporter in Prometheus", lambda: [r for r in query(f"DCGM_FI_DEV_XID_ERRORS{{{sel}}}")
                                            if r["value"][1] == "79"], 60)
    if first_on_node:
        mark("NPD GPUError True", lambda: node_condition(node, "GPUError").get("status") == "True", 120, 2)
    mark("GPUXidError firing", lambda: [
        a for a in prom("/api/v1/alerts")["alerts"] if a["labels"]["alertname"] == "GPUXidError"
        and a["state"] == "firing" and a["labels"].get("Hostname") == node and a["labels"].get("gpu") == str(gpu)],
        240)
    mark("in Alertmanager", lambda: [
        a for a in api_get("kube-prometheus-stack-alertmanager:9093", "/api/v2/alerts?active=true")
        if a["labels"]["alertname"] == "GPUXidError" and a["labels"].get("Hostname") == node
        and a["labels"].get("gpu") == str(gpu)], 60)
    # Alertmanager groups by alertname, cluster, Hostname: a later XID on the same node joins the
    # group and goes out at its next group_interval (5m), not after group_wait. So the message
    # is timed for the first XID of a node only.
    if first_on_node:
        mark("Feishu sink (critical)", lambda: [
            p for p in sink.posts[seen:] if p[1].endswith("/critical")
            and f"GPU {gpu}" in json.dumps(p[2], ensure_ascii=False)], 120)
    return hops


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=5, help="injections (default 5, at most 16)")
    parser.add_argument("--keep", action="store_true", help="leave the stack deployed")
    args = parser.parse_args()
    rules = yaml.safe_load((MON / "rules" / "gpu-alerts.rules.yml").read_text())["groups"]
    group = next(g for g in rules if any(r.get("alert") == "GPUXidError" for r in g["rules"]))
    rule = next(r for r in group["rules"] if r.get("alert") == "GPUXidError")
    route = yaml.safe_load((MON / "alertmanager" / "alertmanager.yml").read_text())["route"]
    proc, secs = run_play()
    if proc.returncode != 0:
        print(proc.stdout[-3000:], file=sys.stderr)
        return 1
    print(f"monitoring.yml: {secs:.0f}s")
    nodes = nvidia_nodes()
    targets = [(node, gpu) for gpu in range(8) for node in nodes][: args.n]
    buses = pci_buses()
    sink = feishu_sink()
    samples = []
    try:
        # The stack must be scraping before the first injection counts.
        until(lambda: len(query('up{job="dcgm-exporter"} == 1')) == len(nodes), 300, 5)
        used = set()
        for node, gpu in targets:
            hops = inject(node, gpu, buses[gpu], sink, node not in used)
            used.add(node)
            samples.append(hops)
            print(f"{node} GPU {gpu}: " + ", ".join(f"{k} {v:.1f}s" if v is not None else f"{k} (not seen)"
                                                    for k, v in hops.items()), flush=True)
    finally:
        sink.close()
        for node in nodes:
            on(node, ": > /var/log/kern.log")
        if not args.keep:
            cleanup()
        else:
            for node in nodes:
                remove_condition(node, "GPUError")
    print(f"\nrule GPUXidError: for {rule.get('for')}, group interval {group.get('interval')}; "
          f"Alertmanager group_wait {route.get('group_wait')}, group_interval {route.get('group_interval')}")
    names = list(dict.fromkeys(k for s in samples for k in s))
    for name in names:
        values = [s[name] for s in samples if s.get(name) is not None]
        missing = sum(1 for s in samples if name in s and s[name] is None)
        if values:
            print(f"XID -> {name}: n={len(values)} p50 {statistics.median(values):.1f}s max {max(values):.1f}s"
                  + (f" ({missing} not seen)" if missing else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
