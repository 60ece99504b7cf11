"""The receiver over HTTPS (listen.tls): Alertmanager's tls_config with the site CA reaches it,
plain HTTP and a client that never finishes the handshake do not hold it up, and a bad TLS
configuration is refused at load."""

from __future__ import annotations

import datetime
import json
import socket
import ssl
import threading
import urllib.error
import urllib.request

import pytest
from ai_l1_day2.remediation import config as config_mod
from ai_l1_day2.remediation.server import make_server, tls_context
from ai_l1_day2.remediation.service import Service
from ai_l1_day2.remediation.store import Store
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from remediation_fakes import TOKEN, FakeExecutor, FakeNodes, make_config


def self_signed(directory):
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ai-l1-remediate")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
            .sign(key, hashes.SHA256()))
    crt, pem_key = directory / "tls.crt", directory / "tls.key"
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem_key.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    return crt, pem_key


@pytest.fixture
def https(tmp_path):
    crt, key = self_signed(tmp_path)
    conf = make_config(tmp_path, listen={"tls": {"cert_file": str(crt), "key_file": str(key)}})
    assert (conf.tls_cert_file, conf.tls_key_file) == (crt, key)
    svc = Service(conf, Store(conf.db_path), FakeNodes(), FakeExecutor(conf.jobs_dir))
    srv = make_server(svc, "127.0.0.1", 0, tls_context(conf.tls_cert_file, conf.tls_key_file))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv.server_address[1], crt
    srv.shutdown()
    srv.server_close()


def get(url, context=None, token=TOKEN):
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=10, context=context) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_https_with_the_ca_answers_and_auth_still_applies(https):
    port, crt = https
    ca = ssl.create_default_context(cafile=str(crt))
    code, body = get(f"https://localhost:{port}/healthz", ca)
    assert code == 200 and body["status"] == "ok", body
    assert get(f"https://localhost:{port}/healthz", ca, token="wrong-token-0123456789")[0] == 401


def test_an_unverified_client_and_plain_http_are_refused(https):
    port, _ = https
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        get(f"https://localhost:{port}/healthz", ssl.create_default_context())
    with pytest.raises((urllib.error.URLError, ConnectionError, OSError)):
        get(f"http://127.0.0.1:{port}/healthz")


def test_a_stalled_handshake_does_not_block_other_clients(https):
    port, crt = https
    with socket.create_connection(("127.0.0.1", port)):  # connects, never says hello
        code, _ = get(f"https://localhost:{port}/healthz", ssl.create_default_context(cafile=str(crt)))
    assert code == 200


@pytest.mark.parametrize(("tls", "message"), [
    ({"cert_file": "/nonexistent/tls.crt", "key_file": "/nonexistent/tls.key"}, "listen.tls.cert_file: cannot read"),
    ({"cert_file": "/etc/hostname"}, "listen.tls.key_file: a PEM file path is required"),
    ({"cert": "x"}, "listen.tls: expected {cert_file, key_file}"),
    ("on", "listen.tls: expected"),
])
def test_bad_tls_configuration_is_refused(tmp_path, tls, message):
    with pytest.raises(config_mod.ConfigError, match=message.replace("{", r"\{").replace("}", r"\}")):
        make_config(tmp_path, listen={"tls": tls})


def test_a_key_that_does_not_match_the_certificate_fails_at_start(tmp_path):
    crt, _ = self_signed(tmp_path / "a")
    _, other_key = self_signed(tmp_path / "b")
    with pytest.raises(ssl.SSLError):
        tls_context(crt, other_key)
