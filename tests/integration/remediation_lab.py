"""Lab helpers for the remediation receiver, shared by tests/integration/test_remediation.py
and tests/bench/remediation_latency.py: run the receiver as its own process (so it can be
killed -9), talk to it as Alertmanager does, read Nodes through the lab's API server, and
put the workers back exactly as they were."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
TOKEN = os.environ.get("AI_L1_REMEDIATE_TOKEN") or "lab-remediation-token-" + os.urandom(8).hex()
KUBECTL = "kubectl --kubeconfig /etc/kubernetes/admin.conf"
LABCTL = [sys.executable, str(REPO / "lab" / "labctl.py")]
# What an isolation sets on a Node (playbooks/day2/isolate.yml, roles/node_drain): restored after tests.
OWNED_KEYS = {"ai-platform.io/fault", "ai-platform.io/cordon-reason", "ai-platform.io/drain-failed",
              "node.kubernetes.io/unschedulable"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fetch_kubeconfig(inventory: Path, control_plane: str, dest: Path) -> Path:
    proc = subprocess.run([*LABCTL, "-i", str(inventory / "hosts.yml"), "ssh", control_plane,
                           "cat /etc/kubernetes/admin.conf"], capture_output=True, text=True, timeout=60, check=False)
    if proc.returncode != 0 or "server:" not in proc.stdout:
        raise RuntimeError(f"cannot read admin.conf from {control_plane}: {proc.stderr[-500:]}")
    dest.write_text(proc.stdout)
    dest.chmod(0o600)
    return dest


def ensure_namespace(core, name: str, timeout: float = 180) -> None:
    """Create namespace `name` (CoreV1Api core), or keep it; an earlier run's namespace that is still
    terminating refuses new objects, so wait until it is gone first."""
    from kubernetes import client  # noqa: PLC0415

    end = time.monotonic() + timeout
    while True:
        try:
            core.create_namespace({"metadata": {"name": name}})
            return
        except client.ApiException as exc:
            if exc.status != 409:
                raise
        if core.read_namespace(name).status.phase != "Terminating":
            return
        if time.monotonic() > end:
            raise RuntimeError(f"namespace {name} still terminating after {timeout:.0f} s")
        time.sleep(2)


class Api:
    """The lab's API server from the controller (the same kubeconfig the receiver uses)."""

    def __init__(self, kubeconfig: Path):
        from kubernetes import client, config  # noqa: PLC0415

        config.load_kube_config(config_file=str(kubeconfig))
        self.core = client.CoreV1Api()

    def node(self, name: str):
        return self.core.read_node(name, _request_timeout=10)

    def state(self, name: str) -> dict:
        n = self.node(name)
        return {"unschedulable": bool(n.spec.unschedulable),
                "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in (n.spec.taints or [])],
                "labels": dict(n.metadata.labels or {}), "annotations": dict(n.metadata.annotations or {})}

    def snapshot(self, names: list[str]) -> dict[str, dict]:
        return {n: self.state(n) for n in names}

    def restore(self, snapshot: dict[str, dict]) -> list[str]:
        """Undo what an isolation did since the snapshot, and nothing else (other engineers
        test against the same nodes): the cordon, and the taints, labels and annotations the
        isolate playbook sets (OWNED_KEYS). Returns what it changed."""
        changed = []
        for name, before in snapshot.items():
            now = self.state(name)
            patch: dict = {"metadata": {"labels": {}, "annotations": {}}, "spec": {}}
            for kind in ("labels", "annotations"):
                for key in (set(now[kind]) | set(before[kind])) & OWNED_KEYS:
                    if now[kind].get(key) != before[kind].get(key):
                        patch["metadata"][kind][key] = before[kind].get(key)
                        changed.append(f"{name} {kind[:-1]} {key}")
            if now["unschedulable"] != before["unschedulable"]:
                patch["spec"]["unschedulable"] = before["unschedulable"]
                changed.append(f"{name} unschedulable -> {before['unschedulable']}")
            ours_before = [t for t in before["taints"] if t["key"] in OWNED_KEYS]
            ours_now = [t for t in now["taints"] if t["key"] in OWNED_KEYS]
            if ours_now != ours_before:
                patch["spec"]["taints"] = [t for t in now["taints"] if t["key"] not in OWNED_KEYS] + ours_before
                changed.append(f"{name} taints {[t['key'] for t in ours_now]} -> {[t['key'] for t in ours_before]}")
            if patch["spec"] or any(patch["metadata"].values()):
                self.core.patch_node(name, patch, _request_timeout=10)
        return changed


class Receiver:
    """ai-l1-remediate serve in its own process."""

    def __init__(self, workdir: Path, config: dict):
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = config.setdefault("listen", {}).setdefault("port", free_port())
        config["listen"].setdefault("host", "127.0.0.1")
        self.config_path = workdir / "remediation.yml"
        self.config_path.write_text(yaml.safe_dump(config))
        self.state_dir = Path(config["state_dir"])
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self, timeout: float = 60) -> None:
        self.starts += 1
        env = {**os.environ, "AI_L1_REMEDIATE_TOKEN": TOKEN}
        log = open(self.workdir / f"receiver-{self.starts}.log", "wb")  # noqa: SIM115 (child keeps it)
        self.proc = subprocess.Popen([sys.executable, "-m", "ai_l1_day2.remediation", "serve",
                                      "--config", str(self.config_path)],
                                     stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"receiver exited {self.proc.returncode}:\n{self.log()[-3000:]}")
            try:
                self.get("/healthz")
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"receiver did not answer within {timeout}s:\n{self.log()[-3000:]}")

    def log(self) -> str:
        return "\n".join((self.workdir / f"receiver-{i}.log").read_text(errors="replace")
                         for i in range(1, self.starts + 1))

    def kill9(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)

    def request(self, method: str, path: str, body: dict | None = None, token: str | None = None):
        token = TOKEN if token is None else token
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        req = urllib.request.Request(self.url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"{}")

    def get(self, path: str) -> dict:
        code, body = self.request("GET", path)
        if code != 200:
            raise RuntimeError(f"GET {path}: {code} {body}")
        return body

    def post_alerts(self, *alerts: dict) -> list[dict]:
        code, body = self.request("POST", "/webhook", payload(*alerts))
        if code != 200:
            raise RuntimeError(f"POST /webhook: {code} {body}")
        return body["decisions"]

    def job(self, job_id: int) -> dict:
        return self.get(f"/jobs/{job_id}")

    def wait_job(self, job_id: int, states=("done", "failed"), timeout: float = 300, ident: bool = False) -> dict:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            job = self.job(job_id)["job"]
            if job["state"] in states and (not ident or job["ident"]):
                return job
            time.sleep(0.2)
        raise AssertionError(f"job {job_id} not in {states} after {timeout}s: {self.job(job_id)}\n"
                             f"{self.log()[-3000:]}")

    def settle(self, timeout: float = 300) -> list[int]:
        """Wait until no isolation run of this receiver is in flight (runs are detached: one
        still going after the receiver stopped would isolate a node again after a restore).
        Returns the run pids it waited for."""
        waited = []
        end = time.monotonic() + timeout
        for job_dir in sorted((self.state_dir / "jobs").glob("job-*")):
            for pid in run_pids(job_dir):
                waited.append(pid)
                while Path(f"/proc/{pid}").exists() and time.monotonic() < end:
                    time.sleep(0.5)
        return waited

    def runs_on_disk(self, job_id: int) -> list[str]:
        """ansible-runner idents that ran for the job, counted from the artifacts on disk."""
        root = self.state_dir / "jobs" / f"job-{job_id:06d}" / "runs"
        return sorted(p.name for p in root.glob("*/artifacts/*") if p.is_dir())


def run_pids(job_dir: Path) -> list[int]:
    """Live processes of a run in job_dir: the receiver's `execute` child, and ansible-playbook
    with its forks (-e @<job_dir>/runs/<ident>/env/extravars), which can outlive the child."""
    needle = str(job_dir.resolve()).encode()
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if any(arg == needle or needle + b"/" in arg for arg in cmdline):
            pids.append(int(proc.name))
    return pids


def alert(name: str, node: str, xid: int | None = 79, fp: str | None = None) -> dict:
    labels = {"alertname": name, "Hostname": node, "gpu": "0", "severity": "critical", "team": "infra",
              "UUID": "GPU-00000000-0000-0000-0000-000000000000", "modelName": "NVIDIA A100-SXM4-80GB"}
    notes = {"summary": f"GPU XID {xid} on {node} GPU 0"} if name == "GPUXidError" else {
        "summary": f"GPU ECC Uncorrectable Error on {node}"}
    return {"status": "firing", "labels": labels, "annotations": notes,
            "startsAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "fingerprint": fp or f"{name}-{node}-{os.urandom(4).hex()}"}


def payload(*alerts: dict) -> dict:
    return {"version": "4", "status": "firing", "receiver": "remediation", "groupKey": "{}:{}",
            "groupLabels": {}, "commonLabels": {}, "commonAnnotations": {}, "externalURL": "http://am",
            "truncatedAlerts": 0, "alerts": list(alerts)}
