"""Remediation through AWX (issue 16, item 3): with run.backend awx the receiver keeps its policy
and launches the isolate job template through AWX's API, then follows the AWX job to its end.
Against tests/unit/awx_standin.py, a stand-in of the two endpoints it calls: success, a failed
job, AWX refusing the token, AWX down, TLS with the site's CA, a restart that follows the job
already launched, and untrusted alert text reaching AWX verbatim as an extra variable."""

from __future__ import annotations

import json
import logging
import socket
import ssl

import pytest
from ai_l1_day2.remediation import config as config_mod
from ai_l1_day2.remediation.awx import AwxClient, AwxError, AwxExecutor
from ai_l1_day2.remediation.executor import SubprocessExecutor, make_executor
from ai_l1_day2.remediation.server import tls_context
from ai_l1_day2.remediation.service import Service
from ai_l1_day2.remediation.store import Store
from awx_standin import AwxStandIn
from remediation_fakes import HMAC_KEY, TOKEN, FakeNodes, alert, make_config, payload
from test_remediation_store import wait_state
from test_remediation_tls import self_signed

AWX_TOKEN = "awx-oauth2-token-0123456789abcdef"  # noqa: S105 (a test token)
TEMPLATE = 42


def awx_config(tmp_path, url, *, token=AWX_TOKEN, run=None, **awx):
    token_file = tmp_path / "awx-token"
    token_file.write_text(token + "\n")
    section = {"url": url, "job_template_id": TEMPLATE, "token_file": str(token_file), "poll_s": 0.02, **awx}
    return make_config(tmp_path, run={"backend": "awx", "workers": 1, "timeout_s": 60, **(run or {})}, awx=section,
                       ceiling={"max_fraction": 1.0, "pool_label": "accelerator"})


def receiver(tmp_path, url, nodes=None, **kw):
    conf = awx_config(tmp_path, url, **kw)
    return Service(conf, Store(conf.db_path), nodes or FakeNodes(), make_executor(conf))


def isolate(svc, *alerts):
    """Webhook in, wait for every queued job to end; the jobs."""
    svc.start()
    try:
        decisions = svc.handle_payload(payload(*(alerts or [alert()])))
        assert all(d["decision"] == "queued" for d in decisions), decisions
        return [wait_state(svc.store, d["job_id"], ("done", "failed")) for d in decisions]
    finally:
        svc.stop()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def no_token_anywhere(svc, caplog):
    """The AWX token is in no log record, audit row, job row or file of the job directories."""
    assert AWX_TOKEN not in caplog.text
    for record in caplog.records:
        assert AWX_TOKEN not in json.dumps(getattr(record, "fields", {}), default=str)
    assert AWX_TOKEN not in json.dumps(svc.store.audit_entries(), default=str)
    assert AWX_TOKEN not in json.dumps(svc.store.jobs(), default=str)
    for path in svc.cfg.jobs_dir.rglob("*"):
        if path.is_file():
            assert AWX_TOKEN not in path.read_text(errors="replace"), path


# ------------------------------------------------------------------ through the receiver


def test_success_launches_the_template_and_follows_the_job(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    with AwxStandIn(AWX_TOKEN, running_polls=2) as awx:
        svc = receiver(tmp_path, awx.url)
        [job] = isolate(svc, alert(xid=79, host="gpu2"))
    assert job["state"] == "done" and job["status"] == "successful", job
    [launch] = awx.launches
    assert launch["template"] == TEMPLATE and launch["body"]["limit"] == "gpu2"
    assert launch["body"]["extra_vars"]["day2_fault"] == "xid-79"
    assert launch["body"]["extra_vars"]["day2_remediation_job"] == job["id"]
    assert job["ident"] == f"awx-job-{launch['job']}" and job["pid"] == launch["job"]
    assert awx.polls(launch["job"]) == 4  # pending, running x2, successful
    assert [r["headers"]["Authorization"] for r in awx.requests] == [f"Bearer {AWX_TOKEN}"] * 5
    # the policy stays in the receiver: its precordon, its lock (released), its audit
    assert [c[0] for c in svc.nodes.cordons] == ["gpu2"]
    with svc.store.transaction() as db:
        assert svc.store.lock_holder(db, "gpu2") is None
    started = [a for a in svc.store.audit_entries("job.started") if a["job_id"] == job["id"]]
    assert started and started[0]["details"]["pid"] == launch["job"]
    result = json.loads((svc.executor.job_dir(job["id"]) / "result.json").read_text())
    assert result["source"] == "awx" and result["url"].endswith(f"/#/jobs/playbook/{launch['job']}")
    no_token_anywhere(svc, caplog)


def test_a_failed_awx_job_fails_the_remediation_job(tmp_path):
    with AwxStandIn(AWX_TOKEN, outcome="failed") as awx:
        [job] = isolate(receiver(tmp_path, awx.url))
    assert job["state"] == "failed" and job["status"] == "failed", job
    assert f"awx-job-{awx.launches[0]['job']} failed" in job["message"]


def test_an_awx_error_names_awx_s_explanation(tmp_path):
    with AwxStandIn(AWX_TOKEN, outcome="error") as awx:
        [job] = isolate(receiver(tmp_path, awx.url))
    assert job["state"] == "failed" and job["status"] == "error" and "Job terminated due to error" in job["message"]


def test_awx_refusing_the_token_fails_the_job_and_never_shows_it(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    with AwxStandIn("the-token-awx-knows-0123456789") as awx:
        svc = receiver(tmp_path, awx.url)
        [job] = isolate(svc)
    assert job["state"] == "failed" and job["status"] == "error", job
    assert "refused the token (HTTP 401)" in job["message"] and "Invalid token" in job["message"], job["message"]
    assert awx.launches == [] and len(awx.requests) == 1  # refused: nothing launched, nothing polled
    with svc.store.transaction() as db:
        assert svc.store.lock_holder(db, "gpu1") is None
    no_token_anywhere(svc, caplog)


def test_awx_down_fails_the_job(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    svc = receiver(tmp_path, f"http://127.0.0.1:{closed_port()}")
    [job] = isolate(svc)
    assert job["state"] == "failed" and job["status"] == "error", job
    assert "unreachable" in job["message"] and "launch" in job["message"], job["message"]
    no_token_anywhere(svc, caplog)


def test_an_unknown_job_template_is_named(tmp_path):
    with AwxStandIn(AWX_TOKEN, templates=(7,)) as awx:
        [job] = isolate(receiver(tmp_path, awx.url))
    assert job["state"] == "failed" and "HTTP 404" in job["message"] and f"/job_templates/{TEMPLATE}/" in job["message"]


def test_alert_text_reaches_awx_verbatim_as_extra_vars(tmp_path):
    """Untrusted alert text is data: sent as values of the JSON extra_vars object, never rendered
    here; what AWX receives is byte for byte what the alert held."""
    attack = "{{ lookup('pipe','id') }}"
    summary_attack = "GPU-{% set x = lookup('pipe', 'id') %}{{ x }} {# c #}"
    xid = alert("GPUXidError", "gpu1", xid=79)
    xid["labels"]["UUID"] = attack
    ecc = alert("GPUECCUncorrectableError", "gpu2")
    for key in ("gpu", "UUID"):
        ecc["labels"].pop(key, None)
    ecc["annotations"] = {"summary": summary_attack}
    with AwxStandIn(AWX_TOKEN) as awx:
        svc = receiver(tmp_path, awx.url, run={"extravars": {"day2_note": attack}})
        jobs = isolate(svc, xid, ecc)
    assert [j["state"] for j in jobs] == ["done", "done"], jobs
    sent = {launch["body"]["limit"]: launch for launch in awx.launches}
    assert set(sent) == {"gpu1", "gpu2"}
    for launch in sent.values():
        assert launch["template"] == TEMPLATE
        assert isinstance(launch["body"]["extra_vars"], dict)  # a JSON object, not a string to parse
        assert launch["body"]["extra_vars"]["day2_note"] == attack
    assert attack in sent["gpu1"]["body"]["extra_vars"]["day2_fault_details"]
    assert sent["gpu2"]["body"]["extra_vars"]["day2_fault_details"] == f"GPUECCUncorrectableError: {summary_attack}"
    raw = [r["raw"] for r in awx.requests if r["method"] == "POST"]
    assert any(json.dumps(attack).encode() in body for body in raw)


def test_a_restarted_receiver_follows_the_launched_job_exactly_once(tmp_path):
    """Receiver A launched the AWX job and died; receiver B follows that job to its end and
    launches nothing."""
    with AwxStandIn(AWX_TOKEN, outcome=None) as awx:
        a = receiver(tmp_path, awx.url)
        [d] = a.handle_payload(payload(alert()))
        job = a.store.claim_next(a.owner)
        pid = a.executor.start(job, a.spec(job))
        a.store.update_job(job["id"], pid=pid, run_dir=str(a.executor.job_dir(job["id"])))
        assert pid == awx.launches[0]["job"]
        # ... A is gone (no worker ever waited); B starts on the same state directory
        b = Service(a.cfg, Store(a.cfg.db_path), a.nodes, make_executor(a.cfg))
        b.owner = "receiver-b"
        b.start()
        try:
            adopted = [e for e in b.store.audit_entries("job.recovered") if e["job_id"] == d["job_id"]]
            assert adopted and adopted[0]["decision"] == "adopted", adopted
            assert b.store.job(d["job_id"])["state"] == "running"
            awx.finish(pid, "successful")
            done = wait_state(b.store, d["job_id"], ("done", "failed"))
        finally:
            b.stop()
    assert done["state"] == "done" and done["ident"] == f"awx-job-{pid}", done
    assert len(awx.launches) == 1
    assert b.executor.runs(d["job_id"]) == [f"awx-job-{pid}"]


def test_a_restart_after_the_awx_job_ended_records_its_outcome(tmp_path):
    with AwxStandIn(AWX_TOKEN, outcome="failed", running_polls=0) as awx:
        a = receiver(tmp_path, awx.url)
        [d] = a.handle_payload(payload(alert()))
        job = a.store.claim_next(a.owner)
        a.store.update_job(job["id"], pid=a.executor.start(job, a.spec(job)))
        awx.jobs[awx.launches[0]["job"]]["answers"] = 5  # it ended while no receiver watched
        b = Service(a.cfg, Store(a.cfg.db_path), a.nodes, make_executor(a.cfg))
        b.owner = "receiver-b"
        b.recover()
    job = b.store.job(d["job_id"])
    assert job["state"] == "failed" and job["status"] == "failed" and len(awx.launches) == 1, job


# ------------------------------------------------------------------ the executor and client alone


def test_a_job_that_never_ends_times_out_without_a_second_launch(tmp_path):
    with AwxStandIn(AWX_TOKEN, outcome=None) as awx:
        conf = awx_config(tmp_path, awx.url)
        ex = AwxExecutor(conf.jobs_dir, conf.awx)
        job = {"id": 1, "attempts": 1, "node": "gpu1"}
        assert ex.start(job, {"limit": ["gpu1"], "extravars": {}}) == awx.launches[0]["job"]
        assert ex.alive(job) and ex.result(job) is None
        idents = []
        result = ex.wait(job, idents.append, timeout_s=0.3)
    assert result["status"] == "timeout" and "not canceled" in result["message"], result
    assert idents == [f"awx-job-{awx.launches[0]['job']}"] and len(awx.launches) == 1
    assert not ex.alive(job)  # the outcome is recorded


def test_awx_ignoring_the_limit_is_an_error(tmp_path):
    """A template that does not prompt for Limit runs without it: no isolation, say so."""
    with AwxStandIn(AWX_TOKEN, running_polls=0, ignores={TEMPLATE: ["limit"]}) as awx:
        conf = awx_config(tmp_path, awx.url)
        ex = AwxExecutor(conf.jobs_dir, conf.awx)
        job = {"id": 1, "attempts": 1, "node": "gpu1"}
        ex.start(job, {"limit": ["gpu1"], "extravars": {}})
        result = ex.wait(job, lambda _i: None, timeout_s=10)
    assert result["status"] == "error" and "must prompt on launch for Limit" in result["message"], result


def test_https_with_the_site_ca(tmp_path):
    crt, key = self_signed(tmp_path / "tls")
    with AwxStandIn(AWX_TOKEN, tls=tls_context(crt, key), running_polls=0) as awx:
        assert awx.url.startswith("https://localhost:")
        trusted = AwxClient(awx_config(tmp_path, awx.url, ca_file=str(crt)).awx)
        job = trusted.launch("gpu1", {"day2_fault": "xid-79"})["job"]
        assert trusted.job(job)["status"] == "pending"
        with pytest.raises(AwxError, match="unreachable.*CERTIFICATE_VERIFY_FAILED"):
            AwxClient(awx_config(tmp_path, awx.url).awx).launch("gpu1", {})
        unverified = AwxClient(awx_config(tmp_path, awx.url, verify=False).awx)
        assert unverified.launch("gpu1", {})["job"] > job


def test_the_token_file_is_read_at_each_request(tmp_path):
    """A rotated Secret is picked up without a restart."""
    with AwxStandIn(AWX_TOKEN) as awx:
        conf = awx_config(tmp_path, awx.url)
        client = AwxClient(conf.awx)
        client.launch("gpu1", {})
        awx.token = "rotated-token-0123456789abcdef"
        with pytest.raises(AwxError, match=r"HTTP 401"):
            client.launch("gpu1", {})
        (tmp_path / "awx-token").write_text(awx.token)
        client.launch("gpu1", {})
    assert len(awx.launches) == 2


def test_a_redirect_is_not_followed(tmp_path):
    """urllib would send the token on to wherever a redirect points."""
    import threading  # noqa: PLC0415
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer  # noqa: PLC0415

    seen = []

    class Redirect(BaseHTTPRequestHandler):
        def log_message(self, *_a):
            pass

        def do_POST(self):  # noqa: N802
            seen.append(self.headers.get("Authorization"))
            self.send_response(301)
            self.send_header("Location", "http://127.0.0.1:1/elsewhere/")
            self.send_header("Content-Length", "0")
            self.end_headers()

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        client = AwxClient(awx_config(tmp_path, f"http://127.0.0.1:{srv.server_address[1]}").awx)
        with pytest.raises(AwxError, match=r"redirect \(HTTP 301\).*not followed"):
            client.launch("gpu1", {})
    finally:
        srv.shutdown()
        srv.server_close()
    assert len(seen) == 1


# ------------------------------------------------------------------ configuration


def test_the_backend_picks_the_executor(tmp_path):
    assert isinstance(make_executor(make_config(tmp_path)), SubprocessExecutor)
    conf = awx_config(tmp_path, "https://awx.example.com")
    assert isinstance(make_executor(conf), AwxExecutor)
    assert conf.inventory is None  # AWX's job template has its own inventory


def load(tmp_path, env=None, **raw):
    env = {"AI_L1_REMEDIATE_TOKEN": TOKEN, "AI_L1_REMEDIATE_HMAC_KEY": HMAC_KEY, **(env or {})}
    return config_mod.load(None, env=env, overrides={"state_dir": str(tmp_path / "state"), **raw})


AWX = {"url": "https://awx.example.com", "job_template_id": 42}


@pytest.mark.parametrize(("raw", "message"), [
    ({"run": {"backend": "ansible"}}, r"run.backend: expected runner or awx, got 'ansible'"),
    ({"run": {"backend": "awx"}}, r"awx: required with run.backend awx"),
    ({"run": {"backend": "awx"}, "awx": {"job_template_id": 42}}, r"awx.url: required"),
    ({"run": {"backend": "awx"}, "awx": {**AWX, "url": "ftp://awx"}}, r"awx.url: expected an http\(s\) URL"),
    ({"run": {"backend": "awx"}, "awx": {**AWX, "url": "https://admin:pw@awx"}}, r"awx.url: no credentials"),
    ({"run": {"backend": "awx"}, "awx": {**AWX, "job_template_id": "42"}}, r"awx.job_template_id: expected an AWX"),
    ({"run": {"backend": "awx"}, "awx": {"url": AWX["url"]}}, r"awx.job_template_id: expected an AWX"),
    ({"run": {"backend": "awx"}, "awx": {**AWX, "inventory_id": 0}}, r"awx.inventory_id: expected an AWX"),
    ({"run": {"backend": "awx"}, "awx": {**AWX, "token": AWX_TOKEN}}, r"awx.token: secrets are not read"),
    ({"run": {"backend": "awx"}, "awx": {**AWX, "token_file": "/nonexistent/t"}}, r"awx.token_file: cannot read"),
    ({"run": {"backend": "awx"}, "awx": {**AWX, "token_env": "NO_SUCH_VAR"}},
     r"awx.token_env: the AWX token is not in the environment variable NO_SUCH_VAR"),
    ({"run": {"backend": "awx"}, "awx": {**AWX, "verify": "no"}}, r"awx.verify: expected bool"),
    ({"run": {"backend": "awx"}, "awx": {**AWX, "verify": False, "ca_file": "/etc/hostname"}},
     r"awx.ca_file: set with awx.verify false"),
    ({"run": {"backend": "awx"}, "awx": {**AWX, "ca_file": "/nonexistent/ca.crt"}}, r"awx.ca_file: cannot read"),
    ({"run": {"backend": "awx"}, "awx": {**AWX, "poll_s": 0}}, r"awx.poll_s and awx.request_timeout_s must be > 0"),
    ({"run": {"backend": "awx"}, "awx": {**AWX, "tmeplate": 1}}, r"awx: unknown keys tmeplate"),
    ({"run": {"backend": "awx", "inventory": "/nonexistent/hosts.yml"}, "awx": AWX},
     r"run.inventory: inventory /nonexistent/hosts.yml does not exist"),
    ({"run": {"inventory": "/etc/hostname"}, "awx": AWX}, r"awx: set, but run.backend is runner"),
])
def test_configuration_errors_name_the_field(tmp_path, raw, message):
    with pytest.raises(config_mod.ConfigError, match=message) as exc:
        load(tmp_path, env={"AI_L1_REMEDIATE_AWX_TOKEN": AWX_TOKEN}, **raw)
    assert AWX_TOKEN not in str(exc.value)


@pytest.mark.parametrize("token", ["", "   ", "two words-0123456789", "line\nbreak-0123456789"])
def test_a_token_a_header_cannot_carry_is_refused_without_showing_it(tmp_path, token):
    (tmp_path / "t").write_text(token)
    with pytest.raises(config_mod.ConfigError, match=r"awx.token_file: .*(empty|blanks)") as exc:
        load(tmp_path, run={"backend": "awx"}, awx={**AWX, "token_file": str(tmp_path / "t")})
    assert not token.strip() or token.strip() not in str(exc.value)


def test_the_token_from_the_environment_is_never_shown(tmp_path):
    cfg = load(tmp_path, env={"AI_L1_REMEDIATE_AWX_TOKEN": AWX_TOKEN}, run={"backend": "awx"}, awx=AWX)
    assert cfg.awx.token() == AWX_TOKEN and cfg.awx.url == "https://awx.example.com"
    assert AWX_TOKEN not in repr(cfg) and AWX_TOKEN not in json.dumps(cfg.awx.describe())
    assert cfg.awx.describe()["token"] == "env AI_L1_REMEDIATE_AWX_TOKEN"
    cfg = load(tmp_path, env={"SITE_AWX": AWX_TOKEN}, run={"backend": "awx"},
               awx={**AWX, "url": "https://awx.example.com/", "token_env": "SITE_AWX"})
    assert cfg.awx.token() == AWX_TOKEN and cfg.awx.url == "https://awx.example.com"


def test_ssl_context_follows_verify(tmp_path):
    crt, _key = self_signed(tmp_path / "tls")
    strict = AwxClient(load(tmp_path, env={"AI_L1_REMEDIATE_AWX_TOKEN": AWX_TOKEN}, run={"backend": "awx"},
                            awx={**AWX, "ca_file": str(crt)}).awx)
    handler = next(h for h in strict._opener.handlers if hasattr(h, "_context"))
    assert handler._context.verify_mode == ssl.CERT_REQUIRED and handler._context.check_hostname
