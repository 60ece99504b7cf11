"""Receiver configuration: a YAML file for policy and wiring, the environment (or files)
for secrets. Secrets are never logged, never written to the store, never echoed in errors.

    listen: {host: 127.0.0.1, port: 9095}
      # tls: {cert_file: /etc/ai-l1-remediate/tls/tls.crt, key_file: .../tls.key}   # HTTPS; both or neither
    state_dir: /var/lib/ai-l1-remediate      # SQLite store + one directory per job
    dry_run: false                            # decide and record, never run
    auth:
      token_env: AI_L1_REMEDIATE_TOKEN        # bearer token (Alertmanager http_config.authorization)
      hmac_key_env: AI_L1_REMEDIATE_HMAC_KEY  # or HMAC-SHA256 signature header
      # token_file / hmac_key_file: read the secret from a file instead
      max_skew_s: 300                         # HMAC timestamp tolerance
    alerts:                                   # alertname -> fault kind; others are ignored
      GPUXidError: xid                        # xid-<code> when the code is known
      GPUECCUncorrectableError: ecc-uncorrectable
      GPUNodeUnavailable: gpu-unavailable
      GPURowRemapFailure: row-remap-failure
      GPUFallenOffBus: gpu-lost
    node_labels: [Hostname, node, kubernetes_io_hostname, instance]
    xid: {ignore: [13, 31, 43, 45, 68, 109], allow: [], unknown: refuse}
    dedupe_window_s: 3600
    rate_limit: {max_runs: 5, window_s: 600}
    ceiling: {max_fraction: 0.25, pool_label: accelerator, pools: {}}
    isolated_taint: ai-platform.io/fault      # a node carrying it is already isolated
    run: {operation: isolate, inventory: inventories/production, workers: 2, max_attempts: 3,
          timeout_s: 3600, extravars: {}, precordon: true, keep_job_dirs: 1000}
    # keep_job_dirs: job directories (specs, logs, each run's artifacts) of finished jobs kept,
    # the newest first; older ones are removed (their job rows and the audit log stay).
    # precordon: the receiver cordons the Node itself (spec.unschedulable + the reason in
    # run.cordon_annotation, the node_drain role's key) the moment a job starts, then runs
    # the playbook, which cordons again (no-op), taints, alerts and drains. Seconds matter for
    # the cordon (no new pod lands on a faulty GPU); the playbook's start-up is ~3-4 s.
    kubernetes: {kubeconfig: null, context: null}   # null: in-cluster, else ~/.kube/config
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

DEFAULT_XID_IGNORE = (13, 31, 43, 45, 68, 109)
# alertname -> fault kind (a label value: the isolate playbook's day2_fault); an XID alert with
# a readable code becomes xid-<code>.
DEFAULT_ALERTS = {
    "GPUXidError": "xid",
    "GPUECCUncorrectableError": "ecc-uncorrectable",
    "GPUNodeUnavailable": "gpu-unavailable",
    # monitoring/rules: a row the GPU could not remap; a GPU NVML lost while its exporter is up.
    "GPURowRemapFailure": "row-remap-failure",
    "GPUFallenOffBus": "gpu-lost",
}
LABEL_VALUE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9_.-]{0,50}[A-Za-z0-9])?$")
DEFAULT_NODE_LABELS = ("Hostname", "node", "kubernetes_io_hostname", "instance")


class ConfigError(ValueError):
    """A configuration problem, named by its key."""


@dataclass
class AuthConfig:
    token: str | None = field(default=None, repr=False)
    hmac_key: bytes | None = field(default=None, repr=False)
    max_skew_s: int = 300

    def describe(self) -> dict:
        """What is configured, never the secrets themselves."""
        return {"bearer": self.token is not None, "hmac": self.hmac_key is not None, "max_skew_s": self.max_skew_s}


@dataclass
class Config:
    auth: AuthConfig
    state_dir: Path
    host: str = "127.0.0.1"
    port: int = 9095
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    dry_run: bool = False
    alerts: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_ALERTS))
    node_labels: tuple[str, ...] = DEFAULT_NODE_LABELS
    xid_ignore: frozenset[int] = frozenset(DEFAULT_XID_IGNORE)
    xid_allow: frozenset[int] = frozenset()
    xid_unknown: str = "refuse"
    dedupe_window_s: float = 3600.0
    rate_max_runs: int = 5
    rate_window_s: float = 600.0
    ceiling_fraction: float = 0.25
    pool_label: str | None = "accelerator"
    pools: dict[str, tuple[str, ...]] = field(default_factory=dict)
    isolated_taint: str = "ai-platform.io/fault"
    operation: str = "isolate"
    inventory: str = "inventories/production"
    workers: int = 2
    max_attempts: int = 3
    timeout_s: int = 3600
    precordon: bool = True
    keep_job_dirs: int = 1000
    cordon_annotation: str = "ai-platform.io/cordon-reason"
    extravars: dict[str, Any] = field(default_factory=dict)
    kubeconfig: str | None = None
    kube_context: str | None = None
    log_level: str = "info"

    @property
    def db_path(self) -> Path:
        return self.state_dir / "remediation.sqlite"

    @property
    def jobs_dir(self) -> Path:
        return self.state_dir / "jobs"


def _typed(section: dict, key: str, kind, where: str, default):
    value = section.get(key, default)
    if value is None and default is None:
        return None
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise ConfigError(f"{where}{key}: expected {kind.__name__}, got {type(value).__name__} ({value!r})")
    return value


def _secret(auth: dict, name: str, env: dict) -> str | None:
    env_key = auth.get(f"{name}_env", f"AI_L1_REMEDIATE_{name.upper()}")
    file_key = auth.get(f"{name}_file")
    if name in auth:
        raise ConfigError(f"auth.{name}: secrets are not read from the config file; use auth.{name}_env "
                          f"(an environment variable) or auth.{name}_file")
    if file_key:
        try:
            value = Path(file_key).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"auth.{name}_file: cannot read {file_key}: {exc.strerror}") from None
        if not value:
            raise ConfigError(f"auth.{name}_file: {file_key} is empty")
        return value
    value = env.get(env_key)
    return value or None


def _tls_files(tls) -> tuple[Path | None, Path | None]:
    """listen.tls: the certificate chain and its key (PEM files), both or neither, readable now."""
    if tls is None:
        return None, None
    if not isinstance(tls, dict) or set(tls) - {"cert_file", "key_file"}:
        raise ConfigError(f"listen.tls: expected {{cert_file, key_file}}, got {tls!r}")
    files = []
    for key in ("cert_file", "key_file"):
        value = tls.get(key)
        if not isinstance(value, str) or not value:
            raise ConfigError(f"listen.tls.{key}: a PEM file path is required with listen.tls")
        try:
            Path(value).read_bytes()
        except OSError as exc:
            raise ConfigError(f"listen.tls.{key}: cannot read {value}: {exc.strerror}") from None
        files.append(Path(value))
    return files[0], files[1]


def _int_list(value, where: str) -> frozenset[int]:
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ConfigError(f"{where}: expected a list of XID codes (integers), got {value!r}")
    return frozenset(value)


def load(  # noqa: PLR0912, PLR0915 (one check per key, in file order)
        path: str | Path | None = None, *, env: dict | None = None, overrides: dict | None = None) -> Config:
    """Read and validate the config; raise ConfigError naming the key at fault."""
    env = os.environ if env is None else env
    raw: dict = {}
    if path is not None:
        try:
            raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        except OSError as exc:
            raise ConfigError(f"cannot read config {path}: {exc.strerror}") from None
        except yaml.YAMLError as exc:
            raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level")
    raw.update(overrides or {})
    known = {"listen", "state_dir", "dry_run", "auth", "alerts", "node_labels", "xid", "dedupe_window_s",
             "rate_limit", "ceiling", "isolated_taint", "run", "kubernetes", "log_level"}
    unknown = set(raw) - known
    if unknown:
        raise ConfigError(f"unknown config keys: {', '.join(sorted(unknown))} (known: {', '.join(sorted(known))})")

    auth_raw = raw.get("auth") or {}
    auth = AuthConfig(token=_secret(auth_raw, "token", env),
                      max_skew_s=_typed(auth_raw, "max_skew_s", int, "auth.", 300))
    hmac_key = _secret(auth_raw, "hmac_key", env)
    auth.hmac_key = hmac_key.encode() if hmac_key else None
    if auth.token is None and auth.hmac_key is None:
        raise ConfigError("no credential configured: set the bearer token (env "
                          f"{auth_raw.get('token_env', 'AI_L1_REMEDIATE_TOKEN')}) or the HMAC key (env "
                          f"{auth_raw.get('hmac_key_env', 'AI_L1_REMEDIATE_HMAC_KEY')}); "
                          "every request is authenticated")
    for name, secret in (("token", auth.token), ("hmac_key", auth.hmac_key)):
        if secret is not None and len(secret.strip()) < 16:
            raise ConfigError(f"auth.{name}: the secret is shorter than 16 characters (blanks not counted)")

    state_dir = raw.get("state_dir")
    if not isinstance(state_dir, str) or not state_dir:
        raise ConfigError("state_dir: required (a directory for the SQLite store and per-job run directories)")
    listen = raw.get("listen") or {}
    xid = raw.get("xid") or {}
    rate = raw.get("rate_limit") or {}
    ceiling = raw.get("ceiling") or {}
    run = raw.get("run") or {}
    kube = raw.get("kubernetes") or {}

    cfg = Config(auth=auth, state_dir=Path(state_dir).expanduser())
    cfg.host = _typed(listen, "host", str, "listen.", cfg.host)
    cfg.port = _typed(listen, "port", int, "listen.", cfg.port)
    if not 0 <= cfg.port <= 65535:
        raise ConfigError(f"listen.port: {cfg.port} is not a TCP port")
    cfg.tls_cert_file, cfg.tls_key_file = _tls_files(listen.get("tls"))
    cfg.dry_run = _typed(raw, "dry_run", bool, "", False)
    alerts = raw.get("alerts", DEFAULT_ALERTS)
    if not isinstance(alerts, dict) or not alerts or not all(isinstance(v, str) and LABEL_VALUE.match(v)
                                                             for v in alerts.values()):
        raise ConfigError("alerts: expected a mapping alertname -> fault kind (a Kubernetes label value, "
                          f"e.g. ecc-uncorrectable), got {alerts!r}")
    cfg.alerts = dict(alerts)
    labels = raw.get("node_labels", list(DEFAULT_NODE_LABELS))
    if not isinstance(labels, list) or not labels or not all(isinstance(v, str) for v in labels):
        raise ConfigError("node_labels: expected a non-empty list of alert label names")
    cfg.node_labels = tuple(labels)
    cfg.xid_ignore = _int_list(xid.get("ignore", list(DEFAULT_XID_IGNORE)), "xid.ignore")
    cfg.xid_allow = _int_list(xid.get("allow", []), "xid.allow")
    both = cfg.xid_ignore & cfg.xid_allow
    if both:
        raise ConfigError(f"xid: codes {sorted(both)} are in both xid.allow and xid.ignore")
    cfg.xid_unknown = _typed(xid, "unknown", str, "xid.", "refuse")
    if cfg.xid_unknown not in ("refuse", "isolate"):
        raise ConfigError(f"xid.unknown: expected refuse or isolate, got {cfg.xid_unknown!r}")
    cfg.dedupe_window_s = _typed(raw, "dedupe_window_s", float, "", 3600.0)
    cfg.rate_max_runs = _typed(rate, "max_runs", int, "rate_limit.", 5)
    cfg.rate_window_s = _typed(rate, "window_s", float, "rate_limit.", 600.0)
    if cfg.rate_max_runs < 1 or cfg.rate_window_s <= 0 or cfg.dedupe_window_s < 0:
        raise ConfigError("rate_limit.max_runs must be >= 1, rate_limit.window_s > 0, dedupe_window_s >= 0")
    cfg.ceiling_fraction = _typed(ceiling, "max_fraction", float, "ceiling.", 0.25)
    if not 0.0 <= cfg.ceiling_fraction <= 1.0:
        raise ConfigError(f"ceiling.max_fraction: {cfg.ceiling_fraction} is not within 0..1")
    cfg.pool_label = _typed(ceiling, "pool_label", str, "ceiling.", None) if "pool_label" in ceiling \
        else cfg.pool_label
    pools = ceiling.get("pools") or {}
    if not isinstance(pools, dict) or not all(isinstance(v, list) and all(isinstance(n, str) for n in v)
                                              for v in pools.values()):
        raise ConfigError("ceiling.pools: expected a mapping pool name -> list of node names")
    cfg.pools = {name: tuple(nodes) for name, nodes in pools.items()}
    cfg.isolated_taint = _typed(raw, "isolated_taint", str, "", cfg.isolated_taint)
    cfg.operation = _typed(run, "operation", str, "run.", cfg.operation)
    cfg.inventory = _typed(run, "inventory", str, "run.", cfg.inventory)
    cfg.workers = _typed(run, "workers", int, "run.", cfg.workers)
    cfg.max_attempts = _typed(run, "max_attempts", int, "run.", cfg.max_attempts)
    cfg.timeout_s = _typed(run, "timeout_s", int, "run.", cfg.timeout_s)
    cfg.precordon = _typed(run, "precordon", bool, "run.", cfg.precordon)
    cfg.cordon_annotation = _typed(run, "cordon_annotation", str, "run.", cfg.cordon_annotation)
    cfg.keep_job_dirs = _typed(run, "keep_job_dirs", int, "run.", cfg.keep_job_dirs)
    if cfg.workers < 1 or cfg.max_attempts < 1 or cfg.timeout_s < 1 or cfg.keep_job_dirs < 1:
        raise ConfigError("run.workers, run.max_attempts, run.timeout_s and run.keep_job_dirs must be >= 1")
    cfg.extravars = _typed(run, "extravars", dict, "run.", {})
    cfg.kubeconfig = _typed(kube, "kubeconfig", str, "kubernetes.", None)
    cfg.kube_context = _typed(kube, "context", str, "kubernetes.", None)
    cfg.log_level = _typed(raw, "log_level", str, "", "info")
    return cfg
