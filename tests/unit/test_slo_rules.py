"""Filter ai_platform.l1.slo_rules: the inventory's service-level objectives as recording rules and
multi-window, multi-burn-rate alerts. What the rules do is tested by promtool
(monitoring/rules/tests/slo.test.yml, through test_monitoring_rules.py); here: their shape, the
thresholds, and refusals of bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.ai_platform.l1.plugins.filter.slo_rules import slo_rules

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "inventories" / "sample" / "group_vars" / "all" / "slo.yml"
LAB = ROOT / "inventories" / "lab" / "group_vars" / "all" / "slo.yml"

EVENTS = {"name": "api", "description": "API requests without a 5xx.", "objective": 0.999,
          "errors": 'sum(rate(req_total{code=~"5.."}[$window]))', "total": "sum(rate(req_total[$window]))"}
TIME = {"name": "nodes", "description": "Nodes Ready.", "objective": 0.95, "bad_ratio": "1 - avg(up)"}


def sample():
    return yaml.safe_load(SAMPLE.read_text(encoding="utf-8"))


def rules_of(group, key):
    return {r[key]: r for r in group["rules"] if key in r}


def test_the_sample_and_the_lab_define_the_same_objectives_for_both_monitoring_paths():
    doc = sample()
    assert doc["monitoring_slos"] == doc["monitoring_k8s_slos"]
    assert yaml.safe_load(LAB.read_text(encoding="utf-8")) == doc
    assert {s["name"] for s in doc["monitoring_slos"]} == {
        "apiserver_availability", "gpu_nodes_available", "pod_scheduling_latency", "xid_isolation",
        "etcd_backup_freshness"}


def test_an_event_objective_records_each_window_and_alerts_at_the_workbooks_burn_rates():
    (group,) = slo_rules([EVENTS])["groups"]
    assert group["name"] == "ai-l1-slo-api"
    records = [r["record"] for r in group["rules"] if "record" in r]
    assert records == [f"ai_l1_slo:error_ratio:rate{w}" for w in ("5m", "30m", "1h", "2h", "6h", "1d", "3d")] + [
        "ai_l1_slo:objective"]
    assert all(r["labels"] == {"slo": "api"} for r in group["rules"] if "record" in r)
    one_hour = rules_of(group, "record")["ai_l1_slo:error_ratio:rate1h"]["expr"]
    assert one_hour == ('((sum(rate(req_total{code=~"5.."}[1h]))) or vector(0))\n/\n(sum(rate(req_total[1h])))')
    assert rules_of(group, "record")["ai_l1_slo:objective"]["expr"] == "vector(0.999)"
    alerts = rules_of(group, "alert")
    fast, slow = alerts["L1SLOErrorBudgetBurnFast"], alerts["L1SLOErrorBudgetBurnSlow"]
    assert fast["labels"] == {"slo": "api", "severity": "critical", "team": "infra"}
    assert slow["labels"] == {"slo": "api", "severity": "warning", "team": "infra"}
    for rate, long_w, short_w in ((14.4, "1h", "5m"), (6, "6h", "30m")):
        assert f'rate{long_w}{{slo="api"}} > ({rate} * 0.001)' in fast["expr"]
        assert f'rate{short_w}{{slo="api"}} > ({rate} * 0.001)' in fast["expr"]
    for rate, long_w, short_w in ((3, "1d", "2h"), (1, "3d", "6h")):
        assert f'rate{long_w}{{slo="api"}} > ({rate} * 0.001)' in slow["expr"]
        assert f'rate{short_w}{{slo="api"}} > ({rate} * 0.001)' in slow["expr"]
    assert "$window" not in yaml.safe_dump(group)


def test_a_time_objective_records_the_instant_ratio_and_averages_it_over_each_window():
    (group,) = slo_rules([TIME])["groups"]
    records = rules_of(group, "record")
    assert records["ai_l1_slo:bad_ratio:instant"]["expr"] == "1 - avg(up)"
    assert records["ai_l1_slo:error_ratio:rate6h"]["expr"] == (
        'avg_over_time(ai_l1_slo:bad_ratio:instant{slo="nodes"}[6h])')
    # The budget of 0.95 is 0.05, not 0.050000000000000044.
    assert "(14.4 * 0.05)" in rules_of(group, "alert")["L1SLOErrorBudgetBurnFast"]["expr"]


def test_no_objectives_no_groups():
    assert slo_rules([]) == {"groups": []}


@pytest.mark.parametrize(("change", "message"), [
    ({"name": "API-Availability"}, "name must be lower case"),
    ({"objective": 1}, "objective must be the fraction"),
    ({"objective": 99.9}, "objective must be the fraction"),
    ({"objective": "0.999"}, "objective must be the fraction"),
    ({"objective": True}, "objective must be the fraction"),
    ({"description": " "}, "description must say"),
    ({"errors": "sum(rate(req_total[5m]))"}, "errors must be a PromQL expression with $window"),
    ({"total": None}, "total must be a PromQL expression with $window"),
    ({"bad_ratio": "1 - avg(up)"}, "give either errors and total"),
    ({"thresold": 1}, "unknown keys thresold"),
], ids=lambda v: v if isinstance(v, str) else "-".join(v))
def test_bad_objectives_are_refused_naming_the_objective(change, message):
    slo = {**EVENTS, **change}
    with pytest.raises(AnsibleFilterError, match=r"^slo_rules: .*" + message.replace("$", r"\$")):
        slo_rules([slo])


@pytest.mark.parametrize(("slos", "message"), [
    ([EVENTS, EVENTS], "api: defined twice"),
    ([{**TIME, "bad_ratio": "avg_over_time(x[$window])"}], "bad_ratio is an instant PromQL expression"),
    ([{**TIME, "total": "sum(x)"}], "takes no total"),
    ([{k: v for k, v in EVENTS.items() if k not in ("errors", "total")}], "give either errors and total"),
    (["api"], "each objective must be a dict"),
])
def test_bad_lists_are_refused(slos, message):
    with pytest.raises(AnsibleFilterError, match=message.replace("$", r"\$")):
        slo_rules(slos)


def test_not_a_list_is_refused():
    with pytest.raises(AnsibleFilterError, match="expected a list of objectives, got dict"):
        slo_rules({"name": "api"})
