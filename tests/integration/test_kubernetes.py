"""The Kubernetes rollout on the lab, for real: 3 control planes (stacked etcd) behind the
keepalived + haproxy virtual IP, 3 workers, every node Ready, etcd with 3 healthy members, the
API still answering through the VIP while the control plane holding it is stopped, and a
second `site.yml` run that changes nothing.

Needs root podman, the node image (`make image`), the lab's Kubernetes artifacts
(`bash lab/k8s/build.sh`) and the mirror serving them (`python lab/mirror/mirror.py up`);
each missing piece fails with what to run. The lab is removed at the end unless
AI_L1_KEEP_LAB=1. Timings are printed (pytest -s) and written to .cache/k8s-timings.json.
"""

from __future__ import annotations

import json
import os
import re
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
LABCTL = [sys.executable, str(REPO / "lab" / "labctl.py")]
# Another lab inventory (a second lab on its own network) for development; CI uses the lab.
LAB_INVENTORY = Path(os.environ.get("AI_L1_LAB_INVENTORY", REPO / "inventories" / "lab"))
SITE = REPO / "playbooks" / "site.yml"
CACHE = Path(os.environ.get("AI_L1_CACHE", "/var/cache/ai-l1"))
OVERLAY = CACHE / "mirror" / "lab-overlay.yml"
TIMINGS = REPO / ".cache" / "k8s-timings.json"
ENV = {
    **os.environ,
    "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
    "ANSIBLE_FORCE_COLOR": "0",
    "ANSIBLE_NOCOLOR": "1",
    "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
}
RECAP = re.compile(
    r"^(?P<host>\S+)\s*:\s*ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+"
    r"unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)",
    re.MULTILINE,
)


def sh(*cmd: str | Path, timeout: int = 3600, check: bool = False) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], cwd=REPO, env=ENV, capture_output=True,
                          text=True, timeout=timeout, check=False)
    if check:
        assert proc.returncode == 0, f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{tail(proc)}"
    return proc


def tail(proc: subprocess.CompletedProcess, lines: int = 80) -> str:
    return "\n".join((proc.stdout + proc.stderr).splitlines()[-lines:])


def recap(output: str) -> dict[str, dict[str, int]]:
    return {m["host"]: {k: int(m[k]) for k in ("ok", "changed", "unreachable", "failed")}
            for m in RECAP.finditer(output)}


def lab_inventory() -> dict:
    return yaml.safe_load((LAB_INVENTORY / "hosts.yml").read_text())["all"]


def group_hosts(group: dict) -> list[str]:
    hosts = list((group.get("hosts") or {}).keys())
    for child in (group.get("children") or {}).values():
        hosts += group_hosts(child or {})
    return hosts


INV = lab_inventory()
CONTROL_PLANES = group_hosts(INV["children"]["k8s_control_plane"])
WORKERS = group_hosts(INV["children"]["k8s_worker"])
LAB_NAME = INV["vars"]["lab_name"]
K8S_VARS = yaml.safe_load((LAB_INVENTORY / "group_vars" / "all" / "k8s.yml").read_text())
VIP = K8S_VARS["k8s_control_plane_vip"]
VIP_URL = f"https://{VIP}:8443/readyz"


def on(host: str, command: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """A command on a lab node over SSH, as Ansible reaches it."""
    return sh(*LABCTL, "-i", LAB_INVENTORY / "hosts.yml", "ssh", host, command, timeout=timeout)


def kubectl_json(host: str, args: str) -> dict:
    proc = on(host, f"kubectl --kubeconfig /etc/kubernetes/admin.conf {args} -o json")
    assert proc.returncode == 0, f"kubectl {args} on {host}:\n{tail(proc)}"
    return json.loads(proc.stdout)


def vip_ready(timeout: float = 3.0) -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(VIP_URL, timeout=timeout, context=ctx) as resp:  # noqa: S310
            return resp.status == 200
    except (OSError, urllib.error.URLError):
        return False


def record(key: str, seconds: float) -> None:
    TIMINGS.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(TIMINGS.read_text()) if TIMINGS.exists() else {}
    data[key] = round(seconds, 1)
    TIMINGS.write_text(json.dumps(data, indent=2) + "\n")
    print(f"timing {key}: {seconds:.0f}s")


def etcd_members(host: str) -> tuple[list[dict], list[dict]]:
    etcdctl = ("kubectl --kubeconfig /etc/kubernetes/admin.conf -n kube-system exec etcd-{h} -- "
               "etcdctl --endpoints=https://127.0.0.1:2379 --cacert=/etc/kubernetes/pki/etcd/ca.crt "
               "--cert=/etc/kubernetes/pki/etcd/healthcheck-client.crt "
               "--key=/etc/kubernetes/pki/etcd/healthcheck-client.key ").format(h=host)
    members = on(host, etcdctl + "member list -w json")
    assert members.returncode == 0, f"etcdctl member list on {host}:\n{tail(members)}"
    health = on(host, etcdctl + "endpoint health --cluster -w json")
    assert health.returncode == 0, f"etcdctl endpoint health on {host}:\n{tail(health)}"
    return json.loads(members.stdout)["members"], json.loads(health.stdout)


def wait_nodes_ready(host: str, timeout: int = 600) -> list[str]:
    deadline = time.monotonic() + timeout
    not_ready: list[str] = []
    while time.monotonic() < deadline:
        proc = on(host, "kubectl --kubeconfig /etc/kubernetes/admin.conf get nodes -o json")
        if proc.returncode == 0:
            nodes = json.loads(proc.stdout)["items"]
            ready = {n["metadata"]["name"] for n in nodes
                     if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])}
            not_ready = sorted(set(CONTROL_PLANES + WORKERS) - ready)
            if not not_ready:
                return []
        time.sleep(5)
    return not_ready


@pytest.fixture(scope="module")
def cluster():
    if not OVERLAY.is_file():
        pytest.fail(f"no lab artifact overlay at {OVERLAY}: build and publish the lab's Kubernetes "
                    "artifacts first (bash lab/k8s/build.sh && python lab/mirror/mirror.py up)")
    status = sh(sys.executable, REPO / "lab" / "mirror" / "mirror.py", "status", timeout=300)
    assert status.returncode == 0, f"the lab mirror does not serve every artifact:\n{tail(status)}"
    # Every node's kubelet, containerd and kube-proxy take inotify instances from the same
    # host-wide per-user limit (128 by default): "too many open files" otherwise.
    instances = int(Path("/proc/sys/fs/inotify/max_user_instances").read_text())
    if instances < 1024:
        pytest.fail(f"fs.inotify.max_user_instances is {instances} on this host: six kubelets need more "
                    "(sysctl -w fs.inotify.max_user_instances=8192 fs.inotify.max_user_watches=524288)")
    sh(*LABCTL, "-i", LAB_INVENTORY / "hosts.yml", "up", check=True)
    t0 = time.monotonic()
    first = sh("ansible-playbook", "-i", LAB_INVENTORY, SITE)
    record("site_first_run_s", time.monotonic() - t0)
    assert first.returncode == 0, f"first site.yml run failed:\n{tail(first, 150)}"
    yield first
    if os.environ.get("AI_L1_KEEP_LAB") != "1":
        sh(*LABCTL, "-i", LAB_INVENTORY / "hosts.yml", "down", check=True)


def test_every_node_is_ready(cluster):
    nodes = kubectl_json(CONTROL_PLANES[0], "get nodes")["items"]
    names = sorted(n["metadata"]["name"] for n in nodes)
    assert names == sorted(CONTROL_PLANES + WORKERS)
    for node in nodes:
        ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
        assert ready and ready[0]["status"] == "True", f"{node['metadata']['name']}: {ready}"
        assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.34.4"
    control = {n["metadata"]["name"] for n in nodes
               if "node-role.kubernetes.io/control-plane" in n["metadata"].get("labels", {})}
    assert control == set(CONTROL_PLANES)


def test_etcd_has_three_healthy_members(cluster):
    members, health = etcd_members(CONTROL_PLANES[0])
    assert sorted(m["name"] for m in members) == sorted(CONTROL_PLANES)
    assert not any(m.get("isLearner") for m in members), members
    assert len(health) == len(CONTROL_PLANES), health
    unhealthy = [h for h in health if not h.get("health")]
    assert not unhealthy, unhealthy


def test_api_survives_the_vip_holder_being_stopped(cluster):
    assert vip_ready(), f"{VIP_URL} does not answer before any control plane is stopped"
    holders = [h for h in CONTROL_PLANES if VIP in on(h, "ip -o -4 addr show").stdout]
    assert len(holders) == 1, f"exactly one control plane must hold {VIP}, found {holders}"
    victim = holders[0]
    container = f"{LAB_NAME}-{victim}"
    survivor = next(h for h in CONTROL_PLANES if h != victim)
    sh("podman", "stop", "-t", "10", container, check=True)
    try:
        t0 = time.monotonic()
        while not vip_ready() and time.monotonic() - t0 < 60:
            time.sleep(1)
        record("vip_failover_s", time.monotonic() - t0)
        assert vip_ready(), f"{VIP_URL} did not answer within 60 s of stopping {victim}"
        # Writes need etcd quorum (2 of 3): create and delete an object through the VIP (the
        # admin kubeconfig's server), as a client would, retrying while the fail-over settles.
        name = f"vip-check-{int(time.time())}"
        for _ in range(6):
            proc = on(survivor, f"kubectl --kubeconfig /etc/kubernetes/admin.conf --request-timeout=10s "
                                f"create configmap {name} -n default --from-literal=stopped={victim} && "
                                f"kubectl --kubeconfig /etc/kubernetes/admin.conf delete configmap {name} -n default")
            if proc.returncode == 0:
                break
            time.sleep(5)
        assert proc.returncode == 0, f"API writes through the VIP failed with {victim} stopped:\n{tail(proc)}"
        new_holder = [h for h in CONTROL_PLANES if h != victim and VIP in on(h, "ip -o -4 addr show").stdout]
        assert len(new_holder) == 1, f"{VIP} did not move to one surviving control plane: {new_holder}"
    finally:
        sh("podman", "start", container, check=True)
    not_ready = wait_nodes_ready(survivor)
    assert not not_ready, f"nodes not Ready after {victim} came back: {not_ready}"
    deadline = time.monotonic() + 300
    while True:
        try:
            members, health = etcd_members(victim)
            if len(health) == len(CONTROL_PLANES) and all(h.get("health") for h in health):
                break
        except AssertionError:
            if time.monotonic() > deadline:
                raise
        assert time.monotonic() < deadline, f"etcd not healthy after {victim} restarted: {health}"
        time.sleep(5)


def test_second_run_changes_nothing(cluster):
    t0 = time.monotonic()
    second = sh("ansible-playbook", "-i", LAB_INVENTORY, SITE)
    record("site_second_run_s", time.monotonic() - t0)
    assert second.returncode == 0, f"second site.yml run failed:\n{tail(second, 150)}"
    result = recap(second.stdout)
    missing = set(CONTROL_PLANES + WORKERS) - set(result)
    assert not missing, f"hosts missing from the recap: {missing}"
    changed = {h: r["changed"] for h, r in result.items() if r["changed"]}
    assert not changed, f"second run changed something: {changed}\n{tail(second, 150)}"
