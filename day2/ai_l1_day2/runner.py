"""Run one day-2 operation (a playbook under playbooks/day2/) as an ansible-runner job.

Every run gets its own private data directory `<runs_dir>/<ident>` and an ident nobody else
can have (UTC time, operation, random suffix; the directory is created exclusively, so two
concurrent runs never share one). ansible-runner keeps the run's artifacts (stdout, events,
status, rc) in `<runs_dir>/<ident>/artifacts/<ident>/`; nothing is deleted afterwards.

The playbooks need nothing from this process: no environment variables, no controller files
outside the project. AWX runs the same playbooks as job templates.

Extra variables are data, never templates: they come from alerts (labels, annotations) and
from operators' free text, and ansible-core renders a trusted string that holds `{{ }}`.
`write_extravars` writes them to the run's `env/extravars` (which ansible-runner passes as
`-e @file`) with every string tagged `!unsafe`, so a value reaches the playbook verbatim.

Runs are replayable: the private data directory is laid out as ansible-runner expects
(`env/`, `project/`), and the run itself reads its inventory, limit and check mode from there, so
`ansible-runner run <private_data_dir> -p <playbook>` repeats it with the same values:

    env/extravars   the extra variables (as above)
    env/cmdline     -i <inventory, absolute> [--limit <hosts>] [--check]
    env/envvars     ANSIBLE_CONFIG, the PATH of ansible-playbook, no colour
    project         a symbolic link to the project directory (the playbooks, roles, collections)
    replay.json     operation, playbook (relative to project/), inventory, limit, check and the
                    command that replays the run

The inventory is named in env/cmdline rather than linked as `inventory/`: ansible-runner passes
`<private_data_dir>/inventory` to ansible-playbook, and an inventory file linked there would lose
the group_vars/ and host_vars/ beside it.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

# operation name (CLI subcommand) -> playbook under playbooks/day2/
OPERATIONS: dict[str, str] = {
    op: f"{op.replace('-', '_')}.yml"
    for op in ("cordon", "uncordon", "drain", "isolate", "firmware-update", "mig-reconfigure",
               "upgrade-driver", "add-node", "remove-node", "restore-etcd", "renew-certificates",
               "report")
}
STATUSES = ("successful", "failed", "timeout", "canceled")
RUNS_ENV = "AI_L1_DAY2_RUNS"
PROJECT_ENV = "AI_L1_PROJECT_DIR"
INVENTORY_ENV = "AI_L1_INVENTORY"
REPLAY_FILE = "replay.json"


class BadInput(ValueError):
    """The request is wrong before anything runs (unknown operation, missing inventory, ...)."""


def project_dir() -> Path:
    """The Ansible project (the directory holding playbooks/day2/): $AI_L1_PROJECT_DIR, else the
    checkout this package is installed from (editable install), else the current directory."""
    if os.environ.get(PROJECT_ENV):
        return Path(os.environ[PROJECT_ENV]).resolve()
    here = Path(__file__).resolve()
    for parent in here.parents:
        if (parent / "playbooks" / "day2").is_dir():
            return parent
    return Path.cwd()


def default_runs_dir(project: Path | None = None) -> Path:
    if os.environ.get(RUNS_ENV):
        return Path(os.environ[RUNS_ENV])
    return (project or project_dir()) / ".cache" / "day2-runs"


def playbook_path(operation: str, project: Path | None = None) -> Path:
    if operation not in OPERATIONS:
        raise BadInput(f"unknown operation {operation!r}; one of: {', '.join(OPERATIONS)}")
    return (project or project_dir()) / "playbooks" / "day2" / OPERATIONS[operation]


KEEP_ENV = "AI_L1_DAY2_KEEP_RUNS"
KEEP_RUNS = 200


def keep_runs() -> int:
    """How many finished runs a runs directory keeps ($AI_L1_DAY2_KEEP_RUNS, default 200)."""
    text = os.environ.get(KEEP_ENV, "").strip()
    if not text:
        return KEEP_RUNS
    if not text.isascii() or not text.isdigit() or int(text) < 1:
        raise BadInput(f"{KEEP_ENV} must be a whole number >= 1, got {text!r}")
    return int(text)


def prune_runs(runs_dir: Path, keep: int) -> list[str]:
    """Remove the oldest finished runs beyond the newest `keep` (their artifacts hold commands,
    events and output of past runs: they must not pile up forever). A run without a status may
    still be going and stays. Idents start with their UTC start time, so names sort by age."""
    runs = sorted(p for p in runs_dir.iterdir() if p.is_dir() and (p / "artifacts").is_dir())
    removed = []
    for path in runs[:-keep] if len(runs) > keep else []:
        if not any((path / "artifacts").glob("*/status")):
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path.name)
    return removed


def new_run_dir(runs_dir: Path, operation: str) -> tuple[str, Path]:
    """A fresh ident and its private data directory, created exclusively (mkdir fails if taken)."""
    runs_dir.mkdir(parents=True, exist_ok=True)
    for _ in range(100):
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
        ident = f"{stamp}-{operation}-{secrets.token_hex(4)}"
        path = runs_dir / ident
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return ident, path
    raise RuntimeError(f"could not create a unique run directory under {runs_dir}")


VAR_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# The only variables of this process's environment a run gets (ansible-runner would pass, and
# keep in artifacts/<ident>/command, all of them: the receiver's token and HMAC key, an
# operator's shell secrets). Ansible's own settings, the locale, SSH agent and proxies pass, and
# the API server's address a Pod is given (the kubernetes client's in-cluster configuration).
RUN_ENV_KEEP = re.compile(r"^(PATH|HOME|USER|LOGNAME|LANG|LANGUAGE|LC_[A-Z]+|TERM|TZ|TMPDIR|SSH_AUTH_SOCK|"
                          r"VIRTUAL_ENV|PYTHONPATH|KUBECONFIG|KUBERNETES_SERVICE_(HOST|PORT)|"
                          r"ANSIBLE_[A-Z0-9_]+|AI_L1_CACHE|AI_L1_LAB_[A-Z_]+|"
                          r"(?i:https?_proxy|no_proxy))$")


def run_environment(prepared: dict[str, str], environ: dict[str, str]) -> dict[str, str]:
    """What a run's ansible-playbook sees: ansible-runner's prepared environment (`environ`, the
    process's, plus its own settings and our envvars) less what came from `environ` unasked."""
    return {k: v for k, v in prepared.items() if RUN_ENV_KEEP.match(k) or environ.get(k) != v}


class _DataDumper(yaml.SafeDumper):
    """YAML whose every string value is `!unsafe`: Ansible keeps it as data, never a template."""


def _unsafe_str(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    # ansible-core 2.19 loads `!unsafe ""` as None; an empty string holds no template anyway.
    if not value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"')
    return dumper.represent_scalar("!unsafe", value, style='"')


def _plain_keys(dumper: yaml.SafeDumper, value: dict) -> yaml.Node:
    pairs = [(dumper.represent_scalar("tag:yaml.org,2002:str", str(k)), dumper.represent_data(v))
             for k, v in value.items()]
    return yaml.MappingNode("tag:yaml.org,2002:map", pairs)


_DataDumper.add_representer(str, _unsafe_str)
_DataDumper.add_representer(dict, _plain_keys)


def check_var_names(extravars: dict) -> None:
    bad = [k for k in extravars if not isinstance(k, str) or not VAR_NAME.match(k)]
    if bad:
        raise BadInput(f"extra variable names must be identifiers: {', '.join(map(repr, bad))}")


def write_extravars(private_data_dir: Path, extravars: dict) -> Path:
    """Write the run's extra variables to <private_data_dir>/env/extravars (mode 0600), every
    string `!unsafe`. Variable names must be identifiers (BadInput otherwise)."""
    check_var_names(extravars)
    env = private_data_dir / "env"
    env.mkdir(mode=0o700, exist_ok=True)
    path = env / "extravars"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        yaml.dump(extravars, handle, Dumper=_DataDumper, allow_unicode=True, default_flow_style=False,
                  sort_keys=True)
    return path


@dataclass
class RunResult:
    ident: str
    operation: str
    status: str
    rc: int
    private_data_dir: Path
    artifacts_dir: Path
    stats: dict[str, dict[str, int]]
    started: float
    finished: float
    limit: list[str] | None = None
    failures: list[dict[str, Any]] = field(default_factory=list)
    check: bool = False
    # What the playbook returned with set_stats (report.yml: {"compliance": ...}).
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "successful"

    @property
    def duration_s(self) -> float:
        return round(self.finished - self.started, 3)

    def summary(self) -> dict[str, Any]:
        """A JSON-able record of the run (what `ai-l1-day2 --json` prints)."""
        return {
            "ident": self.ident,
            "operation": self.operation,
            "status": self.status,
            "rc": self.rc,
            "limit": self.limit,
            "check": self.check,
            "started": datetime.fromtimestamp(self.started, timezone.utc).isoformat(timespec="seconds"),
            "finished": datetime.fromtimestamp(self.finished, timezone.utc).isoformat(timespec="seconds"),
            "duration_s": self.duration_s,
            "hosts": self.stats,
            "failures": self.failures,
            "data": self.data,
            "private_data_dir": str(self.private_data_dir),
            "artifacts_dir": str(self.artifacts_dir),
        }


STAT_KEYS = {"ok": "ok", "changed": "changed", "failures": "failed", "dark": "unreachable",
             "skipped": "skipped", "rescued": "rescued", "ignored": "ignored"}


def per_host_stats(stats: dict | None) -> dict[str, dict[str, int]]:
    """ansible-runner's {'ok': {host: n}, 'failures': {...}, ...} -> {host: {'ok': n, 'failed': n, ...}}."""
    hosts: dict[str, dict[str, int]] = {}
    for key, name in STAT_KEYS.items():
        for host, count in ((stats or {}).get(key) or {}).items():
            hosts.setdefault(host, dict.fromkeys(STAT_KEYS.values(), 0))[name] = int(count)
    return dict(sorted(hosts.items()))


def failure_of(event: dict) -> dict[str, Any] | None:
    """The failure an ansible-runner event reports (an unignored failed task or an unreachable host)."""
    kind = event.get("event")
    data = event.get("event_data") or {}
    if kind == "runner_on_failed" and data.get("ignore_errors"):
        return None
    if kind not in ("runner_on_failed", "runner_on_unreachable"):
        return None
    res = data.get("res") or {}
    msg = res.get("msg") or res.get("stderr") or res.get("reason") or ""
    return {"host": data.get("host", ""), "task": data.get("task", ""),
            "unreachable": kind == "runner_on_unreachable", "msg": str(msg)[:2000]}


class _Collected:
    """What a run's events report: its failures, and the data the playbook returned with set_stats
    (the playbook_on_stats event's artifact_data)."""

    def __init__(self) -> None:
        self.failures: list[dict[str, Any]] = []
        self.data: dict[str, Any] = {}
        self._lock = threading.Lock()

    def take(self, event: dict) -> None:
        failure = failure_of(event)
        with self._lock:
            if failure:
                self.failures.append(failure)
            if event.get("event") == "playbook_on_stats":
                self.data.update((event.get("event_data") or {}).get("artifact_data") or {})


def _as_list(limit: str | Iterable[str] | None) -> list[str] | None:
    if limit is None:
        return None
    items = [limit] if isinstance(limit, str) else list(limit)
    items = [str(i).strip() for i in items if str(i).strip()]
    return items or None


def resolve_inventory(inventory: str | Path, project: Path | None = None) -> Path:
    """The inventory file or directory, absolute: as given when absolute, else relative to the
    current directory, else to the project. BadInput when it does not exist."""
    path = Path(inventory).expanduser()
    if not path.is_absolute():
        path = (Path.cwd() / path) if (Path.cwd() / path).exists() else (project or project_dir()) / path
    if not path.exists():
        raise BadInput(f"inventory {path} does not exist")
    return path.resolve()


def inventory_manager(inventory: str | Path):
    """Ansible's own view of an inventory (InventoryManager): what a run on it will see."""
    from ansible.inventory.manager import InventoryManager  # noqa: PLC0415 - only when hosts are resolved
    from ansible.parsing.dataloader import DataLoader  # noqa: PLC0415

    return InventoryManager(loader=DataLoader(), sources=[str(resolve_inventory(inventory))])


def _checked_paths(operation: str, inventory: Path, project: Path) -> tuple[Path, Path]:
    """The operation's playbook and the inventory (relative to the cwd, else the project)."""
    playbook = playbook_path(operation, project)
    if not playbook.is_file():
        raise BadInput(f"operation {operation!r}: playbook {playbook} does not exist")
    return playbook, resolve_inventory(inventory, project)


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)


def write_replay(private_data_dir: Path, *, operation: str, project: Path, playbook: Path, inventory: Path,
                 hosts: list[str] | None, check: bool, envvars: dict[str, str]) -> dict[str, Any]:
    """Lay the run out as ansible-runner reads a private data directory (env/cmdline,
    env/envvars, project/) and record how to replay it (replay.json); returns that record.
    The run itself reads these files, so a replay gets the values the run had."""
    env = private_data_dir / "env"
    env.mkdir(mode=0o700, exist_ok=True)
    cmdline = ["-i", str(inventory)]
    if hosts:
        cmdline += ["--limit", ",".join(hosts)]
    if check:
        cmdline.append("--check")
    _write_private(env / "cmdline", shlex.join(cmdline) + "\n")
    _write_private(env / "envvars", yaml.safe_dump(dict(sorted(envvars.items())), default_flow_style=False))
    (private_data_dir / "project").symlink_to(project, target_is_directory=True)
    relative = playbook.relative_to(project).as_posix()
    record = {
        "operation": operation,
        "project": str(project),
        "playbook": relative,
        "inventory": str(inventory),
        "limit": hosts,
        "check": check,
        "replay": shlex.join(["ansible-runner", "run", str(private_data_dir), "-p", relative]),
    }
    _write_private(private_data_dir / REPLAY_FILE, json.dumps(record, indent=2, sort_keys=True) + "\n")
    return record


GUARD = Path(__file__).with_name("guard.py")
# How often ansible-runner asks whether to stop (its pexpect timeout; 5 s by default).
STOP_POLL_S = 1


def _proc_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name: state, ppid, ... (None: no such process)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def guard_of(artifact_dir: str) -> int | None:
    """This process's child running guard.py for the run whose artifacts are `artifact_dir`. An
    unreaped child of ours: its pid cannot name another process until ansible-runner reaps it."""
    me, guard, want = os.getpid(), str(GUARD).encode(), str(artifact_dir).encode()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        fields = _proc_fields(int(entry.name))
        if not fields or int(fields[1]) != me:
            continue
        try:
            args = Path(entry.path, "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if len(args) > 2 and args[1] == guard and args[2] == want:  # noqa: PLR2004 (python guard.py ARTIFACTS)
            return int(entry.name)
    return None


def stop_run(artifact_dir: str) -> None:
    """End a run: SIGTERM to its guard, which stops ansible-playbook and every process below it
    (SIGKILL after guard.STOP_GRACE_S) and exits only when none is left; return once it has exited.
    ansible-runner's own cancel and timeout send SIGKILL to the guard's process group, which
    misses ansible's workers (each calls setsid) and their commands: they would go on."""
    pid = guard_of(artifact_dir)
    if pid is None:
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except OSError:
        return
    while (fields := _proc_fields(pid)) is not None and fields[0] not in ("Z", "X"):
        time.sleep(0.05)


class _Stopper:
    """ansible-runner's cancel_callback. Cancel and timeout are ours: the run is stopped (every
    process gone, stop_run) before ansible-runner is told, so the status it then writes is true."""

    def __init__(self, cancel_callback: Callable[[], bool] | None, timeout: int | None):
        if cancel_callback is None:
            # as ansible-runner does without one: SIGTERM and SIGINT cancel the run (main thread only)
            from ansible_runner.utils import signal_handler  # noqa: PLC0415

            cancel_callback = signal_handler()
        self.cancel_callback = cancel_callback
        self.deadline = time.monotonic() + timeout if timeout else None
        self.runner = None  # set once init_runner has made it

    def __call__(self) -> bool:
        artifact_dir = self.runner.config.artifact_dir
        try:
            canceled = bool(self.cancel_callback()) if self.cancel_callback is not None else False
        except BaseException:
            stop_run(artifact_dir)
            raise
        if canceled:
            stop_run(artifact_dir)
            return True
        if self.deadline is not None and time.monotonic() > self.deadline and not self.runner.timed_out:
            stop_run(artifact_dir)
            self.runner.timed_out = True  # ansible-runner records `timeout` (rc 254)
        return False


def run_operation(
    operation: str,
    *,
    inventory: str | Path,
    limit: list[str] | None,
    extravars: dict,
    runs_dir: Path | None = None,
    quiet: bool = False,
    event_handler: Callable[[dict], Any] | None = None,
    timeout: int | None = None,
    cancel_callback: Callable[[], bool] | None = None,
    project: Path | None = None,
    verbosity: int = 0,
    check: bool = False,
    lease: Path | None = None,
) -> RunResult:
    """Run `operation` (a key of OPERATIONS) and wait for it.

    inventory: an inventory file or directory. limit: host names or patterns (None: the
    playbook's own hosts; the single-node playbooks refuse to run without one).
    extravars: passed as extra variables, as data (see write_extravars). runs_dir: where the
    run's private data directory is
    created (default $AI_L1_DAY2_RUNS, else <project>/.cache/day2-runs). quiet: no
    ansible-playbook output on stdout. event_handler: called with every ansible-runner event
    (its return value is ignored; every event is kept in the artifacts). timeout: seconds
    before the run is stopped (status 'timeout'). cancel_callback: returns True to cancel.
    check: run the playbook in check mode (ansible-playbook --check). lease: a file the run holds
    a shared flock on while any of its processes lives (guard.py; the remediation receiver's).

    Canceled and timed out mean stopped: ansible-playbook and every process it started have
    exited (stop_run) before the status is written and this returns.

    Raises BadInput before anything runs when the operation, inventory or limit is wrong.
    """
    import ansible_runner  # noqa: PLC0415 - imported here: argument parsing and --help stay fast

    project = Path(project).resolve() if project else project_dir()
    playbook, inventory = _checked_paths(operation, Path(inventory), project)
    if not isinstance(extravars, dict):
        raise BadInput(f"extravars must be a dict, got {type(extravars).__name__}")
    hosts = _as_list(limit)
    if timeout is not None and timeout <= 0:
        raise BadInput(f"timeout must be positive, got {timeout}")

    runs_dir = Path(runs_dir) if runs_dir else default_runs_dir(project)
    check_var_names(extravars)  # before a run directory exists
    keep = keep_runs()
    try:
        ident, private = new_run_dir(runs_dir.resolve(), operation)
    except OSError as exc:
        raise BadInput(f"runs directory {runs_dir} is not usable: {exc.strerror or exc}") from None
    write_extravars(private, extravars)
    envvars = {"ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1"}
    # ansible-playbook from the same environment as this interpreter (a venv not activated).
    bindir = Path(sys.executable).parent
    if (bindir / "ansible-playbook").exists():
        envvars["PATH"] = f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}"
    cfg = project / "ansible.cfg"
    if cfg.is_file():
        envvars["ANSIBLE_CONFIG"] = str(cfg)
    write_replay(private, operation=operation, project=project, playbook=playbook, inventory=inventory,
                 hosts=hosts, check=bool(check), envvars=envvars)
    prune_runs(runs_dir.resolve(), keep)
    collected = _Collected()

    def on_event(event: dict) -> bool:
        collected.take(event)
        if event_handler is not None:
            try:
                event_handler(event)
            except Exception:  # noqa: BLE001 - a display problem must never stop the run
                pass
        return True

    started = time.time()
    stop_requested = _Stopper(cancel_callback, timeout)
    runner = ansible_runner.interface.init_runner(
        private_data_dir=str(private),
        ident=ident,
        project_dir=str(project),
        playbook=str(playbook),
        # inventory, limit, check mode and environment: from env/cmdline and env/envvars (write_replay)
        quiet=quiet,
        event_handler=on_event,
        cancel_callback=stop_requested,
        timeout=None,  # enforced by stop_requested: ansible-runner's own would SIGKILL the guard
        verbosity=verbosity or None,
    )
    stop_requested.runner = runner
    runner.config.env = run_environment(runner.config.env, dict(os.environ))
    runner.config.pexpect_timeout = STOP_POLL_S
    # ansible-playbook must not outlive this process, nor a stopped run leave any process behind
    # (guard.py says how and why).
    holder = ["--lease", str(lease)] if lease is not None else []
    runner.config.command = [sys.executable, str(GUARD), str(runner.config.artifact_dir), *holder, "--",
                             *runner.config.command]
    runner.run()
    finished = time.time()
    status = runner.status if runner.status in STATUSES else "failed"
    rc = runner.rc if isinstance(runner.rc, int) else -1
    return RunResult(
        ident=ident,
        operation=operation,
        status=status,
        rc=rc,
        private_data_dir=private,
        artifacts_dir=Path(runner.config.artifact_dir),
        stats=per_host_stats(runner.stats),
        started=started,
        finished=finished,
        limit=hosts,
        failures=collected.failures,
        check=bool(check),
        data=collected.data,
    )
