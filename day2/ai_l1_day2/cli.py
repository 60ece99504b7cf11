"""ai-l1-day2: one subcommand per day-2 operation, each an ansible-runner job.

    ai-l1-day2 drain --node gpu1 -i inventories/site
    AI_L1_INVENTORY=inventories/site ai-l1-day2 isolate --node gpu2 --fault xid-79 --details "GPU 0 lost" --json
    ai-l1-day2 firmware-update --node k8s_worker --max-unavailable 1 -i inventories/site --check

There is no default inventory: -i or $AI_L1_INVENTORY names it, else nothing runs (exit 3).
Progress goes to stderr as task/host lines (stdout with --json holds only the summary).
Exit codes: see EXIT_CODES (and `ai-l1-day2 --help`).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import signal
import sys
import threading
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, TextIO

import yaml

from ai_l1_day2 import __version__
from ai_l1_day2.runner import (
    INVENTORY_ENV,
    OPERATIONS,
    BadInput,
    RunResult,
    default_runs_dir,
    inventory_manager,
    run_operation,
)

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_FAILED = 2
EXIT_BAD_INPUT = 3
EXIT_TIMEOUT = 4
EXIT_CANCELED = 5
EXIT_BUSY = 6
EXIT_CODES = {
    EXIT_OK: "the run succeeded",
    EXIT_ERROR: "the tool itself failed (a bug or an unusable ansible-runner)",
    EXIT_FAILED: "the run failed (a task failed or a host was unreachable; see the summary)",
    EXIT_BAD_INPUT: "bad input, nothing was run (unknown host, no or missing inventory, bad -e, missing option)",
    EXIT_TIMEOUT: "the run hit --timeout and was stopped",
    EXIT_CANCELED: "the run was canceled (Ctrl-C / SIGTERM)",
    EXIT_BUSY: "nothing was run: another ai-l1-day2 run on this controller is acting on one of the nodes",
}
STATUS_EXIT = {"successful": EXIT_OK, "failed": EXIT_FAILED, "timeout": EXIT_TIMEOUT,
               "canceled": EXIT_CANCELED}

# Operations that act on named nodes only: refused without --node.
NEEDS_NODE = {"cordon", "uncordon", "drain", "isolate", "mig-reconfigure", "add-node", "remove-node"}
# Operations that take the nodes they name out of service: a pattern such as `all` must not take
# the whole cluster (bounded by --max-nodes), nor a control plane unless asked.
TAKES_CAPACITY = {"cordon", "drain", "isolate", "mig-reconfigure", "remove-node"}
CONTROL_PLANE_GROUP = "k8s_control_plane"
# Operations on every control plane at once (no --node): they lock all of them.
WHOLE_CONTROL_PLANE = {"restore-etcd", "renew-certificates"}
# One part of a --node value (the value split on ',' and ':' as ansible-playbook splits a limit): a
# host or group name, or a glob of '*' over names. Anything else (@file, &group, !group, ~regex,
# [range], ?) is pattern syntax this check does not resolve the way ansible-playbook would, so it
# is refused: `gpu1,@hosts` used to be checked as gpu1 while the run read its hosts from the file.
NODE_PART = re.compile(r"[A-Za-z0-9_.*-]+")
# A resolved host name the run's limit may carry verbatim.
HOST_NAME = re.compile(r"[A-Za-z0-9_.-]+")

HELP = {
    "cordon": "mark nodes unschedulable (with a reason annotation)",
    "uncordon": "make nodes schedulable again, remove the day-2 annotations",
    "drain": "cordon and drain nodes (PodDisruptionBudgets honoured, bounded by a timeout)",
    "isolate": "fault isolation: cordon, drain, taint and label with the fault, alert",
    "firmware-update": "rolling firmware update, at most --max-unavailable nodes at a time, health-gated",
    "mig-reconfigure": "apply a MIG layout to NVIDIA nodes (drained around the change)",
    "upgrade-driver": "move GPU/NPU nodes to the pinned driver, at most --max-unavailable at a time, drained first",
    "add-node": "validate and bring new nodes into the cluster (the site layers limited to them)",
    "remove-node": "drain, kubeadm reset and delete nodes (refuses breaking etcd quorum)",
    "restore-etcd": "restore every etcd member from an off-node backup (refused while a quorum is healthy)",
    "renew-certificates": "renew kubeadm's certificates, one control plane at a time (the API stays up)",
    "report": "fleet compliance: each node's driver, CUDA, CANN, firmware, kernel, containerd and kubelet "
              "against the inventory's baseline (reads only)",
}
# Operations that change nothing: no node lock (they never stand in another run's way).
READ_ONLY = {"report"}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse exits 2 by default; 2 means "run failed" here
        self.print_usage(sys.stderr)
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message}\n")


def parse_extra(values: list[str] | None) -> dict[str, Any]:
    """-e key=value (YAML value), -e @file.yml/json, -e '{"json": "object"}'; later wins."""
    out: dict[str, Any] = {}
    for item in values or []:
        if item.startswith("@"):
            path = Path(item[1:])
            try:
                data = yaml.safe_load(path.read_text())
            except (OSError, yaml.YAMLError) as exc:
                raise BadInput(f"-e {item}: {exc}") from exc
            if not isinstance(data, dict):
                raise BadInput(f"-e {item}: the file must hold a mapping")
            out.update(data)
        elif item.lstrip().startswith("{"):
            try:
                data = yaml.safe_load(item)
            except yaml.YAMLError as exc:
                raise BadInput(f"-e {item!r}: {exc}") from exc
            if not isinstance(data, dict):
                raise BadInput(f"-e {item!r}: not a mapping")
            out.update(data)
        elif "=" in item:
            key, _, raw = item.partition("=")
            if not key.isidentifier():
                raise BadInput(f"-e {item!r}: {key!r} is not a variable name")
            try:
                out[key] = yaml.safe_load(raw) if raw else ""
            except yaml.YAMLError:
                out[key] = raw
        else:
            raise BadInput(f"-e {item!r}: expected key=value, @file or a JSON object")
    return out


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from exc
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def version_text() -> str:
    """ai-l1-day2's version and the ansible-core and ansible-runner it runs with."""
    from importlib import metadata  # noqa: PLC0415 - only for --version

    parts = []
    for dist in ("ansible-core", "ansible-runner"):
        try:
            parts.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{dist} not installed")
    return f"ai-l1-day2 {__version__} ({', '.join(parts)})"


class _Version(argparse.Action):
    """--version: computed only when asked (the package metadata lookups)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):  # noqa: A002
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        sys.stdout.write(version_text() + "\n")
        parser.exit(EXIT_OK)


def build_parser() -> argparse.ArgumentParser:
    epilog = "exit codes:\n" + "\n".join(f"  {code}  {text}" for code, text in EXIT_CODES.items())
    parser = _Parser(prog="ai-l1-day2", description="Day-2 operations of the ai_platform L1 layer on ansible-runner.",
                     epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action=_Version,
                        help="print the version (and ansible-core's and ansible-runner's) and exit")
    sub = parser.add_subparsers(dest="operation", metavar="OPERATION", parser_class=_Parser)
    sub.required = True
    for op in OPERATIONS:
        p = sub.add_parser(op, help=HELP[op], description=HELP[op], epilog=epilog,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
        if op in WHOLE_CONTROL_PLANE:
            p.set_defaults(nodes=None)
        else:
            p.add_argument("-n", "--node", action="append", dest="nodes", metavar="HOST",
                           required=op in NEEDS_NODE,
                           help="inventory host or group, or a '*' glob; several separated by ',' (repeatable; "
                                "the hosts they select become the run's limit; @file, &, !, ~ and [ ] are refused)")
        p.add_argument("-i", "--inventory", metavar="INVENTORY",
                       help=f"inventory file or directory (required: this or ${INVENTORY_ENV}; there is no default)")
        p.add_argument("-e", "--extra-vars", action="append", dest="extra", metavar="VARS",
                       help="extra variables: key=value, @file.yml or a JSON object (repeatable)")
        p.add_argument("--check", action="store_true",
                       help="run the playbook in check mode (ansible-playbook --check): report, change nothing")
        p.add_argument("--json", action="store_true", help="print the run summary as JSON on stdout")
        p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
        p.add_argument("-v", "--verbose", action="count", default=0,
                       help="show ansible-playbook's own output (-vv... passes verbosity on)")
        p.add_argument("--timeout", type=_positive, metavar="SECONDS",
                       help="stop the whole run after this many seconds (exit 4)")
        p.add_argument("--runs-dir", type=Path, metavar="DIR",
                       help="where run directories are kept (default $AI_L1_DAY2_RUNS or .cache/day2-runs)")
        if op in ("cordon", "drain", "firmware-update", "mig-reconfigure", "upgrade-driver", "remove-node"):
            p.add_argument("--reason", help="why (recorded on the Node as ai-platform.io/cordon-reason)")
        if op in ("drain", "isolate", "firmware-update", "mig-reconfigure", "upgrade-driver", "remove-node"):
            p.add_argument("--drain-timeout", type=_positive, metavar="SECONDS",
                           help="seconds a node may take to drain (default 1800)")
        if op in TAKES_CAPACITY:
            p.add_argument("--max-nodes", type=_positive, default=1, metavar="N",
                           help="refuse when --node selects more than N hosts (default %(default)s)")
            p.add_argument("--allow-control-plane", action="store_true",
                           help=f"allow hosts of group {CONTROL_PLANE_GROUP} among the nodes")
        if op == "isolate":
            p.add_argument("--fault", required=True,
                           help="fault kind, a label value (e.g. xid-79, ecc-uncorrectable, gpu-unavailable)")
            p.add_argument("--details", default="", help="free text recorded in the fault annotation and the alert")
            p.add_argument("--alertmanager-url", metavar="URL",
                           help="Alertmanager base URL for the alert (e.g. http://alertmanager:9093)")
        if op in ("firmware-update", "upgrade-driver"):
            p.add_argument("--max-unavailable", type=_positive, metavar="N",
                           help="nodes out of service at once (default 1)")
        if op == "mig-reconfigure":
            p.add_argument("--config", required=True, dest="mig_config", metavar="LAYOUT",
                           help="MIG layout, a key of nvidia_mig_configs['mig-configs'] (e.g. all-balanced)")
        if op == "remove-node":
            p.add_argument("--keep-node-object", action="store_true",
                           help="reset the host but leave the Node object in the API")
        if op == "restore-etcd":
            p.add_argument("--snapshot", metavar="NAME",
                           help="the copy to restore, as `ai-l1-etcd-backup list` names it (default: the newest)")
            p.add_argument("--force", action="store_true",
                           help="restore although etcd has a healthy quorum (every write since the snapshot is lost)")
    return parser


def extravars_from(args: argparse.Namespace) -> dict[str, Any]:
    extra = parse_extra(args.extra)
    mapping = {"reason": "day2_reason", "drain_timeout": "day2_drain_timeout", "fault": "day2_fault",
               "details": "day2_fault_details", "alertmanager_url": "day2_alertmanager_url",
               "max_unavailable": "day2_max_unavailable", "mig_config": "day2_mig_config",
               "snapshot": "day2_snapshot"}
    for attr, var in mapping.items():
        value = getattr(args, attr, None)
        if value not in (None, ""):
            extra[var] = value
    if args.operation == "add-node":
        # Not a limit: add_node.yml runs the site layers over the whole cluster (see its header).
        extra["day2_new_nodes"] = list(args.nodes or [])
    if getattr(args, "keep_node_object", False):
        extra["day2_delete_node"] = False
    if getattr(args, "force", False):
        extra["day2_force"] = True
    return extra


def check_hosts(inventory: str | Path, patterns: list[str], *, max_nodes: int | None = None,
                allow_control_plane: bool = True) -> list[str]:
    """The hosts the patterns select in the inventory, resolved by Ansible's InventoryManager; the
    caller passes this list, not the patterns, as the run's limit, so what is checked is what runs.
    BadInput when a part of a pattern is not a plain name or '*' glob (NODE_PART), selects no host,
    when they select more than max_nodes hosts, or a control plane that is not allowed."""
    from ansible.inventory.manager import split_host_pattern  # noqa: PLC0415 - only when a node is named

    manager = inventory_manager(inventory)
    hosts: list[str] = []
    control_planes: list[str] = []
    for pattern in patterns:
        parts = split_host_pattern(pattern)
        if not parts:
            raise BadInput(f"--node {pattern!r}: names no host")
        for part in parts:
            if not NODE_PART.fullmatch(part):
                raise BadInput(f"--node {pattern!r}: {part!r} is not a host or group name (letters, digits, "
                               "'_', '.', '-', '*' globs); @file, &, !, ~regex and [ranges] are refused")
            found = manager.get_hosts(pattern=part)
            if not found:
                raise BadInput(f"--node {pattern}: no host of {inventory} matches {part}")
            for host in found:
                if host.name not in hosts:
                    hosts.append(host.name)
                    if CONTROL_PLANE_GROUP in {g.name for g in host.get_groups()}:
                        control_planes.append(host.name)
    # The run's limit is these names, joined by ','; Ansible resolves a plain name that is an
    # inventory host to that host alone. A name with other characters (a glob can select one)
    # could be read as pattern syntax: refused.
    odd = [name for name in hosts if not HOST_NAME.fullmatch(name)]
    if odd:
        raise BadInput(f"--node {' '.join(patterns)} selects hosts whose names cannot be a limit: {', '.join(odd)}")
    if max_nodes is not None and len(hosts) > max_nodes:
        raise BadInput(f"--node {' '.join(patterns)} selects {len(hosts)} hosts ({', '.join(hosts[:10])}"
                       f"{', ...' if len(hosts) > 10 else ''}), more than --max-nodes {max_nodes}")
    if control_planes and not allow_control_plane:
        raise BadInput(f"--node selects control-plane hosts {', '.join(control_planes)}; "
                       "pass --allow-control-plane to act on them")
    return hosts


class Progress:
    """An ansible-runner event handler printing one line per task start and per host result."""

    MARK = {"runner_on_ok": "ok", "runner_on_failed": "FAILED", "runner_on_unreachable": "UNREACHABLE",
            "runner_on_skipped": "skipped", "runner_item_on_failed": "item FAILED"}

    def __init__(self, stream: TextIO):
        self.stream = stream
        self.t0 = time.monotonic()
        self.lock = threading.Lock()

    def _line(self, text: str) -> None:
        with self.lock:
            self.stream.write(f"[{time.monotonic() - self.t0:7.1f}s] {text}\n")
            self.stream.flush()

    def __call__(self, event: dict) -> bool:
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        if kind == "playbook_on_play_start":
            self._line(f"PLAY  {data.get('play', '')}")
        elif kind == "playbook_on_task_start":
            self._line(f"TASK  {data.get('task', '')}")
        elif kind in self.MARK:
            res = data.get("res") or {}
            mark = self.MARK[kind]
            if kind == "runner_on_ok" and res.get("changed"):
                mark = "changed"
            if kind == "runner_on_failed" and data.get("ignore_errors"):
                mark = "failed (ignored)"
            line = f"  {data.get('host', '?'):<12} {mark}"
            if kind in ("runner_on_failed", "runner_on_unreachable", "runner_item_on_failed") and res.get("msg"):
                line += f": {str(res['msg']).strip()[:500]}"
            self._line(line)
        elif kind == "playbook_on_stats":
            self._line("RECAP")
        return True


def print_summary(result: RunResult, stream: TextIO) -> None:
    mode = " (check mode)" if result.check else ""
    stream.write(f"\n{result.operation}{mode} {result.status} (rc {result.rc}) in {result.duration_s:.1f}s;"
                 f" run {result.ident}\n")
    for host, counts in result.stats.items():
        stream.write(f"  {host:<12} " + " ".join(f"{k}={v}" for k, v in counts.items()) + "\n")
    for failure in result.failures:
        stream.write(f"  FAILED {failure['host']}: {failure['task']}: {failure['msg'][:300]}\n")
    compliance = result.data.get("compliance")
    if isinstance(compliance, dict) and isinstance(compliance.get("summary"), dict):
        summary = compliance["summary"]
        stream.write(f"  {summary.get('compliant')} of {summary.get('nodes')} nodes match the baseline\n")
        for drift in compliance.get("drift") or []:
            stream.write(f"  DRIFT {drift['node']} {drift['component']}: {drift['observed'] or 'not found'},"
                         f" baseline {' or '.join(drift['expected'])}\n")
    stream.write(f"  artifacts: {result.artifacts_dir}\n")
    if result.operation in OPERATIONS:
        stream.write(f"  replay: ansible-runner run {result.private_data_dir}"
                     f" -p playbooks/day2/{OPERATIONS[result.operation]}\n")


def inventory_of(args: argparse.Namespace, environ: dict[str, str] | None = None) -> str:
    """-i, else $AI_L1_INVENTORY; BadInput when neither names one (no default: a day-2 run acts on
    a real cluster, and the lab's inventory is not a safe guess)."""
    environ = os.environ if environ is None else environ
    inventory = args.inventory or environ.get(INVENTORY_ENV, "").strip()
    if not inventory:
        raise BadInput(f"no inventory: pass -i INVENTORY (a file or directory, e.g. inventories/<site>) "
                       f"or set {INVENTORY_ENV}; there is no default")
    return inventory


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.inventory = inventory_of(args)
        if args.nodes:
            bounded = args.operation in TAKES_CAPACITY
            # From here on the nodes are the checked host names, never the patterns: the limit
            # (or add-node's day2_new_nodes) is exactly what was checked.
            args.nodes = check_hosts(args.inventory, args.nodes, max_nodes=args.max_nodes if bounded else None,
                                     allow_control_plane=args.allow_control_plane if bounded else True)
        extravars = extravars_from(args)
    except BadInput as exc:
        print(f"ai-l1-day2: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT

    cancel = threading.Event()

    def on_signal(signum, _frame):
        print(f"\nai-l1-day2: signal {signum}, canceling the run", file=sys.stderr)
        cancel.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, on_signal)
        signal.signal(signal.SIGTERM, on_signal)

    progress = None if args.quiet or args.verbose else Progress(sys.stderr)
    with ExitStack() as held:
        try:
            locked = [] if args.operation in READ_ONLY else args.nodes or []
            if args.operation in WHOLE_CONTROL_PLANE:
                locked = check_hosts(args.inventory, [CONTROL_PLANE_GROUP])
            for node in sorted(set(locked)):
                held.enter_context(node_lock(args.runs_dir or default_runs_dir(), node, args.operation))
        except NodeBusy as exc:
            print(f"ai-l1-day2: {exc}", file=sys.stderr)
            return EXIT_BUSY
        except BadInput as exc:
            print(f"ai-l1-day2: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        return _run(args, extravars, progress, cancel)


class NodeBusy(RuntimeError):
    """Another run on this controller holds the node's lock."""


@contextmanager
def node_lock(runs_dir: Path, node: str, operation: str):
    """An exclusive lock per node for the run's lifetime (flock on <runs_dir>/locks/<node>.lock,
    released by the kernel whatever ends the process): two runs never act on one node at once."""
    locks = Path(runs_dir) / "locks"
    try:
        locks.mkdir(parents=True, exist_ok=True)
        fd = os.open(locks / f"{node}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as exc:
        raise BadInput(f"runs directory {runs_dir} is unusable for node locks: {exc.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
            raise NodeBusy(f"node {node} is being acted on by another run ({holder}); nothing was run") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}, {operation}".encode(), 0)
        yield
    finally:
        os.close(fd)


def _run(args, extravars: dict, progress, cancel: threading.Event) -> int:
    try:
        limit = None if args.operation == "add-node" else args.nodes
        result = run_operation(args.operation, inventory=args.inventory, limit=limit, extravars=extravars,
                               runs_dir=args.runs_dir, quiet=not args.verbose, event_handler=progress,
                               timeout=args.timeout, cancel_callback=cancel.is_set,
                               verbosity=max(args.verbose - 1, 0), check=args.check)
    except BadInput as exc:
        print(f"ai-l1-day2: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Exception as exc:  # noqa: BLE001 - reported with its own exit code
        print(f"ai-l1-day2: internal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_ERROR
    if args.json:
        json.dump(result.summary(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    if not args.quiet:
        print_summary(result, sys.stderr)
    return STATUS_EXIT.get(result.status, EXIT_FAILED)


if __name__ == "__main__":
    sys.exit(main())
