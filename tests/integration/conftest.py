"""Shared lab fixtures for the integration tests: ONE lab and ONE Kubernetes rollout per
pytest session, shared by every test file (the rollout takes minutes; CI runs it once).

- `lab_nodes`: the 7 lab nodes are up (`labctl up`, idempotent).
- `k8s_cluster`: `playbooks/site.yml` has run once on the lab in this session (its output is
  `k8s_cluster.first_run`); every test that needs the API server takes this fixture.

The lab is removed when the session ends, unless AI_L1_KEEP_LAB=1. For development against
an already converged lab, AI_L1_REUSE_LAB=1 skips the rollout when every node is Ready
(and keeps the lab); `first_run` is then None and the tests that judge it skip.

Helpers for tests: `sh`, `playbook(args)` (the lab inventory, mitogen), `tail`, `recap`, `on(host, cmd)`,
`kubectl_json(args)`, `wait_for(what, probe)`, `record(key, seconds)` (a measured figure, in TIMINGS),
`kube_api(kubeconfig)` and `controller_kubectl(kubeconfig, args)` (the API from the controller),
`server_dry_run(objects)` (the API server validates objects it does not store).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
LABCTL = [sys.executable, str(REPO / "lab" / "labctl.py")]
# Another lab inventory (a second lab on its own network) for development; CI uses the lab.
LAB_INVENTORY = Path(os.environ.get("AI_L1_LAB_INVENTORY", REPO / "inventories" / "lab"))
SITE = REPO / "playbooks" / "site.yml"
CACHE = Path(os.environ.get("AI_L1_CACHE", "/var/cache/ai-l1"))
OVERLAY = CACHE / "mirror" / "lab-overlay.yml"
KEEP_LAB = os.environ.get("AI_L1_KEEP_LAB") == "1"
REUSE_LAB = os.environ.get("AI_L1_REUSE_LAB") == "1"
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
KUBECTL = "kubectl --kubeconfig /etc/kubernetes/admin.conf"
_ADMIN_KUBECONFIG: Path | None = None
# Figures the tests measure (printed with -s, kept here for the docs' benchmark tables).
TIMINGS = REPO / ".cache" / "integration-timings.json"
# The tests' playbook runs, the first rollout included, use the mitogen strategy (plugins/strategy:
# a persistent interpreter per host instead of a new Python per task, about half a run's time).
# The run that kills a host stays on the default (linear) strategy, as do `make lab` and the unit
# tests' runs: the linear path is tested there. Molecule's scenarios use mitogen too
# (.config/molecule/config.yml).
MITOGEN_ENV = {**ENV, "ANSIBLE_STRATEGY": "mitogen_linear"}


def sh(*cmd: str | Path, timeout: int = 3600, check: bool = False,
       env: dict | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(c) for c in cmd], cwd=REPO, env=env or ENV, capture_output=True,
                          text=True, timeout=timeout, check=False)
    if check:
        assert proc.returncode == 0, f"{' '.join(map(str, cmd))} exited {proc.returncode}:\n{tail(proc)}"
    return proc


def playbook(*args: str | Path, timeout: int = 3600) -> subprocess.CompletedProcess:
    """ansible-playbook -i <the lab inventory> ARGS, under the mitogen strategy (MITOGEN_ENV)."""
    return sh("ansible-playbook", "-i", LAB_INVENTORY, *args, timeout=timeout, env=MITOGEN_ENV)


def day2_tool(operation: str, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    """ai-l1-day2 OPERATION ARGS -i <the lab inventory> --json, the operator's tool from this venv."""
    tool = Path(sys.executable).parent / "ai-l1-day2"
    return subprocess.run([str(tool), operation, *args, "-i", str(LAB_INVENTORY), "--json"], cwd=REPO, env=ENV,
                          capture_output=True, text=True, timeout=timeout, check=False)


def record(key: str, seconds: float) -> None:
    """A measured figure: printed, and kept in TIMINGS under `key` (never asserted)."""
    TIMINGS.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(TIMINGS.read_text()) if TIMINGS.exists() else {}
    data[key] = round(seconds, 1)
    TIMINGS.write_text(json.dumps(data, indent=2) + "\n")
    print(f"\ntiming {key}: {seconds:.1f}s")


def kube_api(kubeconfig: Path) -> SimpleNamespace:
    """Kubernetes API clients on the controller for `kubeconfig` (the admin's, fetched from a control plane)."""
    from kubernetes import client, config  # noqa: PLC0415 (only the tests that talk to the API need it)

    api = config.new_client_from_config(str(kubeconfig))
    return SimpleNamespace(core=client.CoreV1Api(api), batch=client.BatchV1Api(api), apps=client.AppsV1Api(api),
                           custom=client.CustomObjectsApi(api), ApiException=client.ApiException, path=kubeconfig)


def controller_kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """kubectl on the controller (the lab's own build, lab/k8s/build.py) with `kubeconfig`."""
    binary = json.loads((CACHE / "k8s" / "lab-build.json").read_text())["artifacts"]["kubectl"]["path"]
    return subprocess.run([binary, "--kubeconfig", str(kubeconfig), *args], input=stdin, capture_output=True,
                          text=True, timeout=120, check=False)


def tail(proc: subprocess.CompletedProcess, lines: int = 80) -> str:
    return "\n".join((proc.stdout + proc.stderr).splitlines()[-lines:])


def recap(output: str) -> dict[str, dict[str, int]]:
    return {m["host"]: {k: int(m[k]) for k in ("ok", "changed", "unreachable", "failed")}
            for m in RECAP.finditer(output)}


def group_hosts(group: dict) -> list[str]:
    hosts = list((group.get("hosts") or {}).keys())
    for child in (group.get("children") or {}).values():
        hosts += group_hosts(child or {})
    return hosts


INV = yaml.safe_load((LAB_INVENTORY / "hosts.yml").read_text())["all"]
LAB_NAME = INV["vars"]["lab_name"]
CONTROL_PLANES = group_hosts(INV["children"]["k8s_control_plane"])
WORKERS = group_hosts(INV["children"]["k8s_worker"])


def _addresses(group: dict, out: dict[str, str]) -> dict[str, str]:
    for host, hvars in (group.get("hosts") or {}).items():
        if (hvars or {}).get("ansible_host"):
            out[host] = hvars["ansible_host"]
    for child in (group.get("children") or {}).values():
        _addresses(child or {}, out)
    return out


ADDRESSES = _addresses(INV, {})
# One SSH connection per node for the whole session (OpenSSH multiplexing): the tests poll nodes
# thousands of times, and a labctl process plus an SSH handshake per poll cost the CPU the lab's
# control loops need on this 2-core machine. labctl's key and options, as `labctl ssh` uses them.
SSH_MUX = Path(tempfile.mkdtemp(prefix="ai-l1-ssh."))
SSH = ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
       "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=5", "-o", "ControlMaster=auto",
       "-o", f"ControlPath={SSH_MUX}/%C", "-o", "ControlPersist=300", "-o", "ServerAliveInterval=5",
       "-i", str(REPO / ".lab" / "ssh" / "id_ed25519")]


def on(host: str, command: str, timeout: int = 120) -> subprocess.CompletedProcess:
    """A command on a lab node over SSH (root, as `labctl ssh` reaches it)."""
    if host not in ADDRESSES:
        return sh(*LABCTL, "-i", LAB_INVENTORY / "hosts.yml", "ssh", host, command, timeout=timeout)
    return sh(*SSH, f"root@{ADDRESSES[host]}", command, timeout=timeout)


def kubectl_json(args: str, host: str | None = None) -> dict:
    """`kubectl <args> -o json` on a control plane (the first by default)."""
    host = host or CONTROL_PLANES[0]
    proc = on(host, f"{KUBECTL} {args} -o json")
    assert proc.returncode == 0, f"kubectl {args} on {host}:\n{tail(proc)}"
    return json.loads(proc.stdout)


def admin_kubeconfig() -> Path:
    """The lab's admin kubeconfig on the controller, read from the first control plane once a session."""
    global _ADMIN_KUBECONFIG  # noqa: PLW0603 (one fetch per session)
    if _ADMIN_KUBECONFIG is None or not _ADMIN_KUBECONFIG.exists():
        from remediation_lab import fetch_kubeconfig  # noqa: PLC0415 (its helpers import nothing from here)

        dest = Path(tempfile.mkdtemp(prefix="ai-l1-admin.")) / "admin.conf"
        _ADMIN_KUBECONFIG = fetch_kubeconfig(LAB_INVENTORY, CONTROL_PLANES[0], dest)
    return _ADMIN_KUBECONFIG


def server_dry_run(objects: list[dict]) -> subprocess.CompletedProcess:
    """kubectl apply --dry-run=server of the objects (from the controller): the API server validates each
    against its schema, CRDs and admission, and stores nothing."""
    return controller_kubectl(admin_kubeconfig(), "apply", "--dry-run=server", "-f", "-",
                              stdin=yaml.safe_dump_all(objects))


def not_ready_nodes(host: str | None = None) -> list[str]:
    """Lab nodes that are not Ready (all of them when the API does not answer)."""
    proc = on(host or CONTROL_PLANES[0], f"{KUBECTL} get nodes -o json")
    if proc.returncode != 0:
        return sorted(CONTROL_PLANES + WORKERS)
    ready = {n["metadata"]["name"] for n in json.loads(proc.stdout)["items"]
             if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"])}
    return sorted(set(CONTROL_PLANES + WORKERS) - ready)


def wait_for(what: str, probe, timeout: float = 180, interval: float = 2.0):
    """probe() until it returns something truthy (returned); fail naming `what` and the last value."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def wait_nodes_ready(host: str | None = None, timeout: int = 600) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        missing = not_ready_nodes(host)
        if not missing or time.monotonic() > deadline:
            return missing
        time.sleep(5)


@dataclass
class Cluster:
    inventory: Path
    control_planes: list[str]
    workers: list[str]
    first_run: subprocess.CompletedProcess | None
    first_run_s: float | None
    extra: dict = field(default_factory=dict)


@pytest.fixture(scope="session")
def lab_nodes():
    """The lab's nodes are up; removed at the end of the session unless kept."""
    sh(*LABCTL, "-i", LAB_INVENTORY / "hosts.yml", "up", check=True)
    yield LAB_INVENTORY
    if not (KEEP_LAB or REUSE_LAB):
        sh(*LABCTL, "-i", LAB_INVENTORY / "hosts.yml", "down", check=True)


@pytest.fixture(scope="session")
def k8s_cluster(lab_nodes):
    """site.yml has run once on the lab in this session: the Kubernetes cluster is up."""
    if REUSE_LAB and not not_ready_nodes():
        yield Cluster(LAB_INVENTORY, CONTROL_PLANES, WORKERS, None, None)
        return
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
    t0 = time.monotonic()
    first = playbook(SITE)
    elapsed = time.monotonic() - t0
    assert first.returncode == 0, f"site.yml on the lab failed:\n{tail(first, 150)}"
    yield Cluster(LAB_INVENTORY, CONTROL_PLANES, WORKERS, first, elapsed)


def pytest_collection_modifyitems(config, items):  # noqa: ARG001 (pytest hook signature)
    """The lab substrate tests (labctl up/down of throwaway labs) run last, after every test
    that uses the shared cluster."""
    items.sort(key=lambda item: item.fspath.basename == "test_lab_rollout.py")
