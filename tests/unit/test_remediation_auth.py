"""Remediation receiver authentication: bearer token and HMAC (constant-time compares),
refusals answered 401 and recorded in the audit log, through the real HTTP server."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import urllib.error
import urllib.request

import pytest
from ai_l1_day2.remediation import auth
from ai_l1_day2.remediation.server import make_server
from ai_l1_day2.remediation.service import Service
from ai_l1_day2.remediation.store import Store
from remediation_fakes import HMAC_KEY, TOKEN, FakeExecutor, FakeNodes, alert, make_config, payload

NOW = 1_700_000_000


class Headers(dict):
    def get(self, key, default=None):
        return next((v for k, v in self.items() if k.lower() == key.lower()), default)


@pytest.fixture
def cfg(tmp_path):
    return make_config(tmp_path)


def test_bearer_ok_and_wrong(cfg):
    assert auth.authenticate(cfg.auth, Headers({"Authorization": f"Bearer {TOKEN}"}), b"") == (True, "bearer", "")
    ok, _, reason = auth.authenticate(cfg.auth, Headers({"Authorization": f"Bearer {TOKEN}x"}), b"")
    assert not ok and reason == "bearer token does not match"
    ok, _, reason = auth.authenticate(cfg.auth, Headers({"Authorization": f"Basic {TOKEN}"}), b"")
    assert not ok and "not 'Bearer <token>'" in reason
    ok, _, reason = auth.authenticate(cfg.auth, Headers(), b"")
    assert not ok and reason.startswith("no credentials")


def test_hmac_ok_tampered_stale_and_malformed(cfg):
    body = b'{"version":"4"}'
    mac = hmac.new(HMAC_KEY.encode(), f"{NOW}.".encode() + body, hashlib.sha256).hexdigest()
    good = Headers({auth.SIGNATURE_HEADER: f"t={NOW},v1={mac}"})
    assert auth.sign(HMAC_KEY.encode(), body, NOW) == f"t={NOW},v1={mac}"
    assert auth.authenticate(cfg.auth, good, body, now=NOW + 10) == (True, "hmac", "")
    ok, _, reason = auth.authenticate(cfg.auth, good, body + b" ", now=NOW)
    assert not ok and reason == "signature does not match"
    ok, _, reason = auth.authenticate(cfg.auth, good, body, now=NOW + 301)
    assert not ok and "301s off (allowed 300s)" in reason
    # the timestamp is signed: moving it forward breaks the signature
    moved = Headers({auth.SIGNATURE_HEADER: f"t={NOW + 400},v1={mac}"})
    assert auth.authenticate(cfg.auth, moved, body, now=NOW + 400)[0] is False
    ok, _, reason = auth.authenticate(cfg.auth, Headers({auth.SIGNATURE_HEADER: "sha256=abc"}), body, now=NOW)
    assert not ok and "malformed" in reason


def test_method_not_configured_is_refused(tmp_path):
    only_token = make_config(tmp_path)
    only_token.auth.hmac_key = None
    sig = auth.sign(HMAC_KEY.encode(), b"x", NOW)
    ok, _, reason = auth.authenticate(only_token.auth, Headers({auth.SIGNATURE_HEADER: sig}), b"x", now=NOW)
    assert not ok and "HMAC authentication is not configured" in reason


def test_compares_are_constant_time(cfg, monkeypatch):
    calls = []
    real = hmac.compare_digest
    monkeypatch.setattr(auth.hmac, "compare_digest", lambda a, b: calls.append(1) or real(a, b))
    auth.authenticate(cfg.auth, Headers({"Authorization": "Bearer nope"}), b"")
    auth.authenticate(cfg.auth, Headers({auth.SIGNATURE_HEADER: auth.sign(b"k" * 20, b"", NOW)}), b"", now=NOW)
    assert len(calls) == 2


@pytest.fixture
def server(tmp_path):
    conf = make_config(tmp_path)
    store = Store(conf.db_path)
    svc = Service(conf, store, FakeNodes(), FakeExecutor(conf.jobs_dir))
    srv = make_server(svc, "127.0.0.1", 0)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield svc, f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def post(url, body: bytes, headers: dict):
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json", **headers})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_http_unauthenticated_refused_401_and_audited_without_the_secret(server):
    svc, url = server
    body = json.dumps(payload(alert())).encode()
    code, answer = post(url + "/webhook", body, {"Authorization": "Bearer wrong-token-value"})
    assert (code, answer) == (401, {"error": "unauthorized"})
    code, _ = post(url + "/webhook", body, {})
    assert code == 401
    refused = svc.store.audit_entries("auth.refused")
    assert [r["reason"] for r in refused] == ["bearer token does not match",
                                              "no credentials (Authorization: Bearer or X-AI-L1-Signature)"]
    assert all(r["remote"] == "127.0.0.1" and r["details"]["path"] == "/webhook" for r in refused)
    dump = json.dumps(svc.store.audit_entries())
    assert "wrong-token-value" not in dump and TOKEN not in dump
    assert svc.store.jobs() == []  # nothing was decided
    # GETs are authenticated too
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(url + "/jobs", timeout=10)
    assert err.value.code == 401


def test_http_bearer_and_hmac_accepted(server):
    svc, url = server
    body = json.dumps(payload(alert(host="gpu1"))).encode()
    code, answer = post(url + "/webhook", body, {"Authorization": f"Bearer {TOKEN}"})
    assert code == 200 and answer["decisions"][0]["decision"] == "queued"
    body = json.dumps(payload(alert(host="gpu2", name="GPUECCUncorrectableError"))).encode()
    code, answer = post(url + "/webhook", body, {auth.SIGNATURE_HEADER: auth.sign(HMAC_KEY.encode(), body)})
    assert code == 200 and answer["decisions"][0]["node"] == "gpu2"
    code, answer = post(url + "/webhook", b'{"version": "3"}', {"Authorization": f"Bearer {TOKEN}"})
    assert code == 400 and "unsupported payload version" in answer["error"]
    assert svc.store.audit_entries("auth.refused") == []


def test_a_signature_dated_ahead_does_not_stretch_the_replay_window(cfg):
    body = b'{"version":"4"}'
    ahead = Headers({auth.SIGNATURE_HEADER: auth.sign(HMAC_KEY.encode(), body, NOW + 290)})
    ok, _, reason = auth.authenticate(cfg.auth, ahead, body, now=NOW)
    assert not ok and "290s ahead (allowed 30s)" in reason
    slightly = Headers({auth.SIGNATURE_HEADER: auth.sign(HMAC_KEY.encode(), body, NOW + 20)})
    assert auth.authenticate(cfg.auth, slightly, body, now=NOW)[0] is True


def test_a_v2_signature_covers_the_method_and_target(cfg):
    sig = auth.sign(HMAC_KEY.encode(), b"", NOW, method="GET", target="/jobs")
    assert sig.startswith(f"t={NOW},v2=")
    headers = Headers({auth.SIGNATURE_HEADER: sig})
    assert auth.authenticate(cfg.auth, headers, b"", now=NOW, method="GET", target="/jobs")[0] is True
    ok, _, reason = auth.authenticate(cfg.auth, headers, b"", now=NOW, method="GET", target="/audit")
    assert not ok and reason == "signature does not match"


def test_a_v1_signature_of_an_empty_body_opens_no_get_endpoint(cfg):
    """v1 signs the body only: a captured one for an empty body would have opened every GET."""
    v1 = Headers({auth.SIGNATURE_HEADER: auth.sign(HMAC_KEY.encode(), b"", NOW)})
    ok, _, reason = auth.authenticate(cfg.auth, v1, b"", now=NOW, method="GET", target="/audit")
    assert not ok and "v1 signature covers the body only" in reason
    assert auth.authenticate(cfg.auth, v1, b"", now=NOW, method="POST", target="/webhook")[0] is True
