#!/usr/bin/env python3
"""The remediation receiver under 1,000 hostile connections while authenticated webhooks arrive.

    python tests/bench/receiver_flood.py [--hostile 1000] [--seconds 30] [--rate 5]

Starts the real receiver (server, store, policy; fake Nodes and a fake executor, so no cluster is
needed) in a child process. A slow-loris client keeps --hostile connections open against it (each
sends part of a request head, then a byte every 5 s; a connection the receiver closes is opened
again), another sends as many unauthenticated requests as it can, and --rate authenticated
webhooks a second arrive for --seconds. Prints the receiver's peak memory (VmRSS) and threads,
the hostile connections it held, the audit rows written, and the webhooks answered with their
p50/p99 answer time. Targets: every webhook answered, p99 under 1 s, memory under 256 MiB.
No assertion: the figures are printed.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import resource
import selectors
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "day2"))
sys.path.insert(0, str(ROOT / "tests" / "unit"))


def pct(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)] if ordered else float("nan")


def serve(state: str, ready) -> None:
    import logging  # noqa: PLC0415

    from ai_l1_day2.remediation.server import make_server  # noqa: PLC0415
    from ai_l1_day2.remediation.service import Service  # noqa: PLC0415
    from ai_l1_day2.remediation.store import Store  # noqa: PLC0415
    from remediation_fakes import FakeExecutor, FakeNodes, make_config  # noqa: PLC0415

    logging.disable(logging.WARNING)  # one line per refusal would be the benchmark's own flood
    workers = tuple(f"gpu{i}" for i in range(1, 201))
    conf = make_config(Path(state), workers=workers, ceiling={"max_fraction": 1.0, "pool_label": "accelerator"},
                       rate_limit={"max_runs": 1_000_000, "window_s": 600})
    nodes = FakeNodes(names=workers)
    svc = Service(conf, Store(conf.db_path), nodes, FakeExecutor(conf.jobs_dir))
    srv = make_server(svc, "127.0.0.1", 0)
    ready.put(srv.server_address[1])
    srv.serve_forever()


def proc_status(pid: int) -> tuple[int, int]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return int(fields["VmRSS"].split()[0]) // 1024, int(fields["Threads"])


def slow_loris(port: int, count: int, stop: threading.Event, held: list[int]) -> None:
    sel = selectors.DefaultSelector()
    head = b"POST /webhook HTTP/1.1\r\nHost: x\r\nX-Pad: "
    socks: dict[socket.socket, float] = {}

    def connect():
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        sel.register(s, selectors.EVENT_READ)
        socks[s] = time.monotonic()

    def drop(s):
        sel.unregister(s)
        socks.pop(s, None)
        s.close()

    for _ in range(count):
        connect()
    while not stop.is_set():
        for key, _ in sel.select(timeout=0.5):
            s = key.fileobj
            try:
                if not s.recv(4096):
                    drop(s)
            except OSError:
                drop(s)
        now = time.monotonic()
        for s, last in list(socks.items()):
            if now - last >= 5 or last == 0:
                try:
                    s.send(head if last == 0 else b"a")
                    socks[s] = now
                except OSError:
                    if s in socks:
                        drop(s)
        for _ in range(count - len(socks)):
            connect()
        held.append(len(socks))
    for s in list(socks):
        drop(s)


def refused_flood(port: int, stop: threading.Event, sent: list[int]) -> None:
    data = (b"POST /webhook HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer wrong-wrong-wrong-0123\r\n"
            b"Content-Length: 2\r\n\r\n{}")
    while not stop.is_set():
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(data)
                while s.recv(4096):
                    pass
            sent[0] += 1
        except OSError:
            time.sleep(0.01)


def webhook(port: int, host: str) -> float:
    from ai_l1_day2.remediation.auth import sign  # noqa: PLC0415
    from remediation_fakes import HMAC_KEY, alert, payload  # noqa: PLC0415

    body = json.dumps(payload(alert(host=host, fp=f"bench-{host}-{time.monotonic_ns()}"))).encode()
    req = (f"POST /webhook HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
           f"X-AI-L1-Signature: {sign(HMAC_KEY.encode(), body)}\r\n\r\n").encode() + body
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(req)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    if not answer.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(answer[:200])
    return time.monotonic() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hostile", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--rate", type=float, default=5, help="authenticated webhooks per second")
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4 * args.hostile + 256)), hard))
    with tempfile.TemporaryDirectory() as state:
        ready = multiprocessing.Queue()
        child = multiprocessing.Process(target=serve, args=(state, ready), daemon=True)
        child.start()
        port = ready.get(timeout=30)
        base_rss, base_threads = proc_status(child.pid)
        stop = threading.Event()
        held: list[int] = []
        sent = [0]
        workers = [threading.Thread(target=slow_loris, args=(port, args.hostile, stop, held), daemon=True),
                   threading.Thread(target=refused_flood, args=(port, stop, sent), daemon=True)]
        for w in workers:
            w.start()
        time.sleep(2)  # the hostile connections are open before the first webhook
        peak_rss, peak_threads, latencies, failures = base_rss, base_threads, [], []
        t_end = time.monotonic() + args.seconds
        i = 0
        while time.monotonic() < t_end:
            i += 1
            try:
                latencies.append(webhook(port, f"gpu{1 + i % 200}"))
            except (OSError, RuntimeError) as exc:
                failures.append(str(exc)[:120])
            rss, threads = proc_status(child.pid)
            peak_rss, peak_threads = max(peak_rss, rss), max(peak_threads, threads)
            time.sleep(max(0.0, 1 / args.rate - (latencies[-1] if latencies else 0)))
        stop.set()
        for w in workers:
            w.join(timeout=10)
        from ai_l1_day2.remediation.store import Store  # noqa: PLC0415

        rows = Store(Path(state) / "state" / "remediation.sqlite").audit_entries()
        child.terminate()
    refused_rows = sum(r["event"] in ("auth.refused", "request.refused") for r in rows)
    print(f"hostile connections held: median {pct(held, 50):.0f}, min {min(held) if held else 0} (of {args.hostile})")
    print(f"unauthenticated requests sent: {sent[0]}; audit rows: {len(rows)} ({refused_rows} refusals, "
          f"{sum(r['event'] == 'request.refused.aggregated' for r in rows)} aggregated)")
    print(f"receiver: memory {base_rss} MiB idle, peak {peak_rss} MiB; "
          f"threads {base_threads} idle, peak {peak_threads}")
    print(f"authenticated webhooks: {len(latencies)} answered, {len(failures)} failed; "
          f"p50 {pct(latencies, 50) * 1000:.0f} ms, p99 {pct(latencies, 99) * 1000:.0f} ms, "
          f"max {max(latencies) * 1000 if latencies else float('nan'):.0f} ms")
    for failure in failures[:5]:
        print(f"  failed: {failure}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
