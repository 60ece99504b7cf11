"""kubeadm's certificates on the lab: the hourly expiry check's metrics agree with the certificates
themselves (openssl), the kubelets rotate their own client certificates, and
`ai-l1-day2 renew-certificates` renews every control plane's certificates while a client keeps
asking the API through the virtual IP, none of its requests failing (the renewal's time printed).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from datetime import datetime

from conftest import (
    CONTROL_PLANES,
    REPO,
    WORKERS,
    admin_kubeconfig,
    day2_tool,
    kube_api,
    not_ready_nodes,
    on,
    playbook,
    record,
    tail,
)

METRICS = "/var/lib/node_exporter/textfile/kubeadm_certificates.prom"
PKI = "/etc/kubernetes/pki"
# kubeadm's certificate names -> files (the kubeconfigs carry theirs inline).
FILES = {"apiserver": f"{PKI}/apiserver.crt", "apiserver-kubelet-client": f"{PKI}/apiserver-kubelet-client.crt",
         "front-proxy-client": f"{PKI}/front-proxy-client.crt", "etcd-server": f"{PKI}/etcd/server.crt",
         "etcd-peer": f"{PKI}/etcd/peer.crt", "ca": f"{PKI}/ca.crt", "etcd-ca": f"{PKI}/etcd/ca.crt"}


def not_after(host: str) -> dict[str, int]:
    """NotAfter of each certificate of FILES on `host`, as a Unix time (openssl's reading)."""
    out = {}
    for name, path in FILES.items():
        proc = on(host, f"sudo openssl x509 -noout -enddate -in {path}")
        assert proc.returncode == 0, tail(proc)
        text = proc.stdout.strip().removeprefix("notAfter=")
        out[name] = int(datetime.strptime(text, "%b %d %H:%M:%S %Y %Z").timestamp())
    return out


def metrics(host: str) -> dict[tuple[str, str], float]:
    """(certificate, kind) -> expiry from the check's textfile on `host`, with ('check', 'success')."""
    proc = on(host, f"cat {METRICS}")
    assert proc.returncode == 0, tail(proc)
    out = {}
    for line in proc.stdout.splitlines():
        if line.startswith("ai_l1_kubeadm_certificate_expiry_timestamp_seconds{"):
            labels = dict(part.split("=", 1) for part in line[line.index("{") + 1:line.index("}")].split(","))
            out[(labels["certificate"].strip('"'), labels["kind"].strip('"'))] = float(line.rsplit(" ", 1)[1])
        elif line.startswith("ai_l1_kubeadm_certificate_check_success "):
            out[("check", "success")] = float(line.rsplit(" ", 1)[1])
    return out


def renew(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return day2_tool("renew-certificates", *args, timeout=timeout)


def test_expiry_metrics_match_the_certificates(k8s_cluster):  # noqa: ARG001
    for host in CONTROL_PLANES:
        timer = on(host, "systemctl is-enabled ai-l1-kubeadm-cert-expiry.timer && "
                         "systemctl is-active ai-l1-kubeadm-cert-expiry.timer")
        assert timer.stdout.split() == ["enabled", "active"], tail(timer)
        got, truth = metrics(host), not_after(host)
        assert got[("check", "success")] == 1
        for name, expires in truth.items():
            kind = "ca" if name.endswith("ca") else "certificate"
            assert got[(name, kind)] == expires, (host, name)
        # Every kubeconfig kubeadm writes on a control plane is there too.
        assert {"admin.conf", "controller-manager.conf", "scheduler.conf"} <= {name for name, _ in got}


def test_kubelets_rotate_their_own_client_certificates(k8s_cluster):  # noqa: ARG001
    for host in CONTROL_PLANES + WORKERS:
        proc = on(host, "sudo grep -E '^rotateCertificates: true$' /var/lib/kubelet/config.yaml && "
                        "sudo test -L /var/lib/kubelet/pki/kubelet-client-current.pem")
        assert proc.returncode == 0, f"{host}: {tail(proc)}"


def test_renewal_refuses_some_control_planes_and_check_mode_changes_nothing(k8s_cluster):  # noqa: ARG001
    before = not_after(CONTROL_PLANES[0])
    limited = playbook(REPO / "playbooks" / "day2" / "renew_certificates.yml", "--limit", CONTROL_PLANES[0])
    assert limited.returncode != 0 and "in one run" in limited.stdout, tail(limited)
    checked = renew("--check")
    assert checked.returncode == 0, tail(checked)
    assert not_after(CONTROL_PLANES[0]) == before


def test_renewal_moves_every_certificate_forward_and_the_api_stays_up(k8s_cluster):  # noqa: ARG001
    before = {host: not_after(host) for host in CONTROL_PLANES}
    api = kube_api(admin_kubeconfig())
    failures: list[str] = []
    answered = [0]
    stop = threading.Event()

    def probe() -> None:
        """A client of the API through the virtual IP: a read that reaches etcd, every 200 ms."""
        while not stop.is_set():
            try:
                api.core.list_namespaced_config_map("kube-system", limit=1, _request_timeout=5)
                answered[0] += 1
            except Exception as exc:  # noqa: BLE001 (every failure a client would see counts)
                failures.append(f"{time.strftime('%H:%M:%S')} {type(exc).__name__}: {str(exc)[:200]}")
            stop.wait(0.2)

    # kubeadm gives a renewed certificate a year from now: a second's difference is enough to tell.
    time.sleep(2)
    prober = threading.Thread(target=probe, daemon=True)
    prober.start()
    t0 = time.monotonic()
    try:
        proc = renew()
    finally:
        elapsed = time.monotonic() - t0
        stop.set()
        prober.join(10)
    assert proc.returncode == 0, tail(proc, 120)
    assert json.loads(proc.stdout)["status"] == "successful"
    record("cert_renewal_s", elapsed)
    print(f"renewal of {len(CONTROL_PLANES)} control planes: {elapsed:.0f} s; the API answered {answered[0]} times, "
          f"failed {len(failures)} times")
    assert failures == [], failures
    assert answered[0] > elapsed  # about five a second: the probe ran throughout

    for host in CONTROL_PLANES:
        after = not_after(host)
        for name in FILES:
            if name.endswith("ca"):
                assert after[name] == before[host][name], (host, name)  # CAs are not renewed
            else:
                assert after[name] > before[host][name], (host, name)
        # The metrics were read again after the renewal.
        got = metrics(host)
        assert got[("apiserver", "certificate")] == after["apiserver"], host
        # The API server serves the new certificate.
        served = on(host, "echo | openssl s_client -connect 127.0.0.1:6443 2>/dev/null | openssl x509 -noout -enddate")
        assert datetime.strptime(served.stdout.strip().removeprefix("notAfter="), "%b %d %H:%M:%S %Y %Z").timestamp() \
            == after["apiserver"], tail(served)
        assert on(host, "sudo test ! -e /etc/kubernetes/ai-l1-renew").returncode == 0
    assert not_ready_nodes() == []
