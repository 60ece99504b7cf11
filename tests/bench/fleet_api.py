#!/usr/bin/env python3
"""The API side of a 1,000-node fleet, on the lab's real control plane (issue 17, item 3).

    python tests/bench/fleet_api.py [--nodes 1000] [--parts inventory,nodes,labels,firmware,remediation]
                                    [--keep] [--json FILE]
    python tests/bench/fleet_api.py --parts inventory        # the one part that needs no lab

Needs the lab up (make lab) for every part but `inventory`. Reads the lab's admin kubeconfig from
cp1 (tests/integration/remediation_lab.py), builds kwok (sigs.k8s.io/kwok, lab/k8s/build.py
ensure_kwok: `build.py --only kwok`, cached) if it is not built, and runs it on this machine
against the lab's API server, managing only the Nodes annotated kwok.x-k8s.io/node=fake (its own
Node stages from the module: Ready, then a Lease heartbeat). Then, timed:

  inventory    playbooks/validate.yml on inventories/sample (103 hosts) and on a copy widened to
               --nodes hosts (gpu-a100-[001:640], npu-910b-[001:353] for 1,000). Target < 10 s.
  nodes        --nodes fake Nodes (kwok-gpu-0001...) created through the API from a thread pool:
               the seed's A100 labels (module_utils/node_labels.compute_labels on the seed's
               facts), capacity nvidia.com/gpu 8, the taint kwok.x-k8s.io/node=fake:NoSchedule;
               then the time until kwok has every one Ready. DaemonSets that would still put a
               Pod on them are named (and their Pods waited for, so they do not load the timings).
  labels       ai_platform.l1.node_metadata through ansible-playbook on localhost, as the two
               roles call it per batch: the accelerator labels with their ownership annotation
               (roles/node_labels) and inventory labels plus a taint (roles/k8s_worker), for every
               Node at once; first run (every Node patched), then the no-change run. Target < 60 s.
  firmware     the per-batch planning of playbooks/day2/firmware_update.yml: its tasks "Read the cordoned
               Nodes" (kubernetes.core.k8s_info, field selector spec.unschedulable=true), the
               day2_max_unavailable check over the cordoned workers and the per-host cordoned read,
               taken from the playbook itself
               and run for --fw-batches batches with --nodes workers in the inventory; the mean
               per batch times the batches of a whole rolling update (--nodes / day2_max_unavailable).
               Beside it the floor: one list of the Nodes and the same filter in Python.
               (The device-count read is gpu_info on each node, not the API: not measured here.)
  remediation  the remediation receiver (its real Service, HTTP server, SQLite store and
               Kubernetes node view, in a process of its own) with an executor stand-in that only
               cordons the Node through the API (kwok Nodes have no SSH) and holds the job --run-s
               seconds; a pool of --burst-nodes fake Nodes with ceiling --max-fraction; a burst of
               --burst alerts (GPUXidError and GPUECCUncorrectableError per Node, one webhook each,
               all sent at once as Alertmanager's groups flush). Prints each decision's latency
               p50/p99/max (target: every one under 1 s), what was decided, and whether exactly
               the ceiling was isolated (decisions queued, and Nodes cordoned once the jobs ran).

At the end (in a finally, also on Ctrl-C/SIGTERM) the fake Nodes are deleted from a thread pool and
kwok is stopped, unless --keep. Figures are printed (and written with --json); nothing is asserted.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import copy
import importlib.util
import ipaddress
import json
import math
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
sys.path.insert(0, str(ROOT / "collections"))
sys.path.insert(0, str(ROOT / "day2"))
from ansible_collections.ai_platform.l1.plugins.module_utils.node_labels import compute_labels  # noqa: E402
from remediation_lab import TOKEN, alert, fetch_kubeconfig, payload  # noqa: E402

LAB_INVENTORY = ROOT / "inventories" / "lab"
SAMPLE_INVENTORY = ROOT / "inventories" / "sample"
FIRMWARE_PLAYBOOK = ROOT / "playbooks" / "day2" / "firmware_update.yml"
# The per-batch capacity gate every rolling day-2 operation imports.
CAPACITY_GATE = ROOT / "playbooks" / "day2" / "tasks" / "capacity_gate.yml"
# The sample's VRRP password is a placeholder the validation refuses (tests/unit/test_validation_play.py).
SAMPLE_SECRET = ("-e", "k8s_control_plane_vrrp_password=9fQ2vR7x")
VALIDATION_TASK = "Check groups, per-host values and role arguments"
PARTS = ("inventory", "nodes", "labels", "firmware", "remediation")

KWOK_ANNOTATION, KWOK_VALUE = "kwok.x-k8s.io/node", "fake"
BENCH_LABEL = "bench.ai-platform.io/fleet-api"
NAME_PREFIX = "kwok-gpu-"
KWOK_PIDFILE = Path(tempfile.gettempdir()) / "ai-l1-fleet-api-kwok.pid"
CORDON_ANNOTATION = "ai-platform.io/cordon-reason"  # the receiver's run.cordon_annotation default
# What roles/node_labels (vars/main.yml node_labels_annotation) and roles/k8s_worker hand the module.
LABELS_ANNOTATION = "ai-platform.io/managed-labels"
INVENTORY_LABELS = {"pool": "training", "ai-platform.io/team": "llm"}
INVENTORY_TAINT = {"key": "ai-platform.io/dedicated", "value": "training", "effect": "NoSchedule"}

# The seed's 8 x A100-SXM4-80GB NVSwitch node (section 4.1.2), as gpu_info and node_hw_info report it:
# compute_labels turns these into the seed's label set (tests/unit/test_labels.py SEED_A100_VALID).
SEED_GPU_INFO = {
    "present": True, "driver_version": "550.54.15", "cuda_driver_version": "12.4", "count": 8,
    "topology": "nvswitch",
    "gpus": [{"index": i, "name": "NVIDIA A100-SXM4-80GB", "memory_total_mib": 81920, "compute_capability": "8.0",
              "mig": {"capable": True, "current": True, "profiles": ["7g.80gb", "3g.40gb", "2g.20gb", "1g.10gb"]}}
             for i in range(8)],
}
SEED_HW_INFO = {"network": {"speed_mbps": 100000, "interface": "mlx5_0"}, "nvme": {"total_bytes": int(3.5 * 2**40)}}
SEED_CAPACITY = {"cpu": "128", "memory": "2Ti", "pods": "110", "ephemeral-storage": "3584Gi", "nvidia.com/gpu": "8"}
# The share of the sample's fleet that is NVIDIA (64 of 96 accelerator nodes, rounded as the issue's
# sed does: 640 GPU + 353 NPU nodes beside 3 control planes and 4 storage nodes make 1,000).
GPU_SHARE = 0.64
FIXED_SAMPLE_HOSTS = 3 + 4


# ---------------------------------------------------------------- pure parts (tests/unit/test_fleet_api_bench.py)

def percentile(samples: list[float], p: float) -> float:
    """Nearest rank: the smallest sample with at least p % of the samples at or below it."""
    if not samples:
        raise ValueError("no samples")
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


def summary(samples: list[float]) -> dict:
    if not samples:
        return {"n": 0}
    return {"n": len(samples), "p50": round(percentile(samples, 50), 4), "p90": round(percentile(samples, 90), 4),
            "p99": round(percentile(samples, 99), 4), "max": round(max(samples), 4)}


def seed_labels() -> dict[str, str]:
    return compute_labels(gpu_info=SEED_GPU_INFO, hw_info=SEED_HW_INFO, node_type="gpu-compute")


def node_name(i: int) -> str:
    return f"{NAME_PREFIX}{i:04d}"


def spare_pod_cidr(cluster_cidr: str, mask: int = 24) -> str:
    """The last per-node range of the pod network: every fake Node gets this one podCIDR, which the
    controller-manager's allocator only marks used (a /16 of /24s holds 256 Nodes, not 1,000: without
    a podCIDR the others would fail allocation, with an event and a retry each, all through the run)."""
    return str(list(ipaddress.ip_network(cluster_cidr).subnets(new_prefix=mask))[-1])


def fake_node(name: str, index: int, labels: dict[str, str], pod_cidr: str) -> dict:
    """A Node kwok manages. No kubernetes.io/os label: the DaemonSets that select on it (kube-proxy,
    node-exporter) stay off the fake Nodes, although they tolerate every taint."""
    address = f"198.18.{index // 256}.{index % 256}"  # the benchmarking range (RFC 2544), never routed
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_ANNOTATION: KWOK_VALUE, "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {**labels, "kubernetes.io/hostname": name, "type": "kwok", BENCH_LABEL: "true"},
        },
        "spec": {"taints": [{"key": KWOK_ANNOTATION, "value": KWOK_VALUE, "effect": "NoSchedule"}],
                 "podCIDR": pod_cidr, "podCIDRs": [pod_cidr]},
        "status": {"capacity": dict(SEED_CAPACITY), "allocatable": dict(SEED_CAPACITY),
                   "addresses": [{"type": "InternalIP", "address": address}, {"type": "Hostname", "address": name}]},
    }


def fleet_split(total: int) -> tuple[int, int]:
    """(GPU nodes, NPU nodes) of a sample inventory widened to `total` hosts."""
    gpu = round(total * GPU_SHARE)
    npu = total - FIXED_SAMPLE_HOSTS - gpu
    if npu < 1:
        raise ValueError(f"{total} hosts: too few for the sample's control planes, storage and two vendors")
    return gpu, npu


def widen_inventory(hosts_yml: str, total: int) -> str:
    """inventories/sample/hosts.yml with its GPU and NPU ranges widened so the inventory holds `total` hosts."""
    gpu, npu = fleet_split(total)
    width = max(2, len(str(max(gpu, npu))))
    out = hosts_yml
    for pattern, count in ((r"gpu-a100-\[01:64\]", gpu), (r"npu-910b-\[01:32\]", npu)):
        prefix = pattern.split("\\[", 1)[0]
        out, found = re.subn(pattern, f"{prefix}[{1:0{width}d}:{count:0{width}d}]", out)
        if found != 1:
            raise ValueError(f"inventories/sample/hosts.yml: expected one {prefix}[..] range, found {found}")
    return out


def _tolerates(tolerations: list[dict], taint: dict) -> bool:
    for tol in tolerations or []:
        if tol.get("effect") and tol["effect"] != taint["effect"]:
            continue
        if not tol.get("key"):
            if tol.get("operator") == "Exists":
                return True
            continue
        same_value = tol.get("operator") == "Exists" or tol.get("value", "") == taint.get("value", "")
        if tol["key"] == taint["key"] and same_value:
            return True
    return False


def _term_matches(term: dict, labels: dict[str, str]) -> bool:
    for expr in term.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        ok = {"In": key in labels and labels[key] in values, "NotIn": labels.get(key) not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}.get(op, True)  # Gt/Lt: assume it lands
        if not ok:
            return False
    return not term.get("matchFields")  # a field selector (metadata.name) is per Node: not ours


def daemonsets_landing(daemonsets: list[dict], labels: dict[str, str], taints: list[dict]) -> list[str]:
    """namespace/name of the DaemonSets (API JSON) whose Pods would be placed on a Node with these labels and
    taints: nodeSelector matched, every NoSchedule/NoExecute taint tolerated, required node affinity met."""
    landing = []
    for ds in daemonsets:
        pod = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
        if any(labels.get(k) != v for k, v in (pod.get("nodeSelector") or {}).items()):
            continue
        if not all(_tolerates(pod.get("tolerations"), t) for t in taints if t["effect"] in ("NoSchedule", "NoExecute")):
            continue
        required = (((pod.get("affinity") or {}).get("nodeAffinity") or {})
                    .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
        terms = required.get("nodeSelectorTerms") or []
        if terms and not any(_term_matches(t, labels) for t in terms):
            continue
        meta = ds.get("metadata") or {}
        landing.append(f"{meta.get('namespace')}/{meta.get('name')}")
    return sorted(landing)


def cordoned_workers(nodes: list[dict], workers: set[str]) -> list[str]:
    """What the capacity gate computes per batch (day2_rolling_cordoned), over the API's Node list."""
    return sorted(n["metadata"]["name"] for n in nodes
                  if (n.get("spec") or {}).get("unschedulable") and n["metadata"]["name"] in workers)


FW_PLAY = "Rolling firmware update"
FW_TASKS = ("Read the cordoned Nodes",
            "Refuse a batch that would put more than day2_max_unavailable workers out of service",
            "Remember whether the node was cordoned before the run")
FW_SHORT = dict(zip(FW_TASKS, ("cordoned Node list", "max_unavailable check", "per-host cordoned read"), strict=True))


def _strip_become(obj):
    if isinstance(obj, dict):
        return {k: _strip_become(v) for k, v in obj.items() if k not in ("become", "become_user")}
    if isinstance(obj, list):
        return [_strip_become(v) for v in obj]
    return obj


def play_tasks(play: dict) -> list[dict]:
    """A play's tasks, with the capacity gate's tasks in place of the task that imports it."""
    tasks = []
    for task in play.get("tasks") or []:
        imported = task.get("ansible.builtin.import_tasks")
        if imported and (FIRMWARE_PLAYBOOK.parent / imported).resolve() == CAPACITY_GATE.resolve():
            tasks.extend(yaml.safe_load(CAPACITY_GATE.read_text()))
        else:
            tasks.append(task)
    return tasks


def firmware_planning_play(playbook: list[dict], kubeconfig: str) -> dict:
    """The firmware update's per-batch planning, taken from the playbook itself: its rolling play's
    serial, failure settings and vars, and the tasks FW_TASKS (from the capacity gate it imports),
    with the API read pointed at `kubeconfig` and no privilege escalation (the bench runs them on
    this machine)."""
    play = next((p for p in playbook if p.get("name") == FW_PLAY), None)
    if play is None:
        raise ValueError(f"{FIRMWARE_PLAYBOOK.name}: no play named {FW_PLAY!r}")
    by_name = {t.get("name"): t for t in play_tasks(play)}
    missing = [n for n in FW_TASKS if n not in by_name]
    if missing:
        raise ValueError(f"{FIRMWARE_PLAYBOOK.name}: play {FW_PLAY!r} has no task {', '.join(map(repr, missing))}")
    tasks = []
    for name in FW_TASKS:
        task = _strip_become(copy.deepcopy(by_name[name]))
        for module in ("kubernetes.core.k8s_info", "k8s_info"):
            if module in task:
                task[module]["kubeconfig"] = kubeconfig
        tasks.append(task)
    keep = {k: play[k] for k in ("serial", "max_fail_percentage", "any_errors_fatal") if k in play}
    return {"name": f"{FW_PLAY}: the per-batch planning (tests/bench/fleet_api.py)", "hosts": play["hosts"],
            "gather_facts": False, **keep, "vars": dict(play.get("vars") or {}), "tasks": tasks}


def task_seconds(report: dict, name: str) -> list[float]:
    """Duration of every run of the task `name` (one per batch with serial) in an ansible.posix.json report."""
    out = []
    for play in report.get("plays") or []:
        for task in play.get("tasks") or []:
            meta = task.get("task") or {}
            duration = meta.get("duration") or {}
            if meta.get("name") == name and "end" in duration:
                start, end = (datetime.fromisoformat(duration[k].rstrip("Z")) for k in ("start", "end"))
                out.append((end - start).total_seconds())
    return out


# ---------------------------------------------------------------- Ansible runs

def ansible_env() -> dict:
    # As tests/unit/test_validation_play.py: the JSON report on stdout, nothing else printed into it.
    return {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
            "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json", "ANSIBLE_FORCE_COLOR": "0"}


def run_playbook(playbook: Path, inventory: Path | str, *extra: str,
                 log: Path | None = None) -> tuple[int, dict, float]:
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), str(playbook), "-i", str(inventory), *extra]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=ansible_env(), capture_output=True, text=True, check=False)
    wall = time.monotonic() - t0
    if log:
        log.write_text(proc.stdout + proc.stderr)
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        report = {"error": (proc.stderr or proc.stdout)[-3000:]}
    return proc.returncode, report, wall


def host_results(report: dict, task_name: str) -> list[dict]:
    return [r for play in report.get("plays") or [] for t in play.get("tasks") or []
            if (t.get("task") or {}).get("name") == task_name for r in (t.get("hosts") or {}).values()]


# ---------------------------------------------------------------- the API

def core_api(kubeconfig: Path, pool: int):
    from kubernetes import client, config  # noqa: PLC0415 (the inventory part runs without it)

    cfg = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    cfg.connection_pool_maxsize = max(pool, 4)
    return client.CoreV1Api(client.ApiClient(cfg)), client.AppsV1Api(client.ApiClient(cfg))


def body(resp) -> dict:
    return json.loads(resp.data)  # reading to the end returns the connection to the pool


def bench_nodes(core) -> list[dict]:
    return body(core.list_node(label_selector=f"{BENCH_LABEL}=true", _preload_content=False,
                               _request_timeout=120))["items"]


def threaded(fn, items: list, workers: int) -> tuple[float, list]:
    """fn over items from `workers` threads: (seconds, [(item, exception or None)])."""
    def one(item):
        try:
            fn(item)
            return item, None
        except Exception as exc:  # noqa: BLE001 (counted and shown)
            return item, exc
    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        out = list(pool.map(one, items))
    return time.monotonic() - t0, out


def is_ready(node: dict) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def delete_bench_nodes(core, workers: int, timeout: float = 600) -> dict:
    names = [n["metadata"]["name"] for n in bench_nodes(core)]
    if not names:
        return {"deleted": 0, "seconds": 0.0, "left": 0}

    def delete(name):
        try:
            body(core.delete_node(name, _preload_content=False, _request_timeout=60))
        except Exception as exc:
            if getattr(exc, "status", None) != 404:
                raise
    seconds, results = threaded(delete, names, workers)
    errors = [f"{n}: {e}" for n, e in results if e]
    end = time.monotonic() + timeout
    while bench_nodes(core) and time.monotonic() < end:
        time.sleep(2)
    left = len(bench_nodes(core))
    return {"deleted": len(names) - len(errors), "seconds": round(seconds, 2), "errors": errors[:5],
            "gone_s": round(time.monotonic() - (end - timeout), 1), "left": left}


def pods_on(core, names: set[str]) -> dict[str, int]:
    """Pods bound to these Nodes, by owner (namespace/kind/name)."""
    pods = body(core.list_pod_for_all_namespaces(_preload_content=False, _request_timeout=120))["items"]
    out: dict[str, int] = {}
    for pod in pods:
        if (pod.get("spec") or {}).get("nodeName") in names:
            meta = pod["metadata"]
            owner = (meta.get("ownerReferences") or [{}])[0]
            key = f"{meta['namespace']}/{owner.get('kind', 'Pod')}/{owner.get('name', meta['name'])}"
            out[key] = out.get(key, 0) + 1
    return out


# ---------------------------------------------------------------- kwok

def load_build():
    spec = importlib.util.spec_from_file_location("lab_k8s_build", ROOT / "lab" / "k8s" / "build.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["lab_k8s_build"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def stop_pid(pid: int, grace: float = 15) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    end = time.monotonic() + grace
    while time.monotonic() < end:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def stop_kept_kwok() -> None:
    """The kwok a --keep run left (its pid file), so two never manage the same Nodes."""
    try:
        pid = int(KWOK_PIDFILE.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        KWOK_PIDFILE.unlink(missing_ok=True)
        return
    if b"kwok" in cmdline and f"{KWOK_ANNOTATION}={KWOK_VALUE}".encode() in cmdline:
        print(f"stopping kwok {pid} left by an earlier --keep run", flush=True)
        stop_pid(pid)
    KWOK_PIDFILE.unlink(missing_ok=True)


def start_kwok(kwok: dict, kubeconfig: Path, work: Path, extra: list[str]) -> subprocess.Popen:
    home = work / "kwok-home"  # no ~/.kwok/kwok.yaml of this machine's user gets loaded
    home.mkdir(exist_ok=True)
    cmd = [str(kwok["binary"]), f"--kubeconfig={kubeconfig}", "--manage-all-nodes=false",
           f"--manage-nodes-with-annotation-selector={KWOK_ANNOTATION}={KWOK_VALUE}",
           *[f"--config={s}" for s in kwok["stages"]], *extra]
    log = open(work / "kwok.log", "wb")  # noqa: SIM115 (the child keeps it)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "HOME": str(home)},
                            start_new_session=True)
    KWOK_PIDFILE.write_text(f"{proc.pid}\n")
    time.sleep(3)
    if proc.poll() is not None:
        raise RuntimeError(f"kwok exited {proc.returncode}:\n{(work / 'kwok.log').read_text(errors='replace')[-3000:]}")
    print(f"kwok {kwok['binary']} running (pid {proc.pid}, log {work / 'kwok.log'})", flush=True)
    return proc


# ---------------------------------------------------------------- parts

def part_inventory(total: int, work: Path) -> dict:
    inv = work / "inventory-widened"
    shutil.copytree(SAMPLE_INVENTORY, inv)
    (inv / "hosts.yml").write_text(widen_inventory((SAMPLE_INVENTORY / "hosts.yml").read_text(), total))
    out = {}
    for label, path in (("sample", SAMPLE_INVENTORY), ("widened", inv)):
        rc, report, wall = run_playbook(ROOT / "playbooks" / "validate.yml", path, *SAMPLE_SECRET,
                                        log=work / f"validate-{label}.json")
        [result] = host_results(report, VALIDATION_TASK) or [{}]
        out[label] = {"rc": rc, "wall_s": round(wall, 2),
                      "task_s": round(sum(task_seconds(report, VALIDATION_TASK)), 2),
                      "checked_hosts": result.get("checked_hosts"),
                      "errors": result.get("errors", report.get("error"))}
        print(f"inventory validation, {label:7s}: {out[label]['checked_hosts']} hosts  rc={rc}  wall {wall:.2f} s  "
              f"(validation task {out[label]['task_s']} s)  errors={out[label]['errors']}", flush=True)
    print(f"  target: the {total}-host inventory under 10 s", flush=True)
    return out


def part_nodes(core, apps, names: list[str], *, labels: dict, pod_cidr: str, workers: int,
               ready_timeout: float) -> dict:
    bodies = [fake_node(n, i, labels, pod_cidr) for i, n in enumerate(names, 1)]
    taints = bodies[0]["spec"]["taints"]
    daemonsets = body(apps.list_daemon_set_for_all_namespaces(_preload_content=False, _request_timeout=60))["items"]
    landing = daemonsets_landing(daemonsets, bodies[0]["metadata"]["labels"], taints)
    if landing:
        print(f"DaemonSets that will put a Pod on every fake Node (they tolerate its taint): {', '.join(landing)}; "
              f"{len(landing) * len(names)} Pods (Pending: kwok runs no Pod stages)", flush=True)

    def create(node):
        body(core.create_node(node, _preload_content=False, _request_timeout=60))
    seconds, results = threaded(create, bodies, workers)
    errors = [f"{n['metadata']['name']}: {getattr(e, 'status', '')} {getattr(e, 'reason', e)}" for n, e in results if e]
    print(f"created {len(names) - len(errors)} Nodes in {seconds:.1f} s ({(len(names) - len(errors)) / seconds:.0f}/s, "
          f"{workers} threads){'; errors: ' + '; '.join(errors[:5]) if errors else ''}", flush=True)
    t0 = time.monotonic()
    ready = 0
    while time.monotonic() - t0 < ready_timeout:
        ready = sum(1 for n in bench_nodes(core) if is_ready(n))
        if ready >= len(names) - len(errors):
            break
        time.sleep(2)
    ready_s = time.monotonic() - t0
    print(f"kwok: {ready}/{len(names)} Nodes Ready {ready_s:.1f} s after the last create", flush=True)
    # kwok's node-initialize keeps the capacity a Node was created with; should the API have dropped the
    # status on create, it would be kwok's default (no GPUs): set it through the status subresource.
    listed = bench_nodes(core)
    without = [n["metadata"]["name"] for n in listed
               if (n.get("status") or {}).get("capacity", {}).get("nvidia.com/gpu") != SEED_CAPACITY["nvidia.com/gpu"]]
    if without:
        capacity = {"status": {"capacity": SEED_CAPACITY, "allocatable": SEED_CAPACITY}}
        patch_s, patched = threaded(lambda n: core.patch_node_status(n, capacity, _preload_content=False,
                                                                     _request_timeout=60).data, without, workers)
        print(f"{len(without)} Nodes had no nvidia.com/gpu capacity: set in {patch_s:.1f} s "
              f"({sum(1 for _, e in patched if e)} failed)", flush=True)
    out = {"created": len(names) - len(errors), "create_s": round(seconds, 2), "errors": errors[:20],
           "ready": ready, "ready_after_s": round(ready_s, 1), "daemonsets_landing": landing,
           "capacity_patched": len(without)}
    if landing:
        # Their Pods come in the first minutes: wait until the count holds still so they do not load the timings.
        t0, last, steady = time.monotonic(), -1, 0.0
        while time.monotonic() - t0 < 300 and steady < 10:
            count = sum(pods_on(core, set(names)).values())
            steady = steady + 3 if count == last else 0.0
            last = count
            time.sleep(3)
        out["daemonset_pods"] = last
        print(f"DaemonSet Pods on the fake Nodes: {last} (settled after {time.monotonic() - t0:.0f} s)", flush=True)
    return out


def part_labels(kubeconfig: Path, names: list[str], labels: dict, work: Path, parallel: int | None) -> dict:
    (work / "labels-vars.json").write_text(json.dumps({
        "bench_kubeconfig": str(kubeconfig),
        "bench_accelerator_nodes": {n: {"labels": labels} for n in names},
        "bench_inventory_nodes": {n: {"labels": INVENTORY_LABELS, "taints": [INVENTORY_TAINT]} for n in names},
    }))
    extra = {"parallel": parallel} if parallel else {}
    tasks = [("Accelerator labels (as roles/node_labels)",
              {"labels_annotation": LABELS_ANNOTATION, "nodes": "{{ bench_accelerator_nodes }}"}),
             ("Inventory labels and taints (as roles/k8s_worker)", {"nodes": "{{ bench_inventory_nodes }}"})]
    play = [{"name": f"node_metadata on {len(names)} Nodes (tests/bench/fleet_api.py)", "hosts": "localhost",
             "connection": "local", "gather_facts": False, "vars_files": [str(work / "labels-vars.json")],
             "tasks": [{"name": name, "ai_platform.l1.node_metadata": {
                 "kubeconfig": "{{ bench_kubeconfig }}", "missing": "skip", **args, **extra}}
                 for name, args in tasks]}]
    playbook = work / "labels.yml"
    playbook.write_text(yaml.safe_dump(play, sort_keys=False))
    out = {}
    for run in ("first", "second"):
        rc, report, wall = run_playbook(playbook, "localhost,", "-e", f"ansible_python_interpreter={sys.executable}",
                                        log=work / f"labels-{run}.json")
        row = {"rc": rc, "wall_s": round(wall, 2)}
        for name, _ in tasks:
            [res] = host_results(report, name) or [{}]
            row[name] = {"task_s": round(sum(task_seconds(report, name)), 2),
                         "nodes_changed": sum(1 for e in (res.get("nodes") or {}).values() if e.get("changed")),
                         "failed": res.get("failed", False), "msg": (res.get("msg") or "")[:300] or None}
        if "error" in report:
            row["error"] = report["error"]
        out[run] = row
        print(f"labels+taints, {run:6s} run: rc={rc} wall {wall:.1f} s  " + "  ".join(
            f"[{name.split(' (')[0]}: {row[name]['task_s']} s, {row[name]['nodes_changed']} Nodes changed]"
            for name, _ in tasks) + (f"  {row.get('error', '')}" if rc else ""), flush=True)
    print(f"  target: {len(names)} Nodes under 60 s", flush=True)
    return out


def part_firmware(core, kubeconfig: Path, names: list[str], work: Path, *, max_unavailable: int,
                  batches: int) -> dict:
    play = firmware_planning_play(yaml.safe_load(FIRMWARE_PLAYBOOK.read_text()), str(kubeconfig))
    (work / "firmware.yml").write_text(yaml.safe_dump([play], sort_keys=False))
    inventory = {"all": {"hosts": {"localhost": {"ansible_connection": "local",
                                                 "ansible_python_interpreter": sys.executable}},
                         "children": {"k8s_control_plane": {"hosts": {"localhost": None}},
                                      # never contacted (run_once reads and set_fact): no SSH to try
                                      "k8s_worker": {"hosts": dict.fromkeys(names),
                                                     "vars": {"ansible_connection": "local"}}}}}
    (work / "firmware-inventory.yml").write_text(yaml.safe_dump(inventory))
    limit = ",".join(names[:batches * max_unavailable])
    rc, report, wall = run_playbook(work / "firmware.yml", work / "firmware-inventory.yml", "--limit", limit,
                                    "-e", f"day2_max_unavailable={max_unavailable}", log=work / "firmware.json")
    per_task = {name: task_seconds(report, name) for name in FW_TASKS}
    per_batch = [sum(x) for x in zip(*per_task.values(), strict=False)]
    total_batches = math.ceil(len(names) / max_unavailable)
    mean = sum(per_batch) / len(per_batch) if per_batch else float("nan")
    # The floor: the same read and filter, in this process.
    t0 = time.monotonic()
    listed = body(core.list_node(_preload_content=False, _request_timeout=120))["items"]
    t1 = time.monotonic()
    cordoned = cordoned_workers(listed, set(names))
    gpus = sum(int((n.get("status") or {}).get("capacity", {}).get("nvidia.com/gpu", 0)) for n in listed)
    t2 = time.monotonic()
    out = {"rc": rc, "wall_s": round(wall, 1), "batches_run": len(per_batch), "max_unavailable": max_unavailable,
           "per_task_s": {k: [round(s, 3) for s in v] for k, v in per_task.items()},
           "per_batch_mean_s": round(mean, 3), "batches_whole_update": total_batches,
           "planning_whole_update_s": round(mean * total_batches, 1),
           "python_list_s": round(t1 - t0, 3), "python_filter_s": round(t2 - t1, 4), "nodes_listed": len(listed),
           "cordoned_workers": len(cordoned), "gpus_listed": gpus}
    if rc:
        out["error"] = report.get("error") or [r.get("msg") for t in FW_TASKS for r in host_results(report, t)
                                               if r.get("failed")][:3]
    print(f"firmware update planning, {len(per_batch)} batches of {max_unavailable} over {len(names)} workers: "
          f"rc={rc} per batch {mean:.2f} s ("
          + ", ".join(f"{FW_SHORT[k]} {sum(v) / max(len(v), 1):.2f} s" for k, v in per_task.items())
          + f"); a whole rolling update ({total_batches} batches): {mean * total_batches:.0f} s of planning",
          flush=True)
    print(f"  floor: one list of {len(listed)} Nodes {t1 - t0:.2f} s + the cordoned/device-count filter "
          f"{(t2 - t1) * 1000:.1f} ms in Python", flush=True)
    if rc:
        print(f"  the planning run failed (log {work / 'firmware.json'}): {str(out['error'])[:500]}", flush=True)
    return out


class CordonOnlyExecutor:
    """The receiver's executor interface (remediation/executor.py) without ansible-runner: start cordons the
    Node through the API (what the isolate playbook does first); the job then holds for run_s seconds."""

    def __init__(self, jobs_dir: Path, nodes, annotation: str, run_s: float):
        self.jobs_dir, self.nodes, self.annotation, self.run_s = Path(jobs_dir), nodes, annotation, run_s
        self.stopping = threading.Event()
        self._results: dict[int, dict] = {}

    def job_dir(self, job_id: int) -> Path:
        return self.jobs_dir / f"job-{job_id:06d}"

    def start(self, job: dict, spec: dict) -> int:  # noqa: ARG002 (the interface's signature)
        self.nodes.cordon(job["node"], self.annotation, f"fleet_api bench: job {job['id']} ({job['kind']})")
        self._results[job["id"]] = {"ident": f"standin-{job['id']}", "status": "successful", "rc": 0,
                                    "source": "standin"}
        return os.getpid()

    def wait(self, job: dict, on_ident, poll_s: float = 0.1, timeout_s: float | None = None) -> dict | None:  # noqa: ARG002
        on_ident(f"standin-{job['id']}")
        self.stopping.wait(self.run_s)
        return self._results.get(job["id"])

    def alive(self, job: dict) -> bool:  # noqa: ARG002
        return False

    def run_processes(self, job: dict) -> list[int]:  # noqa: ARG002
        return []

    def ident(self, job: dict) -> str | None:
        return (self._results.get(job["id"]) or {}).get("ident")

    def result(self, job: dict) -> dict | None:
        return self._results.get(job["id"])

    def runs(self, job_id: int) -> list[str]:
        return [f"standin-{job_id}"] if job_id in self._results else []


class TimedNodes:
    """The receiver's KubeNodes, each full Node read timed into a file (one line of seconds per read)."""

    def __init__(self, inner, path: Path):
        self.inner, self.path, self.lock = inner, path, threading.Lock()

    def nodes(self):
        t0 = time.monotonic()
        try:
            return self.inner.nodes()
        finally:
            with self.lock, open(self.path, "a") as fh:
                fh.write(f"{time.monotonic() - t0:.4f}\n")

    def __getattr__(self, name):
        return getattr(self.inner, name)


def serve_receiver(spec_path: Path) -> int:
    """--serve-receiver: the receiver (Service, HTTP server, store, KubeNodes) with CordonOnlyExecutor, in this
    process; prints its port, serves until SIGTERM."""
    from ai_l1_day2.remediation import config as config_mod  # noqa: PLC0415
    from ai_l1_day2.remediation.kube import KubeNodes  # noqa: PLC0415
    from ai_l1_day2.remediation.server import make_server  # noqa: PLC0415
    from ai_l1_day2.remediation.service import Service  # noqa: PLC0415
    from ai_l1_day2.remediation.store import Store  # noqa: PLC0415

    spec = json.loads(spec_path.read_text())
    cfg = config_mod.load(None, env={"AI_L1_REMEDIATE_TOKEN": spec["token"]}, overrides=spec["config"])
    view = KubeNodes(cfg.kubeconfig)
    view.wait_synced(30)  # as the receiver's start does (remediation/cli.py serve)
    nodes = TimedNodes(view, Path(spec["timings"]))
    executor = CordonOnlyExecutor(cfg.jobs_dir, nodes, cfg.cordon_annotation, spec["run_s"])
    service = Service(cfg, Store(cfg.db_path), nodes, executor)
    service.acquire_state_dir()
    service.start()
    server = make_server(service, "127.0.0.1", 0)

    def interrupt(_signum, _frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, interrupt)
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        executor.stopping.set()
        service.stop()
        server.server_close()
    return 0


def http(url: str, method: str = "GET", data: dict | None = None, timeout: float = 600) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=json.dumps(data).encode() if data is not None else None, method=method,
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def burst_alerts(pool: list[str], count: int) -> list[dict]:
    """`count` alerts over the pool: a GPUXidError (XID 79) for each Node, then a GPUECCUncorrectableError for each,
    and so on, in a fixed shuffled order (Alertmanager flushes its groups in no particular order)."""
    alerts = []
    for i in range(count):
        node = pool[i % len(pool)]
        name = "GPUXidError" if (i // len(pool)) % 2 == 0 else "GPUECCUncorrectableError"
        alerts.append(alert(name, node, xid=79 if name == "GPUXidError" else None))
    random.Random(17).shuffle(alerts)
    return alerts


def send_burst(url: str, alerts: list[dict], senders: int) -> tuple[float, list[tuple[float, int, dict]]]:
    """One webhook per alert, `senders` in flight at once, all released together: (seconds, [(latency, code, body)])."""
    go = threading.Event()

    def send(a):
        go.wait()
        t0 = time.monotonic()
        code, reply = http(url + "/webhook", "POST", payload(a))
        return time.monotonic() - t0, code, reply
    with concurrent.futures.ThreadPoolExecutor(max_workers=senders) as pool:
        futures = [pool.submit(send, a) for a in alerts]
        t0 = time.monotonic()
        go.set()
        replies = [f.result() for f in futures]
    return time.monotonic() - t0, replies


def classify(replies: list[tuple[float, int, dict]]) -> tuple[dict[str, int], list[str]]:
    """Decisions by kind (refusals by the ceiling and by the node lock apart), and the failed requests."""
    decisions: dict[str, int] = {}
    failed = []
    for _, code, reply in replies:
        if code != 200:
            failed.append(f"{code} {str(reply.get('error', ''))[:200]}")
            continue
        for d in reply["decisions"]:
            reason = d["reason"]
            kind = d["decision"] + (": pool ceiling" if reason.startswith("pool ceiling") else
                                    ": rate limit" if reason.startswith("rate limit") else
                                    ": node locked" if " is locked by job " in reason else "")
            decisions[kind] = decisions.get(kind, 0) + 1
    return decisions, failed


def wait_jobs(url: str, timeout: float) -> int:
    """Until the receiver has no queued or running job: how many are still active."""
    end, active = time.monotonic() + timeout, -1
    while time.monotonic() < end:
        code, jobs = http(url + "/jobs")
        if code != 200:
            return -1
        active = sum(1 for j in jobs["jobs"] if j["state"] in ("queued", "running"))
        if active == 0:
            break
        time.sleep(1)
    return active


def restore_pool(core, pool: set[str]) -> None:
    """The pool as it was (the Nodes may be kept): uncordoned, the cordon reason annotation off."""
    for n in bench_nodes(core):
        meta = n["metadata"]
        if meta["name"] in pool and ((n.get("spec") or {}).get("unschedulable")
                                     or CORDON_ANNOTATION in (meta.get("annotations") or {})):
            patch = {"spec": {"unschedulable": False}, "metadata": {"annotations": {CORDON_ANNOTATION: None}}}
            body(core.patch_node(meta["name"], patch, _preload_content=False, _request_timeout=60))


def start_receiver(kubeconfig: Path, pool: list[str], work: Path, args) -> tuple[subprocess.Popen, str, Path]:
    inventory = work / "receiver-inventory.yml"
    # The receiver isolates only hosts of k8s_worker in its run inventory (the stand-in never reads it further).
    inventory.write_text(yaml.safe_dump({"all": {"children": {"k8s_worker": {"hosts": dict.fromkeys(pool, {})}}}}))
    timings = work / "receiver-nodes-reads.txt"
    spec = {"run_s": args.run_s, "timings": str(timings), "token": TOKEN, "config": {
        "state_dir": str(work / "receiver"), "kubernetes": {"kubeconfig": str(kubeconfig)},
        "ceiling": {"max_fraction": args.max_fraction, "pools": {"bench-pool": pool}},
        # By default far above the burst: the ceiling, not the rate limit (the breaker), stops it.
        "rate_limit": {"max_runs": args.rate_limit or 10 * args.burst, "window_s": 3600},
        "run": {"inventory": str(inventory), "workers": args.receiver_workers, "timeout_s": 600}}}
    (work / "receiver-spec.json").write_text(json.dumps(spec))
    log = open(work / "receiver.log", "wb")  # noqa: SIM115 (the child keeps it)
    proc = subprocess.Popen([sys.executable, __file__, "--serve-receiver", str(work / "receiver-spec.json")],
                            stdout=subprocess.PIPE, stderr=log, cwd=ROOT)
    port = int(proc.stdout.readline() or 0)
    if not port:
        proc.wait(30)
        log_text = (work / "receiver.log").read_text(errors="replace")
        raise RuntimeError(f"the receiver did not start:\n{log_text[-3000:]}")
    return proc, f"http://127.0.0.1:{port}", timings


def stop_process(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


def part_remediation(core, kubeconfig: Path, names: list[str], work: Path, args) -> dict:
    pool = names[:args.burst_nodes]
    limit = math.floor(args.max_fraction * len(pool) + 1e-9)
    out: dict = {"pool": len(pool), "max_fraction": args.max_fraction, "ceiling": limit, "alerts": args.burst,
                 "senders": args.senders, "run_s": args.run_s, "receiver_workers": args.receiver_workers}
    proc = None
    try:
        proc, url, timings = start_receiver(kubeconfig, pool, work, args)
        burst_s, replies = send_burst(url, burst_alerts(pool, args.burst), args.senders)
        latency = [s for s, _, _ in replies]
        decisions, failed = classify(replies)
        queued = decisions.get("queued", 0)
        # The isolations run: the stand-in cordons at start, --receiver-workers at a time, --run-s each.
        t_jobs = time.monotonic()
        active = wait_jobs(url, args.run_s * math.ceil(max(queued, 1) / args.receiver_workers) + 120)
        drain_s = burst_s + time.monotonic() - t_jobs
        cordoned = [n["metadata"]["name"] for n in bench_nodes(core)
                    if n["metadata"]["name"] in set(pool) and (n.get("spec") or {}).get("unschedulable")]
        reads = [float(x) for x in timings.read_text().split()] if timings.exists() else []
        out.update({"burst_s": round(burst_s, 2), "latency_s": summary(latency),
                    "server_s": summary([r.get("ms", 0) / 1000 for _, c, r in replies if c == 200]),
                    "over_1s": sum(1 for s in latency if s >= 1.0), "decisions": decisions, "http_errors": failed[:10],
                    "http_error_count": len(failed), "queued": queued, "cordoned": len(cordoned),
                    "jobs_still_active": active, "node_list_reads_s": summary(reads),
                    # Isolations finished per minute, from the burst to the last job's end.
                    "drain_s": round(drain_s, 1), "drained_per_min": round(60 * queued / drain_s, 1) if drain_s else 0,
                    "ceiling_held": queued == limit and len(cordoned) == limit})
        print_remediation(out, args)
    finally:
        if proc is not None:
            stop_process(proc)
        restore_pool(core, set(pool))
    return out


def print_remediation(out: dict, args) -> None:
    lat, reads = out["latency_s"], out["node_list_reads_s"]
    print(f"remediation burst: {out['alerts']} alerts over {out['pool']} Nodes, {args.senders} at once, "
          f"in {out['burst_s']:.1f} s", flush=True)
    if lat["n"]:
        print(f"  per decision (webhook round trip): p50 {lat['p50']:.3f} s  p90 {lat['p90']:.3f} s  "
              f"p99 {lat['p99']:.3f} s  max {lat['max']:.3f} s  ({out['over_1s']} of {lat['n']} at 1 s or more)",
              flush=True)
    if reads["n"]:
        print(f"  the receiver's Node list reads: {reads['n']}, p50 {reads['p50']:.3f} s  max {reads['max']:.3f} s",
              flush=True)
    errors = f"; HTTP errors: {out['http_error_count']} ({out['http_errors'][0]})" if out["http_error_count"] else ""
    print(f"  decisions: {json.dumps(out['decisions'], sort_keys=True)}{errors}", flush=True)
    still = "" if out["jobs_still_active"] == 0 else f" ({out['jobs_still_active']} jobs still active)"
    verdict = "exactly the ceiling" if out["ceiling_held"] else "NOT the ceiling"
    print(f"  isolated: {out['queued']} queued, {out['cordoned']} Nodes cordoned; ceiling floor({out['max_fraction']} "
          f"x {out['pool']}) = {out['ceiling']}: {verdict}{still}", flush=True)
    print(f"  drained: {out['queued']} isolations in {out['drain_s']:.1f} s from the burst "
          f"({out['drained_per_min']:.1f} a minute, {args.receiver_workers} at a time, {args.run_s:.0f} s each)",
          flush=True)


# ---------------------------------------------------------------- main

def interrupt(_signum, _frame):
    raise KeyboardInterrupt


def lab_pod_cidr() -> str:
    cluster = yaml.safe_load((LAB_INVENTORY / "group_vars" / "all" / "cluster.yml").read_text())
    return spare_pod_cidr(cluster["k8s_pod_cidr"])


def main() -> int:  # noqa: PLR0912, PLR0915 (one block per part, in order)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000, help="fake Nodes, and hosts of the widened inventory")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--keep", action="store_true", help="leave the fake Nodes and kwok running at the end")
    parser.add_argument("--workers", type=int, default=16, help="threads creating and deleting Nodes")
    parser.add_argument("--ready-timeout", type=float, default=600)
    parser.add_argument("--pod-cidr",
                        help="podCIDR of every fake Node (default: the last /24 of the lab's pod network)")
    parser.add_argument("--parallel", type=int, help="node_metadata's parallel option (default: the module's)")
    parser.add_argument("--max-unavailable", type=int, default=1, help="day2_max_unavailable of the firmware update")
    parser.add_argument("--fw-batches", type=int, default=3, help="firmware planning batches to run and average")
    parser.add_argument("--burst", type=int, default=200, help="alerts in the remediation burst")
    parser.add_argument("--burst-nodes", type=int, default=100, help="fake Nodes the alerts name: the ceiling's pool")
    parser.add_argument("--max-fraction", type=float, default=0.1, help="the pool's ceiling.max_fraction")
    parser.add_argument("--rate-limit", type=int, default=0,
                        help="the receiver's rate_limit.max_runs in an hour (the breaker; default 10x the burst: off)")
    parser.add_argument("--senders", type=int, default=200, help="webhooks in flight at once")
    parser.add_argument("--run-s", type=float, default=5.0, help="how long the stand-in's isolation run holds its job")
    parser.add_argument("--receiver-workers", type=int, default=2, help="the receiver's run.workers")
    parser.add_argument("--kwok-arg", action="append", default=[], help="one more kwok flag (repeatable)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--serve-receiver", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_receiver:
        return serve_receiver(args.serve_receiver)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"unknown parts {', '.join(unknown)} (known: {', '.join(PARTS)})")
    if {"labels", "firmware", "remediation"} & set(parts) and "nodes" not in parts:
        parts.append("nodes")  # they run on the fake Nodes
    if "remediation" in parts and args.burst_nodes > args.nodes:
        parser.error("--burst-nodes is more than --nodes")

    work = Path(tempfile.mkdtemp(prefix="fleet-api-bench-"))
    report: dict = {"nodes": args.nodes, "parts": parts, "workdir": str(work)}
    signal.signal(signal.SIGTERM, interrupt)  # timeout(1), kill: leave through the finally below
    kwok_proc = core = None
    names = [node_name(i) for i in range(1, args.nodes + 1)]
    try:
        if "inventory" in parts:
            report["inventory"] = part_inventory(args.nodes, work)
        if "nodes" in parts:
            kubeconfig = fetch_kubeconfig(LAB_INVENTORY, "cp1", work / "admin.conf")
            core, apps = core_api(kubeconfig, args.workers)
            t0 = time.monotonic()
            kwok = load_build().ensure_kwok()
            report["kwok"] = {"binary": str(kwok["binary"]), "cached": kwok.get("cached"),
                              "build_s": round(time.monotonic() - t0, 1)}
            print(f"kwok {'cached' if kwok.get('cached') else 'built'} in {report['kwok']['build_s']} s", flush=True)
            stop_kept_kwok()
            leftover = delete_bench_nodes(core, args.workers)
            if leftover["deleted"]:
                print(f"deleted {leftover['deleted']} fake Nodes an earlier run left", flush=True)
            kwok_proc = start_kwok(kwok, kubeconfig, work, args.kwok_arg)
            labels = seed_labels()
            report["seed_labels"] = labels
            report["create"] = part_nodes(core, apps, names, labels=labels, pod_cidr=args.pod_cidr or lab_pod_cidr(),
                                          workers=args.workers, ready_timeout=args.ready_timeout)
            if "labels" in parts:
                report["labels"] = part_labels(kubeconfig, names, labels, work, args.parallel)
            if "firmware" in parts:
                report["firmware"] = part_firmware(core, kubeconfig, names, work, max_unavailable=args.max_unavailable,
                                                   batches=args.fw_batches)
            if "remediation" in parts:
                report["remediation"] = part_remediation(core, kubeconfig, names, work, args)
            report["pods_on_fake_nodes"] = pods_on(core, set(names))
    except KeyboardInterrupt:
        print("interrupted: cleaning up", file=sys.stderr)
        report["interrupted"] = True
    finally:
        if core is not None and not args.keep:
            report["delete"] = delete_bench_nodes(core, args.workers)
            print(f"deleted {report['delete']['deleted']} fake Nodes in {report['delete']['seconds']} s "
                  f"({report['delete']['left']} left)", flush=True)
        if kwok_proc is not None:
            if args.keep:
                print(f"kept: {args.nodes} fake Nodes (label {BENCH_LABEL}=true) and kwok (pid {kwok_proc.pid}; "
                      "the next run stops it)", flush=True)
            else:
                stop_pid(kwok_proc.pid)
                kwok_proc.wait(30)
                KWOK_PIDFILE.unlink(missing_ok=True)
        if args.json:
            args.json.write_text(json.dumps(report, indent=2, default=str))
        print(f"logs: {work}", flush=True)
    return 1 if report.get("interrupted") else 0


if __name__ == "__main__":
    sys.exit(main())
