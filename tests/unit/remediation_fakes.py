"""Fakes shared by the test_remediation_* unit tests: Nodes, an executor, alerts."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "day2"))

from ai_l1_day2.remediation import config as config_mod  # noqa: E402
from ai_l1_day2.remediation.policy import NodeInfo  # noqa: E402

TOKEN = "t0ken-for-unit-tests-0123456789"
HMAC_KEY = "hmac-key-for-unit-tests-0123456789"


def make_config(tmp_path, workers=("gpu1", "gpu2", "gpu3", "npu1"), **overrides):
    """A valid configuration: run.inventory (required with the runner backend, and it must exist) is
    an inventory in tmp_path with `workers` in k8s_worker (the isolate playbook acts on those only,
    and the receiver refuses the others) unless the test's `run` names its own (or another backend)."""
    inventory = tmp_path / "remediation-inventory.yml"
    inventory.parent.mkdir(parents=True, exist_ok=True)
    hosts = ", ".join(f"{w}: {{}}" for w in workers)
    inventory.write_text(f"all: {{children: {{k8s_worker: {{hosts: {{{hosts}}}}}, "
                         "k8s_control_plane: {hosts: {cp1: {}}}}}\n")
    raw = {"state_dir": str(tmp_path / "state"), "ceiling": {"max_fraction": 0.67, "pool_label": "accelerator"}}
    raw.update(overrides)
    run = dict(raw.get("run") or {})
    if run.get("backend", "runner") == "runner":
        run.setdefault("inventory", str(inventory))
    raw["run"] = run
    return config_mod.load(None, env={"AI_L1_REMEDIATE_TOKEN": TOKEN, "AI_L1_REMEDIATE_HMAC_KEY": HMAC_KEY},
                           overrides=raw)


class FakeNodes:
    """Nodes as the API would list them; cordon/taint them to simulate a finished isolation."""

    def __init__(self, names=("gpu1", "gpu2", "gpu3"), label="accelerator", value="nvidia"):
        self.items = {n: NodeInfo(n, labels={label: value}, addresses=(f"10.0.0.{i + 1}",))
                      for i, n in enumerate(names)}
        self.calls = 0
        self.cordons = []
        self.annotations: dict[str, dict[str, str]] = {}  # node -> annotations the fakes set
        self.releases: list[str] = []
        self.fail_cordon = False
        self.down = False
        self.pods: dict[str, list[str]] = {}  # node -> Pods a drain still has to evict

    def check(self):
        if self.down:
            raise RuntimeError("the Kubernetes API does not answer: connection refused")

    def nodes(self):
        self.calls += 1
        return {k: NodeInfo(v.name, dict(v.labels), v.unschedulable, tuple(v.taints), tuple(v.addresses), v.ready)
                for k, v in self.items.items()}

    def node(self, name):
        return self.nodes().get(name)

    def pods_to_evict(self, name):
        return list(self.pods.get(name, []))

    def cordon(self, name, annotation, reason):
        if self.fail_cordon:
            raise RuntimeError("API down")
        self.items[name].unschedulable = True
        self.annotations.setdefault(name, {})[annotation] = reason
        self.cordons.append((name, annotation, reason))

    def release_cordon(self, name, annotation, reason):
        if not self.items[name].unschedulable or self.annotations.get(name, {}).get(annotation) != reason:
            return False
        self.items[name].unschedulable = False
        del self.annotations[name][annotation]
        self.releases.append(name)
        return True

    def isolate(self, name, taint="ai-platform.io/fault"):
        self.items[name].unschedulable = True
        self.items[name].taints = (*self.items[name].taints, taint)


class FakeExecutor:
    """Records starts; each job's outcome is set by the test (result, alive, dead)."""

    def __init__(self, jobs_dir):
        self.jobs_dir = Path(jobs_dir)
        self.started: list[tuple[int, dict]] = []
        self.results: dict[int, dict] = {}
        self.alive_jobs: set[int] = set()
        self.idents: dict[int, str] = {}
        self.on_start = None

    def job_dir(self, job_id):
        return self.jobs_dir / f"job-{job_id:06d}"

    def start(self, job, spec):
        self.started.append((job["id"], spec))
        ident = f"run-{job['id']}-{job['attempts']}"
        self.idents[job["id"]] = ident
        if self.on_start:
            self.on_start(job, spec, self)
        elif job["id"] not in self.results:
            self.results[job["id"]] = {"ident": ident, "status": "successful", "rc": 0, "source": "runner"}
        return 10_000 + job["id"]

    def alive(self, job):
        return job["id"] in self.alive_jobs

    def run_processes(self, job):
        return [20_000 + job["id"]] if self.alive(job) else []

    def ident(self, job):
        return self.idents.get(job["id"])

    def result(self, job):
        return self.results.get(job["id"])

    def wait(self, job, on_ident, poll_s=0.01, timeout_s=None):  # noqa: ARG002 (the real one's signature)
        import time  # noqa: PLC0415

        if self.ident(job):
            on_ident(self.ident(job))
        while job["id"] in self.alive_jobs:
            time.sleep(poll_s)
        return self.result(job)

    def runs(self, job_id):
        return [f"run-{job_id}-{n}" for n, (jid, _) in enumerate(self.started, 1) if jid == job_id]


def alert(name="GPUXidError", host="gpu1", xid=79, status="firing", fp=None, **labels):
    labels = {"alertname": name, "Hostname": host, "gpu": "0", "severity": "critical", **labels}
    notes = {"summary": f"GPU XID {xid} on {host} GPU 0"} if name == "GPUXidError" and xid is not None else {}
    return {"status": status, "labels": labels, "annotations": notes, "startsAt": "2026-11-30T00:00:00Z",
            "fingerprint": fp or f"fp-{name}-{host}"}


def payload(*alerts):
    return {"version": "4", "status": "firing", "receiver": "remediation", "groupKey": "{}", "alerts": list(alerts)}
