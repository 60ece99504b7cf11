"""roles/k8s_control_plane/files/ai-l1-kubeadm-cert-expiry against a script that prints what
`kubeadm certs check-expiration -o json` prints (kubeadm's own output is read in
tests/integration/test_certificates.py)."""

from __future__ import annotations

import json
import shutil
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import pytest

PROGRAM = Path(__file__).resolve().parents[2] / "roles" / "k8s_control_plane" / "files" / "ai-l1-kubeadm-cert-expiry"

REPORT = {
    "kind": "CertificateExpirationInfo",
    "apiVersion": "output.kubeadm.k8s.io/v1alpha3",
    "certificates": [
        {"name": "admin.conf", "expirationDate": "2027-12-07T05:00:00Z", "residualTime": 31535000,
         "caName": "ca", "externallyManaged": False, "missing": False},
        {"name": "apiserver", "expirationDate": "2027-01-02T03:04:05Z", "residualTime": 2246645,
         "caName": "ca", "externallyManaged": False, "missing": False},
        {"name": "etcd-server", "expirationDate": "2028-01-01T00:00:00Z", "caName": "etcd-ca",
         "externallyManaged": True, "missing": False},
        {"name": "super-admin.conf", "caName": "ca", "externallyManaged": False, "missing": True},
    ],
    "certificateAuthorities": [
        {"name": "ca", "expirationDate": "2036-12-05T05:00:00Z", "residualTime": 315000000,
         "externallyManaged": False, "missing": False},
    ],
}


def run(tmp_path: Path, script: str) -> tuple[subprocess.CompletedProcess, str]:
    kubeadm = tmp_path / "kubeadm"
    kubeadm.write_text("#!/bin/sh\n" + script)
    kubeadm.chmod(0o755)
    out = tmp_path / "textfile"
    proc = subprocess.run([str(PROGRAM), "--textfile-dir", str(out), "--kubeadm", str(kubeadm)],
                          capture_output=True, text=True, check=False)
    return proc, (out / "kubeadm_certificates.prom").read_text()


def ts(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(timezone.utc).timestamp())


def test_every_certificate_and_ca_that_exists_becomes_an_expiry_line(tmp_path):
    report = tmp_path / "report.json"
    report.write_text(json.dumps(REPORT))
    # kubeadm logs to stdout before its document when it reads the cluster's configuration.
    proc, text = run(tmp_path, f"echo '[check-expiration] Reading configuration from the cluster...'\ncat {report}\n")
    assert proc.returncode == 0, proc.stderr
    lines = {line.rsplit(" ", 1)[0]: line.rsplit(" ", 1)[1] for line in text.splitlines() if not line.startswith("#")}
    prefix = "ai_l1_kubeadm_certificate_expiry_timestamp_seconds"
    assert lines == {
        f'{prefix}{{certificate="admin.conf",externally_managed="false",kind="certificate"}}':
            str(ts("2027-12-07T05:00:00Z")),
        f'{prefix}{{certificate="apiserver",externally_managed="false",kind="certificate"}}':
            str(ts("2027-01-02T03:04:05Z")),
        f'{prefix}{{certificate="etcd-server",externally_managed="true",kind="certificate"}}':
            str(ts("2028-01-01T00:00:00Z")),
        f'{prefix}{{certificate="ca",externally_managed="false",kind="ca"}}': str(ts("2036-12-05T05:00:00Z")),
        "ai_l1_kubeadm_certificate_check_success": "1",
        "ai_l1_kubeadm_certificate_check_timestamp_seconds": lines["ai_l1_kubeadm_certificate_check_timestamp_seconds"],
    }
    assert abs(int(lines["ai_l1_kubeadm_certificate_check_timestamp_seconds"])
               - datetime.now(timezone.utc).timestamp()) < 60
    assert "the first to expire: apiserver" in proc.stdout
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.fail("promtool is missing: apt-get install prometheus")
    lint = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr


@pytest.mark.parametrize("script", [
    "echo 'error: open /etc/kubernetes/pki/ca.crt: no such file' >&2\nexit 1\n",   # kubeadm fails
    "echo 'no JSON here'\n",                                                          # nothing to read
    "echo '{\"certificates\": [], \"certificateAuthorities\": []}'\n",                # an empty report
    "echo '{\"certificates\": [{\"name\": \"apiserver\", \"expirationDate\": \"soon\"}]}'\n",  # a bad date
])
def test_a_failed_check_says_so_and_leaves_no_expiry_to_alert_on(tmp_path, script):
    proc, text = run(tmp_path, script)
    assert proc.returncode == 1
    assert "cannot read kubeadm's certificates" in proc.stderr
    assert "ai_l1_kubeadm_certificate_check_success 0" in text.splitlines()
    assert "expiry_timestamp_seconds{" not in text
