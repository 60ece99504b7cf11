#!/usr/bin/env python3
"""Time ai_platform.l1.node_metadata reconciling the labels and taints of 1,000 Nodes.

    python tests/bench/node_metadata_bench.py [--nodes 1000] [--latency-ms 5] [--parallel 1,4,8]
    python tests/bench/node_metadata_bench.py --kubeconfig ~/.kube/config [--nodes 50]

Without --kubeconfig it starts a fake API server (a separate process: list, get and merge-patch
of Nodes over HTTP/1.1, resourceVersion preconditions answered 409, --latency-ms added to every
request as a real API server's etcd write would) holding --nodes Nodes of a realistic size (status
with conditions and 30 images, about 9 KB of JSON each), and times, through the real kubernetes
client:

  list_only      one list of all Nodes, parsed (the part every run pays)
  first_run      reconcile(): every Node needs a label and a taint (one PATCH each), per --parallel
  second_run     the same again: nothing differs, so one list and no PATCH
  per_node       one GET and one PATCH per Node, in sequence: the fewest API calls of the per-host
                 tasks this module replaces (k8s_info, then k8s / k8s_taint), without their Ansible
                 task cost (a delegated module run per host and task)
  module_run     the module file run as Ansible runs it, in a new Python process (interpreter,
                 kubernetes import, 1,000-Node arguments and result as JSON): first and second run

With --kubeconfig it runs against that cluster's first --nodes Nodes instead (per_node skipped).
It writes the label bench.ai-platform.io/run and the taint bench.ai-platform.io/run:PreferNoSchedule
(recorded in their own bench annotations) and removes them all at the end.
No assertions on time: the figures are printed (JSON) for the issue and for later comparison.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COLLECTIONS = ROOT / "collections"
MODULE = COLLECTIONS / "ansible_collections/ai_platform/l1/plugins/modules/node_metadata.py"
sys.path.insert(0, str(COLLECTIONS))
from ansible_collections.ai_platform.l1.plugins.module_utils.node_metadata import merge_patch  # noqa: E402

LABELS_ANN = "bench.ai-platform.io/managed-labels"
TAINTS_ANN = "bench.ai-platform.io/managed-taints"
KEY = "bench.ai-platform.io/run"


# --- the fake API server (run with --serve in its own process) ------------------------------------

def fake_node(i):
    name = "gpu%04d" % i
    now = "2026-01-01T00:00:00Z"
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name, "uid": "00000000-0000-0000-0000-%012d" % i, "creationTimestamp": now,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                       "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64",
                       "node-role.kubernetes.io/worker": "", "topology.kubernetes.io/zone": "zone-%d" % (i % 4)},
            "annotations": {"kubeadm.alpha.kubernetes.io/cri-socket": "unix:///run/containerd/containerd.sock",
                            "node.alpha.kubernetes.io/ttl": "0",
                            "volumes.kubernetes.io/controller-managed-attach-detach": "true"},
        },
        "spec": {"podCIDR": "10.%d.%d.0/24" % (i // 256, i % 256), "podCIDRs": ["10.%d.%d.0/24" % (i // 256, i % 256)],
                 "taints": ([{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": now}]
                            if i % 100 == 0 else [])},
        "status": {
            "capacity": {"cpu": "128", "memory": "2113464872Ki", "nvidia.com/gpu": "8", "pods": "110",
                         "ephemeral-storage": "3750000000Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0"},
            "allocatable": {"cpu": "126", "memory": "2103464872Ki", "nvidia.com/gpu": "8", "pods": "110",
                            "ephemeral-storage": "3456000000000", "hugepages-1Gi": "0", "hugepages-2Mi": "0"},
            "conditions": [{"type": t, "status": "False" if t != "Ready" else "True", "lastHeartbeatTime": now,
                            "lastTransitionTime": now, "reason": "Kubelet" + t, "message": "kubelet reports " + t}
                           for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready", "GPUError")],
            "addresses": [{"type": "InternalIP", "address": "10.1.%d.%d" % (i // 256, i % 256)},
                          {"type": "Hostname", "address": name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": "%032x" % i, "systemUUID": "%032x" % (i + 7), "bootID": "%032x" % (i + 9),
                         "kernelVersion": "5.15.0-105-generic", "osImage": "Ubuntu 22.04.4 LTS",
                         "containerRuntimeVersion": "containerd://1.7.13", "kubeletVersion": "v1.30.4",
                         "kubeProxyVersion": "v1.30.4", "operatingSystem": "linux", "architecture": "amd64"},
            "images": [{"names": ["registry.example.com/ai/image-%02d@sha256:%064x" % (j, j),
                                  "registry.example.com/ai/image-%02d:v1.%d" % (j, j)], "sizeBytes": 1000000 * (j + 1)}
                       for j in range(30)],
        },
    }


def serve(count, latency):
    nodes = {}
    state = {"version": 1000}
    lock = threading.Lock()
    for i in range(count):
        node = fake_node(i)
        state["version"] += 1
        node["metadata"]["resourceVersion"] = str(state["version"])
        nodes[node["metadata"]["name"]] = node

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the real API server
        disable_nagle_algorithm = True  # as Go's net/http: no 40 ms wait between headers and body

        def log_message(self, *args):
            pass

        def reply(self, code, obj):
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def status(self, code, reason, message):
            self.reply(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                              "reason": reason, "code": code})

        def do_GET(self):
            time.sleep(latency)
            path = self.path.split("?")[0]
            with lock:
                if path == "/api/v1/nodes":
                    body = {"kind": "NodeList", "apiVersion": "v1",
                            "metadata": {"resourceVersion": str(state["version"])},
                            "items": [nodes[n] for n in sorted(nodes)]}
                    return self.reply(200, body)
                name = path.rsplit("/", 1)[-1]
                if path.startswith("/api/v1/nodes/") and name in nodes:
                    return self.reply(200, nodes[name])
            return self.status(404, "NotFound", 'nodes "%s" not found' % name)

        def do_PATCH(self):
            time.sleep(latency)
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            name = self.path.split("?")[0].rsplit("/", 1)[-1]
            with lock:
                if name not in nodes:
                    return self.status(404, "NotFound", 'nodes "%s" not found' % name)
                wanted = (body.get("metadata") or {}).pop("resourceVersion", None)
                if wanted and wanted != nodes[name]["metadata"]["resourceVersion"]:
                    return self.status(409, "Conflict", 'Operation cannot be fulfilled on nodes "%s": the object '
                                       'has been modified' % name)
                state["version"] += 1
                node = merge_patch(nodes[name], body)
                node["metadata"]["resourceVersion"] = str(state["version"])
                nodes[name] = node
                return self.reply(200, node)

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request, client_address):
            # A client process that ends closes its kept-alive connections: not worth a traceback.
            if not isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError)):
                super().handle_error(request, client_address)

    server = Server(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


# --- the client side -------------------------------------------------------------------------------

class Counting:
    """A CoreV1Api that counts the calls the module makes."""

    def __init__(self, api):
        self.api = api
        self.calls = {"list_node": 0, "read_node": 0, "patch_node": 0}
        self.lock = threading.Lock()

    def __getattr__(self, name):
        method = getattr(self.api, name)
        if name not in self.calls:
            return method

        def counted(*args, **kwargs):
            with self.lock:
                self.calls[name] += 1
            return method(*args, **kwargs)
        return counted


def wanted(names, run):
    """Every Node: the run's label and taint (a new value each run, so every Node differs)."""
    return {n: {"labels": {KEY: run}, "taints": [{"key": KEY, "value": run, "effect": "PreferNoSchedule"}]}
            for n in names}


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return round(time.perf_counter() - start, 3), out


def reconcile_runs(mod, api, names, parallel, run):
    out = {}
    for label, spec in (("first_run", wanted(names, run)), ("second_run", wanted(names, run))):
        counting = Counting(api)
        seconds, (result, problems) = timed(lambda s=spec, c=counting: mod.reconcile(
            c, s, labels_annotation=LABELS_ANN, taints_annotation=TAINTS_ANN, parallel=parallel, missing="fail"))
        if problems:
            sys.exit("reconcile failed: %s" % "; ".join(problems)[:2000])
        changed = sum(1 for e in result["nodes"].values() if e["changed"])
        out[label] = {"seconds": seconds, "nodes_changed": changed, "api_calls": counting.calls,
                      "ms_per_node": round(seconds * 1000 / max(len(names), 1), 3)}
    return out


def module_runs(kubeconfig, names, run, tmp):
    env = dict(os.environ, PYTHONPATH=str(COLLECTIONS))
    out = {}
    for label in ("first_run", "second_run"):
        args = Path(tmp) / "args.json"
        args.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {
            "kubeconfig": kubeconfig, "nodes": wanted(names, run), "labels_annotation": LABELS_ANN,
            "taints_annotation": TAINTS_ANN}}))
        seconds, proc = timed(lambda a=args: subprocess.run([sys.executable, str(MODULE), str(a)],
                                                            capture_output=True, env=env, check=False, text=True))
        if proc.returncode != 0:
            sys.exit("module run failed: %s %s" % (proc.stdout[-2000:], proc.stderr[-2000:]))
        result = json.loads(proc.stdout)
        out[label] = {"seconds": seconds, "changed": result["changed"],
                      "nodes_changed": sum(1 for e in result["nodes"].values() if e["changed"])}
    return out


def per_node(api, names):
    """One GET and one PATCH per Node in sequence (what the per-host tasks send at the least)."""
    def go():
        for name in names:
            # .data reads each answer to the end, which returns the connection to the pool.
            json.loads(api.read_node(name, _preload_content=False).data)
            json.loads(api.patch_node(name, {"metadata": {"labels": {KEY + "-per-node": "x"}}},
                                      _preload_content=False).data)
    seconds, _ = timed(go)
    return {"seconds": seconds, "api_calls": 2 * len(names), "ms_per_node": round(seconds * 1000 / len(names), 3)}


def start_fake(count, latency_ms, tmp):
    proc = subprocess.Popen([sys.executable, __file__, "--serve", "--nodes", str(count),
                             "--latency-ms", str(latency_ms)], stdout=subprocess.PIPE, text=True)
    port = int(proc.stdout.readline())
    kubeconfig = Path(tmp) / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": "http://127.0.0.1:%d" % port}}],
        "users": [{"name": "fake", "user": {"token": "bench"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}]}))
    return proc, str(kubeconfig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--latency-ms", type=float, default=5.0,
                        help="fake API server: added to every request (default 5)")
    parser.add_argument("--parallel", default="1,4,8", help="values of the module's parallel option to time")
    parser.add_argument("--kubeconfig", help="time against this cluster's Nodes instead of the fake")
    parser.add_argument("--no-module-run", action="store_true", help="skip the module-in-a-new-process runs")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.serve:
        return serve(opts.nodes, opts.latency_ms / 1000.0)

    from ansible_collections.ai_platform.l1.plugins.modules import node_metadata as mod  # noqa: PLC0415
    from kubernetes import client, config  # noqa: PLC0415 (the fake server process does not need it)

    with tempfile.TemporaryDirectory() as tmp:
        server = None
        if opts.kubeconfig:
            kubeconfig = os.path.expanduser(opts.kubeconfig)
        else:
            server, kubeconfig = start_fake(opts.nodes, opts.latency_ms, tmp)
        try:
            api = client.CoreV1Api(config.new_client_from_config(config_file=kubeconfig))
            list_times = []
            for _ in range(3):
                seconds, listed = timed(lambda: json.loads(api.list_node(_preload_content=False).data))
                list_times.append(seconds)
            names = sorted(item["metadata"]["name"] for item in listed["items"])[:opts.nodes]
            report = {"target": opts.kubeconfig or "fake API server, %g ms per request" % opts.latency_ms,
                      "nodes": len(names), "node_list_bytes": len(json.dumps(listed)),
                      "list_only": {"seconds_median_of_3": statistics.median(list_times)}, "reconcile": {}}
            for n, parallel in enumerate(int(p) for p in opts.parallel.split(",")):
                report["reconcile"]["parallel=%d" % parallel] = reconcile_runs(mod, api, names, parallel,
                                                                               "p%d-%d" % (parallel, n))
            if not opts.kubeconfig:
                report["per_node"] = per_node(api, names)
            if not opts.no_module_run:
                report["module_run"] = module_runs(kubeconfig, names, "module", tmp)
            # Leave the Nodes as they were: the bench labels, taints and annotations go.
            cleanup, problems = mod.reconcile(api, {n: {"labels": {}, "taints": []} for n in names},
                                              labels_annotation=LABELS_ANN, taints_annotation=TAINTS_ANN)
            report["cleanup_nodes_changed"] = sum(1 for e in cleanup["nodes"].values() if e["changed"])
            if problems:
                report["cleanup_problems"] = problems
            print(json.dumps(report, indent=2))
        finally:
            if server:
                server.terminate()
                server.wait()
    return None


if __name__ == "__main__":
    main()
