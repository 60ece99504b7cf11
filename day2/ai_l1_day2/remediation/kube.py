"""The Kubernetes reads (and the one optional write) the receiver does itself, through the
official client. Everything else happens in the isolation playbook.

Nodes are read from a view the receiver keeps: one daemon thread lists the Nodes once and then
watches them from the list's resourceVersion (ADDED/MODIFIED/DELETED applied, BOOKMARK moves
the resourceVersion on, an ERROR 410 or any failure relists, with a small backoff). Lists and
watch events are parsed as JSON into NodeInfo: the client's model classes cost seconds per list
on a large fleet. The view is replaced whole on every change (copy on write), so a reader holds
a consistent snapshot without a lock. It is trusted only while the API confirmed it (a list, an
event, a bookmark, a watch the server ended at its timeout) within `max_stale_s`; otherwise
nodes() lists directly and check() reports the view stale.
"""

from __future__ import annotations

import json
import logging
import threading
import time

from .logs import log
from .policy import NodeInfo

LOG = logging.getLogger("ai_l1_day2.remediation.kube")
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
FINISHED = ("Succeeded", "Failed")
CONNECT_TIMEOUT_S = 5
LIST_TIMEOUT_S = 30  # reading a whole list: about 10 MB of JSON for 1,000 Nodes
WATCH_READ_MARGIN_S = 10  # beyond the watch's own timeoutSeconds: a connection silent longer is dead
BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 10.0
GONE = 410


class KubeError(RuntimeError):
    pass


class _Relist(Exception):  # noqa: N818 (a signal to the watcher, not an error)
    """The watch cannot go on from the view's resourceVersion: list again at once."""


class KubeNodes:
    def __init__(self, kubeconfig: str | None = None, context: str | None = None, *,
                 max_stale_s: float = 60.0, watch_timeout_s: int | None = None):
        try:
            from kubernetes import client, config  # noqa: PLC0415 (optional at import time)
            from kubernetes.watch.watch import iter_resp_lines  # noqa: PLC0415
        except ImportError as exc:
            raise KubeError("the 'kubernetes' Python package is missing (pip install kubernetes)") from exc
        try:
            if kubeconfig is None and context is None:
                try:
                    config.load_incluster_config()
                except config.ConfigException:
                    config.load_kube_config()
            else:
                config.load_kube_config(config_file=kubeconfig, context=context)
        except Exception as exc:
            raise KubeError(f"cannot load Kubernetes credentials ({kubeconfig or 'in-cluster/~/.kube/config'}): "
                            f"{exc}") from exc
        self._api = client.CoreV1Api()
        self._version = client.VersionApi()
        # The watch holds a connection for minutes: a client (connection pool) of its own, so it
        # never takes one the decisions, drains and cordons need.
        self._watch_api = client.CoreV1Api(client.ApiClient())
        self._lines = iter_resp_lines
        self.max_stale_s = float(max_stale_s)
        # The server ends each watch after this, which confirms the view (nothing was missed):
        # well within the bound even when the fleet is quiet and the server sends no bookmark.
        self.watch_timeout_s = int(watch_timeout_s or max(1, int(self.max_stale_s / 2)))

        self._state = threading.Lock()  # guards the fields below; never held across an API call
        self._view: dict[str, NodeInfo] = {}  # replaced whole, never changed in place
        self._rv = ""
        self._base = 0  # number of the list the view is built on (0: none yet)
        self._served = 0  # newest direct list nodes() handed out
        self._confirmed = time.monotonic()  # the first list has max_stale_s before check() fails
        self._error = ""
        self._events = 0  # watch events applied, for the watcher's backoff
        self._resp = None  # the watcher's response in flight, for close() to cut
        self._seq = 0  # lists issued, under _listing
        # One list at a time: lists then finish in the order they were issued, so a newer list
        # number is a newer view, and nodes() never hands out a view older than the last one.
        self._listing = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="kube-node-view", daemon=True)
        self._thread.start()

    # -- health ----------------------------------------------------------------------------
    def check(self) -> None:
        """Raise KubeError unless the API server answers (a cheap read, whatever the fleet size)
        and the Node view is confirmed within max_stale_s."""
        try:
            self._version.get_code(_request_timeout=5)
        except Exception as exc:
            raise KubeError(f"the Kubernetes API does not answer: {exc}") from exc
        problem = self.view_problem()
        if problem:
            raise KubeError(problem)

    def view_problem(self) -> str:
        """Why the Node view cannot be trusted ('' when it can)."""
        with self._state:
            age, base, error = time.monotonic() - self._confirmed, self._base, self._error
        if age <= self.max_stale_s:
            return ""
        what = ("has not been listed yet" if not base else f"has not been confirmed by the API for {age:.0f} s")
        return (f"the Node view {what} (bound {self.max_stale_s:g} s; decisions list the Nodes directly)"
                + (f"; last error: {error}" if error else ""))

    def wait_synced(self, timeout: float) -> bool:
        """Wait up to `timeout` for the watcher's first list; True when the view is in use. The
        receiver waits before it listens, so a burst right after a start does not queue every
        decision behind one list (the view would otherwise be listed inside the decision lock)."""
        deadline = time.monotonic() + timeout
        while self._trusted_view() is None:
            if self._stop.is_set() or time.monotonic() >= deadline:
                return False
            time.sleep(0.05)
        return True

    # -- reads -----------------------------------------------------------------------------
    def nodes(self) -> dict[str, NodeInfo]:
        """Every Node, by name. The returned dict is shared: read it, never change it."""
        view = self._trusted_view()
        if view is not None:
            return view
        # Not synced yet, or stale: list now rather than wait on a sync that may be failing, so
        # the first webhook decides as before and no decision uses a view that may miss changes.
        # Behind _listing, a list the watcher has in flight finishes first and is used instead.
        with self._listing:
            view = self._trusted_view()
            if view is not None:
                return view
            seq, view, _rv = self._list(self._api)
            with self._state:
                self._served = seq  # the watcher's view is older now: it relists (see _check_base)
        return view

    def node(self, name: str) -> NodeInfo | None:
        """The Node as the API has it now (one GET), None when it does not exist."""
        try:
            resp = self._api.read_node(name, _preload_content=False,
                                       _request_timeout=(CONNECT_TIMEOUT_S, LIST_TIMEOUT_S))
            try:
                body = json.loads(resp.data)
            finally:
                resp.release_conn()
        except Exception as exc:
            if getattr(exc, "status", None) == 404:
                return None
            raise KubeError(f"reading Node {name} failed: {exc}") from exc
        return _info(body)

    def pods_to_evict(self, name: str) -> list[str]:
        """namespace/name of the Pods a drain of the Node still has to evict, by the rules of
        kubectl drain (the filter ai_platform.l1.drain_blockers the playbook judges with):
        mirror and DaemonSet Pods stay, finished Pods do not count."""
        try:
            pods = self._api.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}",
                                                         _request_timeout=10).items
        except Exception as exc:
            raise KubeError(f"listing the Pods on {name} failed: {exc}") from exc
        left = []
        for pod in pods:
            meta = pod.metadata
            if MIRROR_ANNOTATION in (meta.annotations or {}) or (pod.status and pod.status.phase in FINISHED):
                continue
            if any(ref.kind == "DaemonSet" for ref in meta.owner_references or []):
                continue
            left.append(f"{meta.namespace}/{meta.name}")
        return sorted(left)

    def cordon(self, name: str, annotation: str, reason: str) -> None:
        """spec.unschedulable with the reason beside it, in one patch (as roles/node_drain does)."""
        body = {"metadata": {"annotations": {annotation: reason}}, "spec": {"unschedulable": True}}
        try:
            self._api.patch_node(name, body, _request_timeout=10)
        except Exception as exc:
            raise KubeError(f"cordoning Node {name} failed: {exc}") from exc

    def release_cordon(self, name: str, annotation: str, reason: str) -> bool:
        """Undo a cordon this receiver made, only while it is still exactly that cordon: the Node
        unschedulable with `reason` in `annotation` (nobody, the playbook included, has cordoned it
        since). The patch carries the resourceVersion it checked. True when it was undone."""
        try:
            node = self._api.read_node(name, _request_timeout=10)
            meta = node.metadata
            if not node.spec.unschedulable or (meta.annotations or {}).get(annotation) != reason:
                return False
            body = {"metadata": {"resourceVersion": meta.resource_version, "annotations": {annotation: None}},
                    "spec": {"unschedulable": False}}
            self._api.patch_node(name, body, _request_timeout=10)
        except Exception as exc:
            raise KubeError(f"undoing the precordon of Node {name} failed: {exc}") from exc
        return True

    def close(self, timeout: float = 5.0) -> None:
        """Stop the watcher: cut its connection (a read can block for the watch's timeout) and join."""
        self._stop.set()
        with self._state:
            resp = self._resp
        if resp is not None:
            _cut(resp)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    # -- the view --------------------------------------------------------------------------
    def _trusted_view(self) -> dict[str, NodeInfo] | None:
        with self._state:
            if (self._base and self._base > self._served
                    and time.monotonic() - self._confirmed <= self.max_stale_s):
                return self._view
        return None

    def _list(self, api, track: bool = False) -> tuple[int, dict[str, NodeInfo], str]:
        """One raw list (caller holds _listing): its number, the Nodes, its resourceVersion."""
        self._seq += 1
        seq = self._seq
        try:
            resp = api.list_node(_preload_content=False, _request_timeout=(CONNECT_TIMEOUT_S, LIST_TIMEOUT_S))
            if track:
                with self._state:
                    self._resp = resp
            try:
                body = json.loads(resp.data)
            finally:
                if track:
                    with self._state:
                        self._resp = None
                resp.release_conn()
            view = {}
            for item in body.get("items") or []:
                info = _info(item)
                view[info.name] = info
            rv = str((body.get("metadata") or {}).get("resourceVersion") or "")
        except Exception as exc:
            raise KubeError(f"listing Nodes failed: {exc}") from exc
        return seq, view, rv

    def _relist(self) -> int:
        with self._listing:
            seq, view, rv = self._list(self._watch_api, track=True)
            with self._state:
                self._view, self._rv, self._base = view, rv, seq
                self._confirmed = time.monotonic()
                self._error = ""
        log(LOG, logging.INFO, "Node view listed", nodes=len(view), resource_version=rv)
        return seq

    def _follow(self) -> None:
        """The watcher thread: list, watch, relist, until close()."""
        base, failures = 0, 0
        while not self._stop.is_set():
            # A round that brought no event (a list that failed, a watch refused, expired or ended
            # at once) backs off before the next: an API answering 410 or 500 is not hammered.
            if failures and self._stop.wait(min(BACKOFF_MIN_S * 2 ** (failures - 1), BACKOFF_MAX_S)):
                break
            events, started = self._events, time.monotonic()
            try:
                if not base:
                    base = self._relist()
                self._watch(base)
            except _Relist as exc:
                log(LOG, logging.INFO, "Node view relists", reason=str(exc))
                base = 0
            except Exception as exc:  # noqa: BLE001 (the watcher must outlive any API failure)
                if self._stop.is_set():
                    break
                with self._state:
                    self._error = f"{type(exc).__name__}: {exc}"[:512]
                log(LOG, logging.WARNING, "Node view: list or watch failed; relisting", error=str(exc)[:512])
                base = 0
            idle = self._events == events and (not base or time.monotonic() - started < 1)
            failures = failures + 1 if idle else 0

    def _watch(self, base: int) -> None:
        """Follow one watch from the view's resourceVersion, until the server ends it or close()."""
        with self._state:
            rv = self._rv
        try:
            resp = self._watch_api.list_node(
                watch=True, resource_version=rv or None, allow_watch_bookmarks=True,
                timeout_seconds=self.watch_timeout_s, _preload_content=False,
                _request_timeout=(CONNECT_TIMEOUT_S, self.watch_timeout_s + WATCH_READ_MARGIN_S))
        except Exception as exc:
            if getattr(exc, "status", None) == GONE:  # some servers answer an expired watch with HTTP 410
                raise _Relist(f"watch expired (410): {exc}") from exc
            raise
        with self._state:
            self._resp = resp
        try:
            if self._stop.is_set():  # close() ran before _resp was set
                return
            for line in self._lines(resp):
                if line:
                    self._apply(base, json.loads(line))
                if self._stop.is_set():
                    return
            # The server ended the watch (its timeoutSeconds): every change until now was delivered.
            self._confirm(base)
        finally:
            with self._state:
                self._resp = None
            resp.close()  # a watch connection is never reused half-read
            resp.release_conn()

    def _check_base(self, base: int) -> None:
        """Caller holds _state. A direct list newer than the view was handed out (the view was
        stale or not synced then): applying events to the older view would let a later decision
        see less than an earlier one did, so list again."""
        if self._served >= base:
            raise _Relist("a newer direct list was served while the view was stale")

    def _confirm(self, base: int) -> None:
        with self._state:
            self._check_base(base)
            self._confirmed = time.monotonic()

    def _apply(self, base: int, event: dict) -> None:
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == GONE:
                raise _Relist(f"watch expired (410): {obj.get('message', '')}")
            raise KubeError(f"watch error {obj.get('code')}: {obj.get('reason', '')} {obj.get('message', '')}")
        if kind not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK"):
            raise KubeError(f"unexpected watch event type {kind!r}")
        info = _info(obj) if kind in ("ADDED", "MODIFIED") else None
        name = (obj.get("metadata") or {}).get("name")
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        with self._state:
            self._check_base(base)
            if info is not None and self._view.get(info.name) != info:
                self._view = {**self._view, info.name: info}
            elif kind == "DELETED" and name in self._view:
                self._view = {k: v for k, v in self._view.items() if k != name}
            if rv:
                self._rv = str(rv)
            self._confirmed = time.monotonic()
            self._events += 1


def _cut(resp) -> None:
    """Unblock a read another thread is doing on this response."""
    try:
        shutdown = getattr(resp, "shutdown", None)  # urllib3 >= 2.3
        if shutdown is not None:
            shutdown()
            return
        import socket  # noqa: PLC0415

        sock = getattr(getattr(resp, "connection", None), "sock", None)
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
    except Exception:  # noqa: BLE001 (already closed: nothing to unblock)
        pass


def _info(node: dict) -> NodeInfo:
    meta, spec, status = node.get("metadata") or {}, node.get("spec") or {}, node.get("status") or {}
    return NodeInfo(
        name=meta["name"],
        labels=dict(meta.get("labels") or {}),
        unschedulable=bool(spec.get("unschedulable")),
        taints=tuple(t.get("key") for t in spec.get("taints") or []),
        addresses=tuple(a.get("address") for a in status.get("addresses") or []),
        # Ready False or Unknown (the node controller lost the kubelet) is not ready; a Node that
        # reports no Ready condition yet is judged by its other fields.
        ready=not any(c.get("type") == "Ready" and c.get("status") != "True" for c in status.get("conditions") or []),
    )
