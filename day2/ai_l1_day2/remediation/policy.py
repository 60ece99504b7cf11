"""The remediation policy: which alert isolates which node, and when it must not.

Each alert of an Alertmanager v4 payload goes through, in order:
  1. mapped alertname (cfg.alerts) and status firing, else ignored
  2. XID lists (GPUXidError only): ignore list wins, then the allow list when non-empty;
     an XID alert without a readable code follows xid.unknown (refuse by default).
     The alert's GPU health view (the collection's module_utils/accelerator_health.py, as
     gpu_info and the NPD GPU plugin read it) is recorded in the decision: ok for an ignored
     XID, degraded for an XID in neither list, failed for a critical XID and the other GPU
     alerts
  3. node: the first of cfg.node_labels present; `instance` loses its port and an address
     is matched against the Nodes' addresses; a node the API does not know is refused
  4. dedupe: a job for the same fingerprint within dedupe_window_s -> duplicate
  5. per-node lock: a queued or running job on the node -> refused (recorded)
  6. already isolated: the node carries cfg.isolated_taint -> ignored
  7. rate limit: at most rate_max_runs jobs created within rate_window_s
  8. pool ceiling: after this isolation, at most floor(max_fraction x pool size) nodes of
     the pool may be unavailable, counting cordoned nodes from the API and nodes with an
     active job (not yet cordoned) from the store
Decisions 4-8 read the store inside the caller's write transaction, so two webhooks racing
for the last slot of a pool cannot both win.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone

from .config import Config, accelerator_health

XID_LABELS = ("xid", "XID", "err_code")
XID_TEXT = re.compile(r"\bXID\W{0,3}([0-9]{1,4})\b", re.IGNORECASE)
ASCII_INT = re.compile(r"[0-9]{1,6}")
PORT = re.compile(r"^\[?([^\]]+?)\]?(:\d+)?$")


@dataclass
class NodeInfo:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    unschedulable: bool = False
    taints: tuple[str, ...] = ()
    addresses: tuple[str, ...] = ()
    ready: bool = True  # the Ready condition is True (a NotReady node gives no capacity either)


@dataclass
class Decision:
    decision: str  # queued | dry-run | ignored | duplicate | refused
    reason: str
    alertname: str = ""
    fingerprint: str = ""
    node: str = ""
    kind: str = ""
    detail: str = ""
    pool: str = ""
    job_id: int | None = None
    health: str = ""  # the alert's GPU health view: ok | degraded | failed ('' before it is read)

    def as_dict(self) -> dict:
        return asdict(self)


def malformed(alert) -> str:
    """Why the alert is not an Alertmanager alert ('' when it is): each alert of a notification
    is judged on its own, so one bad alert is refused and the others go on."""
    if not isinstance(alert, dict):
        return "the alert is not an object"
    labels, notes = alert.get("labels"), alert.get("annotations")
    if not isinstance(labels, dict):
        return "'labels' is not an object"
    if notes is not None and not isinstance(notes, dict):
        return "'annotations' is not an object"
    for kind, mapping in (("label", labels), ("annotation", notes or {})):
        for key, value in mapping.items():
            if not isinstance(value, str):
                return f"{kind} {str(key)[:64]!r} is not a string"
    return ""


ENDS_AT_GRACE_S = 300  # clocks of Alertmanager and the receiver may differ by this much


def ended_at(alert: dict, now: float) -> str:
    """The alert's endsAt when it lies in the past (beyond the grace), else ''. Alertmanager sends
    firing alerts with a zero time (year 1) or one in the future; an unreadable value is judged
    by the status alone."""
    value = alert.get("endsAt")
    if not isinstance(value, str) or not value:
        return ""
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return ""
    if when.year <= 1:
        return ""
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return value[:64] if when.timestamp() < now - ENDS_AT_GRACE_S else ""


def fingerprint(alert: dict) -> str:
    fp = alert.get("fingerprint")
    if isinstance(fp, str) and fp:
        return fp
    labels = alert.get("labels") or {}
    return hashlib.sha256(json.dumps(labels, sort_keys=True).encode()).hexdigest()[:16]


def alert_xid(alert: dict) -> int | None:
    labels, notes = alert.get("labels") or {}, alert.get("annotations") or {}
    for key in XID_LABELS:
        value = str(labels.get(key, "")).strip()
        if ASCII_INT.fullmatch(value):
            return int(value)
    for key in ("summary", "description"):
        match = XID_TEXT.search(str(notes.get(key, "")))
        if match:
            return int(match.group(1))
    return None


def xid_decision(xid: int | None, cfg: Config) -> tuple[bool, str]:
    if xid is None:
        if cfg.xid_unknown == "isolate":
            return True, "XID code not in the alert; xid.unknown is isolate"
        return False, ("XID code not found in the alert (labels xid/err_code, annotations 'XID <n>'); "
                       "xid.unknown is refuse")
    if accelerator_health.xid_view(xid, cfg.xid_policy).state == accelerator_health.OK:
        return False, f"XID {xid} is in xid.ignore (application error, not a hardware fault)"
    if cfg.xid_allow and xid not in cfg.xid_allow:
        return False, f"XID {xid} is not in xid.allow {sorted(cfg.xid_allow)}"
    return True, f"XID {xid}"


def node_hint(alert: dict, cfg: Config) -> tuple[str, str]:
    """(label name, value) of the first node label present; ('', '') when none is."""
    labels = alert.get("labels") or {}
    for key in cfg.node_labels:
        value = str(labels.get(key, "")).strip()
        if value:
            return key, value
    return "", ""


def resolve_node(label: str, value: str, nodes: dict[str, NodeInfo]) -> str | None:
    if value in nodes:
        return value
    match = PORT.match(value) if label == "instance" or ":" in value else None
    host = match.group(1) if match else value
    if host in nodes:
        return host
    # A name or address the Node itself reports, nothing looser: the first label of a domain name
    # (gpu4.some.other.domain) names a host of another domain as often as this one.
    for node in nodes.values():
        if host in node.addresses:
            return node.name
    return None


def pool_of(node: str, nodes: dict[str, NodeInfo], cfg: Config) -> tuple[str, list[str]]:
    """(pool name, member names) or ('', []) when the node is in no pool."""
    for name, members in cfg.pools.items():
        if node in members:
            return name, list(members)
    if cfg.pool_label:
        value = nodes[node].labels.get(cfg.pool_label)
        if value is not None:
            members = [n.name for n in nodes.values() if n.labels.get(cfg.pool_label) == value]
            return f"{cfg.pool_label}={value}", members
    return "", []


def ceiling(node: str, members: list[str], unavailable: set[str], fraction: float) -> tuple[bool, int, int]:
    """(allowed, limit, unavailable count after isolating node)."""
    limit = math.floor(fraction * len(members) + 1e-9)
    after = len((unavailable & set(members)) | {node})
    return after <= limit, limit, after


def decide(  # noqa: PLR0911, PLR0912, PLR0915 (the documented steps, in order)
        alert: dict, cfg: Config, *, store, db, nodes: dict[str, NodeInfo], now: float,
        recent_runs: int = 0) -> Decision:
    """recent_runs: the isolations this process queued within rate_limit.window_s by the monotonic
    clock; the rate limit counts the larger of it and the store's count by the wall clock, so a
    wall clock set forward does not empty the window."""
    labels = alert.get("labels") or {}
    name = str(labels.get("alertname", ""))
    d = Decision("ignored", "", alertname=name, fingerprint=fingerprint(alert))
    if name not in cfg.alerts:
        d.reason = f"alertname {name!r} is not mapped to a remediation (alerts: {sorted(cfg.alerts)})"
        return d
    if alert.get("status") != "firing":
        d.reason = f"alert status is {alert.get('status')!r}, only firing alerts isolate"
        return d
    ended = ended_at(alert, now)
    if ended:
        d.reason = f"alert ended at {ended} (endsAt is past): only alerts still firing isolate"
        return d
    d.kind = cfg.alerts[name]
    details = []
    xid = alert_xid(alert) if name == accelerator_health.XID_ALERT else None
    d.health = accelerator_health.alert_view(name, cfg.xid_policy, xid).state
    if name == accelerator_health.XID_ALERT:
        ok, why = xid_decision(xid, cfg)
        if not ok:
            d.decision = "refused" if xid is None else "ignored"
            d.reason = why
            return d
        details.append(why)
        if xid is not None:
            d.kind = f"{d.kind}-{xid}"
    label, value = node_hint(alert, cfg)
    if not value:
        d.decision, d.reason = "refused", f"no node label in the alert (looked for {', '.join(cfg.node_labels)})"
        return d
    node = resolve_node(label, value, nodes)
    if node is None:
        d.decision, d.reason = "refused", f"{label}={value!r} matches no Kubernetes Node (by name or address)"
        return d
    d.node = node
    if labels.get("gpu") not in (None, ""):
        details.append(f"GPU {labels['gpu']}")
    if labels.get("UUID"):
        details.append(str(labels["UUID"]))
    summary = str((alert.get("annotations") or {}).get("summary", ""))
    d.detail = f"{name}: " + (", ".join(details) if details else summary)

    previous = store.recent_by_fingerprint(db, d.fingerprint, now - cfg.dedupe_window_s)
    if previous is not None:
        d.decision, d.job_id = "duplicate", previous["id"]
        d.reason = (f"job {previous['id']} ({previous['state']}) already handles this alert "
                    f"(dedupe window {cfg.dedupe_window_s:.0f}s)")
        return d
    holder = store.lock_holder(db, node)
    if holder is not None:
        d.decision, d.job_id = "refused", holder["id"]
        d.reason = f"node {node} is locked by job {holder['id']} ({holder['state']}, {holder['kind']})"
        return d
    if cfg.isolated_taint in nodes[node].taints:
        d.reason = f"node {node} is already isolated (taint {cfg.isolated_taint})"
        return d
    recent = max(store.count_since(db, now - cfg.rate_window_s), recent_runs)
    if recent >= cfg.rate_max_runs:
        d.decision = "refused"
        d.reason = f"rate limit: {recent} isolations within {cfg.rate_window_s:.0f}s (max {cfg.rate_max_runs})"
        return d
    pool, members = pool_of(node, nodes, cfg)
    if not pool:
        d.decision = "refused"
        d.reason = (f"node {node} is in no pool (ceiling.pools, or label {cfg.pool_label!r}): "
                    "the ceiling cannot be checked")
        return d
    d.pool = pool
    # Capacity already gone: cordoned, NotReady (a dead kubelet schedules nothing), or being isolated.
    unavailable = ({n for n in members if n in nodes and (nodes[n].unschedulable or not nodes[n].ready)}
                   | store.active_nodes(db))
    ok, limit, after = ceiling(node, members, unavailable, cfg.ceiling_fraction)
    if not ok:
        busy = sorted((unavailable & set(members)) - {node})
        d.decision = "refused"
        d.reason = (f"pool ceiling: pool {pool} has {len(members)} nodes, {len(busy)} already unavailable "
                    f"({', '.join(busy)}); isolating {node} would make {after} > {limit} "
                    f"(max_fraction {cfg.ceiling_fraction})")
        return d
    d.decision = "dry-run" if cfg.dry_run else "queued"
    d.reason = f"isolate {node}: {d.detail} (pool {pool}: {after}/{len(members)} unavailable, limit {limit})"
    return d
