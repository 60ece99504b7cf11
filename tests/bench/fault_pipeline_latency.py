#!/usr/bin/env python3
"""XID -> alert -> isolation latency of the fault pipeline in the lab cluster (issue 14's benchmark).

    python tests/bench/fault_pipeline_latency.py [-n 5] [--keep]

Needs the lab cluster up (make lab). Deploys the stack and the remediation receiver with
playbooks/monitoring.yml (-e monitoring_k8s_enabled=true -e remediation_receiver_enabled=true;
a no-op when they are there), starts the Feishu stand-in on the lab host, then N times, each on
a GPU not used before (gpu1 and gpu2 in turn, 8 GPUs each; a new GPU is a new alert fingerprint,
which the receiver's dedupe does not swallow): puts a one-GPU workload on the node, appends an
`NVRM: Xid ... 79` line to that node's simulated kernel log and times, from the append, the
exporter's value in Prometheus, GPUXidError firing, the alert in Alertmanager, the Node cordoned
by the deployed receiver and the drain complete (the receiver's job done: cordoned, tainted, the
workload evicted), and on the first injection per node NPD's GPUError condition and the relay's
critical message at the Feishu sink (later XIDs of a node join its Alertmanager group, sent at
group_interval). Between samples the node is put back in service and the alert left to resolve.
Prints each sample and p50/max of every hop, and of alert (firing) -> Node cordoned, with the
rule's `for:`, the rule group's interval and Alertmanager's group_wait beside them. No
assertion: figures are printed. The receiver's rate limit (5 runs in 10 min) caps -n at 5 per
10 minutes. The kernel logs, GPUError conditions, the workload and (without --keep) the stack
and the receiver are removed at the end, and the nodes put back.
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
from remediation_lab import Api, fetch_kubeconfig  # noqa: E402
from test_monitoring_k8s import (  # noqa: E402
    CP,
    EXTRA_DIR,
    KUBECTL,
    LAB_INVENTORY,
    MON,
    WORKLOAD_NS,
    Sink,
    api_get,
    cleanup,
    feishu_sink,
    node_condition,
    node_state,
    nvidia_nodes,
    on,
    prom,
    query,
    receiver_cli,
    remove_condition,
    run_play,
    running_pod,
    workload,
    workload_pods,
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
        try:
            value = probe()
        except (AssertionError, OSError, ValueError, KeyError):
            value = None  # the lab's API server busy for a moment (EOF, a 503): try again
        if value:
            return value
        time.sleep(interval)
    return None


def inject(node: str, gpu: int, bus: str, sink: Sink, first_on_node: bool) -> dict[str, float | None]:
    name = workload(node, grace=2)
    pod = running_pod(name)
    jobs_before = {j["id"] for j in receiver_cli("jobs", node)}
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
        240, 0.5)
    mark("in Alertmanager", lambda: [
        a for a in api_get("kube-prometheus-stack-alertmanager:9093", "/api/v2/alerts?active=true")
        if a["labels"]["alertname"] == "GPUXidError" and a["labels"].get("Hostname") == node
        and a["labels"].get("gpu") == str(gpu)], 60, 0.5)
    mark("Node cordoned", lambda: node_state(node)["unschedulable"], 120, 0.5)
    mark("drain complete", lambda: [j for j in receiver_cli("jobs", node)
                                    if j["id"] not in jobs_before and j["state"] == "done"], 300, 1)
    hops["workload evicted"] = hops["drain complete"] if pod not in [
        p["metadata"]["name"] for p in workload_pods(name)] else None
    # Alertmanager groups by alertname, cluster, Hostname: a later XID on the same node joins the
    # group and goes out at its next group_interval (5m), not after group_wait. So the message
    # is timed for the first XID of a node only.
    if first_on_node:
        mark("Feishu sink (critical)", lambda: [
            p for p in sink.posts[seen:] if p[1].endswith("/critical")
            and f"GPU {gpu}" in json.dumps(p[2], ensure_ascii=False)], 120)
    return hops


def back_in_service(api: Api, snapshot: dict, nodes: list[str]) -> None:
    """The isolated node back as it was, its XID gone and the alert resolved: the next sample
    starts from a pool with every node in service (the ceiling allows one of two)."""
    for node in nodes:
        on(node, ": > /var/log/kern.log")
    until(lambda: not [a for a in prom("/api/v1/alerts")["alerts"] if a["labels"]["alertname"] == "GPUXidError"],
          240, 5)
    api.restore(snapshot)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=5, help="injections (default 5, at most 16; 5 per 10 min)")
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
    api = Api(fetch_kubeconfig(LAB_INVENTORY, CP, EXTRA_DIR / "admin.conf"))
    snapshot = api.snapshot(nodes)
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
            if hops.get("GPUXidError firing") is not None and hops.get("Node cordoned") is not None:
                hops["alert firing -> Node cordoned"] = hops["Node cordoned"] - hops["GPUXidError firing"]
            samples.append(hops)
            back_in_service(api, snapshot, nodes)
            print(f"{node} GPU {gpu}: " + ", ".join(f"{k} {v:.1f}s" if v is not None else f"{k} (not seen)"
                                                    for k, v in hops.items()), flush=True)
    finally:
        sink.close()
        for node in nodes:
            on(node, ": > /var/log/kern.log")
        on(CP, f"{KUBECTL} delete namespace {WORKLOAD_NS} --ignore-not-found --wait=false")
        if not args.keep:
            cleanup()
        else:
            for node in nodes:
                remove_condition(node, "GPUError")
        api.restore(snapshot)
    print(f"\nrule GPUXidError: for {rule.get('for')}, group interval {group.get('interval')}; "
          f"Alertmanager group_wait {route.get('group_wait')}, group_interval {route.get('group_interval')}")
    names = list(dict.fromkeys(k for s in samples for k in s))
    for name in names:
        values = [s[name] for s in samples if s.get(name) is not None]
        missing = sum(1 for s in samples if name in s and s[name] is None)
        if values:
            label = name if name.startswith("alert") else f"XID -> {name}"
            print(f"{label}: n={len(values)} p50 {statistics.median(values):.1f}s max {max(values):.1f}s"
                  + (f" ({missing} not seen)" if missing else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
