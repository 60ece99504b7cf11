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
    audit: {max_rows: 100000, max_bytes: 67108864}   # the audit trail's bound; the oldest rows go first
    rate_limit: {max_runs: 5, window_s: 600}
    ceiling: {max_fraction: 0.25, pool_label: accelerator, pools: {}}
    isolated_taint: ai-platform.io/fault      # a node carrying it is already isolated
    run: {backend: runner, operation: isolate, inventory: /etc/ai-l1-remediate/hosts.yml, workers: 2,
          max_attempts: 3, timeout_s: 3600, extravars: {}, precordon: true, keep_job_dirs: 1000}
    # backend: how an isolation runs. runner (the default): the isolate playbook through
    # ansible-runner in a child process, against run.inventory (required with runner, no default:
    # a file or directory that exists; relative paths are resolved against the current directory,
    # else the project). awx: the isolate job template is launched through AWX's API (section awx
    # below) and followed to its end; the policy (lock, ceiling, dedupe, rate limit, audit) stays
    # here either way.
    # keep_job_dirs: job directories (specs, logs, each run's artifacts) of finished jobs kept,
    # the newest first; older ones are removed (their job rows and the audit log stay).
    # precordon: the receiver cordons the Node itself (spec.unschedulable + the reason in
    # run.cordon_annotation, the node_drain role's key) the moment a job starts, then runs
    # the playbook, which cordons again (no-op), taints, alerts and drains. Seconds matter for
    # the cordon (no new pod lands on a faulty GPU); the playbook's start-up is ~3-4 s.
    kubernetes: {kubeconfig: null, context: null}   # null: in-cluster, else ~/.kube/config
    awx:                                      # only with run.backend: awx (refused otherwise)
      url: https://awx.example.com            # required; no credentials, query or fragment in it
      job_template_id: 42                     # required: the isolate job template (Limit and Variables
                                              #   prompted on launch)
      token_env: AI_L1_REMEDIATE_AWX_TOKEN    # the OAuth2 token (default variable), or
      # token_file: /etc/ai-l1-remediate/awx/token   # read at every request (a rotated Secret is picked up)
      ca_file: null                           # PEM bundle AWX's certificate is checked against (default: system CAs)
      verify: true                            # false: no certificate check (a lab only; never with ca_file)
      inventory_id: null                      # launch with this AWX inventory (the template must prompt for it)
      poll_s: 5                               # GET /api/v2/jobs/<id>/ every poll_s seconds until it ends
      request_timeout_s: 30                   # one HTTP request
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import yaml

from ..collection import module_utils

# The one XID policy and health view (the collection's module_utils/accelerator_health.py), as
# gpu_info and the Node Problem Detector GPU plugin read them.
accelerator_health = module_utils("accelerator_health")

DEFAULT_XID_IGNORE = tuple(accelerator_health.APPLICATION_XIDS)
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
BACKENDS = ("runner", "awx")
AWX_TOKEN_ENV = "AI_L1_REMEDIATE_AWX_TOKEN"
BEARER = re.compile(r"^[\x21-\x7e]+$")  # printable ASCII, no blanks: what an Authorization header can carry
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
class AwxConfig:
    """Where and how the isolate job template is launched (run.backend: awx)."""

    url: str
    job_template_id: int
    token_env: str | None = None
    token_file: Path | None = None
    env_token: str | None = field(default=None, repr=False)
    ca_file: Path | None = None
    verify: bool = True
    inventory_id: int | None = None
    poll_s: float = 5.0
    request_timeout_s: float = 30.0

    def token(self) -> str:
        """The token now: token_file read again (a Secret may have been rotated), else the
        environment's value read at start. ConfigError naming the field, never the value."""
        if self.token_file is None:
            if not self.env_token:
                raise ConfigError(f"awx.token_env: {self.token_env} is not set")
            return self.env_token
        try:
            value = self.token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(f"awx.token_file: cannot read {self.token_file}: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise ConfigError(f"awx.token_file: {self.token_file} is not text") from None
        _check_bearer(value, f"awx.token_file: {self.token_file}")
        return value

    def describe(self) -> dict:
        """What is configured, never the token."""
        return {"url": self.url, "job_template_id": self.job_template_id, "inventory_id": self.inventory_id,
                "token": f"file {self.token_file}" if self.token_file else f"env {self.token_env}",
                "verify": self.verify, "ca_file": str(self.ca_file) if self.ca_file else None}


def _check_bearer(value: str, where: str) -> None:
    if not value:
        raise ConfigError(f"{where} is empty")
    if not BEARER.match(value):
        raise ConfigError(f"{where}: the token holds blanks or characters an HTTP header cannot carry")


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
    backend: str = "runner"
    operation: str = "isolate"
    inventory: str | None = None  # required with backend runner (no default: it must name an inventory that exists)
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
    awx: AwxConfig | None = None
    audit_max_rows: int = 100_000
    audit_max_bytes: int = 64 << 20

    @property
    def xid_policy(self):
        """The XID policy (accelerator_health.XidPolicy): xid.ignore, and the shared critical list."""
        return accelerator_health.XidPolicy(ignore=self.xid_ignore)

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


AWX_KEYS = ("url", "job_template_id", "token_env", "token_file", "token", "ca_file", "verify", "inventory_id",
            "poll_s", "request_timeout_s")


def _positive_id(section: dict, key: str, required: bool) -> int | None:
    value = section.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"awx.{key}: expected an AWX object id (an integer >= 1), got {value!r}")
    return value


def _awx(raw, env: dict) -> AwxConfig:  # noqa: PLR0912, PLR0915 (one check per key)
    """The awx section (run.backend: awx)."""
    if not isinstance(raw, dict):
        raise ConfigError("awx: required with run.backend awx: a mapping with url, job_template_id and "
                          "token_file or token_env")
    unknown = set(raw) - set(AWX_KEYS)
    if unknown:
        raise ConfigError(f"awx: unknown keys {', '.join(sorted(map(str, unknown)))} (known: {', '.join(AWX_KEYS)})")
    if "token" in raw:
        raise ConfigError("awx.token: secrets are not read from the config file; use awx.token_file "
                          f"(a file, e.g. a mounted Secret) or awx.token_env (default {AWX_TOKEN_ENV})")
    url = raw.get("url")
    if not isinstance(url, str) or not url.strip():
        raise ConfigError("awx.url: required with run.backend awx (e.g. https://awx.example.com)")
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"awx.url: expected an http(s) URL such as https://awx.example.com, got {url!r}")
    if parts.username is not None or parts.password is not None or parts.query or parts.fragment:
        raise ConfigError("awx.url: no credentials, query or fragment in the URL (the token comes from "
                          "awx.token_file or awx.token_env)")
    try:
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError:
        raise ConfigError(f"awx.url: bad port in {url!r}") from None
    cfg = AwxConfig(url=url.strip().rstrip("/"), job_template_id=_positive_id(raw, "job_template_id", True))
    cfg.inventory_id = _positive_id(raw, "inventory_id", False)
    token_file = raw.get("token_file")
    if token_file is not None:
        if "token_env" in raw:
            raise ConfigError("awx.token_file and awx.token_env: set one of them")
        if not isinstance(token_file, str) or not token_file:
            raise ConfigError(f"awx.token_file: expected a file path, got {token_file!r}")
        cfg.token_file = Path(token_file).expanduser()
        cfg.token()  # readable and well-formed now: a start, not the first isolation, finds out
    else:
        cfg.token_env = _typed(raw, "token_env", str, "awx.", AWX_TOKEN_ENV)
        value = (env.get(cfg.token_env) or "").strip()
        if not value:
            raise ConfigError(f"awx.token_env: the AWX token is not in the environment variable {cfg.token_env} "
                              "(or set awx.token_file)")
        _check_bearer(value, f"awx.token_env: {cfg.token_env}")
        cfg.env_token = value
    cfg.verify = _typed(raw, "verify", bool, "awx.", True)
    ca_file = raw.get("ca_file")
    if ca_file is not None:
        if not isinstance(ca_file, str) or not ca_file:
            raise ConfigError(f"awx.ca_file: expected a PEM file path, got {ca_file!r}")
        if not cfg.verify:
            raise ConfigError("awx.ca_file: set with awx.verify false; a certificate that is not checked needs no CA")
        if parts.scheme != "https":
            raise ConfigError(f"awx.ca_file: set for a plain http URL ({cfg.url})")
        try:
            Path(ca_file).expanduser().read_bytes()
        except OSError as exc:
            raise ConfigError(f"awx.ca_file: cannot read {ca_file}: {exc.strerror}") from None
        cfg.ca_file = Path(ca_file).expanduser()
    cfg.poll_s = _typed(raw, "poll_s", float, "awx.", cfg.poll_s)
    cfg.request_timeout_s = _typed(raw, "request_timeout_s", float, "awx.", cfg.request_timeout_s)
    if cfg.poll_s <= 0 or cfg.request_timeout_s <= 0:
        raise ConfigError("awx.poll_s and awx.request_timeout_s must be > 0")
    return cfg


def _inventory(value, backend: str) -> str | None:
    """run.inventory: required with the runner backend, and it must exist whatever the backend."""
    from ai_l1_day2.runner import BadInput, resolve_inventory  # noqa: PLC0415 (the runner's own rule)

    if value is None:
        if backend == "runner":
            raise ConfigError("run.inventory: required with run.backend runner: the inventory file or directory "
                              "the isolation runs use (there is no default)")
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"run.inventory: expected an inventory file or directory path, got {value!r}")
    try:
        return str(resolve_inventory(value))
    except BadInput as exc:
        raise ConfigError(f"run.inventory: {exc}") from None


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
             "rate_limit", "ceiling", "isolated_taint", "run", "kubernetes", "log_level", "awx", "audit"}
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
    cfg.backend = _typed(run, "backend", str, "run.", cfg.backend)
    if cfg.backend not in BACKENDS:
        raise ConfigError(f"run.backend: expected {' or '.join(BACKENDS)}, got {cfg.backend!r}")
    cfg.operation = _typed(run, "operation", str, "run.", cfg.operation)
    cfg.inventory = _inventory(run.get("inventory"), cfg.backend)
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
    audit = raw.get("audit") or {}
    if not isinstance(audit, dict) or set(audit) - {"max_rows", "max_bytes"}:
        raise ConfigError(f"audit: expected a mapping with max_rows and/or max_bytes, got {audit!r}")
    cfg.audit_max_rows = _typed(audit, "max_rows", int, "audit.", cfg.audit_max_rows)
    cfg.audit_max_bytes = _typed(audit, "max_bytes", int, "audit.", cfg.audit_max_bytes)
    if cfg.audit_max_rows < 1000 or cfg.audit_max_bytes < 1 << 20:
        raise ConfigError("audit.max_rows must be >= 1000 and audit.max_bytes >= 1048576 (1 MiB)")
    if cfg.backend == "awx":
        cfg.awx = _awx(raw.get("awx"), env)
    elif raw.get("awx") is not None:
        raise ConfigError("awx: set, but run.backend is runner; set run.backend: awx to launch isolations "
                          "through AWX, or remove the awx section")
    return cfg
