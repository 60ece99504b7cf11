"""Monitoring on Kubernetes (roles/monitoring_k8s through playbooks/monitoring.yml) on the lab
cluster, for real: helm (built from its Go module) installs kube-prometheus-stack and
dcgm-exporter from chart tarballs served by the lab mirror (sha256 checked), then the role
applies the PrometheusRule, ConfigMaps, NPD plugin config and the Feishu relay.

What is asserted comes from the API: every rule of monitoring/rules is in the PrometheusRule,
the Alertmanager configuration kube-prometheus-stack hands to Alertmanager routes to the
in-cluster relay with the seed's routes, Grafana's sidecar loads the dashboards ConfigMap,
the dcgm-exporter DaemonSet mounts the counters ConfigMap and passes it with -f, every image
points at the lab registry; a second run changes nothing; a broken rule file and a broken
Alertmanager configuration are refused before anything is applied (the objects keep their
resourceVersion).

Not asserted: running pods. No registry here holds the stack's images, so its pods stay in
ImagePullBackOff; the lab sets monitoring_k8s_helm_wait: false. The dcgm-exporter chart is
the lab's stand-in (tests/hardware/dcgm/chart, see lab/charts/build.py): the Go module proxy
refuses NVIDIA's repository. Namespace `monitoring`, the NPD ConfigMap, both releases and
the operator's CRDs are removed at the end. Timings are printed (pytest -s).
"""

from __future__ import annotations

import base64
import json
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from conftest import CONTROL_PLANES, KUBECTL, LAB_INVENTORY, OVERLAY, REPO, kubectl_json, on, recap, sh, tail

PLAYBOOK = REPO / "playbooks" / "monitoring.yml"
MON = REPO / "monitoring"
CP = CONTROL_PLANES[0]
NEEDED = ("helm", "kube-prometheus-stack-chart", "dcgm-exporter-chart")
LAB_VARS = yaml.safe_load((LAB_INVENTORY / "group_vars" / "all" / "monitoring_k8s.yml").read_text())
REGISTRY = LAB_VARS["monitoring_k8s_image_registry"]


def run_play(*extra: str, timeout: int = 600):
    t0 = time.monotonic()
    proc = sh("ansible-playbook", "-i", LAB_INVENTORY, PLAYBOOK, "--limit", CP,
              "-e", "monitoring_k8s_enabled=true", *extra, timeout=timeout)
    return proc, time.monotonic() - t0


def get(kind: str, name: str, namespace: str = "monitoring") -> dict:
    return kubectl_json(f"-n {namespace} get {kind} {name}")


def cleanup() -> None:
    helm = "$(ls /opt/ai-platform/helm/*/linux-*/helm | tail -1)"
    for release in ("dcgm-exporter", "kube-prometheus-stack"):
        on(CP, f"{helm} --kubeconfig /etc/kubernetes/admin.conf -n monitoring uninstall {release} --wait=false "
               "2>/dev/null || true", timeout=300)
    on(CP, f"{KUBECTL} delete namespace monitoring --ignore-not-found --wait=false; "
           f"{KUBECTL} -n kube-system delete configmap node-problem-detector-gpu --ignore-not-found; "
           f"{KUBECTL} get crd -o name | grep monitoring.coreos.com | xargs -r {KUBECTL} delete --wait=false",
       timeout=300)
    # Gone before the next run: a Terminating namespace refuses new objects.
    on(CP, f"{KUBECTL} wait --for=delete namespace/monitoring --timeout=180s 2>/dev/null || true", timeout=240)


@pytest.fixture(scope="module")
def deployed(k8s_cluster):
    overlay = yaml.safe_load(OVERLAY.read_text()) if OVERLAY.is_file() else {}
    missing = [n for n in NEEDED if n not in (overlay.get("artifacts") or {})]
    if missing:
        pytest.fail(f"the lab mirror does not serve {', '.join(missing)}: run python lab/charts/build.py, "
                    "bash lab/k8s/build.sh and python lab/mirror/mirror.py up (make lab-artifacts)")
    first, first_s = run_play()
    print(f"\ntiming monitoring_k8s first run: {first_s:.0f}s")
    try:
        assert first.returncode == 0, f"monitoring.yml (Kubernetes path) failed:\n{tail(first, 120)}"
        yield {"first": first, "first_s": first_s}
    finally:
        t0 = time.monotonic()
        cleanup()
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
    assert config["route"]["routes"] == source["route"]["routes"]
    assert config["inhibit_rules"] == source["inhibit_rules"]
    urls = {r["name"]: [h["url"] for h in r.get("webhook_configs", [])] for r in config["receivers"]}
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


def test_grafana_sidecar_picks_up_the_dashboards_configmap(deployed):
    cm = get("configmap", "ai-l1-gpu-dashboards")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    for path in sorted((MON / "dashboards").glob("*.json")):
        assert json.loads(cm["data"][path.name]) == json.loads(path.read_text()), path.name
    grafana = get("deployment", "kube-prometheus-stack-grafana")
    envs = [{e["name"]: e.get("value") for e in c.get("env", [])}
            for c in grafana["spec"]["template"]["spec"]["containers"]]
    # The dashboards sidecar watches ConfigMaps with this label.
    assert any(env.get("LABEL") == "grafana_dashboard" and env.get("LABEL_VALUE") == "1" for env in envs), envs


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


def test_npd_configmap_and_images(deployed):
    npd = get("configmap", "node-problem-detector-gpu", namespace="kube-system")
    assert npd["data"]["check_gpu.py"] == (MON / "npd" / "check_gpu.py").read_text()
    assert json.loads(npd["data"]["gpu-problem.json"]) == json.loads((MON / "npd" / "gpu-problem.json").read_text())
    operator = get("deployment", "kube-prometheus-stack-operator")
    image = operator["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.startswith(f"{REGISTRY}/"), image


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
