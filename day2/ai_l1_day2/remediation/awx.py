"""Isolations through AWX (run.backend: awx): the receiver keeps its policy (per-node lock, pool
ceiling, dedupe, rate limit, audit) and, instead of running the isolate playbook itself, launches
the isolate job template and follows the AWX job to its end. AWX is the detached runner: a job
goes on when the receiver dies, and a restarted receiver follows it again.

Two endpoints, with the token as a bearer token:

    POST {url}/api/v2/job_templates/{id}/launch/  {"limit": NODE, "extra_vars": {...}}  -> 201 {"job": N}
    GET  {url}/api/v2/jobs/{N}/  -> {"status": new|pending|waiting|running|successful|failed|error|canceled}

The extra variables travel as a JSON object: data, never templated here. AWX keeps launch-time
variables as data too while its setting ALLOW_JINJA_IN_EXTRA_VARS stays at `template` (the
default); never set it to `always`. The job template needs "Prompt on launch" for Limit and
Variables (AWX ignores what it does not prompt for: such a launch is reported as an error).

The executor has SubprocessExecutor's interface (executor.py). Per job directory:
    spec-<attempt>.json        what was asked (no token)
    awx-job-<attempt>.json     the launched AWX job (written as soon as AWX answers)
    ident                      awx-job-<N>
    result.json                the outcome: status successful / failed / error / canceled / timeout
The store's `pid` column holds the AWX job number for these jobs ("the run's handle").
Exactly once: a job found running after a restart is followed (its awx-job file names the AWX
job); one with no awx-job file never reached AWX, or the receiver died between AWX's answer and
the file: the Node then says whether it is isolated, as for a run that left no outcome.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import time
import urllib.error
import urllib.request
from pathlib import Path

from .config import AwxConfig, ConfigError
from .executor import JobDirs
from .logs import log

LOG = logging.getLogger("ai_l1_day2.remediation")
FINISHED = ("successful", "failed", "error", "canceled")
DETAIL_MAX = 300


class AwxError(RuntimeError):
    """AWX could not be reached or refused a request; the message never holds the token."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is not followed: urllib would send the token on to wherever it points."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: PLR0913, PLR0917
        return None


def _detail(body: bytes) -> str:
    """What AWX said, short: its `detail`, else the body (a 400 names the fields at fault)."""
    try:
        data = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace").strip()[:DETAIL_MAX]
    if isinstance(data, dict) and isinstance(data.get("detail"), str):
        return data["detail"][:DETAIL_MAX]
    return json.dumps(data, sort_keys=True)[:DETAIL_MAX]


class AwxClient:
    """The two AWX API calls, with the token from AwxConfig.token() at each request."""

    def __init__(self, cfg: AwxConfig):
        self.cfg = cfg
        handlers: list = [_NoRedirect()]
        if cfg.url.startswith("https:"):
            context = ssl.create_default_context(cafile=str(cfg.ca_file) if cfg.ca_file else None)
            if not cfg.verify:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            handlers.append(urllib.request.HTTPSHandler(context=context))
        self._opener = urllib.request.build_opener(*handlers)

    def _request(self, method: str, path: str, body: dict | None = None) -> dict:
        try:
            token = self.cfg.token()
        except ConfigError as exc:
            raise AwxError(f"AWX token unusable: {exc}") from None
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{self.cfg.url}{path}", data=data, method=method, headers={
            "Authorization": f"Bearer {token}", "Accept": "application/json",
            **({"Content-Type": "application/json"} if data is not None else {})})
        what = f"{method} {path}"
        try:
            with self._opener.open(req, timeout=self.cfg.request_timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            detail = _detail(exc.read() or b"")
            if exc.code in (401, 403):
                raise AwxError(f"AWX {self.cfg.url} refused the token (HTTP {exc.code}) for {what}: {detail}",
                               exc.code) from None
            if 300 <= exc.code < 400:
                raise AwxError(f"AWX {self.cfg.url} answered {what} with a redirect (HTTP {exc.code}) to "
                               f"{exc.headers.get('Location', '?')}: not followed; check awx.url", exc.code) from None
            raise AwxError(f"AWX {self.cfg.url} answered {what} with HTTP {exc.code}: {detail}", exc.code) from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise AwxError(f"AWX {self.cfg.url} unreachable for {what}: {reason}") from None
        try:
            answer = json.loads(raw)
        except ValueError:
            raise AwxError(f"AWX {self.cfg.url} answered {what} with something that is not JSON") from None
        if not isinstance(answer, dict):
            raise AwxError(f"AWX {self.cfg.url} answered {what} with JSON that is not an object")
        return answer

    def launch(self, limit: str, extra_vars: dict) -> dict:
        """Launch the job template; the answer (its `job` is the new job's number)."""
        body: dict = {"limit": limit, "extra_vars": extra_vars}
        if self.cfg.inventory_id is not None:
            body["inventory"] = self.cfg.inventory_id
        answer = self._request("POST", f"/api/v2/job_templates/{self.cfg.job_template_id}/launch/", body)
        job = answer.get("job", answer.get("id"))
        if not isinstance(job, int) or isinstance(job, bool):
            raise AwxError(f"AWX {self.cfg.url} launched job template {self.cfg.job_template_id} but named no job")
        return {**answer, "job": job}

    def job(self, job_id: int) -> dict:
        return self._request("GET", f"/api/v2/jobs/{int(job_id)}/")


def _write(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(json.dumps(data, sort_keys=True, default=str))
        handle.flush()
        os.fsync(handle.fileno())
    tmp.replace(path)


class AwxExecutor(JobDirs):
    """SubprocessExecutor's interface over AWX jobs (see the module docstring)."""

    def __init__(self, jobs_dir: Path, cfg: AwxConfig, client: AwxClient | None = None):
        super().__init__(jobs_dir)
        self.cfg = cfg
        self.client = client or AwxClient(cfg)

    # -- files ---------------------------------------------------------------------------
    def _launched(self, job: dict) -> dict | None:
        try:
            return json.loads((self.job_dir(job["id"]) / f"awx-job-{job['attempts']}.json").read_text())
        except (OSError, ValueError):
            return None

    def _stored_result(self, job: dict) -> dict | None:
        try:
            return json.loads((self.job_dir(job["id"]) / "result.json").read_text())
        except (OSError, ValueError):
            return None

    def _finish(self, job: dict, result: dict) -> dict:
        _write(self.job_dir(job["id"]) / "result.json", result)
        return result

    def _outcome(self, launched: dict, answer: dict) -> dict:
        job_id = launched["job"]
        status = answer.get("status")
        result = {"ident": f"awx-job-{job_id}", "status": status, "rc": None, "source": "awx", "awx_job": job_id,
                  "url": f"{self.cfg.url}/#/jobs/playbook/{job_id}"}
        notes = [str(answer[k])[:DETAIL_MAX] for k in ("job_explanation",) if answer.get(k)]
        if launched.get("ignored"):
            notes.append(launched["ignored"])
        if notes:
            result["message"] = "; ".join(notes)
        if launched.get("ignored") and status == "successful":
            result["status"] = "error"  # a run without the node or the fault is no isolation
        return result

    # -- the interface -------------------------------------------------------------------
    def start(self, job: dict, spec: dict) -> int:
        """Launch the job template for this job's node; returns the AWX job number (0 when the
        launch failed: result.json then says why)."""
        jdir = self.job_dir(job["id"])
        jdir.mkdir(parents=True, exist_ok=True)
        attempt = job["attempts"]
        (jdir / f"spec-{attempt}.json").write_text(json.dumps(spec, indent=2, sort_keys=True))
        (jdir / "ident").unlink(missing_ok=True)
        if (jdir / "result.json").exists():
            (jdir / "result.json").replace(jdir / f"result-before-{attempt}.json")
        limit = ",".join(spec.get("limit") or [])
        t0 = time.monotonic()
        try:
            answer = self.client.launch(limit, dict(spec.get("extravars") or {}))
        except AwxError as exc:
            log(LOG, logging.ERROR, "AWX launch failed", job_id=job["id"], node=job["node"], error=str(exc))
            self._finish(job, {"ident": None, "status": "error", "rc": None, "source": "awx",
                               "message": str(exc), "http_status": exc.status})
            return 0
        launched = {"job": answer["job"], "attempt": attempt, "job_template": self.cfg.job_template_id,
                    "launched": time.time(), "launch_ms": round((time.monotonic() - t0) * 1000, 1)}
        ignored = {k: v for k, v in (answer.get("ignored_fields") or {}).items() if k in ("limit", "extra_vars")}
        if ignored:
            launched["ignored"] = (f"AWX ignored {', '.join(sorted(ignored))} at launch: the job template "
                                   f"{self.cfg.job_template_id} must prompt on launch for Limit and Variables")
        _write(jdir / f"awx-job-{attempt}.json", launched)
        (jdir / "ident").write_text(f"awx-job-{answer['job']}")
        log(LOG, logging.INFO, "AWX job launched", job_id=job["id"], node=job["node"], awx_job=answer["job"],
            job_template=self.cfg.job_template_id, ms=launched["launch_ms"])
        return answer["job"]

    def _poll(self, job: dict) -> tuple[dict | None, str | None]:
        """(result, None) once the AWX job ended, (None, its status or the error) while it has not
        or AWX does not answer."""
        launched = self._launched(job)
        if launched is None:
            return None, None
        try:
            answer = self.client.job(launched["job"])
        except AwxError as exc:
            return None, str(exc)
        if answer.get("status") in FINISHED:
            return self._finish(job, self._outcome(launched, answer)), None
        return None, str(answer.get("status"))

    def alive(self, job: dict) -> bool:
        """The AWX job has not ended (or AWX does not answer: never a second launch beside it)."""
        if self._stored_result(job) is not None or self._launched(job) is None:
            return False
        result, _ = self._poll(job)
        return result is None

    def run_processes(self, job: dict) -> list[int]:
        launched = self._launched(job)
        return [launched["job"]] if launched and self.alive(job) else []

    def terminate(self, job: dict, grace_s: float = 0.0) -> None:  # noqa: ARG002 (the interface's signature)
        """Not done: cancelling needs a third endpoint; AWX's own job timeout applies."""
        log(LOG, logging.WARNING, "AWX job not canceled by the receiver", job_id=job["id"])

    def result(self, job: dict) -> dict | None:
        stored = self._stored_result(job)
        if stored is not None:
            return stored
        result, _ = self._poll(job)
        return result

    def wait(self, job: dict, on_ident, poll_s: float | None = None, timeout_s: float | None = None) -> dict | None:
        """Follow the AWX job until it ends (GET every awx.poll_s). AWX not answering is retried
        until timeout_s; then the outcome is `timeout` (the AWX job is left to AWX's own timeout)."""
        poll_s = poll_s if poll_s is not None else self.cfg.poll_s
        ident = self.ident(job)
        if ident:
            on_ident(ident)
        end = time.monotonic() + timeout_s if timeout_s else None
        last = None
        while True:
            stored = self._stored_result(job)
            if stored is not None:
                return stored
            launched = self._launched(job)
            if launched is None:
                return None  # never reached AWX: judged from the Node
            result, last = self._poll(job)
            if result is not None:
                return result
            if end is not None and time.monotonic() > end:
                return self._finish(job, {"ident": f"awx-job-{launched['job']}", "status": "timeout", "rc": None,
                                          "source": "awx", "awx_job": launched["job"],
                                          "message": f"AWX job {launched['job']} not finished after {timeout_s:.0f}s "
                                                     f"(last: {last}); not canceled by the receiver"})
            time.sleep(poll_s)

    def runs(self, job_id: int) -> list[str]:
        """Every AWX job launched for this job."""
        found = []
        for path in sorted(self.job_dir(job_id).glob("awx-job-*.json")):
            try:
                found.append(f"awx-job-{json.loads(path.read_text())['job']}")
            except (OSError, ValueError, KeyError):
                continue
        return found
