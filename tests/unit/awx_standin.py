"""A small stand-in for the two AWX API endpoints the remediation receiver calls (run.backend: awx):

    POST /api/v2/job_templates/<id>/launch/   201 {"job": N, "id": N, "ignored_fields": {}, ...}
    GET  /api/v2/jobs/<N>/                    200 {"id": N, "status": ..., "failed": ..., ...}

Bearer token checked on both (401 {"detail": ...} otherwise, as AWX answers). A launched job
walks through `pending`, `running` (one answer each, `running` repeated `running_polls` times)
to `outcome` (successful, failed, error, canceled); `outcome=None` keeps it running. Every
request is recorded (method, path, headers, the JSON body exactly as received) for the tests
to inspect. A job template that does not exist is 404; a template listed in `ignores` answers
as AWX does for fields it does not prompt for (`ignored_fields`).
"""

from __future__ import annotations

import json
import re
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LAUNCH = re.compile(r"^/api/v2/job_templates/(\d+)/launch/$")
JOB = re.compile(r"^/api/v2/jobs/(\d+)/$")


class AwxStandIn:
    def __init__(self, token: str, *, templates=(42,), outcome: str | None = "successful", running_polls: int = 1,
                 tls: ssl.SSLContext | None = None, ignores: dict | None = None):
        self.token = token
        self.templates = set(templates)
        self.outcome = outcome
        self.running_polls = running_polls
        self.ignores = ignores or {}
        self.requests: list[dict] = []
        self.launches: list[dict] = []  # {"template": id, "body": the JSON body as received, "job": N}
        self.jobs: dict[int, dict] = {}
        self.lock = threading.Lock()
        self._next = 100
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.url = f"{'https' if tls else 'http'}://{'localhost' if tls else '127.0.0.1'}:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def finish(self, job_id: int, outcome: str) -> None:
        """End a job that was kept running (outcome=None)."""
        with self.lock:
            self.jobs[job_id]["final"] = outcome

    def polls(self, job_id: int) -> int:
        return sum(1 for r in self.requests if r["method"] == "GET" and r["path"] == f"/api/v2/jobs/{job_id}/")

    # -- the endpoints ---------------------------------------------------------------------
    def _launch(self, template: int, body) -> tuple[int, dict]:
        if template not in self.templates:
            return 404, {"detail": "Not found."}
        if not isinstance(body, dict):
            return 400, {"detail": "launch body must be a JSON object"}
        with self.lock:
            self._next += 1
            job_id = self._next
            self.jobs[job_id] = {"status": "pending", "answers": 0, "final": self.outcome,
                                 "limit": body.get("limit", ""), "extra_vars": body.get("extra_vars")}
            self.launches.append({"template": template, "body": body, "job": job_id})
        ignored = {k: body[k] for k in self.ignores.get(template, ()) if k in body}
        return 201, {"job": job_id, "id": job_id, "type": "job", "status": "pending", "ignored_fields": ignored,
                     "url": f"/api/v2/jobs/{job_id}/"}

    def _job(self, job_id: int) -> tuple[int, dict]:
        with self.lock:
            job = self.jobs.get(job_id)
            if job is None:
                return 404, {"detail": "Not found."}
            job["answers"] += 1
            if job["answers"] == 1:
                status = "pending"
            elif job["answers"] <= 1 + self.running_polls or job["final"] is None:
                status = "running"
            else:
                status = job["final"]
            job["status"] = status
        explanation = "Job terminated due to error" if status == "error" else ""
        return 200, {"id": job_id, "type": "job", "status": status, "failed": status in ("failed", "error"),
                     "limit": job["limit"], "job_explanation": explanation}

    def _handler(self):
        standin = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args):
                pass

            def _answer(self, code: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                with standin.lock:
                    standin.requests.append({"method": method, "path": self.path, "headers": dict(self.headers),
                                             "raw": raw, "body": body})
                if self.headers.get("Authorization") != f"Bearer {standin.token}":
                    self._answer(401, {"detail": "Authentication credentials were not provided."
                                       if not self.headers.get("Authorization") else "Invalid token."})
                    return
                launch, job = LAUNCH.match(self.path), JOB.match(self.path)
                if method == "POST" and launch:
                    self._answer(*standin._launch(int(launch.group(1)), body))
                elif method == "GET" and job:
                    self._answer(*standin._job(int(job.group(1))))
                else:
                    self._answer(404 if not (launch or job) else 405, {"detail": "Not found."})

            def do_GET(self):  # noqa: N802 (BaseHTTPRequestHandler's names)
                self._serve("GET")

            def do_POST(self):  # noqa: N802
                self._serve("POST")

        return Handler
