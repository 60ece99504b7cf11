"""The receiver's watch-fed Node view (remediation/kube.py KubeNodes), through the real kubernetes
client against a fake API server in this process: the list, the watch (events pushed by the test,
410 expiry, bookmarks, a watch that stops being served), GET of one Node and /version.

The fake server has the shape of tests/bench/node_metadata_bench.py's (HTTP/1.1, NodeList with a
resourceVersion, Status errors), but runs in a thread and streams watches, which that one (a
separate process for the benchmark) does not.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
from ai_l1_day2.remediation.kube import KubeError, KubeNodes
from ai_l1_day2.remediation.policy import NodeInfo
from ai_l1_day2.remediation.service import Service
from ai_l1_day2.remediation.store import Store
from remediation_fakes import FakeExecutor, alert, make_config, payload

VERSION = {"major": "1", "minor": "30", "gitVersion": "v1.30.4", "gitCommit": "0" * 40, "gitTreeState": "clean",
           "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.22.5", "compiler": "gc", "platform": "linux/amd64"}
DEADLINE_S = 10.0


def node(name, i, unschedulable=False, taints=(), accelerator="nvidia"):
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"accelerator": accelerator, "kubernetes.io/hostname": name}},
            "spec": {"unschedulable": unschedulable, "taints": [{"key": t, "effect": "NoSchedule"} for t in taints]},
            "status": {"addresses": [{"type": "InternalIP", "address": f"10.0.0.{i}"},
                                     {"type": "Hostname", "address": name}]}}


def status(code, reason, message):
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason,
            "code": code}


class FakeApi:
    """Nodes, an event log with resourceVersions, and the requests seen. push() changes a Node and
    logs the event every open watch then streams; expire() changes a Node without an event (as if
    compacted) and ends the watches with ERROR 410; `hang` makes watches send nothing at all."""

    def __init__(self, nodes, bookmark_s=None):
        self.nodes = {n["metadata"]["name"]: n for n in nodes}
        self.rv = 100
        for n in self.nodes.values():
            n["metadata"]["resourceVersion"] = str(self.rv)
        self.events: list[tuple[int, dict]] = []
        self.oldest = 0  # a watch from below this resourceVersion is answered 410
        self.bookmark_s = bookmark_s
        self.hang = False
        self.closing = False
        self.requests: list[tuple[str, str]] = []  # (kind, path): list, watch, get, pods, version
        self.cond = threading.Condition()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def close(self):
        with self.cond:
            self.closing = True
            self.cond.notify_all()
        self.server.shutdown()
        self.server.server_close()

    def count(self, kind):
        with self.cond:
            return sum(1 for k, _ in self.requests if k == kind)

    def push(self, kind, obj):
        with self.cond:
            self.rv += 1
            obj = json.loads(json.dumps(obj))
            obj["metadata"]["resourceVersion"] = str(self.rv)
            if kind == "DELETED":
                self.nodes.pop(obj["metadata"]["name"])
            else:
                self.nodes[obj["metadata"]["name"]] = obj
            self.events.append((self.rv, {"type": kind, "object": obj}))
            self.cond.notify_all()

    def expire(self, silently=None):
        with self.cond:
            self.rv += 1
            if silently is not None:
                silently["metadata"]["resourceVersion"] = str(self.rv)
                self.nodes[silently["metadata"]["name"]] = silently
            self.oldest = self.rv
            gone = status(410, "Expired", "too old resource version")
            self.events.append((self.rv, {"type": "ERROR", "object": gone}))
            self.cond.notify_all()

    def change_silently(self, obj):
        """A change no watch delivers (a watch lagging behind): only a fresh read sees it."""
        with self.cond:
            self.rv += 1
            obj["metadata"]["resourceVersion"] = str(self.rv)
            self.nodes[obj["metadata"]["name"]] = obj

    def set_hang(self, hang):
        with self.cond:
            self.hang = hang
            self.cond.notify_all()

    # -- the watch -------------------------------------------------------------------------
    def _next(self, sent, end, bookmark_at):
        """Under cond: what the watch sends next, waiting for it: (events, new sent, finished) or None (drop)."""
        while True:
            if self.closing:
                return None
            now = time.monotonic()
            if not self.hang:
                batch = [e for rv, e in self.events if rv > sent]
                if batch:
                    last = max(rv for rv, _ in self.events if rv > sent)
                    return batch, last, any(e["type"] == "ERROR" for e in batch)
                if now >= end:
                    return [], sent, True
                if now >= bookmark_at:
                    mark = {"type": "BOOKMARK",
                            "object": {"kind": "Node", "apiVersion": "v1",
                                       "metadata": {"resourceVersion": str(self.rv)}}}
                    return [mark], self.rv, False
            self.cond.wait(0.02)

    def _watch(self, handler, query):
        since = int(query.get("resourceVersion") or 0)
        end = time.monotonic() + float(query.get("timeoutSeconds") or 60)
        bookmarks = query.get("allowWatchBookmarks") == "true" and self.bookmark_s
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        with self.cond:
            expired = since < self.oldest
        sent = since
        while True:
            if expired:
                events, finished = [{"type": "ERROR", "object": status(410, "Expired", "too old")}], True
            else:
                with self.cond:
                    step = self._next(sent, end, time.monotonic() + bookmarks if bookmarks else float("inf"))
                if step is None:
                    return
                events, sent, finished = step
            data = b"".join(json.dumps(e).encode() + b"\n" for e in events)
            try:
                if data:
                    handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                if finished:
                    handler.wfile.write(b"0\r\n\r\n")
                handler.wfile.flush()
            except OSError:  # the client went away
                return
            if finished:
                return

    def _handler(self):
        api = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive and chunked watches, as the real API server

            def log_message(self, *_args):
                pass

            def reply(self, code, obj):
                data = json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802 (BaseHTTPRequestHandler's name)
                url = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(url.query).items()}
                if url.path.rstrip("/") == "/version":  # the client asks for /version/
                    kind = "version"
                elif url.path == "/api/v1/nodes":
                    kind = "watch" if query.get("watch") == "true" else "list"
                elif url.path == "/api/v1/pods":
                    kind = "pods"
                else:
                    kind = "get"
                with api.cond:
                    api.requests.append((kind, self.path))
                    nodes = {k: json.loads(json.dumps(v)) for k, v in api.nodes.items()}
                    rv = api.rv
                if kind == "version":
                    return self.reply(200, VERSION)
                if kind == "watch":
                    return api._watch(self, query)
                if kind == "pods":  # no Pod anywhere: a drain has nothing left to evict
                    return self.reply(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": []})
                if kind == "list":
                    return self.reply(200, {"kind": "NodeList", "apiVersion": "v1",
                                            "metadata": {"resourceVersion": str(rv)},
                                            "items": [nodes[n] for n in sorted(nodes)]})
                name = url.path.rsplit("/", 1)[-1]
                if url.path.startswith("/api/v1/nodes/") and name in nodes:
                    return self.reply(200, nodes[name])
                return self.reply(404, status(404, "NotFound", f'nodes "{name}" not found'))

        return Handler


def write_kubeconfig(path, url):
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "fake",
        "clusters": [{"name": "fake", "cluster": {"server": url, "insecure-skip-tls-verify": True}}],
        "users": [{"name": "fake", "user": {"token": "unit-test-token"}}],
        "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}]}))


@pytest.fixture
def kube(tmp_path, monkeypatch):
    """kube(nodes, bookmark_s=..., **KubeNodes kwargs) -> (FakeApi, KubeNodes); both closed after the test."""
    from kubernetes import client  # noqa: PLC0415

    # load_kube_config sets the client's default configuration: give it back after the test.
    monkeypatch.setattr(client.Configuration, "_default", client.Configuration._default)
    made = []

    def start(nodes, bookmark_s=None, **kwargs):
        api = FakeApi(nodes, bookmark_s=bookmark_s)
        kubeconfig = tmp_path / f"kubeconfig-{len(made)}"
        write_kubeconfig(kubeconfig, api.url)
        view = KubeNodes(str(kubeconfig), **kwargs)
        made.append((api, view))
        return api, view

    yield start
    for api, view in made:
        view.close()
        api.close()


def until(what, check, deadline_s=DEADLINE_S):
    """Poll check() until it is truthy; fail naming `what` after the deadline."""
    end = time.monotonic() + deadline_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > end:
            pytest.fail(f"not within {deadline_s} s: {what}")
        time.sleep(0.01)


def synced(api):
    """The watcher has listed and its watch is open (it watches only after a list); returns the
    number of lists so far."""
    until("the watch is open", lambda: api.count("watch") >= 1)
    return api.count("list")


def reads_without_list(api, view):
    lists = api.count("list")
    view.nodes()
    return api.count("list") == lists


def three():
    return [node("gpu1", 1), node("gpu2", 2, unschedulable=True, taints=("ai-platform.io/fault",)),
            node("npu1", 3, accelerator="ascend")]


def test_the_first_read_returns_the_listed_nodes(kube):
    _api, view = kube(three())
    assert view.nodes() == {
        "gpu1": NodeInfo("gpu1", {"accelerator": "nvidia", "kubernetes.io/hostname": "gpu1"}, False, (),
                         ("10.0.0.1", "gpu1")),
        "gpu2": NodeInfo("gpu2", {"accelerator": "nvidia", "kubernetes.io/hostname": "gpu2"}, True,
                         ("ai-platform.io/fault",), ("10.0.0.2", "gpu2")),
        "npu1": NodeInfo("npu1", {"accelerator": "ascend", "kubernetes.io/hostname": "npu1"}, False, (),
                         ("10.0.0.3", "npu1")),
    }


def test_wait_synced_is_true_once_listed_and_false_while_the_api_cannot_list(kube, tmp_path):
    api, view = kube(three())
    assert view.wait_synced(DEADLINE_S)
    lists = api.count("list")
    assert view.nodes()["gpu1"].name == "gpu1" and api.count("list") == lists  # the view, no list
    # A second receiver whose API refuses every connection never syncs, and says so in time.
    dead = FakeApi(three())
    dead.close()
    dead_config = tmp_path / "kubeconfig-dead"
    write_kubeconfig(dead_config, dead.url)
    late = KubeNodes(str(dead_config))
    try:
        started = time.monotonic()
        assert not late.wait_synced(0.5)
        assert time.monotonic() - started < DEADLINE_S
    finally:
        late.close()


def test_watch_events_reach_the_view_without_a_list(kube):
    api, view = kube(three())
    lists = synced(api)
    before = view.nodes()

    api.push("ADDED", node("gpu3", 4))
    until("gpu3 added", lambda: "gpu3" in view.nodes())
    api.push("MODIFIED", node("gpu1", 1, unschedulable=True, taints=("ai-platform.io/fault",)))
    until("gpu1 cordoned", lambda: view.nodes()["gpu1"].unschedulable)
    assert view.nodes()["gpu1"].taints == ("ai-platform.io/fault",)
    api.push("DELETED", node("npu1", 3))
    until("npu1 deleted", lambda: "npu1" not in view.nodes())

    assert sorted(view.nodes()) == ["gpu1", "gpu2", "gpu3"]
    assert api.count("list") == lists  # every change came through the watch
    # Copy on write: a snapshot handed out earlier never changes under its reader.
    assert sorted(before) == ["gpu1", "gpu2", "npu1"]
    assert before["gpu1"].unschedulable is False


def test_nodes_makes_no_api_request_once_synced(kube):
    api, view = kube(three())
    synced(api)
    with api.cond:
        seen = len(api.requests)
    for _ in range(200):
        assert "gpu1" in view.nodes()
    with api.cond:
        assert api.requests[seen:] == []


def test_a_410_relists_and_the_view_has_what_the_watch_missed(kube):
    api, view = kube(three())
    lists = synced(api)
    # gpu1 cordoned while the watch history was compacted: only a new list can show it.
    api.expire(silently=node("gpu1", 1, unschedulable=True))
    until("relisted after 410", lambda: api.count("list") == lists + 1)
    until("gpu1 cordoned (from the relist)", lambda: view.nodes()["gpu1"].unschedulable)
    # ...and the watch goes on from the new list.
    api.push("MODIFIED", node("npu1", 3, unschedulable=True, accelerator="ascend"))
    until("npu1 cordoned", lambda: view.nodes()["npu1"].unschedulable)
    assert api.count("list") == lists + 1


def test_a_stale_view_is_never_used_and_check_reports_it(kube):
    api, view = kube(three(), bookmark_s=0.05, max_stale_s=1.5, watch_timeout_s=60)
    synced(api)
    until("healthy while bookmarks come", lambda: view.check() is None)

    api.set_hang(True)  # the watch stays open but sends nothing, as a dead connection would
    api.push("MODIFIED", node("gpu1", 1, unschedulable=True))  # never delivered while hung

    def unhealthy():
        try:
            view.check()
        except KubeError as exc:
            return str(exc)
        return ""
    problem = until("check() fails on the stale view", unhealthy)
    assert "Node view has not been confirmed" in problem
    lists = api.count("list")
    # Each read lists directly: the cordon the watch did not deliver is seen.
    assert view.nodes()["gpu1"].unschedulable is True
    assert view.nodes()["gpu1"].unschedulable is True
    assert api.count("list") == lists + 2

    # The watch delivers again. Its view is older than the direct lists decisions got: the watcher
    # lists anew rather than go on from it, so no decision sees less than the one before.
    lists = api.count("list")
    api.set_hang(False)
    until("the watcher relists", lambda: api.count("list") == lists + 1)
    until("healthy again", lambda: not unhealthy())
    until("the view is used again", lambda: reads_without_list(api, view))
    assert view.nodes()["gpu1"].unschedulable is True


def test_a_quiet_fleet_stays_trusted_by_the_watches_the_server_ends(kube):
    """No event and no bookmark: each watch the server ends at its timeoutSeconds confirms the view."""
    api, view = kube(three(), max_stale_s=2.0, watch_timeout_s=1)
    lists = synced(api)
    until("four watches ended (past the bound twice)", lambda: api.count("watch") >= 5)
    view.check()
    assert reads_without_list(api, view)
    assert api.count("list") == lists


def test_node_reads_one_node_and_none_when_it_does_not_exist(kube):
    api, view = kube(three())
    synced(api)
    lists = api.count("list")
    assert view.node("gpu2") == NodeInfo("gpu2", {"accelerator": "nvidia", "kubernetes.io/hostname": "gpu2"}, True,
                                         ("ai-platform.io/fault",), ("10.0.0.2", "gpu2"))
    assert view.node("gpu9") is None
    with api.cond:
        gets = [path for kind, path in api.requests if kind == "get"]
    assert gets == ["/api/v1/nodes/gpu2", "/api/v1/nodes/gpu9"]
    assert api.count("list") == lists


def test_close_stops_the_watcher_even_on_a_silent_connection(kube):
    api, view = kube(three(), watch_timeout_s=60)  # the client's read would block for 70 s
    synced(api)
    api.set_hang(True)
    t0 = time.monotonic()
    view.close()
    assert not view._thread.is_alive()
    assert time.monotonic() - t0 < 5


def test_decisions_count_a_cordon_the_watch_delivered(kube, tmp_path):
    """The service reads the view under its decision lock: a Node cordoned through the watch counts
    against the pool ceiling at once, with no list per webhook; stop() closes the view."""
    api, view = kube([node("gpu1", 1), node("gpu2", 2), node("gpu3", 3)])
    conf = make_config(tmp_path, dry_run=True, ceiling={"max_fraction": 0.34, "pool_label": "accelerator"})
    svc = Service(conf, Store(conf.db_path), view, FakeExecutor(conf.jobs_dir))
    lists = synced(api)
    [first] = svc.handle_payload(payload(alert(host="gpu2")))
    assert first["decision"] == "dry-run"
    api.push("MODIFIED", node("gpu1", 1, unschedulable=True))
    until("gpu1 cordoned", lambda: view.nodes()["gpu1"].unschedulable)
    [second] = svc.handle_payload(payload(alert(host="gpu3")))
    assert second["decision"] == "refused"
    assert "pool ceiling" in second["reason"]
    assert api.count("list") == lists
    svc.stop()
    assert not view._thread.is_alive()


def test_a_job_left_without_outcome_is_judged_on_a_fresh_read_of_its_node(kube, tmp_path):
    """_judge_from_node GETs the Node: a cordon and taint the watch has not delivered yet still count."""
    api, view = kube([node("gpu1", 1), node("gpu2", 2), node("gpu3", 3)])
    conf = make_config(tmp_path)
    svc = Service(conf, Store(conf.db_path), view, FakeExecutor(conf.jobs_dir))
    synced(api)
    [d] = svc.handle_payload(payload(alert(host="gpu1")))
    assert d["decision"] == "queued"
    api.change_silently(node("gpu1", 1, unschedulable=True, taints=(conf.isolated_taint,)))
    svc._judge_from_node(svc.store.job(d["job_id"]), "the run process ended without an outcome")
    job = svc.store.job(d["job_id"])
    assert job["state"] == "done", job
    assert "cordoned, tainted and drained" in job["message"]
    with api.cond:
        assert ("get", "/api/v1/nodes/gpu1") in api.requests
    svc.stop()
