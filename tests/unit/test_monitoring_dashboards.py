"""Grafana dashboards (monitoring/dashboards/*.json): they load as Grafana would provision
them, every panel queries, every query is valid PromQL (checked by promtool) and uses only
metrics that the DCGM counters file exports."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "monitoring" / "dashboards").glob("*.json"))
COUNTERS = ROOT / "monitoring" / "dcgm" / "counters.csv"
# Grafana's built-in variables, replaced by what Grafana would send.
GRAFANA_VARS = {"$__rate_interval": "1m", "$__range": "6h", "$__interval": "30s", '"$node"': '".*"'}


def exported():
    lines = COUNTERS.read_text(encoding="utf-8").splitlines()
    return {ln.split(",")[0].strip() for ln in lines if ln.strip() and not ln.startswith("#")}


def panels(dash):
    for panel in dash["panels"]:
        yield panel
        yield from panel.get("panels", [])


def queries(dash):
    return [(p["title"], t["expr"]) for p in panels(dash) if p["type"] != "row" for t in p["targets"]]


def test_there_are_dashboards():
    assert DASHBOARDS, "no dashboards under monitoring/dashboards"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_dashboard_structure(path):
    dash = json.loads(path.read_text(encoding="utf-8"))
    for key in ("uid", "title", "schemaVersion", "panels", "templating"):
        assert key in dash, f"{path.name}: no {key}"
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,40}", dash["uid"])
    ids = [p["id"] for p in panels(dash)]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in panels(dash):
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["w"] > 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            assert panel["targets"], f"panel {panel['title']} has no query"
            assert panel["datasource"]["uid"] == "${datasource}", "panels use the datasource variable"
    names = {v["name"] for v in dash["templating"]["list"]}
    for _, expr in queries(dash):
        for var in re.findall(r"\$(\w+)", expr):
            assert var.startswith("__") or var in names, f"undefined variable ${var} in {expr}"


def recorded():
    """The series the shipped rule files record (the SLO dashboard reads ai_l1_slo:*)."""
    names = set()
    for path in (ROOT / "monitoring" / "rules").glob("*.rules.yml"):
        for group in yaml.safe_load(path.read_text(encoding="utf-8"))["groups"]:
            names |= {r["record"] for r in group["rules"] if "record" in r}
    return names


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_queries_use_exported_metrics(path):
    """Each query reads a DCGM counter the counters file exports, a series a shipped rule records, or the
    ALERTS series of named alerts."""
    dash = json.loads(path.read_text(encoding="utf-8"))
    have, rules = exported(), recorded()
    for title, expr in queries(dash):
        metrics = set(re.findall(r"\bDCGM_FI_[A-Z0-9_]+", expr))
        assert metrics <= have, f"{title}: {metrics - have} not in counters.csv"
        records = set(re.findall(r"\bai_l1_[a-z0-9_]*:[a-z0-9_:]+", expr))
        assert records <= rules, f"{title}: {records - rules} recorded by no rule file"
        alerts = re.search(r"\bALERTS[{]alertname=", expr)  # Prometheus' own series of its alerts
        assert metrics or records or alerts, f"{title}: queries neither a DCGM metric nor a recorded series"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.name)
def test_queries_are_valid_promql(path, tmp_path):
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is missing: apt-get install prometheus")
    dash = json.loads(path.read_text(encoding="utf-8"))
    rules = []
    for n, (_, query) in enumerate(queries(dash)):
        expr = query
        for var, value in GRAFANA_VARS.items():
            expr = expr.replace(var, value)
        rules.append({"record": f"dashboard:query{n}", "expr": expr})
    rule_file = tmp_path / "queries.yml"
    rule_file.write_text(yaml.safe_dump({"groups": [{"name": "q", "rules": rules}]}), encoding="utf-8")
    proc = subprocess.run([promtool, "check", "rules", str(rule_file)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_provider_points_grafana_at_the_dashboards():
    provider = yaml.safe_load((ROOT / "monitoring" / "dashboards" / "provider.yml").read_text(encoding="utf-8"))
    (entry,) = provider["providers"]
    assert entry["type"] == "file" and entry["options"]["path"]
