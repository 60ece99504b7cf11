"""Feishu relay (monitoring/relay/feishu_relay.py) against a local HTTP sink standing in
for Feishu: signing, retries with backoff, error answers, and no secret in the logs."""

import base64
import hashlib
import hmac
import importlib.util
import json
import logging
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

RELAY_PATH = Path(__file__).resolve().parents[2] / "monitoring" / "relay" / "feishu_relay.py"
_spec = importlib.util.spec_from_file_location("feishu_relay", RELAY_PATH)
relay = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(relay)

SECRET = "s3cr3t-do-not-log"
HOOK = "/open-apis/bot/v2/hook/TOKEN-do-not-log"

ALERTS = {
    "version": "4", "status": "firing", "receiver": "feishu-critical",
    "commonLabels": {"alertname": "GPUXidError", "severity": "critical"},
    "alerts": [{
        "status": "firing",
        "labels": {"alertname": "GPUXidError", "severity": "critical", "Hostname": "gpu1", "gpu": "0",
                   "UUID": "GPU-0"},
        "annotations": {"summary": "GPU XID 79 on gpu1 GPU 0", "description": "XID 79"},
    }],
}


class Sink:
    """Records posts; answers the first `fail` of them with `fail_status`."""

    def __init__(self, fail=0, fail_status=500, answer=None):
        self.posts, self.fail, self.fail_status = [], fail, fail_status
        self.answer = answer or {"code": 0, "msg": "success"}
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                sink.posts.append((self.path, body))
                status = sink.fail_status if len(sink.posts) <= sink.fail else 200
                data = json.dumps(sink.answer).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_port}{HOOK}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def serve():
    started = []

    def start(channels, **kw):
        kw.setdefault("backoff", 0.01)
        server = relay.make_server(("127.0.0.1", 0), channels, **kw)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        started.append(server)
        return f"http://127.0.0.1:{server.server_port}"

    yield start
    for server in started:
        server.shutdown()
        server.server_close()


def post(url, body):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def expected_sign(timestamp, secret):
    key = f"{timestamp}\n{secret}".encode()
    return base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()


def test_sign_matches_feishu_reference():
    # Feishu's documented algorithm, computed independently of the relay.
    assert relay.sign("1599360473", "demo") == expected_sign("1599360473", "demo")


def test_signed_delivery_with_labels(serve, caplog):
    sink = Sink()
    try:
        base = serve({"critical": {"url": sink.url, "secret": SECRET}})
        with caplog.at_level(logging.DEBUG, logger="feishu_relay"):
            assert post(base + "/feishu/critical", ALERTS) == 200
        ((path, body),) = sink.posts
        assert path == HOOK
        assert body["msg_type"] == "text"
        assert body["sign"] == expected_sign(body["timestamp"], SECRET)
        text = body["content"]["text"]
        assert "GPUXidError" in text and "Hostname=gpu1" in text and "gpu=0" in text and "XID 79" in text
        assert SECRET not in caplog.text and "TOKEN-do-not-log" not in caplog.text
    finally:
        sink.close()


def test_unsigned_without_secret(serve):
    sink = Sink()
    try:
        base = serve({"info": {"url": sink.url, "secret": None}})
        assert post(base + "/feishu/info", ALERTS) == 200
        ((_, body),) = sink.posts
        assert "sign" not in body and "timestamp" not in body
    finally:
        sink.close()


def test_retries_server_errors_with_backoff(serve, monkeypatch):
    sleeps = []
    monkeypatch.setattr(relay.time, "sleep", sleeps.append)
    sink = Sink(fail=2, fail_status=503)
    try:
        base = serve({"critical": {"url": sink.url, "secret": SECRET}}, backoff=0.5)
        assert post(base + "/feishu/critical", ALERTS) == 200
        assert len(sink.posts) == 3
        assert sleeps == [0.5, 1.0]
    finally:
        sink.close()


def test_gives_up_with_502_and_logs_no_secret(serve, caplog):
    sink = Sink(fail=100, fail_status=500)
    try:
        base = serve({"critical": {"url": sink.url, "secret": SECRET}}, attempts=3)
        with caplog.at_level(logging.DEBUG, logger="feishu_relay"):
            assert post(base + "/feishu/critical", ALERTS) == 502
        assert len(sink.posts) == 3
        assert "attempt 3/3 failed: HTTP 500" in caplog.text
        assert SECRET not in caplog.text and "TOKEN-do-not-log" not in caplog.text
    finally:
        sink.close()


def test_feishu_rejection_is_not_retried(serve):
    sink = Sink(answer={"code": 19021, "msg": "sign match fail or timestamp is not within one hour from current time"})
    try:
        base = serve({"critical": {"url": sink.url, "secret": SECRET}}, attempts=4)
        assert post(base + "/feishu/critical", ALERTS) == 502
        assert len(sink.posts) == 1
    finally:
        sink.close()


def test_unreachable_bot_is_retried_then_502(serve, caplog):
    base = serve({"critical": {"url": "http://127.0.0.1:9" + HOOK, "secret": SECRET}}, attempts=2)
    with caplog.at_level(logging.DEBUG, logger="feishu_relay"):
        assert post(base + "/feishu/critical", ALERTS) == 502
    assert "attempt 2/2 failed" in caplog.text
    assert "TOKEN-do-not-log" not in caplog.text


def test_bad_requests(serve):
    sink = Sink()
    try:
        base = serve({"critical": {"url": sink.url, "secret": None}})
        assert post(base + "/feishu/nope", ALERTS) == 404
        assert post(base + "/feishu/critical", b"not json") == 400
        assert sink.posts == []
        with urllib.request.urlopen(base + "/healthz", timeout=5) as resp:
            assert resp.status == 200
    finally:
        sink.close()


def test_long_groups_are_truncated():
    many = dict(ALERTS, alerts=ALERTS["alerts"] * 500)
    assert len(relay.format_text(many)) <= relay.MAX_TEXT


def test_config_check_reads_secret_file_and_never_prints_it(tmp_path):
    secret = tmp_path / "critical.secret"
    secret.write_text(SECRET + "\n")
    cfg = tmp_path / "relay.json"
    cfg.write_text(json.dumps({"channels": {"critical": {"url": "https://open.feishu.cn" + HOOK,
                                                         "secret_file": str(secret)}}}))
    assert relay.load_config(cfg)["critical"]["secret"] == SECRET
    proc = subprocess.run([sys.executable, str(RELAY_PATH), "--config", str(cfg), "--check"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0 and "channels critical" in proc.stdout
    assert SECRET not in proc.stdout + proc.stderr
    cfg.write_text(json.dumps({"channels": {"critical": {"url": "ftp://x"}}}))
    proc = subprocess.run([sys.executable, str(RELAY_PATH), "--config", str(cfg), "--check"],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 1
