"""Alert rules, their promtool tests, the generated PrometheusRule, the DCGM counters file
and the Alertmanager config (monitoring/). Needs promtool and amtool (Debian packages
prometheus and prometheus-alertmanager)."""

import csv
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MON = ROOT / "monitoring"
RULES = MON / "rules" / "gpu-alerts.rules.yml"
SLO_RULES = MON / "rules" / "slo.rules.yml"
RULE_TESTS = MON / "rules" / "tests"
ALERTMANAGER = MON / "alertmanager" / "alertmanager.yml"
COUNTERS = MON / "dcgm" / "counters.csv"
DASHBOARDS = MON / "dashboards"


def tool(name, package):
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is missing: apt-get install {package}")
    return path


def run(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True, check=False)


def alerts_of(groups):
    return [r["alert"] for g in groups for r in g["rules"] if "alert" in r]


def untested(rule_groups, test_docs):
    """Alerts lacking a firing case or a not-firing case, as {alert: [missing kinds]}. The burn-rate
    alerts of the SLO rules share their names, one per objective: each objective (label slo) needs
    its own firing case, named "alert{slo=...}"."""
    firing, quiet = set(), set()
    for doc in test_docs:
        for case in doc.get("tests", []):
            for art in case.get("alert_rule_test", []):
                if not art.get("exp_alerts"):
                    quiet.add(art["alertname"])
                for exp in art.get("exp_alerts") or []:
                    slo = (exp.get("exp_labels") or {}).get("slo")
                    firing.add(art["alertname"] + (f"{{slo={slo}}}" if slo else ""))
    missing = {}
    for group in rule_groups:
        for rule in (r for r in group["rules"] if "alert" in r):
            alert, slo = rule["alert"], (rule.get("labels") or {}).get("slo")
            name = alert + (f"{{slo={slo}}}" if slo else "")
            kinds = [k for k, seen in (("firing", name in firing), ("not firing", alert in quiet)) if not seen]
            if kinds:
                missing[name] = kinds
    return missing


def load_tests():
    return [yaml.safe_load(p.read_text(encoding="utf-8")) for p in sorted(RULE_TESTS.glob("*.yml"))]


def rule_groups(path=RULES):
    return yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]


@pytest.mark.parametrize("path", [RULES, SLO_RULES], ids=lambda p: p.name)
def test_promtool_check_rules(path):
    proc = run(tool("promtool", "prometheus"), "check", "rules", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {sum(len(g['rules']) for g in rule_groups(path))} rules found" in proc.stdout


def test_promtool_test_rules():
    files = [str(p) for p in sorted(RULE_TESTS.glob("*.yml"))]
    assert files, "no promtool test files under monitoring/rules/tests"
    proc = run(tool("promtool", "prometheus"), "test", "rules", *files)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("path", [RULES, SLO_RULES], ids=lambda p: p.name)
def test_every_rule_has_a_firing_and_a_quiet_case(path):
    missing = untested(rule_groups(path), load_tests())
    assert not missing, f"alerts without promtool cases: {missing}"


def test_coverage_check_wants_a_firing_case_for_each_objective():
    groups = rule_groups(SLO_RULES)
    extra = {"name": "extra", "rules": [{"alert": "L1SLOErrorBudgetBurnFast", "expr": "vector(1)",
                                         "labels": {"slo": "untested_objective"}}]}
    assert untested([*groups, extra], load_tests()) == {
        "L1SLOErrorBudgetBurnFast{slo=untested_objective}": ["firing"]}


def test_coverage_check_catches_an_untested_rule():
    groups = rule_groups() + [{"name": "extra", "rules": [{"alert": "Untested", "expr": "vector(1)"}]}]
    assert untested(groups, load_tests()) == {"Untested": ["firing", "not firing"]}


def test_broken_rule_is_rejected(tmp_path):
    bad = tmp_path / "bad.rules.yml"
    bad.write_text(RULES.read_text(encoding="utf-8").replace("[5m]", "[5m", 1), encoding="utf-8")
    proc = run(tool("promtool", "prometheus"), "check", "rules", str(bad))
    assert proc.returncode != 0


def test_generated_files_are_current():
    # The SLO rule file comes from the collection's filter: importable from collections/.
    proc = subprocess.run([sys.executable, str(MON / "generate.py"), "--check"], capture_output=True, text=True,
                          check=False, env={**os.environ, "PYTHONPATH": str(ROOT / "collections")})
    assert proc.returncode == 0, proc.stderr


def test_prometheusrule_carries_the_same_rules(tmp_path):
    obj = yaml.safe_load((MON / "kubernetes" / "prometheusrule-gpu-alerts.yaml").read_text(encoding="utf-8"))
    assert obj["kind"] == "PrometheusRule" and obj["apiVersion"] == "monitoring.coreos.com/v1"
    assert obj["spec"]["groups"] == rule_groups()
    plain = tmp_path / "from-crd.rules.yml"
    plain.write_text(yaml.safe_dump({"groups": obj["spec"]["groups"]}, allow_unicode=True), encoding="utf-8")
    proc = run(tool("promtool", "prometheus"), "check", "rules", str(plain))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def exported_metrics():
    with COUNTERS.open(encoding="utf-8") as handle:
        rows = [r for r in csv.reader(handle) if r and not r[0].startswith("#")]
    assert all(len(r) >= 3 and r[1].strip() in {"gauge", "counter", "label"} for r in rows), rows
    return {r[0].strip() for r in rows}


def dcgm_names(text):
    return set(re.findall(r"\bDCGM_FI_[A-Z0-9_]+", text))


def test_counters_enable_every_metric_the_rules_use():
    used = dcgm_names(" ".join(r["expr"] for g in rule_groups() for r in g["rules"]))
    assert {"DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"} <= used
    assert used - exported_metrics() == set()


def test_counters_enable_every_metric_the_dashboards_use():
    used = set()
    for path in DASHBOARDS.glob("*.json"):
        used |= dcgm_names(json.dumps(json.loads(path.read_text(encoding="utf-8"))))
    assert used, "dashboards query no DCGM metric"
    assert used - exported_metrics() == set()


def test_amtool_check_config():
    proc = run(tool("amtool", "prometheus-alertmanager"), "check-config", str(ALERTMANAGER))
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("labels", "receiver"),
    [("severity=critical", "feishu-critical"), ("severity=warning", "feishu-warning"),
     ("severity=info", "feishu-info"), ("alertname=Other", "feishu-critical"),
     ("alertname=Watchdog severity=none", "null"), ("alertname=InfoInhibitor severity=none", "null")],
)
def test_alertmanager_routes(labels, receiver):
    proc = run(tool("amtool", "prometheus-alertmanager"), "config", "routes", "test",
               f"--config.file={ALERTMANAGER}", *labels.split())
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == receiver


def test_alertmanager_seed_intervals_and_inhibit():
    cfg = yaml.safe_load(ALERTMANAGER.read_text(encoding="utf-8"))
    repeats = {r["receiver"]: r["repeat_interval"] for r in cfg["route"]["routes"] if r["receiver"] != "null"}
    assert repeats == {"feishu-critical": "1h", "feishu-warning": "4h", "feishu-info": "24h"}
    (inhibit,) = cfg["inhibit_rules"]
    assert inhibit["source_matchers"] == ['severity="critical"']
    assert inhibit["target_matchers"] == ['severity="warning"']
    # Both temperature alerts carry Hostname and gpu, so the critical one silences the warning.
    assert {"Hostname", "gpu"} <= set(inhibit["equal"])


def test_broken_alertmanager_config_is_rejected(tmp_path):
    bad = tmp_path / "alertmanager.yml"
    bad.write_text(ALERTMANAGER.read_text(encoding="utf-8").replace("receiver: feishu-warning", "receiver: nowhere"),
                   encoding="utf-8")
    proc = run(tool("amtool", "prometheus-alertmanager"), "check-config", str(bad))
    assert proc.returncode != 0


def k8s(name):
    return yaml.safe_load((MON / "kubernetes" / name).read_text(encoding="utf-8"))


def test_kube_prometheus_stack_alertmanager_config_passes_amtool(tmp_path):
    values = k8s("kube-prometheus-stack-values.yaml")
    cfg = tmp_path / "alertmanager.yml"
    cfg.write_text(yaml.safe_dump(values["alertmanager"]["config"]), encoding="utf-8")
    proc = run(tool("amtool", "prometheus-alertmanager"), "check-config", str(cfg))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    urls = [h["url"] for r in values["alertmanager"]["config"]["receivers"] for h in r.get("webhook_configs", [])]
    assert urls and all(u.startswith("http://feishu-relay.monitoring.svc:9099/feishu/") for u in urls)


def test_dcgm_exporter_reads_the_counters_configmap():
    cm = k8s("dcgm-exporter-counters-configmap.yaml")
    assert cm["data"]["dcgm-metrics.csv"] == COUNTERS.read_text(encoding="utf-8")
    values = k8s("dcgm-exporter-values.yaml")
    (volume,) = values["extraConfigMapVolumes"]
    assert volume["configMap"]["name"] == cm["metadata"]["name"]
    (mount,) = values["extraVolumeMounts"]
    # -c: collect every 5 s, the ServiceMonitor's interval (seed 4.5.2).
    assert values["arguments"] == ["-f", f"{mount['mountPath']}/dcgm-metrics.csv", "-c", "5000"]
    assert values["serviceMonitor"]["interval"] == "5s"
    assert {"targetLabel": "job", "replacement": "dcgm-exporter"} in values["serviceMonitor"]["relabelings"]


def test_dashboards_configmap_carries_every_dashboard():
    cm = k8s("grafana-dashboards-configmap.yaml")
    assert cm["metadata"]["labels"] == {"grafana_dashboard": "1"}
    assert cm["data"] == {p.name: p.read_text(encoding="utf-8") for p in sorted(DASHBOARDS.glob("*.json"))}


def test_relay_manifests_serve_the_url_alertmanager_posts_to():
    docs = list(yaml.safe_load_all((MON / "kubernetes" / "feishu-relay.yaml").read_text(encoding="utf-8")))
    by_kind = {d["kind"]: d for d in docs}
    assert set(by_kind) == {"ConfigMap", "Deployment", "Service"}
    assert by_kind["ConfigMap"]["data"]["feishu_relay.py"] == (MON / "relay" / "feishu_relay.py").read_text()
    svc = by_kind["Service"]
    assert (svc["metadata"]["name"], svc["metadata"]["namespace"], svc["spec"]["ports"][0]["port"]) == (
        "feishu-relay", "monitoring", 9099)
    pod = by_kind["Deployment"]["spec"]["template"]["spec"]
    assert {"name": "channels", "secret": {"secretName": "feishu-relay-channels"}} in pod["volumes"]
    assert "0.0.0.0:9099" in pod["containers"][0]["command"]
