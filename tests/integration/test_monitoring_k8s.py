"""Monitoring on Kubernetes (roles/monitoring_k8s through playbooks/monitoring.yml) on the lab
cluster, for real: helm (built from its Go module) installs kube-prometheus-stack and
dcgm-exporter from chart tarballs served by the lab mirror (sha256 checked), then the role
applies the PrometheusRule, ConfigMaps, Node Problem Detector and the Feishu relay. Every
image comes from the lab registry: the operator, its config reloader, Prometheus,
Alertmanager, node_exporter and NPD built from their Go modules (lab/k8s/build.py); the
dcgm-exporter and the relay's python3 are lab images (tests/hardware/dcgm, Debian python3).

Asserted from the API and from Prometheus' and Alertmanager's own APIs: the pods run; the
real operator loaded every rule of monitoring/rules into Prometheus; Prometheus scrapes the
dcgm-exporter DaemonSet on both A100 nodes every 5 s and NPD on both; NPD reports GPUError
False; an XID 79 appended to gpu1's simulated kernel log reaches, with no test code in between,
the exporter, Prometheus (GPUXidError with xid="79" firing), NPD (GPUError True, then
GPUNodeDraining firing), Alertmanager and, through the relay, a Feishu sink on the lab host
(signed). Also: the Alertmanager configuration routes to the relay with the seed's routes, the
dashboards ConfigMap and Grafana's sidecar (rendered: Grafana is off in the lab), a second run
changes nothing, a broken rule file or Alertmanager configuration is refused before anything is
applied (the objects keep their resourceVersion).

The remediation receiver is deployed in the same run (roles/remediation_receiver, kubernetes
mode): one-GPU workloads on both A100 nodes, XID 79 on both at once; one node is cordoned, tainted
and drained by the receiver (its workload evicted), the other refused by the pool ceiling (audit
log); a wrong token is refused (401) and isolates nothing; the receiver's Pod deleted mid-drain
finishes its job once after the restart; its NetworkPolicy admits only the Alertmanager Pods.
The dcgm-exporter chart is the lab's stand-in (tests/hardware/dcgm/chart, see
lab/charts/build.py): the Go module proxy refuses NVIDIA's repository. Namespace `monitoring`,
NPD, both releases and the operator's CRDs are removed at the end, and the injected XID and the
GPUError condition with them. Timings are printed (pytest -s).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml
from conftest import (
    CONTROL_PLANES,
    KUBECTL,
    LAB_INVENTORY,
    OVERLAY,
    REPO,
    WORKERS,
    kubectl_json,
    on,
    playbook,
    recap,
    tail,
    wait_for,
)
from remediation_lab import Api, alert, fetch_kubeconfig, payload

PLAYBOOK = REPO / "playbooks" / "monitoring.yml"
MON = REPO / "monitoring"
CP = CONTROL_PLANES[0]
NEEDED = ("helm", "kube-prometheus-stack-chart", "dcgm-exporter-chart")
LAB_VARS = yaml.safe_load((LAB_INVENTORY / "group_vars" / "all" / "monitoring_k8s.yml").read_text())
REGISTRY = LAB_VARS["monitoring_k8s_image_registry"]


def run_play(*extra: str, timeout: int = 600):
    t0 = time.monotonic()
    proc = playbook(PLAYBOOK, "--limit", CP,
              "-e", "monitoring_k8s_enabled=true", "-e", f"@{receiver_extra_vars()}", *extra, timeout=timeout)
    return proc, time.monotonic() - t0


def get(kind: str, name: str, namespace: str = "monitoring") -> dict:
    return kubectl_json(f"-n {namespace} get {kind} {name}")


def nvidia_nodes() -> list[str]:
    nodes = kubectl_json("get nodes -l accelerator=nvidia")["items"]
    return sorted(n["metadata"]["name"] for n in nodes)


def api_get(service: str, path: str) -> dict:
    """GET from a monitoring Service through the API server's proxy (JSON)."""
    proc = on(CP, f"{KUBECTL} get --raw '/api/v1/namespaces/monitoring/services/{service}/proxy{path}'")
    assert proc.returncode == 0, f"{service}{path}:\n{tail(proc)}"
    return json.loads(proc.stdout)


def prom(path: str) -> dict:
    return api_get("kube-prometheus-stack-prometheus:9090", path)["data"]


def query(expr: str) -> list[dict]:
    return prom(f"/api/v1/query?query={quote(expr)}")["result"]


def node_condition(node: str, kind: str) -> dict:
    conditions = kubectl_json(f"get node {node}")["status"].get("conditions", [])
    return next((c for c in conditions if c["type"] == kind), {})


def remove_condition(node: str, kind: str) -> None:
    """NPD's conditions outlive NPD: the Node keeps them until someone removes them."""
    conditions = kubectl_json(f"get node {node}")["status"].get("conditions", [])
    for i, c in enumerate(conditions):
        if c["type"] == kind:
            patch = json.dumps([{"op": "test", "path": f"/status/conditions/{i}/type", "value": kind},
                                {"op": "remove", "path": f"/status/conditions/{i}"}])
            on(CP, f"{KUBECTL} patch node {node} --subresource=status --type=json -p '{patch}'")
            return


class Sink:
    """A webhook sink on the lab host (Pods reach it at its lab-network address): the Feishu bot
    stand-in (lab channel URLs)."""

    def __init__(self, port: int):
        self.posts: list[tuple[float, str, dict, dict]] = []
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                sink.posts.append((time.monotonic(), self.path, body, dict(self.headers)))
                reply = b'{"code":0,"msg":"success"}'
                self.send_response(200)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def feishu_sink() -> Sink:
    """Where the lab's Feishu channel URLs point (inventories/lab monitoring_k8s_feishu_channels)."""
    return Sink(9500)


# The remediation receiver, deployed in the cluster by roles/remediation_receiver (kubernetes
# mode) in the same run; Alertmanager routes the GPU alerts to it with this token.
RECEIVER_NS = "ai-l1-remediation"
RECEIVER_TOKEN = "lab-remediation-token-" + os.urandom(8).hex()
RECEIVER_CONFIG = "/etc/ai-l1-remediate/config/remediation.yml"
RECEIVER_URL = f"https://ai-l1-remediate.{RECEIVER_NS}.svc:9095/webhook"
RECEIVER_VARS = yaml.safe_load((LAB_INVENTORY / "group_vars" / "all" / "remediation_receiver.yml").read_text())
EXTRA_DIR = Path(tempfile.mkdtemp(prefix="ai-l1-monitoring-test."))
WORKLOAD_NS = "fault-test"
WORKLOAD_IMAGE = f"{REGISTRY}/ai-l1-lab/workload:v0.1.0"
GPU_LIMITS = {"nvidia.com/gpu": "1", "cpu": "20m", "memory": "16Mi"}


def receiver_extra_vars() -> Path:
    extra = EXTRA_DIR / "receiver.json"
    extra.write_text(json.dumps({"remediation_receiver_enabled": True, "remediation_receiver_mode": "kubernetes",
                                 "remediation_receiver_token": RECEIVER_TOKEN}))
    return extra


def receiver_cli(what: str, node: str | None = None) -> list[dict]:
    """The receiver's store (ai-l1-remediate jobs|audit), read inside its Pod."""
    proc = on(CP, f"{KUBECTL} -n {RECEIVER_NS} exec deploy/ai-l1-remediate -- python3 -m ai_l1_day2.remediation "
                  f"{what} --config {RECEIVER_CONFIG}" + (f" --node {node}" if node else ""), timeout=60)
    assert proc.returncode == 0, tail(proc)
    return json.loads(proc.stdout)


POST = """
import json, ssl, sys, urllib.error, urllib.request
token = sys.argv[1] if len(sys.argv) > 1 else open("/etc/ai-l1-remediate/secret/token").read().strip()
ctx = ssl.create_default_context(cafile="/etc/ai-l1-remediate/secret/tls.crt")
ctx.check_hostname = False  # 127.0.0.1 inside the Pod; the certificate names the Service
req = urllib.request.Request("https://127.0.0.1:9095/webhook", data=sys.stdin.buffer.read(),
                             headers={"Authorization": "Bearer " + token, "Content-Type": "application/json"})
try:
    with urllib.request.urlopen(req, context=ctx, timeout=30) as resp:
        print(resp.status, resp.read().decode())
except urllib.error.HTTPError as exc:
    print(exc.code, exc.read().decode())
"""


def receiver_post(body: dict, token: str | None = None) -> tuple[int, dict]:
    """POST a webhook to the receiver from inside its Pod (as Alertmanager would, over TLS)."""
    code = base64.b64encode(POST.encode()).decode()
    proc = on(CP, f"{KUBECTL} -n {RECEIVER_NS} exec -i deploy/ai-l1-remediate -- python3 -c "
                  f"\"import base64; exec(base64.b64decode('{code}'))\" {token or ''} <<'EOF'\n{json.dumps(body)}\nEOF",
              timeout=60)
    assert proc.returncode == 0, tail(proc)
    status, text = proc.stdout.strip().split(" ", 1)
    return int(status), json.loads(text)


def workload(node: str, grace: int, prefix: str = "train") -> str:
    """A one-GPU Deployment pinned to `node` with a PodDisruptionBudget (maxUnavailable 1, so a
    drain may evict it). Its sleep is PID 1 and ignores SIGTERM: a Pod takes `grace` seconds to go."""
    name = f"{prefix}-{node}"
    labels = {"app": name}
    docs = [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": WORKLOAD_NS},
         "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
             "metadata": {"labels": labels},
             "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "terminationGracePeriodSeconds": grace,
                      "containers": [{"name": "train", "image": WORKLOAD_IMAGE,
                                      "env": [{"name": "AI_L1_WORKLOAD_SLEEP", "value": "3600"}],
                                      "resources": {"limits": GPU_LIMITS, "requests": GPU_LIMITS}}]}}}},
        {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name, "namespace": WORKLOAD_NS},
         "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}}},
    ]
    text = "\n---\n".join(json.dumps(d) for d in docs)
    proc = on(CP, f"{KUBECTL} create namespace {WORKLOAD_NS} 2>/dev/null; {KUBECTL} apply -f - <<'EOF'\n{text}\nEOF")
    assert proc.returncode == 0, tail(proc)
    return name


def workload_pods(name: str) -> list[dict]:
    return kubectl_json(f"-n {WORKLOAD_NS} get pods -l app={name}")["items"]


def running_pod(name: str, timeout: float = 120) -> str:
    pods = wait_for(f"workload {name} Running", lambda: [
        p for p in workload_pods(name) if p["status"].get("phase") == "Running"
        and not p["metadata"].get("deletionTimestamp")], timeout, 3)
    return pods[0]["metadata"]["name"]


def node_state(node: str) -> dict:
    n = kubectl_json(f"get node {node}")
    return {"unschedulable": bool(n["spec"].get("unschedulable")),
            "taints": {t["key"]: f"{t.get('value', '')}:{t['effect']}" for t in n["spec"].get("taints", [])}}


def cleanup() -> None:
    # The receiver first (it would act on what the stack's removal fires), its store with it.
    on(CP, f"{KUBECTL} delete namespace {RECEIVER_NS} {WORKLOAD_NS} --ignore-not-found --wait=false; "
           f"{KUBECTL} delete clusterrole,clusterrolebinding ai-platform:ai-l1-remediate --ignore-not-found; "
           f"{KUBECTL} wait --for=delete namespace/{RECEIVER_NS} --timeout=120s 2>/dev/null || true", timeout=180)
    host_path_node = RECEIVER_VARS["remediation_receiver_host_path_node"]
    on(host_path_node, "rm -rf /var/lib/ai-l1-remediate")
    helm = "$(ls /opt/ai-platform/helm/*/linux-*/helm | tail -1)"
    for release in ("dcgm-exporter", "kube-prometheus-stack"):
        on(CP, f"{helm} --kubeconfig /etc/kubernetes/admin.conf -n monitoring uninstall {release} --wait=false "
               "2>/dev/null || true", timeout=300)
    on(CP, f"{KUBECTL} delete namespace monitoring --ignore-not-found --wait=false; "
           f"{KUBECTL} -n kube-system delete daemonset,serviceaccount "
           "-l app.kubernetes.io/name=node-problem-detector "
           "--ignore-not-found; "
           f"{KUBECTL} -n kube-system delete configmap node-problem-detector-gpu --ignore-not-found; "
           f"{KUBECTL} delete clusterrole,clusterrolebinding ai-l1-node-problem-detector --ignore-not-found; "
           f"{KUBECTL} get crd -o name | grep monitoring.coreos.com | xargs -r {KUBECTL} delete --wait=false",
       timeout=300)
    # Gone before the next run: a Terminating namespace refuses new objects.
    on(CP, f"{KUBECTL} wait --for=delete namespace/monitoring --timeout=180s 2>/dev/null || true", timeout=240)
    # After NPD is gone (it would set the condition again): no injected XID, no GPUError left.
    on(CP, f"{KUBECTL} -n kube-system wait --for=delete pod -l app.kubernetes.io/name=node-problem-detector "
           "--timeout=120s 2>/dev/null || true", timeout=180)
    for node in nvidia_nodes():
        on(node, ": > /var/log/kern.log")
        remove_condition(node, "GPUError")
        remove_condition(node, "GPUHealthy")


@pytest.fixture(scope="module")
def deployed(k8s_cluster):
    overlay = yaml.safe_load(OVERLAY.read_text()) if OVERLAY.is_file() else {}
    missing = [n for n in NEEDED if n not in (overlay.get("artifacts") or {})]
    if missing:
        pytest.fail(f"the lab mirror does not serve {', '.join(missing)}: run python lab/charts/build.py, "
                    "bash lab/k8s/build.sh and python lab/mirror/mirror.py up (make lab-artifacts)")
    api = Api(fetch_kubeconfig(LAB_INVENTORY, CP, EXTRA_DIR / "admin.conf"))
    # What the receiver's isolations change on the workers is put back at the end.
    snapshot = api.snapshot(WORKERS)
    busy = [n for n, st in snapshot.items() if st["unschedulable"]]
    if busy:
        pytest.fail(f"workers {busy} are cordoned before the test: the pool ceiling test needs them in service")
    first, first_s = run_play()
    print(f"\ntiming monitoring_k8s first run: {first_s:.0f}s")
    try:
        assert first.returncode == 0, f"monitoring.yml (Kubernetes path) failed:\n{tail(first, 120)}"
        yield {"first": first, "first_s": first_s, "api": api, "snapshot": snapshot}
    finally:
        t0 = time.monotonic()
        cleanup()
        print("restored:", api.restore(snapshot))
        print(f"timing monitoring_k8s cleanup: {time.monotonic() - t0:.0f}s")


def test_prometheus_rule_has_every_rule(deployed):
    want = yaml.safe_load((MON / "rules" / "gpu-alerts.rules.yml").read_text())["groups"]
    got = get("prometheusrule", "gpu-alerts")["spec"]["groups"]
    assert [g["name"] for g in got] == [g["name"] for g in want]
    for wg, gg in zip(want, got, strict=True):
        want_rules = {r["alert"]: r for r in wg["rules"]}
        got_rules = {r["alert"]: r for r in gg["rules"]}
        assert got_rules.keys() == want_rules.keys(), f"group {wg['name']}"
        for name, rule in want_rules.items():
            assert got_rules[name]["expr"] == rule["expr"], name
            assert got_rules[name]["labels"] == rule["labels"], name
            assert got_rules[name].get("for") == rule.get("for"), name


def test_alertmanager_routes_to_the_relay(deployed):
    # kube-prometheus-stack renders alertmanager.config into this Secret for the operator.
    secret = get("secret", "alertmanager-kube-prometheus-stack-alertmanager")
    config = yaml.safe_load(base64.b64decode(secret["data"]["alertmanager.yaml"]))
    source = yaml.safe_load((MON / "alertmanager" / "alertmanager.yml").read_text())
    # The remediation route first (monitoring_k8s_remediation_url), then the seed's routes.
    first, *rest = config["route"]["routes"]
    assert rest == source["route"]["routes"]
    assert first["receiver"] == "ai-l1-remediation" and first["continue"] is True, first
    assert first["matchers"] == ['alertname=~"GPUXidError|GPUECCUncorrectableError|GPUNodeUnavailable|'
                                 'GPURowRemapFailure|GPUFallenOffBus"'], first
    hook = next(r for r in config["receivers"] if r["name"] == "ai-l1-remediation")["webhook_configs"][0]
    secrets = "/etc/alertmanager/secrets/ai-l1-remediation-receiver"
    assert hook["http_config"]["authorization"] == {"type": "Bearer", "credentials_file": f"{secrets}/token"}
    assert hook["http_config"]["tls_config"]["ca_file"] == f"{secrets}/ca.crt"
    assert hook["send_resolved"] is False
    # ... to the deployed receiver, trusting exactly its serving certificate.
    assert hook["url"] == RECEIVER_URL, hook
    ca = base64.b64decode(get("secret", "ai-l1-remediation-receiver")["data"]["ca.crt"])
    assert ca == base64.b64decode(get("secret", "ai-l1-remediate", RECEIVER_NS)["data"]["tls.crt"])
    am = get("alertmanager", "kube-prometheus-stack-alertmanager")
    assert "ai-l1-remediation-receiver" in am["spec"]["secrets"], am["spec"].get("secrets")
    assert config["inhibit_rules"] == source["inhibit_rules"]
    urls = {r["name"]: [h["url"] for h in r.get("webhook_configs", [])] for r in config["receivers"]
            if r["name"] != "ai-l1-remediation"}
    for name in ("feishu-critical", "feishu-warning", "feishu-info"):
        channel = name.split("-", 1)[1]
        assert urls[name] == [f"http://feishu-relay.monitoring.svc:9099/feishu/{channel}"], urls


def test_relay_deployment_and_secret(deployed):
    deploy = get("deployment", "feishu-relay")
    pod = deploy["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"].startswith(f"{REGISTRY}/"), pod["containers"][0]["image"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["channels"]["secret"]["secretName"] == "feishu-relay-channels"
    secret = get("secret", "feishu-relay-channels")
    channels = json.loads(base64.b64decode(secret["data"]["relay.json"]))["channels"]
    assert sorted(channels) == sorted(LAB_VARS["monitoring_k8s_feishu_channels"])
    script = get("configmap", "feishu-relay")["data"]["feishu_relay.py"]
    assert script == (MON / "relay" / "feishu_relay.py").read_text()
    assert get("service", "feishu-relay")["spec"]["ports"][0]["port"] == 9099


def test_receiver_runs_with_only_the_verbs_an_isolation_needs(deployed):
    deploy = get("deployment", "ai-l1-remediate", RECEIVER_NS)
    assert deploy["status"].get("readyReplicas") == 1, deploy["status"]
    assert deploy["spec"]["replicas"] == 1 and deploy["spec"]["strategy"]["type"] == "Recreate"
    pod = deploy["spec"]["template"]["spec"]
    [container] = pod["containers"]
    manifest = yaml.safe_load((REPO / "artifacts" / "manifest.yml").read_text())
    version = {a["name"]: a["version"] for a in manifest["artifacts"]}
    assert container["image"].startswith(f"{REGISTRY}/remediation-receiver:"
                                         f"{version['remediation-receiver-image']}@sha256:"), container["image"]
    assert pod["serviceAccountName"] == "ai-l1-remediate"
    assert pod["securityContext"]["runAsNonRoot"] is True and container["securityContext"]["readOnlyRootFilesystem"]
    # The store outlives the Pod: a host path on the one Node the Pod is pinned to.
    state = next(v for v in pod["volumes"] if v["name"] == "state")
    assert state["hostPath"]["path"] == "/var/lib/ai-l1-remediate", state
    assert pod["nodeSelector"]["kubernetes.io/hostname"] == RECEIVER_VARS["remediation_receiver_host_path_node"]
    running = kubectl_json(f"-n {RECEIVER_NS} get pods -l app.kubernetes.io/name=ai-l1-remediate")["items"]
    assert [p["spec"]["nodeName"] for p in running] == [RECEIVER_VARS["remediation_receiver_host_path_node"]]
    role = kubectl_json("get clusterrole ai-platform:ai-l1-remediate")
    rules = sorted((tuple(r["resources"]), tuple(sorted(r["verbs"]))) for r in role["rules"])
    assert rules == [(("nodes",), ("get", "list", "patch", "watch")), (("pods",), ("get", "list")),
                     (("pods/eviction",), ("create",))], rules
    sa = f"system:serviceaccount:{RECEIVER_NS}:ai-l1-remediate"
    for verb, resource, allowed in (("patch", "nodes", "yes"), ("create", "pods --subresource=eviction", "yes"),
                                    ("delete", "pods", "no"), ("get", "secrets", "no"), ("delete", "nodes", "no")):
        proc = on(CP, f"{KUBECTL} auth can-i {verb} {resource} --as {sa}")
        assert proc.stdout.strip() == allowed, (verb, resource, proc.stdout)
    secret = get("secret", "ai-l1-remediate", RECEIVER_NS)
    assert sorted(secret["data"]) == ["tls.crt", "tls.key", "token"]
    assert base64.b64decode(secret["data"]["token"]).decode() == RECEIVER_TOKEN
    config = yaml.safe_load(get("configmap", "ai-l1-remediate", RECEIVER_NS)["data"]["remediation.yml"])
    assert config["ceiling"] == RECEIVER_VARS["remediation_receiver_policy"]["ceiling"]
    # The secret is a mounted file, never in the ConfigMap; the runs use the Pod's ServiceAccount.
    assert config["auth"] == {"token_file": "/etc/ai-l1-remediate/secret/token"}, config["auth"]
    assert {k: config["run"]["extravars"][k] for k in ("day2_api_host", "day2_kubeconfig")} == \
        {"day2_api_host": "receiver-local", "day2_kubeconfig": ""}
    inventory = yaml.safe_load(get("configmap", "ai-l1-remediate", RECEIVER_NS)["data"]["hosts.yml"])
    assert sorted(inventory["all"]["children"]["k8s_worker"]["hosts"]) == sorted(WORKERS)


def test_receiver_admits_only_alertmanager(deployed):
    """The receiver's NetworkPolicy (Ingress only) admits its port to the Alertmanager Pods alone, and
    its selectors match what runs: the receiver's Pod, the operator's Alertmanager Pods in namespace
    monitoring. The lab's bridge CNI does not enforce NetworkPolicy, so the route's traffic is not
    what this checks; an enforcing CNI lets the kubelet's probes from the node through."""
    policy = get("networkpolicy", "ai-l1-remediate", RECEIVER_NS)
    assert policy["spec"]["policyTypes"] == ["Ingress"], policy["spec"]
    [rule] = policy["spec"]["ingress"]
    [peer] = rule["from"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 9095}], rule
    assert peer["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}, peer
    assert kubectl_json("get namespace monitoring")["metadata"]["labels"]["kubernetes.io/metadata.name"] == "monitoring"

    def selected(namespace: str, labels: dict) -> list[str]:
        selector = ",".join(f"{k}={v}" for k, v in labels.items())
        return sorted(p["metadata"]["name"] for p in kubectl_json(f"-n {namespace} get pods -l {selector}")["items"])

    alertmanagers = selected("monitoring", peer["podSelector"]["matchLabels"])
    assert alertmanagers and all(n.startswith("alertmanager-kube-prometheus-stack-alertmanager-")
                                 for n in alertmanagers), alertmanagers
    receivers = selected(RECEIVER_NS, policy["spec"]["podSelector"]["matchLabels"])
    assert receivers and all(n.startswith("ai-l1-remediate-") for n in receivers), receivers


def test_dashboards_configmap_and_grafana_sidecar(deployed):
    cm = get("configmap", "ai-l1-gpu-dashboards")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    for path in sorted((MON / "dashboards").glob("*.json")):
        assert json.loads(cm["data"][path.name]) == json.loads(path.read_text()), path.name
    # Grafana is off in the lab (licence): production's release, rendered with the shipped values.
    chart = on(CP, "ls /var/cache/ai-platform/charts/kube-prometheus-stack-*.tgz").stdout.strip()
    values = (MON / "kubernetes" / "kube-prometheus-stack-values.yaml").read_text()
    helm = "$(ls /opt/ai-platform/helm/*/linux-*/helm | tail -1)"
    proc = on(CP, f"{helm} template kube-prometheus-stack {chart} -n monitoring -f - <<'EOF'\n{values}\nEOF")
    assert proc.returncode == 0, tail(proc)
    grafana = next(d for d in yaml.safe_load_all(proc.stdout)
                   if d and d["kind"] == "Deployment" and d["metadata"]["name"] == "kube-prometheus-stack-grafana")
    envs = [{e["name"]: e.get("value") for e in c.get("env", [])}
            for c in grafana["spec"]["template"]["spec"]["containers"]]
    # The dashboards sidecar watches ConfigMaps with this label.
    assert any(env.get("LABEL") == "grafana_dashboard" and env.get("LABEL_VALUE") == "1" for env in envs), envs


# The second run and the refused configurations come before the checks that wait for Prometheus:
# they need no scrape, and they run while the operator's new configuration reaches Prometheus
# (the kubelet refreshes the mounted config Secret within a minute or two).
def test_second_run_changes_nothing(deployed):
    second, second_s = run_play()
    print(f"\ntiming monitoring_k8s second run: {second_s:.0f}s")
    assert second.returncode == 0, tail(second, 120)
    assert recap(second.stdout)[CP]["changed"] == 0, tail(second, 120)


def _versions() -> dict[str, str]:
    return {
        "rule": get("prometheusrule", "gpu-alerts")["metadata"]["resourceVersion"],
        "alertmanager": get("secret", "alertmanager-kube-prometheus-stack-alertmanager")["metadata"]["resourceVersion"],
        "release": on(CP, f"{KUBECTL} -n monitoring get secret -l owner=helm,name=kube-prometheus-stack "
                          "-o name").stdout.strip(),
    }


def test_broken_rule_refused_before_apply(deployed):
    before = _versions()
    with tempfile.TemporaryDirectory() as tmp:
        broken = Path(tmp) / "gpu-alerts.rules.yml"
        text = (MON / "rules" / "gpu-alerts.rules.yml").read_text()
        # An unbalanced parenthesis in the XID rule: promtool cannot parse it.
        broken.write_text(text.replace("(DCGM_FI_DEV_XID_ERRORS != 0)", "(DCGM_FI_DEV_XID_ERRORS != 0", 1))
        extra = Path(tmp) / "extra.json"
        extra.write_text(json.dumps({"monitoring_k8s_rule_files": [str(broken)]}))
        proc, secs = run_play("-e", f"@{extra}")
    print(f"\ntiming monitoring_k8s broken rule refused: {secs:.0f}s")
    assert proc.returncode != 0, "a broken rule file was accepted"
    assert "promtool check rules" in proc.stdout, tail(proc, 60)
    assert _versions() == before, "the cluster changed although the rule was refused"


def test_broken_alertmanager_config_refused_before_apply(deployed):
    before = _versions()
    with tempfile.TemporaryDirectory() as tmp:
        extra = Path(tmp) / "extra.json"
        # A route to a receiver that does not exist: amtool rejects the configuration.
        extra.write_text(json.dumps({"monitoring_k8s_values": {
            **LAB_VARS["monitoring_k8s_values"],
            "kube-prometheus-stack": {**LAB_VARS["monitoring_k8s_values"]["kube-prometheus-stack"],
                                      "alertmanager": {"config": {"route": {"receiver": "no-such-receiver"}}}}}}))
        proc, secs = run_play("-e", f"@{extra}")
    print(f"\ntiming monitoring_k8s broken Alertmanager config refused: {secs:.0f}s")
    assert proc.returncode != 0, "a broken Alertmanager configuration was accepted"
    assert "amtool check-config" in proc.stdout, tail(proc, 60)
    assert _versions() == before, "the cluster changed although the configuration was refused"


def test_stack_pods_run(deployed):
    gpu_nodes = nvidia_nodes()
    assert len(gpu_nodes) >= 2, gpu_nodes

    def ready():
        pods = kubectl_json("get pods -A -l 'app.kubernetes.io/part-of in (ai-platform-l1)'")["items"]
        pods += kubectl_json("-n monitoring get pods")["items"]
        state = {}
        for pod in pods:
            name = pod["metadata"]["name"]
            ok = pod["status"].get("phase") == "Running" and all(
                c.get("ready") for c in pod["status"].get("containerStatuses", []))
            state[name] = (ok, pod["spec"].get("nodeName"))
        want = {"prometheus-kube-prometheus-stack-prometheus-0", "alertmanager-kube-prometheus-stack-alertmanager-0"}
        prefixes = {"kube-prometheus-stack-operator-": 1, "feishu-relay-": 1, "dcgm-exporter-": len(gpu_nodes),
                    "node-problem-detector-": len(gpu_nodes)}
        missing = [n for n in want if not state.get(n, (False,))[0]]
        for prefix, count in prefixes.items():
            running = [n for n, (ok, _) in state.items() if n.startswith(prefix) and ok]
            if len(running) < count:
                missing.append(f"{prefix}* ({len(running)}/{count})")
        return state if not missing else None

    t0 = time.monotonic()
    state = wait_for("the operator, Prometheus, Alertmanager, relay, dcgm-exporter and NPD pods Running", ready, 420, 5)
    print(f"\ntiming monitoring_k8s pods ready after the run: {time.monotonic() - t0:.0f}s")
    # The exporters and NPD on the NVIDIA nodes only.
    for prefix in ("dcgm-exporter-", "node-problem-detector-"):
        assert sorted(node for n, (_, node) in state.items() if n.startswith(prefix)) == gpu_nodes, (prefix, state)


def test_prometheus_loaded_every_rule(deployed):
    want = {r["alert"] for g in yaml.safe_load((MON / "rules" / "gpu-alerts.rules.yml").read_text())["groups"]
            for r in g["rules"] if "alert" in r}

    def loaded():
        groups = prom("/api/v1/rules?type=alert")["groups"]
        got = {r["name"] for g in groups for r in g["rules"]}
        return got if want <= got else None

    wait_for(f"Prometheus (real operator, PrometheusRule gpu-alerts) evaluating {sorted(want)}", loaded, 180, 5)
    group = next(g for g in prom("/api/v1/rules")["groups"] if g["name"] == "gpu-failure")
    assert group["interval"] == 30, group["interval"]


def test_the_inventorys_slos_are_recorded_by_the_real_operators_prometheus(deployed):
    """The lab inventory's objectives (group_vars/all/slo.yml) through the role: the PrometheusRule
    slo is the filter's rendering, Prometheus records every objective and loaded both burn-rate alerts
    of each. The SLIs' own series need kube-state-metrics, which the lab cannot build (docs/slo.md)."""
    slos = yaml.safe_load((LAB_INVENTORY / "group_vars" / "all" / "slo.yml").read_text())["monitoring_k8s_slos"]
    rule = get("prometheusrule", "slo")
    assert [g["name"] for g in rule["spec"]["groups"]] == [f"ai-l1-slo-{s['name'].replace('_', '-')}" for s in slos]
    want = {s["name"]: str(s["objective"]) for s in slos}

    def recorded():
        got = {r["metric"]["slo"]: r["value"][1] for r in query("ai_l1_slo:objective")}
        return got if got == want else None

    wait_for(f"Prometheus recording ai_l1_slo:objective for {sorted(want)}", recorded, 180, 5)
    alerts = {(r["name"], r["labels"]["slo"]) for g in prom("/api/v1/rules?type=alert")["groups"]
              if g["name"].startswith("ai-l1-slo-") for r in g["rules"]}
    assert alerts == {(a, s) for s in want for a in ("L1SLOErrorBudgetBurnFast", "L1SLOErrorBudgetBurnSlow")}


def test_prometheus_scrapes_dcgm_every_5s_and_npd(deployed):
    gpu_nodes = nvidia_nodes()

    def targets():
        active = prom("/api/v1/targets?state=active")["activeTargets"]
        by_job = {}
        for t in active:
            by_job.setdefault(t["labels"].get("job"), []).append(t)
        dcgm, npd = by_job.get("dcgm-exporter", []), by_job.get("node-problem-detector", [])
        if len([t for t in dcgm if t["health"] == "up"]) == len(gpu_nodes) and \
                len([t for t in npd if t["health"] == "up"]) == len(gpu_nodes):
            return dcgm, npd
        return None

    dcgm, npd = wait_for("dcgm-exporter and NPD targets up on every NVIDIA node", targets, 240, 5)
    assert {t["scrapeInterval"] for t in dcgm} == {"5s"}, [t["scrapeInterval"] for t in dcgm]
    assert sorted(t["labels"]["node"] for t in npd) == gpu_nodes
    # Every GPU of both nodes, named by its Node (NODE_NAME), not the Pod.
    per_node = wait_for("8 GPUs per node in DCGM_FI_DEV_GPU_TEMP",
                        lambda: {r["metric"]["Hostname"]: int(r["value"][1])
                                 for r in query("count by (Hostname) (DCGM_FI_DEV_GPU_TEMP)")} or None, 60)
    assert per_node == dict.fromkeys(gpu_nodes, 8), per_node
    # The exporter collects at the scrape interval (-c 5000), not its 30 s default.
    ds = get("daemonset", "dcgm-exporter")
    args = ds["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("-c") + 1] == "5000", args


def test_npd_reports_gpus_healthy(deployed):
    for node in nvidia_nodes():
        cond = wait_for(f"GPUError condition on {node}", lambda n=node: node_condition(n, "GPUError"), 120)
        assert cond["status"] == "False" and cond["reason"] == "GPUIsHealthy", cond
        # The L2 contract's condition, written by the same check (monitoring/npd/check_gpu.py).
        cond = wait_for(f"GPUHealthy condition on {node}", lambda n=node: node_condition(n, "GPUHealthy"), 120)
        assert cond["status"] == "True" and cond["reason"] == "GPUIsHealthy", cond


XID_79 = "NVRM: Xid (PCI:0000:47:00): 79, pid=0, GPU has fallen off the bus."


def npd_feishu_and_draining(nodes: list[str], isolated: str, sink: Sink, t0: float, hops: dict) -> None:
    """The hops after the isolation: NPD's condition on every faulty node, the relay's critical
    messages (the XID, the isolate playbook's NodeIsolated) and GPUNodeDraining."""
    for node in nodes:
        cond = wait_for(f"NPD's GPUError True on {node}",
                        lambda n=node: (c := node_condition(n, "GPUError")).get("status") == "True" and c, 120, 3)
        assert cond["reason"] == "GPUCardFailure" and "79" in cond["message"], cond
        healthy = node_condition(node, "GPUHealthy")
        assert (healthy["status"], healthy["reason"]) == ("False", "GPUCardFailure"), healthy
        assert "79" in healthy["message"], healthy
    hops["NPD condition"] = time.monotonic() - t0

    def delivered(text):
        return lambda: [(t, body) for t, path, body, _ in sink.posts
                        if path.endswith("/critical") and text in json.dumps(body, ensure_ascii=False)]
    (when, body), *_ = wait_for("the relay's critical XID message at the Feishu sink", delivered("XID 79"), 90, 2)
    hops["Feishu sink (critical)"] = when - t0
    # The relay signs for a channel with a secret (Feishu's scheme: HMAC-SHA256 keyed by
    # "<timestamp>\n<secret>" over nothing).
    secret = LAB_VARS["monitoring_k8s_feishu_channels"]["critical"]["secret"]
    key = f"{body['timestamp']}\n{secret}".encode()
    assert body["sign"] == base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()
    # The isolate playbook's own critical alert, through Alertmanager and the relay.
    wait_for("NodeIsolated at the Feishu sink", delivered(f"Node {isolated} isolated"), 120, 2)
    hops["NodeIsolated at Feishu"] = time.monotonic() - t0
    wait_for("GPUNodeDraining firing (NPD's problem gauge)", lambda: [
        a for a in prom("/api/v1/alerts")["alerts"]
        if a["labels"]["alertname"] == "GPUNodeDraining" and a["state"] == "firing"
        and a["labels"].get("node") == isolated], 150, 5)
    hops["GPUNodeDraining firing"] = time.monotonic() - t0


def test_xid_79_on_every_gpu_node_isolates_one_within_the_pool_ceiling(deployed):
    """XID 79 on GPU 2 of both A100 nodes at once, a one-GPU workload on each. With no test code in
    between, every hop asserted from its own API: the exporter, Prometheus (GPUXidError firing),
    Alertmanager, the deployed receiver (a job), the Node cordoned, tainted and drained (the
    workload evicted within its PodDisruptionBudget), NPD's condition, the Feishu sink (critical).
    The pool ceiling (0.5 of 2 nodes) lets one isolation through; the other node's is refused,
    in the audit log, and its workload keeps running. The times from injection are printed."""
    nodes = nvidia_nodes()
    assert len(nodes) == 2, nodes
    names = {node: workload(node, grace=2) for node in nodes}
    before = {node: running_pod(name) for node, name in names.items()}
    sink = feishu_sink()
    try:
        t0 = time.monotonic()
        for node in nodes:
            on(node, f"echo '{XID_79}' >> /var/log/kern.log")
        hops = {}
        wait_for("the exporter's XID 79 of both nodes in Prometheus", lambda: len(
            [r for r in query('DCGM_FI_DEV_XID_ERRORS{gpu="2"} == 79') if r["metric"]["Hostname"] in nodes]) == 2,
            60, 2)
        hops["exporter -> Prometheus"] = time.monotonic() - t0

        def firing():
            alerts = [a for a in prom("/api/v1/alerts")["alerts"] if a["labels"]["alertname"] == "GPUXidError"
                      and a["state"] == "firing" and a["labels"].get("Hostname") in nodes]
            return alerts if len(alerts) == 2 else None
        alerts = wait_for("GPUXidError firing for both nodes", firing, 180, 3)
        hops["GPUXidError firing"] = time.monotonic() - t0
        assert {(a["labels"]["xid"], a["labels"]["gpu"]) for a in alerts} == {("79", "2")}, alerts

        def in_alertmanager():
            alerts = api_get("kube-prometheus-stack-alertmanager:9093", "/api/v2/alerts?active=true")
            hosts = {a["labels"].get("Hostname") for a in alerts if a["labels"]["alertname"] == "GPUXidError"}
            return hosts >= set(nodes)
        wait_for("GPUXidError of both nodes in Alertmanager", in_alertmanager, 60, 2)
        hops["Alertmanager"] = time.monotonic() - t0

        def cordoned():
            return [n for n in nodes if node_state(n)["unschedulable"]]
        [isolated] = wait_for("a Node cordoned by the receiver", cordoned, 120, 1)
        hops["Node cordoned"] = time.monotonic() - t0
        [spared] = [n for n in nodes if n != isolated]
        state = wait_for(f"the fault taint on {isolated}", lambda: (
            st := node_state(isolated))["taints"].get("ai-platform.io/fault") and st, 60, 1)
        assert state["taints"]["ai-platform.io/fault"] == "xid-79:NoSchedule", state
        wait_for(f"the workload Pod {before[isolated]} evicted from {isolated}", lambda: before[isolated] not in
                 [p["metadata"]["name"] for p in workload_pods(names[isolated])], 120, 1)
        hops["workload evicted"] = time.monotonic() - t0
        job = wait_for(f"the receiver's job for {isolated} done", lambda: [
            j for j in receiver_cli("jobs", isolated) if j["state"] == "done"], 180, 3)[0]
        hops["drain complete (job done)"] = time.monotonic() - t0
        assert job["attempts"] == 1 and job["kind"] == "xid-79", job
        assert len(receiver_cli("jobs", isolated)) == 1

        # The other node: refused by the ceiling, recorded, untouched.
        refused = [e for e in receiver_cli("audit", spared) if e["decision"] == "refused"]
        assert refused and "pool ceiling" in refused[0]["reason"], receiver_cli("audit", spared)
        assert receiver_cli("jobs", spared) == []
        assert not node_state(spared)["unschedulable"]
        assert running_pod(names[spared], timeout=10) == before[spared]
        # The evicted workload's replacement cannot land on the isolated node.
        assert all(p["spec"].get("nodeName") != isolated for p in workload_pods(names[isolated])
                   if not p["metadata"].get("deletionTimestamp"))

        npd_feishu_and_draining(nodes, isolated, sink, t0, hops)
        print(f"\ntiming XID 79 ({isolated} isolated, {spared} refused) -> "
              + ", ".join(f"{k}: {v:.0f}s" for k, v in hops.items()))
    finally:
        sink.close()
        for node in nodes:
            on(node, ": > /var/log/kern.log")


def test_wrong_token_is_refused_and_isolates_nothing(deployed):
    spared = [n for n in nvidia_nodes() if not node_state(n)["unschedulable"]]
    assert spared, "no A100 node in service"
    before = len(receiver_cli("audit"))
    status, body = receiver_post(payload(alert("GPUECCUncorrectableError", spared[0], xid=None)),
                                 token="not-the-token-0123456789")
    assert status == 401, body
    assert not node_state(spared[0])["unschedulable"]
    assert receiver_cli("jobs", spared[0]) == []
    entries = receiver_cli("audit")[before:]
    refused = [e for e in entries if e["event"] == "auth.refused"]
    assert len(refused) == 1 and refused[0]["reason"] == "bearer token does not match", entries


def test_receiver_pod_deleted_mid_isolation_finishes_the_job_once(deployed):
    """The receiver's Pod is deleted while its isolation drains a workload that takes 40 s to
    stop: the run dies with the Pod. The new Pod finds the job in its store (the host path
    outlives the Pod), sees the Node cordoned and tainted but not drained, and runs it again:
    one job, done, the workload evicted."""
    api = deployed["api"]
    # The earlier XID alerts resolve once the kernel logs are clean; then both nodes go back in
    # service, so that the pool ceiling allows this isolation.
    wait_for("GPUXidError resolved", lambda: not [
        a for a in prom("/api/v1/alerts")["alerts"] if a["labels"]["alertname"] == "GPUXidError"], 180, 5)
    print("restored:", api.restore(deployed["snapshot"]))
    node = nvidia_nodes()[0]
    name = workload(node, grace=40, prefix="slow")
    slow = running_pod(name)
    old_pod = kubectl_json(f"-n {RECEIVER_NS} get pods -l app.kubernetes.io/name=ai-l1-remediate")["items"][0]
    earlier = {j["id"] for j in receiver_cli("jobs", node)}
    status, body = receiver_post(payload(alert("GPUECCUncorrectableError", node, xid=None)))
    assert status == 200 and body["decisions"][0]["decision"] == "queued", body
    job_id = body["decisions"][0]["job_id"]
    wait_for(f"the drain evicting {slow}", lambda: any(
        p["metadata"]["name"] == slow and p["metadata"].get("deletionTimestamp") for p in workload_pods(name)), 90, 1)
    [running] = [j for j in receiver_cli("jobs", node) if j["id"] == job_id]
    assert running["state"] == "running", running
    on(CP, f"{KUBECTL} -n {RECEIVER_NS} delete pod {old_pod['metadata']['name']} --wait=false")
    t0 = time.monotonic()

    def new_pod_ready():
        pods = kubectl_json(f"-n {RECEIVER_NS} get pods -l app.kubernetes.io/name=ai-l1-remediate")["items"]
        return [p for p in pods if p["metadata"]["uid"] != old_pod["metadata"]["uid"]
                and all(c.get("ready") for c in p["status"].get("containerStatuses", [{}]))]
    wait_for("a new receiver Pod ready", new_pod_ready, 180, 2)
    print(f"\ntiming receiver Pod replaced in {time.monotonic() - t0:.0f}s")
    job = wait_for(f"job {job_id} finished", lambda: [
        j for j in receiver_cli("jobs", node) if j["id"] == job_id and j["state"] in ("done", "failed")], 240, 3)[0]
    assert job["state"] == "done", job
    assert [j["id"] for j in receiver_cli("jobs", node) if j["id"] not in earlier] == [job_id], "a second job"
    recovered = [e for e in receiver_cli("audit", node) if e["event"] == "job.recovered" and e["job_id"] == job_id]
    assert [e["decision"] for e in recovered] == ["dead"], recovered
    assert job["attempts"] == 2, job  # the killed run, then the one that finished the drain
    assert slow not in [p["metadata"]["name"] for p in workload_pods(name)]
    state = node_state(node)
    assert state["unschedulable"] and state["taints"]["ai-platform.io/fault"] == "ecc-uncorrectable:NoSchedule", state


def test_dcgm_exporter_uses_our_counters(deployed):
    cm = get("configmap", "dcgm-exporter-metrics")
    assert cm["data"]["dcgm-metrics.csv"] == (MON / "dcgm" / "counters.csv").read_text()
    ds = get("daemonset", "dcgm-exporter")
    pod = ds["spec"]["template"]["spec"]
    container = pod["containers"][0]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    cm_volumes = [n for n, v in volumes.items() if v.get("configMap", {}).get("name") == "dcgm-exporter-metrics"]
    assert cm_volumes, f"no volume from ConfigMap dcgm-exporter-metrics: {volumes}"
    mount = mounts[cm_volumes[0]]["mountPath"]
    args = container["args"]
    assert args[args.index("-f") + 1] == f"{mount}/dcgm-metrics.csv", (args, mount)
    assert container["image"].startswith(f"{REGISTRY}/"), container["image"]
    monitor = get("servicemonitor", "dcgm-exporter")
    relabel = monitor["spec"]["endpoints"][0]["relabelings"]
    # The CRD defaults action: replace.
    assert any(r.get("targetLabel") == "job" and r.get("replacement") == "dcgm-exporter"
               and r.get("action", "replace") == "replace" for r in relabel), relabel


def test_npd_daemonset_and_images(deployed):
    npd = get("configmap", "node-problem-detector-gpu", namespace="kube-system")
    assert npd["data"]["check_gpu.sh"] == (MON / "npd" / "check_gpu.sh").read_text()
    shipped = yaml.safe_load((MON / "kubernetes" / "npd-gpu-configmap.yaml").read_text())["data"]["check_gpu.py"]
    assert npd["data"]["check_gpu.py"] == shipped
    assert json.loads(npd["data"]["gpu-problem.json"]) == json.loads((MON / "npd" / "gpu-problem.json").read_text())
    ds = get("daemonset", "node-problem-detector", namespace="kube-system")
    container = ds["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["GPU_CHECK_KERNEL_LOG"] == LAB_VARS["monitoring_k8s_npd_kernel_log"]
    assert ds["spec"]["template"]["spec"]["nodeSelector"] == {"accelerator": "nvidia"}
    images = [container["image"]]
    for name in ("kube-prometheus-stack-operator",):
        images.append(get("deployment", name)["spec"]["template"]["spec"]["containers"][0]["image"])
    for kind, name in (("prometheus", "kube-prometheus-stack-prometheus"),
                       ("alertmanager", "kube-prometheus-stack-alertmanager")):
        images.append(get(kind, name)["spec"]["image"])
    manifest = yaml.safe_load((REPO / "artifacts" / "manifest.yml").read_text())
    version = {a["name"]: a["version"] for a in manifest["artifacts"]}
    for image in images:
        assert image.startswith(f"{REGISTRY}/"), image
    # Tags (and digests) from artifacts/manifest.yml, not the chart's defaults.
    assert f":{version['prometheus-image']}@sha256:" in images[2], images[2]
    assert f":{version['alertmanager-image']}@sha256:" in images[3], images[3]
    assert f":{version['node-problem-detector-image']}@sha256:" in images[0], images[0]
