"""The receiver's core: decisions under the store's write lock, a pool of workers that run
queued jobs, and recovery of jobs a dead receiver left running.

Exactly-once on restart: a job found `running` whose run process
  - finished (result.json or the ansible-runner artifacts say so) is marked from that outcome;
  - is still alive (runs are detached from the receiver; alive while the job's lease file is
    locked, by the run child, the guard, ansible-playbook or its workers) is waited for, not
    started again, in one of the run.workers slots like any other run;
  - died without an outcome is marked done when the Node shows the isolation completed
    (cordoned and carrying the isolation taint), else queued again (up to run.max_attempts).
One receiver per state directory: an exclusive flock on <state_dir>/receiver.lock.

Store faults: a write the store refuses (a full disk, a read-only remount) around a run is
retried until it succeeds, so a job never stays `running` with its node locked once the disk
is back; a webhook arriving while the store is unusable (deleted, replaced, unwritable) is
answered 503, so Alertmanager sends it again; job numbers continue above the job directories
on disk, so a lost store never reuses a number that has artifacts.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import socket
import sqlite3
import threading
import time

from . import policy
from .config import Config
from .logs import log
from .store import Store

LOG = logging.getLogger("ai_l1_day2.remediation")
RUN_STATUS_DONE = "successful"


class PayloadError(ValueError):
    """The request body is not an Alertmanager v4 webhook payload."""


JOB_DIR = re.compile(r"^job-(\d+)$")
# The groups a node must be in for the operation's playbook to act on it (its validation play's
# day2_validate_groups): a node outside them is refused before anything is changed on it.
OPERATION_GROUPS = {"isolate": ("k8s_worker",)}
RETRY_MAX_S = 30.0
MAX_ALERTS = 1000  # per notification: more would hold the decision lock for many seconds


def validate_payload(payload) -> list[dict]:
    if not isinstance(payload, dict):
        raise PayloadError("expected a JSON object (Alertmanager webhook payload)")
    version = str(payload.get("version", ""))
    if version != "4":
        raise PayloadError(f"unsupported payload version {version!r}: this receiver speaks Alertmanager webhook v4")
    alerts = payload.get("alerts")
    if not isinstance(alerts, list):
        raise PayloadError("'alerts' must be a list")
    if len(alerts) > MAX_ALERTS:
        raise PayloadError(f"{len(alerts)} alerts in one notification, more than {MAX_ALERTS} "
                           "(Alertmanager's max_alerts in the receiver's webhook_config bounds it)")
    return alerts


class Service:
    def __init__(self, cfg: Config, store: Store, nodes, executor, clock=time.time, *,  # noqa: PLR0913
                 monotonic=time.monotonic):
        self.cfg, self.store, self.nodes, self.executor, self.clock = cfg, store, nodes, executor, clock
        self.monotonic = monotonic
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{int(clock())}"
        self._wake = threading.Condition()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._decide = threading.Lock()
        self._lockfile = None
        # Runs a dead receiver left alive: the workers wait for them before taking new jobs.
        self._adopted: list[dict] = []
        self._inventory_view: tuple[tuple, dict[str, frozenset[str]]] | None = None
        self._queued_at: list[float] = []  # time.monotonic() of each isolation queued (the rate limit)

    # -- lifecycle -----------------------------------------------------------------------
    def acquire_state_dir(self) -> None:
        self.cfg.state_dir.mkdir(parents=True, exist_ok=True)
        handle = open(self.cfg.state_dir / "receiver.lock", "a+")  # noqa: SIM115 (held for the process lifetime)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise RuntimeError(f"another receiver holds {self.cfg.state_dir}/receiver.lock: "
                               "one receiver per state directory") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{self.owner}\n")
        handle.flush()
        self._lockfile = handle

    def start(self) -> None:
        self.store.audit("receiver.started", details={"owner": self.owner, "dry_run": self.cfg.dry_run,
                                                      "auth": self.cfg.auth.describe()})
        self._continue_job_numbers()
        self.recover()
        self.prune_job_dirs()
        for i in range(self.cfg.workers):
            thread = threading.Thread(target=self._worker, name=f"remediation-worker-{i}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with self._wake:
            self._wake.notify_all()
        for thread in self._threads:
            thread.join(timeout)
        close = getattr(self.nodes, "close", None)  # KubeNodes' watcher thread; the tests' fakes have none
        if close is not None:
            close()

    def _continue_job_numbers(self) -> None:
        on_disk = [int(m.group(1)) for p in self.cfg.jobs_dir.glob("job-*") if (m := JOB_DIR.match(p.name))]
        known = max((j["id"] for j in self.store.jobs()), default=0)
        if on_disk and max(on_disk) > known:
            self.store.continue_ids_after(max(on_disk))
            self.store.audit("store.reset", decision="continued",
                             reason=f"job directories up to {max(on_disk)} exist but the store knows jobs up to "
                                    f"{known}: the store was lost or replaced; new jobs start above them")
            log(LOG, logging.WARNING, "store lost its jobs; numbering continues", on_disk=max(on_disk), known=known)

    def prune_job_dirs(self) -> list[int]:
        """Remove the directories of finished jobs beyond the newest run.keep_job_dirs."""
        finished = {j["id"] for j in self.store.jobs() if j["state"] in ("done", "failed", "dry-run")}
        dirs = sorted((int(m.group(1)), p) for p in self.cfg.jobs_dir.glob("job-*")
                      if (m := JOB_DIR.match(p.name)) and int(m.group(1)) in finished)
        removed = []
        for job_id, path in dirs[:-self.cfg.keep_job_dirs]:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(job_id)
        if removed:
            log(LOG, logging.INFO, "job directories removed", count=len(removed), keep=self.cfg.keep_job_dirs)
        return removed

    def health(self) -> dict[str, str]:
        """'ok' or the problem, for the store and for the Kubernetes API."""
        checks = {}
        for name, check in (("store", self.store.check), ("kubernetes", self.nodes.check)):
            try:
                check()
                checks[name] = "ok"
            except Exception as exc:  # noqa: BLE001 (any failure is the answer)
                checks[name] = str(exc)
        return checks

    def _durably(self, what: str, write, *args, **kwargs):
        """A store write the run's outcome depends on: retried until the store takes it."""
        delay = 1.0
        while True:
            try:
                return write(*args, **kwargs)
            except sqlite3.Error as exc:
                if self._stop.is_set():
                    raise
                log(LOG, logging.ERROR, "store write failed; retrying", what=what, error=str(exc), retry_s=delay)
                self._stop.wait(delay)
                delay = min(delay * 2, RETRY_MAX_S)

    # -- webhooks ------------------------------------------------------------------------
    def handle_payload(self, payload, remote: str = "") -> list[dict]:
        alerts = validate_payload(payload)
        # Decisions must be recorded: with the store gone or replaced, refuse the whole notification
        # (503); an unwritable one fails the decision's own transaction, which answers 503 too. No
        # heartbeat write here: it cost a second fsync per webhook inside a burst.
        self.store.check_file()
        decisions = []
        with self._decide:
            # Read under the lock (a snapshot of the watch-fed view, no API call once synced): each
            # decision sees Nodes at least as new as the previous one did, so the pool ceiling counts
            # every cordon an earlier decision could see.
            nodes = self.nodes.nodes() if alerts else {}
            for alert in alerts:
                decisions.append(self._handle_alert(alert, nodes, remote))
        if any(d["decision"] == "queued" for d in decisions):
            with self._wake:
                self._wake.notify_all()
        return decisions

    def _handle_alert(self, alert, nodes, remote: str) -> dict:
        problem = policy.malformed(alert)
        if problem:
            d = policy.Decision("refused", f"malformed alert: {problem}")
            self.store.audit("alert", decision=d.decision, reason=d.reason, remote=remote,
                             details={"alert": json.dumps(alert, default=str)[:1024]})
            log(LOG, logging.WARNING, "alert refused", **d.as_dict(), remote=remote)
            return d.as_dict()
        now = self.clock()
        with self.store.transaction() as db:
            mono = self.monotonic()
            self._queued_at = [t for t in self._queued_at if mono - t < self.cfg.rate_window_s]
            d = policy.decide(alert, self.cfg, store=self.store, db=db, nodes=nodes, now=now,
                              recent_runs=len(self._queued_at))
            if d.decision in ("queued", "dry-run") and (why := self.refused_by_playbook(d.node)):
                d.decision, d.reason = "refused", why
            if d.decision in ("queued", "dry-run"):
                d.job_id = self.store.insert_job(db, node=d.node, kind=d.kind, detail=d.detail, alertname=d.alertname,
                                                 fingerprint=d.fingerprint, pool=d.pool, state=d.decision)
                if d.decision == "queued":
                    self.store.lock_node(db, d.node, d.job_id)
                    self._queued_at.append(mono)
            self.store.audit("alert", decision=d.decision, reason=d.reason, node=d.node, job_id=d.job_id,
                             fingerprint=d.fingerprint, remote=remote,
                             details={"alertname": d.alertname, "labels": alert.get("labels"),
                                      "startsAt": alert.get("startsAt"), "kind": d.kind, "pool": d.pool}, db=db)
        level = logging.WARNING if d.decision == "refused" else logging.INFO
        log(LOG, level, "alert " + d.decision, **d.as_dict(), remote=remote)
        return d.as_dict()

    def refused_by_playbook(self, node: str) -> str:
        """Why the operation's playbook would refuse the node ('' when it would act on it), from
        the run inventory as Ansible reads it: the receiver changes nothing (no precordon) on a
        node the run then refuses. Only the runner backend has the inventory at hand."""
        groups = OPERATION_GROUPS.get(self.cfg.operation)
        if not groups or self.cfg.backend != "runner" or not self.cfg.inventory:
            return ""
        membership = self._inventory_groups()
        if any(node in membership.get(group, ()) for group in groups):
            return ""
        return (f"{node} is not in {' or '.join(groups)} of the run inventory {self.cfg.inventory}: the "
                f"{self.cfg.operation} playbook would refuse it, so nothing is changed on it")

    def _inventory_groups(self) -> dict[str, frozenset[str]]:
        """group -> host names of the run inventory, read again when one of its files changes."""
        from ai_l1_day2.runner import inventory_manager  # noqa: PLC0415 (ansible-core, loaded when needed)

        root = os.path.realpath(self.cfg.inventory)
        files = [root] if os.path.isfile(root) else sorted(
            os.path.join(d, f) for d, _, names in os.walk(root) for f in names)
        stamp = tuple((f, os.stat(f).st_mtime_ns) for f in files)
        if self._inventory_view is None or self._inventory_view[0] != stamp:
            manager = inventory_manager(root)
            view = {name: frozenset(h.name for h in group.get_hosts()) for name, group in manager.groups.items()}
            self._inventory_view = (stamp, view)
        return self._inventory_view[1]

    # -- workers -------------------------------------------------------------------------
    def _worker(self) -> None:
        while not self._stop.is_set():
            with self._wake:
                adopted = self._adopted.pop(0) if self._adopted else None
            if adopted is not None:
                self._adopt(adopted)
                continue
            job = self.store.claim_next(self.owner)
            if job is None:
                with self._wake:
                    self._wake.wait(1.0)
                continue
            try:
                self._run(job)
            except Exception as exc:  # noqa: BLE001 (a worker must survive one bad job)
                LOG.exception("job crashed", extra={"fields": {"job_id": job["id"], "node": job["node"]}})
                self._crashed(job["id"], exc)

    def _crashed(self, job_id: int, exc: Exception) -> None:
        """The receiver failed around a job. A run still going keeps the node's lock (the next
        start recovers the job); otherwise the job fails and the lock goes."""
        try:
            job = self.store.job(job_id)
            if job and job["pid"] and self.executor.alive(job):
                self.store.audit("job.orphaned", decision="running", node=job["node"], job_id=job_id,
                                 reason=f"receiver error while run {job['pid']} goes on: {exc}; recovered on restart")
                return
            self._durably("finish", self.store.finish_job, job_id, "failed", status="error", rc=None,
                          message=f"receiver error: {type(exc).__name__}: {exc}")
        except Exception:
            LOG.exception("recording the crash failed", extra={"fields": {"job_id": job_id}})

    def spec(self, job: dict) -> dict:
        extravars = {**self.cfg.extravars, "day2_fault": job["kind"], "day2_fault_details": job["detail"],
                     "day2_remediation_job": job["id"]}
        return {"operation": self.cfg.operation, "inventory": self.cfg.inventory, "limit": [job["node"]],
                "extravars": extravars, "timeout": self.cfg.timeout_s}

    @staticmethod
    def precordon_reason(job: dict) -> str:
        return (f"fault isolation: {job['kind']}: {job['detail']} "
                f"(remediation job {job['id']}; isolate playbook running)")

    def _precordon(self, job: dict) -> None:
        reason = self.precordon_reason(job)
        t0 = time.monotonic()
        try:
            node = self.nodes.node(job["node"])
            if node is not None and node.unschedulable:
                # Cordoned already (by an operator, or an earlier run): its reason stays, and a
                # failed run never undoes a cordon that is not this receiver's.
                self.store.audit("job.precordon", decision="skipped", reason="the Node is cordoned already",
                                 node=job["node"], job_id=job["id"])
                return
            self.nodes.cordon(job["node"], self.cfg.cordon_annotation, reason)
        except Exception as exc:  # noqa: BLE001 (the playbook cordons too: go on, loudly)
            self.store.audit("job.precordon", decision="failed", reason=str(exc), node=job["node"], job_id=job["id"])
            log(LOG, logging.ERROR, "precordon failed; the playbook will cordon", job_id=job["id"], node=job["node"],
                error=str(exc))
            return
        ms = round((time.monotonic() - t0) * 1000, 1)
        self.store.audit("job.precordon", decision="cordoned", reason=reason, node=job["node"], job_id=job["id"],
                         details={"ms": ms})
        log(LOG, logging.INFO, "node cordoned", job_id=job["id"], node=job["node"], ms=ms)

    def _release_precordon(self, job: dict) -> None:
        """After a failed run: the receiver's own cordon is undone when the run never got to its
        first step (the playbook's cordon replaces the reason; after it, the node stays cordoned)."""
        if not self.cfg.precordon:
            return
        try:
            released = self.nodes.release_cordon(job["node"], self.cfg.cordon_annotation, self.precordon_reason(job))
        except Exception as exc:  # noqa: BLE001 (reported; the node stays cordoned, which is safe)
            self.store.audit("job.precordon", decision="kept", reason=f"undoing it failed: {exc}", node=job["node"],
                             job_id=job["id"])
            return
        if released:
            self.store.audit("job.precordon", decision="released", node=job["node"], job_id=job["id"],
                             reason="the run failed before its first step: the receiver's cordon is undone")
            log(LOG, logging.WARNING, "precordon undone: the run failed before its first step", job_id=job["id"],
                node=job["node"])

    def _run(self, job: dict) -> None:
        if self.cfg.precordon:
            self._precordon(job)
        pid = self.executor.start(job, self.spec(job))
        job = {**job, "pid": pid}
        # The run is on: recording it is retried, never a reason to abandon it.
        self._durably("started", self.store.update_job, job["id"], pid=pid,
                      run_dir=str(self.executor.job_dir(job["id"])))
        self._durably("started", self.store.audit, "job.started", decision="running", node=job["node"],
                      job_id=job["id"], fingerprint=job["fingerprint"],
                      details={"pid": pid, "attempt": job["attempts"], "owner": self.owner})
        log(LOG, logging.INFO, "job started", job_id=job["id"], node=job["node"], pid=pid, attempt=job["attempts"])
        self._await(job)

    def _await(self, job: dict) -> None:
        def on_ident(ident: str) -> None:
            try:
                self.store.update_job(job["id"], ident=ident)
            except sqlite3.Error as exc:  # the outcome carries the ident again
                log(LOG, logging.ERROR, "recording the ident failed", job_id=job["id"], error=str(exc))
                return
            log(LOG, logging.INFO, "job ident", job_id=job["id"], node=job["node"], ident=ident)

        self._settle(job, self.executor.wait(job, on_ident, timeout_s=self._run_timeout()))

    def _run_timeout(self) -> float | None:
        """How long a run may go on before the receiver ends it: the run timeout plus a minute,
        so ansible-runner's own timeout acts first while the child lives."""
        return self.cfg.timeout_s + 60 if self.cfg.timeout_s else None

    def _settle(self, job: dict, result: dict | None) -> None:
        """Record a run's outcome; a run that left none is judged from the Node."""
        try:
            self._record(job, result)
        finally:
            self.prune_job_dirs()

    def _record(self, job: dict, result: dict | None) -> None:
        if result is not None:
            status = result.get("status")
            state = "done" if status == RUN_STATUS_DONE else "failed"
            message = f"run {result.get('ident')} {status} (rc {result.get('rc')})"
            if result.get("message"):
                message += f": {result['message']}"
            self._durably("finish", self.store.finish_job, job["id"], state, status=status, rc=result.get("rc"),
                          message=message, ident=result.get("ident"))
            if state == "failed":
                self._release_precordon(job)
            log(LOG, logging.INFO if state == "done" else logging.ERROR, "job " + state, job_id=job["id"],
                node=job["node"], status=status, rc=result.get("rc"), ident=result.get("ident"))
            return
        self._judge_from_node(job, "the run process ended without an outcome")

    def _judge_from_node(self, job: dict, why: str) -> None:
        try:
            node = self.nodes.node(job["node"])  # a fresh GET: the outcome is judged on the API's word now
        except Exception as exc:  # noqa: BLE001
            node, why = None, f"{why}; reading the Node failed ({exc})"
        left = None
        if node is not None and node.unschedulable and self.cfg.isolated_taint in node.taints:
            # Cordoned and tainted come first in the run; the drain is last, and a run killed
            # with its receiver (a Pod deleted) may have stopped halfway through it.
            try:
                left = self.nodes.pods_to_evict(job["node"])
            except Exception as exc:  # noqa: BLE001
                why = f"{why}; listing its Pods failed ({exc})"
            if left == []:
                self._durably("finish", self.store.finish_job, job["id"], "done", status="unknown", rc=None,
                              message=f"{why}; Node {job['node']} is cordoned, tainted and drained: "
                                      "isolation completed")
                return
            if left:
                why = f"{why}; Node {job['node']} is cordoned and tainted, but {len(left)} Pods are left to evict"
        if job["attempts"] >= self.cfg.max_attempts:
            self._durably("finish", self.store.finish_job, job["id"], "failed", status="unknown", rc=None,
                          message=f"{why}; {job['attempts']} attempts, run.max_attempts reached")
            return
        self._durably("requeue", self.store.requeue, job["id"],
                      f"{why}; Node {job['node']} is not isolated{'' if left is None else ' completely'}: run again")
        with self._wake:
            self._wake.notify_all()

    # -- restart recovery ------------------------------------------------------------------
    def recover(self) -> None:
        for job in self.store.jobs(state="running"):
            if job["owner"] == self.owner:
                continue
            result = self.executor.result(job)
            ident = self.executor.ident(job)
            if ident and not job["ident"]:
                self.store.update_job(job["id"], ident=ident)
            if result is not None:
                self.store.audit("job.recovered", decision="finished", node=job["node"], job_id=job["id"],
                                 reason=f"outcome found ({result.get('source')})", details=result)
                self._settle(job, result)
            elif self.executor.alive(job):
                self.store.update_job(job["id"], owner=self.owner)
                pids = self.executor.run_processes(job)
                self.store.audit("job.recovered", decision="adopted", node=job["node"], job_id=job["id"],
                                 reason=f"run processes {pids or job['pid']} still alive: waiting for them")
                with self._wake:
                    self._adopted.append(job)
            else:
                self.store.audit("job.recovered", decision="dead", node=job["node"], job_id=job["id"],
                                 reason="run process gone without an outcome")
                self._judge_from_node(job, f"receiver {job['owner']} died and its run left no outcome")
            log(LOG, logging.WARNING, "recovered job", job_id=job["id"], node=job["node"], previous_owner=job["owner"])

    def _adopt(self, job: dict) -> None:
        try:
            self._await(job)
        except Exception:
            LOG.exception("adopted job crashed", extra={"fields": {"job_id": job["id"]}})
