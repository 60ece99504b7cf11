"""The receiver under floods and slow clients: the audit trail is bounded and refusals are counted,
not written one by one; credentials are checked before a body is read; a request has one total
deadline; idle connections cost no thread; the number of connections is capped; and an
authenticated alert is decided while all of that goes on. Raw sockets against the real server."""

from __future__ import annotations

import json
import socket
import sqlite3
import threading
import time

import pytest
from ai_l1_day2.remediation import config as config_mod
from ai_l1_day2.remediation import server as server_mod
from ai_l1_day2.remediation.auth import SIGNATURE_HEADER, sign
from ai_l1_day2.remediation.service import Service
from ai_l1_day2.remediation.store import Store
from remediation_fakes import HMAC_KEY, TOKEN, FakeExecutor, FakeNodes, alert, make_config, payload


@pytest.fixture
def receiver(tmp_path, monkeypatch):
    monkeypatch.setattr(server_mod, "SOCKET_TIMEOUT_S", 1.5)
    conf = make_config(tmp_path, ceiling={"max_fraction": 1.0, "pool_label": "accelerator"})
    svc = Service(conf, Store(conf.db_path), FakeNodes(), FakeExecutor(conf.jobs_dir))
    srv = server_mod.make_server(svc, "127.0.0.1", 0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield svc, srv
    srv.shutdown()
    srv.server_close()


def request(path="/webhook", body=b"{}", headers=None, length=None, method="POST") -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "Host: x", f"Content-Length: {len(body) if length is None else length}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def exchange(srv, data: bytes, timeout=10) -> bytes:
    with socket.create_connection(srv.server_address, timeout=timeout) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1])


def authenticated_alert(srv, host="gpu1") -> tuple[int, dict]:
    body = json.dumps(payload(alert(host=host, fp=f"fp-{host}-{time.monotonic_ns()}"))).encode()
    answer = exchange(srv, request(body=body, headers={"Authorization": f"Bearer {TOKEN}"}))
    return status(answer), json.loads(answer.split(b"\r\n\r\n", 1)[1])


# -- the audit trail is bounded --------------------------------------------------------------------

def test_audit_rows_past_the_row_bound_are_dropped_oldest_first(tmp_path):
    store = Store(tmp_path / "s.db", audit_max_rows=50)
    for i in range(500):
        store.audit("auth.refused", reason=f"r{i}")
    store.prune_audit()
    rows = store.audit_entries()
    assert len(rows) == 50
    assert [r["reason"] for r in rows] == [f"r{i}" for i in range(450, 500)]


def test_audit_bytes_past_the_byte_bound_are_dropped_oldest_first(tmp_path):
    store = Store(tmp_path / "s.db", audit_max_bytes=100_000)
    for i in range(100):
        store.audit("auth.refused", reason=f"r{i}", details={"pad": "x" * 10_000})
    store.prune_audit()
    rows = store.audit_entries()
    assert sum(r["size"] for r in rows) <= 100_000
    assert 5 <= len(rows) < 100 and rows[-1]["reason"] == "r99"


def test_the_bound_is_kept_while_writing_without_an_explicit_prune(tmp_path):
    store = Store(tmp_path / "s.db", audit_max_rows=100)
    for i in range(2000):
        store.audit("auth.refused", reason=f"r{i}")
    assert len(store.audit_entries()) <= 100 + 200  # pruned every AUDIT_PRUNE_EVERY writes


def test_a_store_written_before_the_bound_gets_sizes_and_is_pruned(tmp_path):
    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.executescript("CREATE TABLE audit (id INTEGER PRIMARY KEY AUTOINCREMENT, ts REAL NOT NULL,"
                     " event TEXT NOT NULL, decision TEXT NOT NULL DEFAULT '', reason TEXT NOT NULL DEFAULT '',"
                     " node TEXT NOT NULL DEFAULT '', job_id INTEGER, fingerprint TEXT NOT NULL DEFAULT '',"
                     " remote TEXT NOT NULL DEFAULT '', details TEXT NOT NULL DEFAULT '{}');")
    db.executemany("INSERT INTO audit (ts, event, reason) VALUES (?, 'auth.refused', ?)",
                   [(float(i), f"r{i}") for i in range(300)])
    db.commit()
    db.close()
    store = Store(path, audit_max_rows=100)
    rows = store.audit_entries()
    assert len(rows) == 100 and rows[0]["reason"] == "r200" and all(r["size"] > 0 for r in rows)


@pytest.mark.parametrize("audit", [{"max_rows": 10}, {"max_bytes": 1000}, {"max_rows": "many"}, {"rows": 5000}])
def test_an_audit_bound_too_small_or_misspelt_is_refused(tmp_path, audit):
    with pytest.raises(config_mod.ConfigError, match="audit"):
        make_config(tmp_path, audit=audit)


# -- refused requests are rate-limited per client and in all ---------------------------------------

def test_a_flood_of_refused_requests_writes_a_bounded_number_of_rows_and_an_alert_is_still_decided(receiver):
    svc, srv = receiver
    for _ in range(200):
        assert status(exchange(srv, request(headers={"Authorization": "Bearer wrong-token-0123456789"}))) == 401
    refused = svc.store.audit_entries("auth.refused")
    assert len(refused) == srv.limiter.per_client, len(refused)
    code, answer = authenticated_alert(srv, "gpu2")
    assert code == 200 and answer["decisions"][0]["decision"] == "queued", answer


def test_the_window_that_suppressed_refusals_ends_in_one_aggregated_row(receiver):
    svc, srv = receiver
    now = [1000.0]
    srv.limiter = server_mod.RefusalLimiter(per_client=3, total=50, window_s=60, clock=lambda: now[0])
    for _ in range(20):
        exchange(srv, request(headers={"Authorization": "Bearer wrong-token-0123456789"}))
    now[0] += 61
    exchange(srv, request(headers={"Authorization": "Bearer wrong-token-0123456789"}))
    deadline = time.monotonic() + 5
    while not svc.store.audit_entries("request.refused.aggregated") and time.monotonic() < deadline:
        time.sleep(0.05)
    [row] = svc.store.audit_entries("request.refused.aggregated")
    assert row["details"]["suppressed"] == 17
    assert row["details"]["top"] == [{"remote": "127.0.0.1", "suppressed": 17}]
    assert len(svc.store.audit_entries("auth.refused")) == 3 + 1  # the new window's first


def test_the_limiter_bounds_all_clients_together():
    limiter = server_mod.RefusalLimiter(per_client=2, total=5, window_s=60, clock=lambda: 0.0)
    written = [limiter.admit(f"10.0.0.{i}")[0] for i in range(20)]
    assert written.count(True) == 5


# -- connections: credentials before the body, one deadline, no thread per connection, a cap ------

def test_credentials_are_checked_before_the_body_is_read(receiver, monkeypatch):
    svc, srv = receiver
    monkeypatch.setattr(server_mod, "SOCKET_TIMEOUT_S", 6)  # a server that waited for the body would answer at 6 s
    with socket.create_connection(srv.server_address, timeout=10) as sock:
        # announces 1 MiB and sends none of it: the answer must not wait for the body
        sock.sendall(request(body=b"", length=str(1 << 20)))
        t0 = time.monotonic()
        answer = sock.recv(65536)
        waited = time.monotonic() - t0
    assert status(answer) == 401 and waited < 3.0, (answer[:100], waited)
    assert svc.store.audit_entries("auth.refused")


def test_a_fresh_hmac_signature_reads_the_body_and_a_wrong_one_is_refused(receiver):
    _svc, srv = receiver
    body = json.dumps(payload(alert(host="gpu3", fp="hm1"))).encode()
    good = exchange(srv, request(body=body, headers={SIGNATURE_HEADER: sign(HMAC_KEY.encode(), body)}))
    assert status(good) == 200, good[:200]
    bad = exchange(srv, request(body=body + b" ", headers={SIGNATURE_HEADER: sign(HMAC_KEY.encode(), body)}))
    assert status(bad) == 401


def test_a_client_sending_a_byte_at_a_time_is_cut_at_the_total_deadline(receiver):
    _svc, srv = receiver
    data = request(headers={"Authorization": f"Bearer {TOKEN}"})
    with socket.create_connection(srv.server_address, timeout=10) as sock:
        t0 = time.monotonic()
        closed_after = None
        for byte in data[:40]:
            try:
                sock.sendall(bytes([byte]))
            except OSError:
                closed_after = time.monotonic() - t0
                break
            sock.settimeout(0.4)
            try:
                if sock.recv(1024) == b"":
                    closed_after = time.monotonic() - t0
                    break
            except TimeoutError:
                continue
    assert closed_after is not None, "a byte every 0.4 s kept the connection open past 16 s"
    assert closed_after < server_mod.SOCKET_TIMEOUT_S + 3.0, closed_after  # not renewed by each byte (16 s)


def test_idle_connections_take_no_thread_and_an_alert_is_answered_beside_them(receiver):
    _svc, srv = receiver
    before = threading.active_count()
    idle = [socket.create_connection(srv.server_address, timeout=10) for _ in range(300)]
    try:
        for sock in idle:
            sock.sendall(b"POST /webhook HTTP/1.1\r\nHost: x\r\n")
        time.sleep(0.3)
        assert threading.active_count() - before < 20
        code, _answer = authenticated_alert(srv, "gpu1")
        assert code == 200
    finally:
        for sock in idle:
            sock.close()


def test_connections_past_the_cap_are_closed_unanswered(receiver, monkeypatch):
    _svc, srv = receiver
    monkeypatch.setattr(server_mod, "MAX_CONNECTIONS", 5)
    held = [socket.create_connection(srv.server_address, timeout=10) for _ in range(5)]
    try:
        for sock in held:
            sock.sendall(b"GET /jobs HTTP/1.1\r\n")
        time.sleep(0.2)
        with socket.create_connection(srv.server_address, timeout=5) as extra:
            extra.sendall(request(method="GET", path="/jobs", body=b"", headers={"Authorization": f"Bearer {TOKEN}"}))
            try:
                assert extra.recv(1024) == b""
            except ConnectionResetError:
                pass
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.2)
    answer = exchange(srv, request(method="GET", path="/jobs", body=b"", headers={"Authorization": f"Bearer {TOKEN}"}))
    assert status(answer) == 200


# -- framing the old server accepted ---------------------------------------------------------------

@pytest.mark.parametrize(("extra", "code"), [
    ({"Content-Length": "5"}, 400),            # a second, conflicting Content-Length
    ({"Transfer-Encoding": "chunked"}, 501),   # bodies are framed by Content-Length only
])
def test_ambiguous_framing_is_refused(receiver, extra, code):
    _svc, srv = receiver
    answer = exchange(srv, request(headers={"Authorization": f"Bearer {TOKEN}", **extra}))
    assert status(answer) == code, answer[:200]


# -- /audit answers a bounded page ------------------------------------------------------------------

def test_audit_is_answered_in_bounded_pages_that_chain(receiver):
    svc, srv = receiver
    for i in range(1200):
        svc.store.audit("alert", decision="refused", reason=f"r{i}")
    auth = {"Authorization": f"Bearer {TOKEN}"}
    seen, since, pages = [], 0, 0
    while True:
        answer = exchange(srv, request(method="GET", path=f"/audit?event=alert&since={since}&limit=5000",
                                       body=b"", headers=auth))
        page = json.loads(answer.split(b"\r\n\r\n", 1)[1])
        assert len(page["audit"]) <= server_mod.AUDIT_PAGE_MAX
        seen += [r["reason"] for r in page["audit"]]
        pages += 1
        if page["next"] is None:
            break
        since = page["next"]
    assert seen == [f"r{i}" for i in range(1200)] and pages == 2


def test_the_audit_command_prints_every_row_as_one_json_list(tmp_path, capsys, monkeypatch):
    from ai_l1_day2.remediation import cli  # noqa: PLC0415

    conf = make_config(tmp_path)
    store = Store(conf.db_path)
    for i in range(2500):
        store.audit("alert", reason=f"r{i}")
    config_file = tmp_path / "remediation.yml"
    config_file.write_text(json.dumps({"state_dir": str(conf.state_dir), "run": {"inventory": conf.inventory}}))
    monkeypatch.setenv("AI_L1_REMEDIATE_TOKEN", TOKEN)
    assert cli.main(["audit", "--config", str(config_file), "--event", "alert"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["reason"] for r in rows] == [f"r{i}" for i in range(2500)]


def test_probes_that_arrive_together_share_one_check(receiver):
    """/readyz needs no credentials: 50 probes at once cost one health check (a store write and an
    API call), not fifty, and each still gets the answer."""
    svc, srv = receiver
    calls, real = [], svc.health

    def slow_health():
        calls.append(1)
        time.sleep(0.5)
        return real()

    svc.health = slow_health
    answers = []

    def probe():
        answers.append(status(exchange(srv, request(method="GET", path="/readyz", body=b""))))

    threads = [threading.Thread(target=probe) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert answers == [200] * 50 and len(calls) <= 3, len(calls)


def test_a_get_needs_a_signature_of_its_own_method_and_target(receiver):
    _svc, srv = receiver
    key = HMAC_KEY.encode()

    def get(path, signature):
        return status(exchange(srv, request(method="GET", path=path, body=b"", headers={SIGNATURE_HEADER: signature})))

    assert get("/jobs", sign(key, b"", method="GET", target="/jobs")) == 200
    assert get("/audit", sign(key, b"", method="GET", target="/jobs")) == 401  # another target
    assert get("/jobs", sign(key, b"")) == 401  # v1: the body only
