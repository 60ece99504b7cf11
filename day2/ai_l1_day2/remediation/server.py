"""HTTP receiver: one asyncio event loop holds the connections, a small thread pool decides.
Every request is authenticated; refusals are answered 401 and audited (never with what the
client sent as a secret), at most a few rows per client and window, the rest counted.

    POST /webhook      Alertmanager webhook v4 -> 200 {"decisions": [...]}
                       400 not a v4 payload, 413 body too large, 503 store or API unavailable
    GET  /readyz       200 or 503, no details and no credentials (kubelet's probes)
    GET  /healthz      200 {"status": "ok", "store": "ok", "kubernetes": "ok"}, or 503 naming
                       what is unusable (the store deleted or unwritable, the API down, the
                       receiver's Node view not confirmed by the API within its bound)
    GET  /jobs[?state=&node=]   the job table;  GET /jobs/<id>   one job and its run idents
    GET  /audit[?event=&node=&since=<id>&limit=<n>]   the audit log, oldest first, a page of at
                       most AUDIT_PAGE_MAX rows (default AUDIT_PAGE): {"audit": [...], "next": <id>
                       to pass as since for the next page, or null after the last}
Alertmanager retries on 5xx only: a refused alert (lock, ceiling, rate) is answered 200
with its decision, so it is not retried; the next notification is judged afresh.

Why an event loop and not a thread per connection: a thread per connection let 1,000 idle
clients take 1 GB and 1,003 threads, and a client sending a byte every few seconds kept its
thread forever. Here an idle connection costs a few kilobytes, every request has one total
deadline for its head and body (SOCKET_TIMEOUT_S, not renewed by each byte), at most
MAX_CONNECTIONS are open, and the credentials are checked from the head before any body is
read. One request per connection (answers carry `Connection: close`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import parse_qs, urlsplit

from .auth import ASCII_INT, authenticate, precheck
from .logs import log
from .service import PayloadError, Service

LOG = logging.getLogger("ai_l1_day2.remediation.http")
MAX_BODY = 1 << 20
SOCKET_TIMEOUT_S = 10  # the whole request (head and body) arrives within this, or the connection is closed
LISTEN_BACKLOG = 1024  # a burst of webhooks connects at once; past the backlog a SYN waits 1 s
AUDIT_FIELD_MAX = 256  # what a refused request may put into the audit log, per field
AUDIT_PAGE, AUDIT_PAGE_MAX = 500, 1000  # /audit rows per answer (the table holds up to 100,000)
MAX_HEAD = 64 * 1024  # request line and headers together
MAX_HEADERS = 100
MAX_CONNECTIONS = 4096  # open at once; past it a new connection is closed unanswered (the unit sets nofile above it)
DECISION_WORKERS = 8  # threads for what blocks (the store, the Kubernetes API)
REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
           408: "Request Timeout", 411: "Length Required", 413: "Content Too Large",
           431: "Request Header Fields Too Large", 501: "Not Implemented", 503: "Service Unavailable",
           505: "HTTP Version Not Supported"}
CHALLENGE = {"WWW-Authenticate": 'Bearer realm="ai-l1-remediate"'}
TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def tls_context(cert_file, key_file) -> ssl.SSLContext:
    """Server side, TLS 1.2 or newer (ssl.SSLError on a bad certificate or a key that does not match)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context


class RefusalLimiter:
    """Which refused requests get an audit row of their own: at most `per_client` per client and
    `total` in all per window; the others are counted, and each window that suppressed any ends
    in one aggregated row (the counts and the busiest clients). Monotonic clock; at most
    `max_clients` clients are tracked per window (the rest are counted under "other")."""

    def __init__(self, per_client: int = 10, total: int = 100, window_s: float = 60.0, max_clients: int = 10000,
                 clock=time.monotonic):
        self.per_client, self.total, self.window_s, self.max_clients = per_client, total, window_s, max_clients
        self.clock = clock
        self._lock = threading.Lock()
        self._reset(clock())

    def _reset(self, now: float) -> None:
        self._start = now
        self._written = 0
        self._by_client: dict[str, list[int]] = {}  # remote -> [rows written, suppressed]
        self._suppressed = 0

    def admit(self, remote: str) -> tuple[bool, dict | None]:
        """(write this refusal's row?, the summary of a window that just ended, if it suppressed any)."""
        with self._lock:
            summary = self._roll(self.clock())
            key = remote if remote in self._by_client or len(self._by_client) < self.max_clients else "other"
            counts = self._by_client.setdefault(key, [0, 0])
            if counts[0] < self.per_client and self._written < self.total:
                counts[0] += 1
                self._written += 1
                return True, summary
            counts[1] += 1
            self._suppressed += 1
            return False, summary

    def roll(self) -> dict | None:
        """The summary of the window if it has ended (the server calls this periodically)."""
        with self._lock:
            return self._roll(self.clock())

    def _roll(self, now: float) -> dict | None:
        if now - self._start < self.window_s:
            return None
        summary = None
        if self._suppressed:
            top = sorted(((c[1], r) for r, c in self._by_client.items() if c[1]), reverse=True)[:10]
            summary = {"suppressed": self._suppressed, "audited": self._written, "clients": len(self._by_client),
                       "window_s": self.window_s, "top": [{"remote": r, "suppressed": n} for n, r in top]}
        self._reset(now)
        return summary


class Headers:
    """Request headers, names case-insensitive; get() gives the first value."""

    def __init__(self, pairs: list[tuple[str, str]]):
        self._values: dict[str, list[str]] = {}
        for name, value in pairs:
            self._values.setdefault(name.lower(), []).append(value)

    def get(self, name: str, default=None):
        values = self._values.get(name.lower())
        return values[0] if values else default

    def all(self, name: str) -> list[str]:
        return self._values.get(name.lower(), [])


class BadRequest(Exception):
    def __init__(self, code: int, reason: str):
        super().__init__(reason)
        self.code, self.reason = code, reason


def parse_head(head: bytes) -> tuple[str, str, Headers]:
    """(method, target, headers) of a request head ending in CRLF CRLF; BadRequest otherwise."""
    try:
        text = head.decode("iso-8859-1")
    except UnicodeDecodeError:  # pragma: no cover (latin-1 decodes every byte)
        raise BadRequest(400, "request head is not text") from None
    lines = text[:-4].split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[0] or not parts[1]:
        raise BadRequest(400, "bad request line")
    method, target, version = parts
    if version not in ("HTTP/1.0", "HTTP/1.1"):
        raise BadRequest(505 if version.startswith("HTTP/") else 400, "HTTP/1.0 or HTTP/1.1 only")
    if len(lines) - 1 > MAX_HEADERS:
        raise BadRequest(431, f"more than {MAX_HEADERS} headers")
    pairs = []
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or not set(name) <= TOKEN_CHARS:  # folded lines and "Name :" included
            raise BadRequest(400, "malformed header line")
        pairs.append((name, value.strip(" \t")))
    return method, target, Headers(pairs)


def content_length(method: str, headers: Headers) -> int:
    """The body's size from its one Content-Length (0 for a GET without one); BadRequest otherwise."""
    if headers.all("Transfer-Encoding"):
        # A body is framed by Content-Length only: no chunked bodies, nothing to smuggle.
        raise BadRequest(501, "Transfer-Encoding is not supported; send Content-Length")
    values = headers.all("Content-Length")
    if not values:
        if method == "GET":
            return 0
        raise BadRequest(411, "Content-Length required (a decimal byte count)")
    if len(set(v.strip() for v in values)) != 1:
        raise BadRequest(400, "conflicting Content-Length headers")
    if not ASCII_INT.fullmatch(values[0].strip()):
        raise BadRequest(411, "Content-Length required (a decimal byte count)")
    length = int(values[0].strip())
    if length > MAX_BODY:
        raise BadRequest(413, f"body larger than {MAX_BODY} bytes")
    return length


class Server:
    """The receiver's listener. serve_forever() runs the event loop in the calling thread;
    shutdown() (from another thread) ends it; the interface of socketserver's servers."""

    request_queue_size = LISTEN_BACKLOG

    def __init__(self, service: Service, host: str, port: int, tls: ssl.SSLContext | None = None):
        self.service = service
        self.tls = tls
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.socket.bind((host, port))
            self.socket.listen(self.request_queue_size)
        except OSError:
            self.socket.close()
            raise
        self.socket.setblocking(False)
        self.server_address = self.socket.getsockname()
        self.limiter = RefusalLimiter()
        self.open_connections = 0
        self.refused_connections = 0
        self._pool = ThreadPoolExecutor(DECISION_WORKERS, thread_name_prefix="decide")
        # Refusals are audited on a thread of their own: a flood of them never waits in front of a decision.
        self._audit_pool = ThreadPoolExecutor(1, thread_name_prefix="audit")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._stopped = threading.Event()
        self._shutdown = threading.Event()
        # /readyz is unauthenticated: its checks run on a thread of their own, so a flood of
        # probes queues behind itself, never in front of a decision.
        self._probe_pool = ThreadPoolExecutor(1, thread_name_prefix="probe")
        self._ready_check: asyncio.Future | None = None

    # -- lifecycle (socketserver's names) ------------------------------------------------
    def serve_forever(self, poll_interval: float = 0.5) -> None:  # noqa: ARG002 (socketserver's signature)
        self._stopped.clear()
        try:
            asyncio.run(self._serve())
        finally:
            self._stopped.set()

    def shutdown(self) -> None:
        """End serve_forever and wait for it (as socketserver: called before serve_forever has
        started, serve_forever returns at once when it does)."""
        self._shutdown.set()
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            try:
                loop.call_soon_threadsafe(stop.set)
            except RuntimeError:  # the loop has ended already
                return
        self._stopped.wait()

    def server_close(self) -> None:
        self.socket.close()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._audit_pool.shutdown(wait=False, cancel_futures=True)
        self._probe_pool.shutdown(wait=False, cancel_futures=True)

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        if self._shutdown.is_set():  # shutdown() came first
            return
        server = await asyncio.start_server(
            self._connection, sock=self.socket, ssl=self.tls, limit=MAX_HEAD,
            ssl_handshake_timeout=SOCKET_TIMEOUT_S if self.tls else None)
        flusher = asyncio.create_task(self._flush_refusals())
        try:
            await self._stop.wait()
        finally:
            flusher.cancel()
            server.close()
            # Connections in flight are not waited for (wait_closed() would wait for them all).
            self._loop = None

    async def _flush_refusals(self) -> None:
        while True:
            await asyncio.sleep(min(self.limiter.window_s, 5.0))
            self._audit_summary(self.limiter.roll())

    # -- one connection, one request -------------------------------------------------------
    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        remote = (writer.get_extra_info("peername") or ("?",))[0]
        if self.open_connections >= MAX_CONNECTIONS:
            self.refused_connections += 1
            if self.refused_connections % 1000 == 1:
                log(LOG, logging.WARNING, "connection limit reached; closing new connections",
                    limit=MAX_CONNECTIONS, refused=self.refused_connections)
            writer.transport.abort()
            return
        self.open_connections += 1
        try:
            await self._request(reader, writer, remote)
        except (ConnectionError, ssl.SSLError, OSError) as exc:
            log(LOG, logging.DEBUG, "connection failed", remote=remote, error=str(exc)[:AUDIT_FIELD_MAX])
        finally:
            self.open_connections -= 1
            writer.transport.abort()  # answered or given up: nothing more is read or written

    async def _request(self, reader, writer, remote: str) -> None:  # noqa: PLR0911 (one return per outcome)
        deadline = time.monotonic() + SOCKET_TIMEOUT_S
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), SOCKET_TIMEOUT_S)
        except (asyncio.TimeoutError, asyncio.IncompleteReadError):
            return  # a client that sent nothing whole within the deadline gets nothing
        except asyncio.LimitOverrunError:
            await self._answer(writer, 431, {"error": f"request head larger than {MAX_HEAD} bytes"})
            return
        request = {"method": "?", "path": "?", "headers": Headers([]), "remote": remote}
        try:
            method, target, headers = parse_head(head)
            request.update(method=method, path=target, headers=headers)
            if method not in ("GET", "POST"):
                raise BadRequest(405, f"method {method[:16]} not allowed")
            length = content_length(method, headers)
        except BadRequest as exc:
            await self._refuse(writer, request, exc.code, exc.reason)
            return
        path = urlsplit(target).path
        if method == "GET" and path == "/readyz":
            ok = await self._ready_now()
            await self._answer(writer, 200 if ok else 503, {"status": "ok" if ok else "unhealthy"})
            return
        # The credentials, from the head alone, before a byte of the body is read.
        verdict, reason = precheck(self.service.cfg.auth, headers, method=method, target=target)
        if verdict == "refused":
            await self._refuse(writer, request, 401, reason, event="auth.refused", headers=CHALLENGE)
            return
        body = b""
        if length:
            try:
                body = await asyncio.wait_for(reader.readexactly(length), max(0.0, deadline - time.monotonic()))
            except (asyncio.TimeoutError, asyncio.IncompleteReadError):
                await self._refuse(writer, request, 408,
                                   f"body not received within {SOCKET_TIMEOUT_S}s")
                return
        if verdict == "body":  # an HMAC signature: it covers the body
            ok, _how, reason = authenticate(self.service.cfg.auth, headers, body, method=method, target=target)
            if not ok:
                await self._refuse(writer, request, 401, reason, event="auth.refused", headers=CHALLENGE)
                return
        code, answer = await self._loop.run_in_executor(self._pool, self._handle, method, target, body, remote)
        await self._answer(writer, code, answer)

    async def _ready_now(self) -> bool:
        """Probes that arrive while a check runs share its answer: a flood of unauthenticated
        probes costs one store write and one API call at a time, not one each."""
        if self._ready_check is None or self._ready_check.done():
            self._ready_check = asyncio.ensure_future(
                self._loop.run_in_executor(self._probe_pool, self.service.health))
        health = await asyncio.shield(self._ready_check)
        return all(v == "ok" for v in health.values())

    # -- what an authenticated request asks (on a worker thread) ---------------------------
    def _handle(self, method: str, target: str, body: bytes, remote: str) -> tuple[int, dict]:
        url = urlsplit(target)
        if method == "POST":
            if url.path not in ("/webhook", "/alerts"):
                return 404, {"error": f"no such endpoint {target[:AUDIT_FIELD_MAX]}; POST /webhook"}
            return self._webhook(body, remote)
        return self._get(url)

    def _webhook(self, body: bytes, remote: str) -> tuple[int, dict]:
        t0 = time.monotonic()
        try:
            decisions = self.service.handle_payload(json.loads(body, parse_constant=_no_constant), remote=remote)
        except (ValueError, RecursionError, PayloadError) as exc:
            msg = str(exc) if isinstance(exc, PayloadError) else f"body is not JSON: {exc}"
            log(LOG, logging.WARNING, "bad webhook payload", remote=remote, error=msg[:AUDIT_FIELD_MAX])
            return 400, {"error": msg}
        except Exception as exc:  # noqa: BLE001 (store or API down: let Alertmanager retry)
            LOG.exception("webhook not processed", extra={"fields": {"remote": remote}})
            return 503, {"error": f"not processed, retry: {type(exc).__name__}: {exc}"}
        return 200, {"decisions": decisions, "ms": round((time.monotonic() - t0) * 1000, 1)}

    def _get(self, url) -> tuple[int, dict]:  # noqa: PLR0911 (one answer per endpoint)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        service = self.service
        if url.path == "/healthz":
            checks = service.health()
            ok = all(v == "ok" for v in checks.values())
            return (200 if ok else 503), {"status": "ok" if ok else "unhealthy", **checks,
                                          "owner": service.owner, "dry_run": service.cfg.dry_run}
        if url.path == "/jobs":
            return 200, {"jobs": service.store.jobs(state=query.get("state"), node=query.get("node"))}
        if url.path.startswith("/jobs/") and ASCII_INT.fullmatch(url.path[6:]):
            job = service.store.job(int(url.path[6:]))
            if job is None:
                return 404, {"error": f"no job {url.path[6:]}"}
            return 200, {"job": job, "runs": service.executor.runs(job["id"])}
        if url.path == "/audit":
            since = int(query["since"]) if ASCII_INT.fullmatch(query.get("since", "")) else 0
            limit = int(query["limit"]) if ASCII_INT.fullmatch(query.get("limit", "")) else AUDIT_PAGE
            limit = max(1, min(limit, AUDIT_PAGE_MAX))
            rows = service.store.audit_entries(query.get("event"), query.get("node"), since, limit=limit)
            return 200, {"audit": rows, "next": rows[-1]["id"] if len(rows) == limit else None}
        return 404, {"error": f"no such endpoint {url.path[:AUDIT_FIELD_MAX]}"}

    # -- answers -----------------------------------------------------------------------------
    async def _answer(self, writer, code: int, body: dict, headers: dict | None = None) -> None:
        data = json.dumps(body, default=str).encode()
        lines = [f"HTTP/1.1 {code} {REASONS.get(code, '')}", "Server: ai-l1-remediate",
                 "Content-Type: application/json", f"Content-Length: {len(data)}", "Connection: close",
                 *(f"{k}: {v}" for k, v in (headers or {}).items())]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + data)
        try:
            await asyncio.wait_for(writer.drain(), SOCKET_TIMEOUT_S)
        except asyncio.TimeoutError:
            writer.transport.abort()

    async def _refuse(self, writer, request: dict, code: int, reason: str, *, event: str = "request.refused",
                      headers: dict | None = None) -> None:
        """Answer a refused request; audit it (bounded fields) unless its client or the window has had
        its share of rows, in which case it is counted into the window's aggregated row."""
        remote = request["remote"]
        admitted, summary = self.limiter.admit(remote)
        self._audit_summary(summary)
        if admitted:
            details = {"method": request["method"][:16], "path": request["path"][:AUDIT_FIELD_MAX],
                       "user_agent": (request["headers"].get("User-Agent") or "")[:AUDIT_FIELD_MAX]}
            # Written before the answer (a client that reads /audit next finds it); the limiter
            # bounds how many refusals wait for this.
            await self._loop.run_in_executor(self._audit_pool, self._audit_row, event, reason[:AUDIT_FIELD_MAX],
                                             remote, details)
            log(LOG, logging.WARNING, "request refused", remote=remote, method=request["method"][:16],
                path=request["path"][:AUDIT_FIELD_MAX], reason=reason[:AUDIT_FIELD_MAX], code=code)
        await self._answer(writer, code, {"error": "unauthorized" if code == 401 else reason}, headers)

    def _audit_row(self, event: str, reason: str, remote: str, details: dict) -> None:
        try:
            self.service.store.audit(event, decision="refused", reason=reason, remote=remote, details=details)
        except Exception:  # the answer went out; the store being down is the health check's to report
            LOG.exception("auditing a refused request failed")

    def _audit_summary(self, summary: dict | None) -> None:
        if summary:
            log(LOG, logging.WARNING, "refused requests not audited one by one", **summary)
            self._audit_pool.submit(self._audit_row, "request.refused.aggregated",
                                    f"{summary['suppressed']} refused requests in {summary['window_s']:.0f}s "
                                    "counted, not audited one by one", "", summary)


def _no_constant(name: str):
    """NaN, Infinity and -Infinity are not JSON: refused, or they would make /audit invalid JSON."""
    raise ValueError(f"{name} is not a JSON value")


def make_server(service: Service, host: str, port: int, tls: ssl.SSLContext | None = None) -> Server:
    return Server(service, host, port, tls)
