"""HTTP receiver (stdlib ThreadingHTTPServer). Every request is authenticated; refusals are
answered 401 and written to the audit log (never with what the client sent as a secret).

    POST /webhook      Alertmanager webhook v4 -> 200 {"decisions": [...]}
                       400 not a v4 payload, 413 body too large, 503 store or API unavailable
    GET  /healthz      200 {"status": "ok", "store": "ok", "kubernetes": "ok"}, or 503 naming
                       what is unusable (the store deleted or unwritable, the API down, the
                       receiver's Node view not confirmed by the API within its bound)
    GET  /jobs[?state=&node=]   the job table;  GET /jobs/<id>   one job and its run idents
    GET  /audit[?event=&node=&since=<id>]       the audit log
Alertmanager retries on 5xx only: a refused alert (lock, ceiling, rate) is answered 200
with its decision, so it is not retried; the next notification is judged afresh.
"""

from __future__ import annotations

import json
import logging
import ssl
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from .auth import ASCII_INT, authenticate
from .logs import log
from .service import PayloadError, Service

LOG = logging.getLogger("ai_l1_day2.remediation.http")
MAX_BODY = 1 << 20
SOCKET_TIMEOUT_S = 10  # a client that stops sending mid-request frees its thread after this
LISTEN_BACKLOG = 1024  # a burst of webhooks connects at once (socketserver: 5); past the backlog a SYN waits 1 s
AUDIT_FIELD_MAX = 256  # what a refused request may put into the audit log, per field


def tls_context(cert_file, key_file) -> ssl.SSLContext:
    """Server side, TLS 1.2 or newer (ssl.SSLError on a bad certificate or a key that does not match)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    return context


def make_server(service: Service, host: str, port: int, tls: ssl.SSLContext | None = None) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        server_version = "ai-l1-remediate"
        sys_version = ""
        timeout = SOCKET_TIMEOUT_S

        def log_message(self, fmt, *args):  # access log as JSON, through logging
            log(LOG, logging.DEBUG, fmt % args, remote=self.client_address[0])

        def _send(self, code: int, body: dict, headers: dict | None = None) -> None:
            data = json.dumps(body, default=str).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def _refuse(self, event: str, code: int, reason: str, headers: dict | None = None) -> None:
            """Answer a refused request and audit it once, with bounded fields."""
            remote = self.client_address[0]
            try:
                service.store.audit(event, decision="refused", reason=reason[:AUDIT_FIELD_MAX], remote=remote,
                                    details={"method": self.command, "path": self.path[:AUDIT_FIELD_MAX],
                                             "user_agent": self.headers.get("User-Agent", "")[:AUDIT_FIELD_MAX]})
            except Exception:  # the answer must go out even when the store is down
                LOG.exception("auditing a refused request failed")
            log(LOG, logging.WARNING, "request refused", remote=remote, method=self.command,
                path=self.path[:AUDIT_FIELD_MAX], reason=reason[:AUDIT_FIELD_MAX], code=code)
            self._send(code, {"error": "unauthorized" if code == 401 else reason}, headers)

        def _body(self) -> bytes | None:
            length = self.headers.get("Content-Length")
            if length is None or not ASCII_INT.fullmatch(length.strip()):
                self._refuse("request.refused", 411, "Content-Length required (a decimal byte count)")
                return None
            if int(length) > MAX_BODY:
                self._refuse("request.refused", 413, f"body larger than {MAX_BODY} bytes")
                return None
            return self.rfile.read(int(length))

        def _authorised(self, body: bytes) -> bool:
            ok, _method, reason = authenticate(service.cfg.auth, self.headers, body)
            if ok:
                return True
            self._refuse("auth.refused", 401, reason, {"WWW-Authenticate": 'Bearer realm="ai-l1-remediate"'})
            return False

        def do_POST(self):  # noqa: N802
            body = self._body()
            if body is None or not self._authorised(body):
                return
            if urlsplit(self.path).path not in ("/webhook", "/alerts"):
                self._send(404, {"error": f"no such endpoint {self.path}; POST /webhook"})
                return
            t0 = time.monotonic()
            try:
                payload = json.loads(body)
                decisions = service.handle_payload(payload, remote=self.client_address[0])
            except (ValueError, RecursionError, PayloadError) as exc:
                msg = str(exc) if isinstance(exc, PayloadError) else f"body is not JSON: {exc}"
                log(LOG, logging.WARNING, "bad webhook payload", remote=self.client_address[0], error=msg)
                self._send(400, {"error": msg})
                return
            except Exception as exc:  # noqa: BLE001 (store or API down: let Alertmanager retry)
                LOG.exception("webhook not processed", extra={"fields": {"remote": self.client_address[0]}})
                self._send(503, {"error": f"not processed, retry: {type(exc).__name__}: {exc}"})
                return
            self._send(200, {"decisions": decisions, "ms": round((time.monotonic() - t0) * 1000, 1)})

        def do_GET(self):  # noqa: N802
            if urlsplit(self.path).path == "/readyz":
                # For kubelet's probes, which carry no credentials: up or not, no details.
                ok = all(v == "ok" for v in service.health().values())
                self._send(200 if ok else 503, {"status": "ok" if ok else "unhealthy"})
                return
            if not self._authorised(b""):
                return
            url = urlsplit(self.path)
            query = {k: v[-1] for k, v in parse_qs(url.query).items()}
            if url.path == "/healthz":
                checks = service.health()
                ok = all(v == "ok" for v in checks.values())
                self._send(200 if ok else 503, {"status": "ok" if ok else "unhealthy", **checks,
                                                "owner": service.owner, "dry_run": service.cfg.dry_run})
            elif url.path == "/jobs":
                self._send(200, {"jobs": service.store.jobs(state=query.get("state"), node=query.get("node"))})
            elif url.path.startswith("/jobs/") and ASCII_INT.fullmatch(url.path[6:]):
                job = service.store.job(int(url.path[6:]))
                if job is None:
                    self._send(404, {"error": f"no job {url.path[6:]}"})
                else:
                    self._send(200, {"job": job, "runs": service.executor.runs(job["id"])})
            elif url.path == "/audit":
                since = int(query["since"]) if ASCII_INT.fullmatch(query.get("since", "")) else 0
                self._send(200, {"audit": service.store.audit_entries(query.get("event"), query.get("node"), since)})
            else:
                self._send(404, {"error": f"no such endpoint {url.path}"})

    class Server(ThreadingHTTPServer):
        request_queue_size = LISTEN_BACKLOG

        def get_request(self):
            conn, addr = super().get_request()
            if tls is not None:
                # The handshake runs in the request's thread (on its first read), under the
                # socket timeout: a client that never finishes it holds no other client up.
                conn.settimeout(SOCKET_TIMEOUT_S)
                conn = tls.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
            return conn, addr

        def handle_error(self, request, client_address):
            if isinstance(sys.exc_info()[1], (ssl.SSLError, ConnectionError, TimeoutError)):
                log(LOG, logging.WARNING, "connection failed", remote=client_address[0],
                    error=str(sys.exc_info()[1])[:AUDIT_FIELD_MAX])
                return
            super().handle_error(request, client_address)

    server = Server((host, port), Handler)
    server.daemon_threads = True
    return server
