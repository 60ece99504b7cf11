"""Day-2 playbooks through the ai-l1-day2 tool against the lab cluster (issue 8, items 1, 2, 5).

- drain with a PodDisruptionBudget that blocks: the drain gives up at a short timeout, the
  tool exits 2, the node stays cordoned with ai-platform.io/drain-failed; the budget then
  allows it: the drain succeeds and removes that annotation; uncordon restores the node;
- rolling firmware update over the three workers with max_unavailable=1: a watch on the
  Nodes (the API, not the logs) sees every worker cordoned in turn and never two at once;
- the same update with a health-gate failure injected on the 2nd node (the fake firmware
  command adds a double-bit ECC error to the node's simulated NVML): the run stops there,
  the node stays cordoned with ai-platform.io/day2-failed, the 3rd node is never cordoned
  and its firmware command never ran;
- a worker already cordoned by someone else counts against max_unavailable: the update is
  refused before any other node is touched;
- rolling driver upgrade of gpu2 to the lab repository's other 550 driver while a GPU workload
  (with its PodDisruptionBudget) runs on gpu1: only gpu2 is cordoned, its device plugin leaves and
  comes back, NVML reports the new driver, the same devices are advertised; then nvidia.yml with
  the old pin refuses to replace the driver under a GPU Pod on gpu2, naming upgrade-driver; then
  upgrade-driver over both GPU nodes with the inventory's pin leaves gpu1 alone and moves gpu2 back;
- isolation: cordon, fault taint/label/annotation and the critical alert (received by a
  stand-in Alertmanager API on the controller); uncordon with day2_clear_fault removes it all.

Workloads live in the namespace day2-test. Every worker is put back as it was (cordon,
taints, labels, annotations, the fake NVML scenario) even when a test fails. Timings are
printed (pytest -s).
"""

from __future__ import annotations

import base64
import http.server
import json
import threading
import time
from pathlib import Path

import pytest
import yaml
from conftest import CONTROL_PLANES, LAB_INVENTORY, REPO, WORKERS, day2_tool, on, playbook, tail

NS = "day2-test"
OUR_REASONS = ("day2-test pdb", "firmware update", "driver upgrade", "fault isolation: xid-79: day2-test")
OUR_ANNOTATIONS = ("ai-platform.io/cordon-reason", "ai-platform.io/drain-failed", "ai-platform.io/day2-failed")
FW_MARK = "/var/tmp/day2-test-fw"          # written by the fake firmware command
FW_BREAK = "/var/tmp/day2-test-break-gpu"  # present: the fake firmware command breaks GPU 3
SCENARIO = "/etc/ai-l1-fake/nvml-scenario"


def fake_firmware_commands() -> dict:
    """Firmware commands standing in for mlxfwmanager / the Ascend installer: they leave a mark,
    ask for a reboot (the lab nodes are containers: the reboot must be skipped with the reason),
    and on a node holding FW_BREAK simulate a flash that breaks GPU 3 (double-bit ECC errors)."""
    gpu = (f"date +%s.%N > {FW_MARK}; "
           f"if [ -e {FW_BREAK} ]; then echo gpu.3.ecc_dbe_volatile=2 >> {SCENARIO}; fi; "
           "echo 'Please reboot machine to load new configurations.'")
    return {"gpu_nvidia": {"argv": ["sh", "-c", gpu]},
            "npu_ascend": {"argv": ["sh", "-c", f"date +%s.%N > {FW_MARK}; exit 2"], "reboot_rcs": [2]}}


# ---------------------------------------------------------------- the API from the controller


class Api:
    def __init__(self, kubeconfig: dict):
        from kubernetes import client, config  # noqa: PLC0415

        self.client = client
        self.kubeconfig = kubeconfig
        self.core = client.CoreV1Api(config.new_client_from_config_dict(kubeconfig))
        self.apps = client.AppsV1Api(self.core.api_client)
        self.policy = client.PolicyV1Api(self.core.api_client)

    def new_core(self):
        from kubernetes import config  # noqa: PLC0415

        return self.client.CoreV1Api(config.new_client_from_config_dict(self.kubeconfig))

    def node(self, name: str):
        return self.core.read_node(name, _request_timeout=15)

    def state(self, name: str) -> dict:
        n = self.node(name)
        return {"unschedulable": bool(n.spec.unschedulable),
                "taints": [t.to_dict() for t in (n.spec.taints or [])],
                "labels": dict(n.metadata.labels or {}), "annotations": dict(n.metadata.annotations or {})}

    def restore(self, name: str, before: dict) -> None:
        """Put the Node's cordon, labels, annotations and taints back as they were."""
        now = self.state(name)
        body: dict = {"spec": {"unschedulable": before["unschedulable"]}, "metadata": {}}
        for key in ("annotations", "labels"):
            diff = {k: before[key].get(k) for k in set(now[key]) | set(before[key])
                    if now[key].get(k) != before[key].get(k)}
            if diff:
                body["metadata"][key] = diff
        self.core.patch_node(name, body)
        want = [t for t in before["taints"] if t["key"] != "node.kubernetes.io/unschedulable"]
        have = [t for t in self.state(name)["taints"] if t["key"] != "node.kubernetes.io/unschedulable"]
        if sorted(json.dumps(t, sort_keys=True, default=str) for t in have) != \
                sorted(json.dumps(t, sort_keys=True, default=str) for t in want):
            self.core.patch_node(name, {"spec": {"taints": want or None}})


class CordonWatch(threading.Thread):
    """Watches the Nodes and records every change of the set of cordoned workers."""

    def __init__(self, api: Api, workers: list[str]):
        super().__init__(daemon=True)
        self.core = api.new_core()
        self.workers = set(workers)
        self.cordoned: set[str] = set()
        self.ever: set[str] = set()
        self.max = 0
        self.timeline: list[tuple[float, list[str]]] = []
        self.stop_event = threading.Event()
        self.ready = threading.Event()
        self.error: Exception | None = None
        self.t0 = time.monotonic()

    def _update(self, node) -> None:
        name = node.metadata.name
        if name not in self.workers:
            return
        before = set(self.cordoned)
        if node.spec.unschedulable:
            self.cordoned.add(name)
            self.ever.add(name)
        else:
            self.cordoned.discard(name)
        if self.cordoned != before:
            self.max = max(self.max, len(self.cordoned))
            self.timeline.append((round(time.monotonic() - self.t0, 1), sorted(self.cordoned)))

    def run(self) -> None:
        from kubernetes import watch  # noqa: PLC0415

        try:
            listing = self.core.list_node(_request_timeout=30)
            for node in listing.items:
                self._update(node)
            version = listing.metadata.resource_version
            self.ready.set()
            while not self.stop_event.is_set():
                w = watch.Watch()
                for event in w.stream(self.core.list_node, resource_version=version, timeout_seconds=5,
                                      _request_timeout=30):
                    version = event["object"].metadata.resource_version
                    self._update(event["object"])
                    if self.stop_event.is_set():
                        w.stop()
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
            self.ready.set()

    def stop(self) -> None:
        self.stop_event.set()
        self.join(timeout=15)


# ---------------------------------------------------------------- fixtures and helpers


def day2(*args: str, timeout: int = 600) -> tuple[int, dict, str]:
    """Run the tool; returns (exit code, --json summary, progress lines)."""
    t0 = time.monotonic()
    proc = day2_tool(*args, timeout=timeout)
    print(f"timing ai-l1-day2 {' '.join(args)[:80]}: {time.monotonic() - t0:.0f}s (exit {proc.returncode})")
    try:
        summary = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"ai-l1-day2 {args} printed no JSON summary (exit {proc.returncode}):\n{tail(proc)}")
    return proc.returncode, summary, proc.stderr


@pytest.fixture(scope="module")
def api(k8s_cluster):  # noqa: ARG001 - the cluster must be up
    proc = on(CONTROL_PLANES[0], "cat /etc/kubernetes/admin.conf")
    assert proc.returncode == 0 and "server:" in proc.stdout, f"cannot read admin.conf:\n{tail(proc)}"
    return Api(yaml.safe_load(proc.stdout))


@pytest.fixture(scope="module")
def workers(api):
    """The three workers, schedulable at the start and restored exactly at the end."""
    before = {w: api.state(w) for w in WORKERS}
    busy = {w: s["annotations"] for w, s in before.items() if s["unschedulable"]}
    if busy:
        pytest.fail(f"workers already cordoned before the day-2 tests (another test running?): {busy}")
    scenarios = {w: on(w, f"cat {SCENARIO} 2>/dev/null").stdout for w in WORKERS}
    yield before
    for w in WORKERS:
        on(w, f"rm -f {FW_MARK} {FW_BREAK}")
        if scenarios[w]:
            encoded = base64.b64encode(scenarios[w].encode()).decode()
            on(w, f"echo {encoded} | base64 -d > {SCENARIO}")
        now = api.state(w)
        # Only what these tests did is undone: a node another test cordoned meanwhile is left to it.
        ours = (now["annotations"].get("ai-platform.io/cordon-reason", "").startswith(OUR_REASONS)
                or {"ai-platform.io/drain-failed", "ai-platform.io/day2-failed"} & set(now["annotations"]))
        if now != before[w] and ours:
            api.restore(w, before[w])
        elif now != before[w]:
            changed = sorted(k for k in now if now[k] != before[w][k])
            print(f"{w}: {changed} changed during the day-2 tests, not by them: left as it is")


@pytest.fixture(scope="module")
def namespace(api):
    from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

    try:
        api.core.create_namespace({"metadata": {"name": NS}})
    except ApiException as exc:
        if exc.status != 409:
            raise
    yield NS
    api.core.delete_namespace(NS)


def wait(predicate, timeout: float, what: str, step: float = 1.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def fabric_manager_units(workers_: list[str]) -> list[str]:
    """The simulated A100 nodes have NVSwitch, so gpu_info wants the NVIDIA fabric manager running.
    Where no driver role installed it, a stand-in unit is started (removed again by the caller)."""
    added = []
    for w in workers_:
        state = on(w, "systemctl show -p LoadState,ActiveState nvidia-fabricmanager").stdout
        if "LoadState=not-found" in state:
            on(w, "printf '[Unit]\\nDescription=day2-test stand-in\\n[Service]\\nExecStart=/bin/sleep infinity\\n' "
                  "> /run/systemd/system/nvidia-fabricmanager.service && systemctl daemon-reload && "
                  "systemctl start nvidia-fabricmanager")
            added.append(w)
        elif "ActiveState=active" not in state:
            on(w, "systemctl start nvidia-fabricmanager")
    return added


# ---------------------------------------------------------------- drain with a PodDisruptionBudget


def test_drain_blocked_by_pdb_then_allowed(api, workers, namespace):  # noqa: ARG001
    node = WORKERS[-1]  # npu1 in the lab: the GPU nodes are the busier ones in other tests
    labels = {"app": "day2-pdb"}
    api.apps.create_namespaced_deployment(namespace, {
        "metadata": {"name": "day2-pdb"},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                                       "terminationGracePeriodSeconds": 1,
                                       "containers": [{"name": "pause", "image": "registry.k8s.io/pause:3.10.1"}]}}}})
    api.policy.create_namespaced_pod_disruption_budget(namespace, {
        "metadata": {"name": "day2-pdb"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}}})

    def running():
        pods = api.core.list_namespaced_pod(namespace, label_selector="app=day2-pdb").items
        return [p for p in pods if p.status.phase == "Running" and p.spec.node_name == node]

    wait(running, 180, f"the day2-pdb pod Running on {node}", 2)
    wait(lambda: api.policy.read_namespaced_pod_disruption_budget("day2-pdb", namespace).status.current_healthy == 1,
         60, "the PDB to count the pod healthy")

    # Blocked: the budget allows no disruption; a 10 s drain gives up.
    code, summary, progress = day2("drain", "--node", node, "--drain-timeout", "10", "--reason", "day2-test pdb")
    assert code == 2, f"a drain blocked by a PDB must fail (exit 2), got {code}:\n{progress[-3000:]}"
    assert summary["status"] == "failed" and summary["hosts"][node]["failed"] == 1, summary
    assert any("Drain of " + node in f["msg"] for f in summary["failures"]), summary["failures"]
    state = api.state(node)
    assert state["unschedulable"], "the node must stay cordoned after a failed drain"
    failed = state["annotations"].get("ai-platform.io/drain-failed", "")
    assert "day2-test pdb" in failed and "day2-test/day2-pdb-" in failed, failed
    assert state["annotations"].get("ai-platform.io/cordon-reason") == "day2-test pdb"
    assert running(), "the PDB-protected pod must still run on the node"
    print("drain-failed annotation:", failed)

    # Allowed: the budget now tolerates one disruption.
    api.policy.patch_namespaced_pod_disruption_budget("day2-pdb", namespace,
                                                      {"spec": {"minAvailable": 0}})
    wait(lambda: api.policy.read_namespaced_pod_disruption_budget("day2-pdb", namespace).status.disruptions_allowed,
         60, "the PDB to allow a disruption")
    code, summary, progress = day2("drain", "--node", node, "--drain-timeout", "120", "--reason", "day2-test pdb")
    assert code == 0, f"drain with an allowing PDB must succeed, got {code}:\n{progress[-3000:]}"
    state = api.state(node)
    assert state["unschedulable"] and "ai-platform.io/drain-failed" not in state["annotations"], state["annotations"]
    assert not running(), "the pod must be gone from the drained node"

    code, summary, progress = day2("uncordon", "--node", node)
    assert code == 0, progress[-3000:]
    state = api.state(node)
    assert not state["unschedulable"]
    assert not set(OUR_ANNOTATIONS) & set(state["annotations"]), state["annotations"]
    wait(running, 120, f"the day2-pdb pod back on {node} after uncordon", 2)
    api.apps.delete_namespaced_deployment("day2-pdb", namespace)


# ---------------------------------------------------------------- rolling firmware update


@pytest.fixture(scope="module")
def firmware_lab(workers):  # noqa: ARG001 - restore order: fabric manager units go before the workers' state
    gpu_workers = [w for w in WORKERS if on(w, "test -e /etc/ai-l1-fake/nvml-scenario").returncode == 0]
    added = fabric_manager_units(gpu_workers)
    yield gpu_workers
    for w in added:
        on(w, "systemctl stop nvidia-fabricmanager; rm -f /run/systemd/system/nvidia-fabricmanager.service; "
              "systemctl daemon-reload")


def marks() -> dict[str, bool]:
    return {w: on(w, f"test -e {FW_MARK}").returncode == 0 for w in WORKERS}


def test_rolling_firmware_update_one_node_at_a_time(api, workers, firmware_lab):  # noqa: ARG001
    for w in WORKERS:
        on(w, f"rm -f {FW_MARK} {FW_BREAK}")
    watcher = CordonWatch(api, WORKERS)
    watcher.start()
    assert watcher.ready.wait(30) and watcher.error is None, watcher.error
    try:
        code, summary, progress = day2("firmware-update", "--max-unavailable", "1", "--drain-timeout", "120",
                                       "-e", json.dumps({"day2_firmware_commands": fake_firmware_commands()}))
    finally:
        time.sleep(2)
        watcher.stop()
    print("cordoned workers over time:", watcher.timeline)
    assert watcher.error is None, watcher.error
    assert code == 0, f"the rolling update failed (exit {code}):\n{progress[-4000:]}"
    assert watcher.max == 1, f"more than max_unavailable=1 workers cordoned at once: {watcher.timeline}"
    assert watcher.ever == set(WORKERS), f"every worker must have been taken out in turn: {watcher.timeline}"
    assert not watcher.cordoned, f"workers left cordoned: {watcher.cordoned}"
    assert marks() == dict.fromkeys(WORKERS, True), "the firmware command must have run on every worker"
    # The fake tools ask for a reboot; lab nodes are containers: skipped, with the reason, never done.
    said = {}
    for path in (Path(summary["artifacts_dir"]) / "job_events").glob("*.json"):
        event = json.loads(path.read_text())
        data = event.get("event_data", {})
        if event.get("event") == "runner_on_ok" and data.get("task") == "Report the reboot the host cannot do":
            said[data["host"]] = data["res"]["msg"]
    for w in WORKERS:
        assert "SKIPPED: the host is a container" in said.get(w, ""), said
    for w in WORKERS:
        assert not set(OUR_ANNOTATIONS) & set(api.state(w)["annotations"]), w


def test_failed_health_gate_stops_the_rolling_update(api, workers, firmware_lab):  # noqa: ARG001
    first, second, third = WORKERS[:3]
    if second not in firmware_lab:
        pytest.fail(f"the 2nd worker {second} has no simulated NVML ({SCENARIO}): cannot inject a GPU fault")
    for w in WORKERS:
        on(w, f"rm -f {FW_MARK} {FW_BREAK}")
    on(second, f"touch {FW_BREAK}")
    watcher = CordonWatch(api, WORKERS)
    watcher.start()
    assert watcher.ready.wait(30) and watcher.error is None, watcher.error
    try:
        code, summary, progress = day2("firmware-update", "--max-unavailable", "1", "--drain-timeout", "120",
                                       "-e", json.dumps({"day2_firmware_commands": fake_firmware_commands()}))
    finally:
        time.sleep(2)
        watcher.stop()
    print("cordoned workers over time:", watcher.timeline)
    assert code == 2, f"an injected health-gate failure must fail the run (exit 2), got {code}:\n{progress[-4000:]}"
    assert watcher.max == 1, watcher.timeline
    assert third not in watcher.ever, f"{third} must never be cordoned: {watcher.timeline}"
    assert marks() == {first: True, second: True, third: False}, "the run must stop before the 3rd node"
    gate = [f for f in summary["failures"] if f["host"] == second]
    assert gate and "double-bit ECC" in json.dumps(summary["failures"]), summary["failures"]
    state = api.state(second)
    assert state["unschedulable"], f"{second} must stay cordoned after its failed health gate"
    assert "Health gate failed" in state["annotations"].get("ai-platform.io/day2-failed", ""), state["annotations"]
    assert not api.state(first)["unschedulable"], f"{first} passed its gate and must be back in service"
    assert summary["hosts"].get(third, {}).get("changed", 0) == 0, summary["hosts"]
    # The "broken" GPU is repaired for the tests after this one (the fixture restores the rest at the end).
    repaired = on(second, f"rm -f {FW_BREAK}; sed -i '/^gpu.3.ecc_dbe_volatile=/d' {SCENARIO}")
    assert repaired.returncode == 0, tail(repaired)


def test_firmware_update_refused_when_a_worker_is_already_cordoned(api, workers, firmware_lab):  # noqa: ARG001
    busy = WORKERS[1]
    api.core.patch_node(busy, {"spec": {"unschedulable": True},
                               "metadata": {"annotations": {"ai-platform.io/cordon-reason": "day2-test pdb"}}})
    for w in WORKERS:
        on(w, f"rm -f {FW_MARK} {FW_BREAK}")
    watcher = CordonWatch(api, WORKERS)
    watcher.start()
    assert watcher.ready.wait(30) and watcher.error is None, watcher.error
    try:
        code, summary, progress = day2("firmware-update", "--max-unavailable", "1",
                                       "-e", json.dumps({"day2_firmware_commands": fake_firmware_commands()}))
    finally:
        time.sleep(2)
        watcher.stop()
        api.restore(busy, workers[busy])
    print("cordoned workers over time:", watcher.timeline)
    assert code == 2, progress[-3000:]
    assert "already cordoned" in json.dumps(summary["failures"]), summary["failures"]
    assert watcher.ever == {busy}, f"no other worker may be cordoned: {watcher.timeline}"
    assert not any(marks().values()), "no firmware command may run"


# ---------------------------------------------------------------- rolling driver upgrade

UPGRADE_NODE, WORKLOAD_NODE = "gpu2", "gpu1"
# The lab repository's two drivers of branch 550 (lab/packages/nvidia/build.py, DRIVERS): the pin and this.
LAB_PIN = yaml.safe_load((LAB_INVENTORY / "group_vars/gpu_nvidia/nvidia.yml").read_text())["nvidia_driver_version"]
OTHER_DRIVER = "550.127.05"
PAUSE_LABEL = "ai-platform.io/driver-upgrade"


def driver_version(node: str) -> str:
    proc = on(node, "nvidia-smi --query-gpu=driver_version --format=csv,noheader -i 0")
    assert proc.returncode == 0, tail(proc)
    return proc.stdout.strip()


def gpu_deployment(api: Api, namespace: str, name: str, node: str) -> None:
    labels = {"app": name}
    gpu = {"nvidia.com/gpu": "1"}
    api.apps.create_namespaced_deployment(namespace, {
        "metadata": {"name": name},
        "spec": {"replicas": 1, "selector": {"matchLabels": labels}, "template": {
            "metadata": {"labels": labels},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "train", "image": "10.89.100.1:5000/ai-l1-lab/workload:v0.1.0",
                                     "env": [{"name": "AI_L1_WORKLOAD_SLEEP", "value": "3600"}],
                                     "resources": {"limits": gpu, "requests": gpu}}]}}}})
    api.policy.create_namespaced_pod_disruption_budget(namespace, {
        "metadata": {"name": name}, "spec": {"minAvailable": 1, "selector": {"matchLabels": labels}}})


def running_pods(api: Api, namespace: str, name: str) -> list[str]:
    return [p.metadata.uid for p in api.core.list_namespaced_pod(namespace, label_selector=f"app={name}").items
            if p.status.phase == "Running" and not p.metadata.deletion_timestamp]


def plugin_pod(api: Api, node: str) -> list[str]:
    pods = api.core.list_pod_for_all_namespaces(label_selector="app.kubernetes.io/name=nvidia-device-plugin",
                                                field_selector=f"spec.nodeName={node}").items
    return [p.metadata.uid for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp]


def gpu_allocatable(api: Api, node: str) -> dict:
    return {k: v for k, v in (api.node(node).status.allocatable or {}).items() if k.startswith("nvidia.com/")}


def test_rolling_driver_upgrade_and_the_rollouts_refusal_under_gpu_pods(api, workers, namespace):  # noqa: ARG001
    assert OTHER_DRIVER != LAB_PIN and f'"{OTHER_DRIVER}"' in (REPO / "lab/packages/nvidia/build.py").read_text()
    assert driver_version(UPGRADE_NODE) == LAB_PIN == driver_version(WORKLOAD_NODE)
    gpu_deployment(api, namespace, "day2-gpu-keep", WORKLOAD_NODE)
    kept = wait(lambda: running_pods(api, namespace, "day2-gpu-keep"), 180, f"a GPU workload on {WORKLOAD_NODE}", 2)
    plugin_before, advertised = plugin_pod(api, UPGRADE_NODE), gpu_allocatable(api, UPGRADE_NODE)
    assert plugin_before and advertised, (plugin_before, advertised)
    try:
        watcher = CordonWatch(api, WORKERS)
        watcher.start()
        assert watcher.ready.wait(30) and watcher.error is None, watcher.error
        try:
            code, summary, progress = day2("upgrade-driver", "--node", UPGRADE_NODE, "--drain-timeout", "120",
                                           "-e", f"nvidia_driver_version={OTHER_DRIVER}")
        finally:
            time.sleep(2)
            watcher.stop()
        print("cordoned workers over time:", watcher.timeline)
        assert code == 0, f"the driver upgrade failed (exit {code}):\n{progress[-4000:]}"
        assert watcher.ever == {UPGRADE_NODE} and watcher.max == 1, watcher.timeline
        assert driver_version(UPGRADE_NODE) == OTHER_DRIVER and driver_version(WORKLOAD_NODE) == LAB_PIN
        state = api.state(UPGRADE_NODE)
        assert not state["unschedulable"] and PAUSE_LABEL not in state["labels"], state
        assert not set(OUR_ANNOTATIONS) & set(state["annotations"]), state["annotations"]
        plugin_after = plugin_pod(api, UPGRADE_NODE)
        assert plugin_after and set(plugin_after).isdisjoint(plugin_before), "the device plugin must have restarted"
        assert gpu_allocatable(api, UPGRADE_NODE) == advertised
        assert running_pods(api, namespace, "day2-gpu-keep") == kept, "the workload on the other node was touched"

        # The rollout with the lab's pin would downgrade gpu2 under a GPU Pod: refused, naming the operation.
        gpu_deployment(api, namespace, "day2-gpu-busy", UPGRADE_NODE)
        busy = wait(lambda: running_pods(api, namespace, "day2-gpu-busy"), 180, f"a GPU workload on {UPGRADE_NODE}", 2)
        refused = playbook(REPO / "playbooks" / "nvidia.yml", "--limit", UPGRADE_NODE, "--tags", "nvidia_driver",
                           timeout=600)
        assert refused.returncode != 0, tail(refused)
        assert "refusing to replace driver" in refused.stdout and "ai-l1-day2 upgrade-driver" in refused.stdout, \
            tail(refused)
        assert f"Pod {namespace}/day2-gpu-busy-" in refused.stdout, tail(refused)
        assert driver_version(UPGRADE_NODE) == OTHER_DRIVER
        assert running_pods(api, namespace, "day2-gpu-busy") == busy
    finally:
        from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

        for name in ("day2-gpu-keep", "day2-gpu-busy"):
            for delete in (api.apps.delete_namespaced_deployment, api.policy.delete_namespaced_pod_disruption_budget):
                try:
                    delete(name, namespace)
                except ApiException as exc:
                    if exc.status != 404:
                        raise
        wait(lambda: not api.core.list_namespaced_pod(namespace, label_selector="app in (day2-gpu-keep,day2-gpu-busy)"
                                                      ).items, 120, "the GPU workloads to go", 2)
        # Back to the inventory's pin over both GPU nodes: gpu1 is at it and is left alone.
        code, summary, progress = day2("upgrade-driver", "--node", "gpu_nvidia", "--drain-timeout", "120")
    assert code == 0, f"the driver upgrade back to the pin failed (exit {code}):\n{progress[-4000:]}"
    assert driver_version(UPGRADE_NODE) == LAB_PIN
    # gpu1 runs the pin already: read, never drained (nothing changed there).
    assert summary["hosts"][WORKLOAD_NODE]["changed"] == 0, summary["hosts"]
    assert gpu_allocatable(api, UPGRADE_NODE) == advertised


class _Alertmanager(http.server.BaseHTTPRequestHandler):
    received: list = []

    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).received.append((self.path, json.loads(body)))
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):  # noqa: ARG002 - quiet
        return


def test_isolate_taints_labels_alerts_and_uncordon_clears(api, workers):  # noqa: ARG001
    node = WORKERS[-1]
    # free text holding a template (issue 13): it must land verbatim and never run
    marker = Path(f"/tmp/day2-test-template-ran-{time.time_ns()}")
    details = f"day2-test GPU 0 fell off the bus {{{{ lookup('ansible.builtin.pipe', 'touch {marker}') }}}}"
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Alertmanager)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Alertmanager.received.clear()
    try:
        code, summary, progress = day2("isolate", "--node", node, "--fault", "xid-79", "--details",
                                       details, "--drain-timeout", "60",
                                       "--alertmanager-url", f"http://127.0.0.1:{server.server_port}/")
    finally:
        server.shutdown()
    assert code == 0, progress[-3000:]
    state = api.state(node)
    assert state["unschedulable"]
    assert {"key": "ai-platform.io/fault", "value": "xid-79", "effect": "NoSchedule"} in \
        [{k: t[k] for k in ("key", "value", "effect")} for t in state["taints"]], state["taints"]
    assert state["labels"].get("ai-platform.io/fault") == "xid-79"
    assert state["annotations"].get("ai-platform.io/fault", "").startswith(f"xid-79: {details} (isolated "), \
        state["annotations"]
    assert not marker.exists(), "the --details text was rendered as a template"
    assert len(_Alertmanager.received) == 1, _Alertmanager.received
    path, alerts = _Alertmanager.received[0]
    assert path == "/api/v2/alerts"
    assert alerts[0]["labels"] == {"alertname": "NodeIsolated", "severity": "critical", "node": node, "fault": "xid-79"}
    assert details in alerts[0]["annotations"]["description"], alerts[0]

    code, summary, progress = day2("uncordon", "--node", node, "-e", "day2_clear_fault=true")
    assert code == 0, progress[-3000:]
    state = api.state(node)
    assert not state["unschedulable"]
    assert not [t for t in state["taints"] if t["key"] == "ai-platform.io/fault"], state["taints"]
    assert "ai-platform.io/fault" not in state["labels"] and "ai-platform.io/fault" not in state["annotations"]
