"""roles/remediation_receiver in systemd mode (playbooks/monitoring.yml, group remediation_receiver)
on a lab control plane standing in for the controller host.

The host is given what the role expects there (the operator's part): this project and an
interpreter with its requirements. Here both come from the receiver image the lab built
(/opt/ai-l1: the day2 package, ansible-core, ansible-runner, the Kubernetes client,
playbooks/day2 with its role and collections), with a venv whose .pth points at them and whose
bin/ holds their console scripts, as a venv with requirements.txt installed would. Then:

- the role installs the user, /etc/ai-l1-remediate (configuration, inventory, token,
  kubeconfig, a self-signed certificate for the host's address), the store directory and the
  unit (KillMode=process, LimitNOFILE=65536), and the service, listening on the host's lab
  address (inventories/lab: remediation_receiver_listen_host; the role's default is 127.0.0.1),
  answers /readyz over TLS checked against that certificate and the host's IP address;
- a webhook with the token isolates gpu2 with the real isolate playbook (cordon, fault taint,
  drain), no SSH: the run uses the installed kubeconfig with the receiver as API host;
- a wrong token is refused (401);
- a second run changes nothing.
The service, its files and user are removed at the end, and gpu2 is put back.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import time
import urllib.error
import urllib.request

import pytest
import yaml
from conftest import CONTROL_PLANES, LAB_INVENTORY, REPO, WORKERS, on, playbook, recap, sh, tail
from remediation_lab import Api, alert, fetch_kubeconfig, payload

HOST = CONTROL_PLANES[1]
LAB_HOSTS = yaml.safe_load((LAB_INVENTORY / "hosts.yml").read_text())
ADDRESS = next(h for g in LAB_HOSTS["all"]["children"].values() for name, h in (g.get("hosts") or {}).items()
               if name == HOST)["ansible_host"]
TOKEN = "lab-systemd-token-0123456789abcdef"
IMAGE = "localhost/ai-l1-k8s/remediation-receiver:0.1.0"
NODE = "gpu2"


def run_role(tmp_path_factory) -> subprocess.CompletedProcess:
    tmp = tmp_path_factory.getbasetemp()
    inventory = tmp / "remediation-systemd.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"remediation_receiver": {"hosts": {HOST: {
        "remediation_receiver_python": "/opt/ai-l1-venv/bin/python",
        "remediation_receiver_project_dir": "/opt/ai-l1/project",
        "remediation_receiver_kubeconfig": "/etc/kubernetes/admin.conf",
        "remediation_receiver_alertmanager_url": ""}}}}}}))
    extra = tmp / "remediation-systemd.json"
    extra.write_text(json.dumps({"remediation_receiver_enabled": True, "remediation_receiver_mode": "systemd",
                                 "remediation_receiver_token": TOKEN}))
    return playbook("-i", inventory, REPO / "playbooks" / "monitoring.yml",
              "--limit", HOST, "-e", f"@{extra}", timeout=600)


def cleanup() -> None:
    on(HOST, "systemctl disable --now ai-l1-remediate 2>/dev/null; "
             "rm -f /etc/systemd/system/ai-l1-remediate.service; systemctl daemon-reload; "
             "rm -rf /etc/ai-l1-remediate /var/lib/ai-l1-remediate /opt/ai-l1 /opt/ai-l1-venv; "
             "userdel ai-l1-remediate 2>/dev/null; true")


@pytest.fixture(scope="module")
def service(k8s_cluster, tmp_path_factory):
    api = Api(fetch_kubeconfig(LAB_INVENTORY, CONTROL_PLANES[0], tmp_path_factory.mktemp("systemd") / "admin.conf"))
    snapshot = api.snapshot(WORKERS)
    if any(s["unschedulable"] for s in snapshot.values()):
        pytest.fail(f"a worker is cordoned before the test: {snapshot}")
    # The operator's part: this project and its requirements on the host (from the lab's image).
    container = sh("podman", "create", IMAGE, check=True).stdout.strip()
    try:
        staging = tmp_path_factory.mktemp("receiver-files")
        sh("podman", "cp", f"{container}:/opt/ai-l1", str(staging), check=True)
    finally:
        sh("podman", "rm", container)
    sh("podman", "cp", str(staging / "ai-l1"), f"ai-l1-{HOST}:/opt/ai-l1", check=True)
    proc = on(HOST, "python3 -m venv --without-pip /opt/ai-l1-venv && echo /opt/ai-l1/python > "
                    "$(/opt/ai-l1-venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])')"
                    "/ai-l1.pth && for f in /opt/ai-l1/python/bin/*; do sed '1s|.*|#!/opt/ai-l1-venv/bin/python|' $f "
                    "> /opt/ai-l1-venv/bin/${f##*/}; chmod 755 /opt/ai-l1-venv/bin/${f##*/}; done && "
                    "/opt/ai-l1-venv/bin/ansible-playbook --version && "
                    "/opt/ai-l1-venv/bin/python -c 'import ansible_runner, kubernetes, ai_l1_day2'")
    assert proc.returncode == 0, tail(proc)
    try:
        first = run_role(tmp_path_factory)
        assert first.returncode == 0, tail(first, 120)
        yield {"api": api, "snapshot": snapshot, "tmp": tmp_path_factory}
    finally:
        cleanup()
        print("restored:", api.restore(snapshot))


def context() -> ssl.SSLContext:
    """Trust exactly the receiver's certificate, checked against the host's IP address."""
    cert = on(HOST, "cat /etc/ai-l1-remediate/tls.crt").stdout
    return ssl.create_default_context(cadata=cert)


def call(path: str, body: dict | None = None, token: str = TOKEN) -> tuple[int, dict]:
    req = urllib.request.Request(f"https://{ADDRESS}:9095{path}", data=json.dumps(body).encode() if body else None,
                                 headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, context=context(), timeout=30) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_service_files_and_unit(service):
    assert on(HOST, "systemctl is-active ai-l1-remediate").stdout.strip() == "active"
    assert sorted(on(HOST, "systemctl show -p KillMode,User,LimitNOFILE ai-l1-remediate").stdout.split()) == \
        ["KillMode=process", "LimitNOFILE=65536", "User=ai-l1-remediate"]
    modes = on(HOST, "stat -c '%n %a %U %G' /etc/ai-l1-remediate/* /var/lib/ai-l1-remediate").stdout.splitlines()
    got = {line.split()[0]: line.split()[1:] for line in modes}
    for name in ("token", "tls.key", "kubeconfig", "remediation.yml", "hosts.yml"):
        assert got[f"/etc/ai-l1-remediate/{name}"] == ["640", "root", "ai-l1-remediate"], (name, got)
    assert got["/var/lib/ai-l1-remediate"] == ["700", "ai-l1-remediate", "ai-l1-remediate"], got
    config = on(HOST, "cat /etc/ai-l1-remediate/remediation.yml").stdout
    assert TOKEN not in config
    assert yaml.safe_load(config)["listen"]["host"] == ADDRESS  # not every address of the host
    assert call("/readyz") == (200, {"status": "ok"})


def test_webhook_isolates_the_node_without_ssh(service):
    api = service["api"]
    status, body = call("/webhook", payload(alert("GPUECCUncorrectableError", NODE, xid=None)))
    assert status == 200 and body["decisions"][0]["decision"] == "queued", body
    job_id = body["decisions"][0]["job_id"]
    end, job = time.monotonic() + 240, {}
    while time.monotonic() < end:
        job = call(f"/jobs/{job_id}")[1]["job"]
        if job["state"] in ("done", "failed"):
            break
        time.sleep(2)
    if job.get("state") != "done":
        runs = on(HOST, f"cat /var/lib/ai-l1-remediate/jobs/job-{job_id:06d}/execute-*.log; "
                        f"tail -30 /var/lib/ai-l1-remediate/jobs/job-{job_id:06d}/runs/*/artifacts/*/stdout").stdout
        pytest.fail(f"job {job_id}: {job.get('state')}: {job.get('message')}\n{runs[-3000:]}")
    state = api.state(NODE)
    assert state["unschedulable"], state
    assert {"key": "ai-platform.io/fault", "value": "ecc-uncorrectable", "effect": "NoSchedule"} in state["taints"]


def test_wrong_token_refused(service):
    status, _ = call("/webhook", payload(alert("GPUECCUncorrectableError", "npu1", xid=None)),
                     token="not-the-token-0123456789")
    assert status == 401
    assert not service["api"].state("npu1")["unschedulable"]


def test_second_run_changes_nothing(service):
    second = run_role(service["tmp"])
    assert second.returncode == 0, tail(second, 120)
    assert recap(second.stdout)[HOST]["changed"] == 0, tail(second, 120)
