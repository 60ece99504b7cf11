"""`ai-l1-day2 serve` / `ai-l1-remediate`: run the Alertmanager webhook receiver.

    ai-l1-remediate serve --config remediation.yml [--dry-run] [--port N]
    ai-l1-remediate jobs  --config remediation.yml [--state running]
    ai-l1-remediate audit --config remediation.yml [--event auth.refused]

Exit codes: 0 stopped cleanly, 2 bad configuration, 3 state directory held by another
receiver or unusable, 4 Kubernetes credentials unusable.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sqlite3
import sys
import threading

from . import config as config_mod
from . import logs
from .executor import make_executor
from .store import Store

LOG = logging.getLogger("ai_l1_day2.remediation")
NODE_VIEW_START_S = 30  # how long a start waits for the first list of the Nodes (1,000 Nodes: under 1 s)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", "-c", required=True, help="receiver config (YAML); secrets come from the env")
    parser.add_argument("--dry-run", action="store_true", help="decide and record, never run a playbook")
    parser.add_argument("--host", help="override listen.host")
    parser.add_argument("--port", type=int, help="override listen.port (0: any free port, printed on start)")


def _load(args) -> config_mod.Config:
    cfg = config_mod.load(args.config)
    if getattr(args, "dry_run", False):
        cfg.dry_run = True
    if getattr(args, "host", None):
        cfg.host = args.host
    if getattr(args, "port", None) is not None:
        cfg.port = args.port
    return cfg


def serve(args) -> int:
    from .kube import KubeError, KubeNodes  # noqa: PLC0415
    from .server import make_server, tls_context  # noqa: PLC0415
    from .service import Service  # noqa: PLC0415

    logs.setup()
    # The store, job directories and run files are the receiver's own: no other user reads them.
    os.umask(0o027)
    try:
        cfg = _load(args)
    except config_mod.ConfigError as exc:
        logs.log(LOG, logging.ERROR, f"configuration error: {exc}", config=args.config)
        return 2
    logging.getLogger().setLevel(cfg.log_level.upper())
    try:
        nodes = KubeNodes(cfg.kubeconfig, cfg.kube_context)
    except KubeError as exc:
        logs.log(LOG, logging.ERROR, str(exc))
        return 4
    try:
        store = Store(cfg.db_path, audit_max_rows=cfg.audit_max_rows, audit_max_bytes=cfg.audit_max_bytes)
        service = Service(cfg, store, nodes, make_executor(cfg))
        service.acquire_state_dir()
    except (OSError, RuntimeError, sqlite3.Error) as exc:
        logs.log(LOG, logging.ERROR, f"state directory unusable: {exc}", state_dir=str(cfg.state_dir))
        return 3
    try:
        tls = tls_context(cfg.tls_cert_file, cfg.tls_key_file) if cfg.tls_cert_file else None
    except OSError as exc:  # ssl.SSLError too
        logs.log(LOG, logging.ERROR, f"configuration error: listen.tls: {exc}", config=args.config)
        return 2
    if not nodes.wait_synced(NODE_VIEW_START_S):
        # Not fatal: until the watcher's list lands, each decision lists the Nodes itself.
        logs.log(LOG, logging.WARNING, "the Node view is not synced yet; decisions list the Nodes directly",
                 waited_s=NODE_VIEW_START_S, problem=nodes.view_problem())
    server = make_server(service, cfg.host, cfg.port, tls)
    service.start()
    host, port = server.server_address[:2]
    logs.log(LOG, logging.INFO, "listening", host=host, port=port, tls=tls is not None, dry_run=cfg.dry_run,
             auth=cfg.auth.describe(),
             state_dir=str(cfg.state_dir), workers=cfg.workers, operation=cfg.operation, backend=cfg.backend,
             **({"awx": cfg.awx.describe()} if cfg.awx else {"inventory": cfg.inventory}))

    def stop(signum, _frame):
        logs.log(LOG, logging.INFO, "stopping", signal=signal.Signals(signum).name)
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        service.stop()
        server.server_close()
    return 0


AUDIT_DUMP_PAGE = 1000


def _dump(args, what: str) -> int:
    try:
        cfg = _load(args)
    except config_mod.ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    store = Store(cfg.db_path, audit_max_rows=cfg.audit_max_rows, audit_max_bytes=cfg.audit_max_bytes)
    if what == "jobs":
        print(json.dumps(store.jobs(state=args.state, node=args.node), indent=2, default=str))
        return 0
    # The audit trail page by page, as one JSON list: memory stays one page, whatever the table holds.
    since, first = 0, True
    sys.stdout.write("[")
    while rows := store.audit_entries(args.event, args.node, since, limit=AUDIT_DUMP_PAGE):
        for row in rows:
            sys.stdout.write(("\n" if first else ",\n") + json.dumps(row, default=str))
            first = False
        since = rows[-1]["id"]
    sys.stdout.write("\n]\n")
    return 0


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="ai-l1-remediate", description=__doc__,
                                               formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    for name in ("jobs", "audit"):
        p = sub.add_parser(name, help=f"print the {name} recorded in the store (JSON)")
        p.add_argument("--config", "-c", required=True)
        p.add_argument("--node")
        if name == "jobs":
            p.add_argument("--state")
        else:
            p.add_argument("--event")
        p.set_defaults(func=lambda a, n=name: _dump(a, n))
    return parser


def register(subparsers) -> argparse.ArgumentParser:
    """Add `serve` to a CLI's subparsers (ai-l1-day2 serve); dispatch through args.func(args)."""
    p = subparsers.add_parser("serve", help="run the Alertmanager webhook receiver (event-driven remediation)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p)
    p.set_defaults(func=serve)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
