"""The pure parts of tests/bench/fleet_api.py (the 1,000-Node kwok benchmark) and its kwok build recipe:
what the fake Nodes carry, the widened inventory, the percentile, which DaemonSets land on the fake
Nodes, and the firmware planning taken from the real playbook. Nothing here needs the lab."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


bench = load("fleet_api_bench", ROOT / "tests" / "bench" / "fleet_api.py")

# Seed L1-infrastructure-design.zh.md 4.1.2, with the MIG profiles joined by "_" (a label value holds no
# comma; tests/unit/test_labels.py SEED_A100_VALID).
SEED_A100 = {
    "accelerator": "nvidia", "accelerator-model": "A100-SXM-80GB", "accelerator-memory": "80Gi",
    "accelerator-count": "8", "accelerator-topology": "nvlink-fullmesh", "accelerator-mig-enabled": "true",
    "accelerator-mig-profiles": "1g.10gb_2g.20gb_3g.40gb_7g.80gb", "accelerator-driver-version": "550.54.15",
    "accelerator-cuda-version": "12.4", "node-type": "gpu-compute", "network.bandwidth": "100Gbps",
    "network.interface": "mlx5_0", "storage.local-nvme": "3.5Ti",
}


def test_the_fake_nodes_carry_the_seeds_labels():
    assert bench.seed_labels() == SEED_A100


def test_a_fake_node_is_kwoks_has_8_gpus_and_keeps_real_pods_off():
    node = bench.fake_node("kwok-gpu-0007", 7, bench.seed_labels(), "10.244.255.0/24")
    meta = node["metadata"]
    assert meta["name"] == "kwok-gpu-0007"
    assert meta["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert SEED_A100.items() <= meta["labels"].items()
    assert meta["labels"]["kubernetes.io/hostname"] == "kwok-gpu-0007"
    assert meta["labels"][bench.BENCH_LABEL] == "true"
    # kube-proxy and node-exporter select on it and tolerate every taint: they must not land here.
    assert "kubernetes.io/os" not in meta["labels"]
    assert node["spec"]["taints"] == [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]
    assert node["spec"]["podCIDRs"] == ["10.244.255.0/24"]
    for field in ("capacity", "allocatable"):
        assert node["status"][field]["nvidia.com/gpu"] == "8"
    assert {"type": "InternalIP", "address": "198.18.0.7"} in node["status"]["addresses"]
    assert bench.node_name(7) == "kwok-gpu-0007"


def test_the_spare_pod_cidr_is_the_last_node_range_of_the_pod_network():
    assert bench.spare_pod_cidr("10.244.0.0/16") == "10.244.255.0/24"
    assert bench.spare_pod_cidr("10.244.0.0/16", 26) == "10.244.255.192/26"


def test_widening_the_sample_inventory_gives_the_issues_ranges():
    sample = (ROOT / "inventories" / "sample" / "hosts.yml").read_text()
    sed = sample.replace("gpu-a100-[01:64]", "gpu-a100-[001:640]").replace("npu-910b-[01:32]", "npu-910b-[001:353]")
    assert sed != sample
    assert bench.widen_inventory(sample, 1000) == sed


def test_the_widened_inventory_holds_that_many_hosts(tmp_path):
    from ansible.inventory.manager import InventoryManager  # noqa: PLC0415
    from ansible.parsing.dataloader import DataLoader  # noqa: PLC0415

    inv = tmp_path / "inv"
    shutil.copytree(ROOT / "inventories" / "sample", inv)
    (inv / "hosts.yml").write_text(bench.widen_inventory((inv / "hosts.yml").read_text(), 250))
    manager = InventoryManager(loader=DataLoader(), sources=[str(inv / "hosts.yml")])
    assert len(manager.get_hosts()) == 250
    assert len(manager.groups["gpu_nvidia"].get_hosts()) == 160
    assert len(manager.groups["npu_ascend"].get_hosts()) == 250 - 7 - 160


def test_widening_refuses_what_it_cannot_widen():
    with pytest.raises(ValueError, match="gpu-a100"):
        bench.widen_inventory("all: {}\n", 1000)
    with pytest.raises(ValueError, match="too few"):
        bench.fleet_split(8)


def test_percentile_is_nearest_rank():
    samples = [float(i) for i in range(100, 0, -1)]  # 100 .. 1, unordered on purpose
    assert bench.percentile(samples, 50) == 50.0
    assert bench.percentile(samples, 99) == 99.0
    assert bench.percentile(samples, 100) == 100.0
    assert bench.percentile([0.2, 3.0], 50) == 0.2
    assert bench.percentile([0.2, 3.0], 99) == 3.0
    assert bench.summary([0.5, 0.1, 2.0]) == {"n": 3, "p50": 0.5, "p90": 2.0, "p99": 2.0, "max": 2.0}
    assert bench.percentile(samples, 90) == 90.0
    with pytest.raises(ValueError):
        bench.percentile([], 50)


def daemonset(name, node_selector=None, tolerations=None, affinity=None):
    pod = {"nodeSelector": node_selector or {}, "tolerations": tolerations or []}
    if affinity:
        pod["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": affinity}}}
    return {"metadata": {"namespace": "ns", "name": name}, "spec": {"template": {"spec": pod}}}


def test_daemonsets_that_land_on_the_fake_nodes_are_found():
    node = bench.fake_node("kwok-gpu-0001", 1, bench.seed_labels(), "10.244.255.0/24")
    labels, taints = node["metadata"]["labels"], node["spec"]["taints"]
    everything = [{"operator": "Exists"}]
    found = bench.daemonsets_landing([
        daemonset("kube-proxy", {"kubernetes.io/os": "linux"}, everything),
        daemonset("npd", {"accelerator": "nvidia"}, everything),
        daemonset("device-plugin", {"accelerator": "nvidia"},
                  [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]),
        daemonset("kwok-tolerant", {}, [{"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}]),
        daemonset("other-value", {}, [{"key": "kwok.x-k8s.io/node", "value": "real"}]),
        daemonset("not-kwok", {}, everything,
                  affinity=[{"matchExpressions": [{"key": "type", "operator": "NotIn", "values": ["kwok"]}]}]),
    ], labels, taints)
    assert found == ["ns/kwok-tolerant", "ns/npd"]


def test_cordoned_workers_is_the_playbooks_filter():
    nodes = [{"metadata": {"name": "a"}, "spec": {"unschedulable": True}},
             {"metadata": {"name": "b"}, "spec": {}},
             {"metadata": {"name": "cp1"}, "spec": {"unschedulable": True}},
             {"metadata": {"name": "c"}, "spec": {"unschedulable": True}}]
    assert bench.cordoned_workers(nodes, {"a", "b", "c"}) == ["a", "c"]


def test_firmware_planning_comes_from_the_playbook():
    playbook = yaml.safe_load((ROOT / "playbooks" / "day2" / "firmware_update.yml").read_text())
    [original] = [p for p in playbook if p.get("name") == bench.FW_PLAY]
    play = bench.firmware_planning_play(playbook, "/tmp/admin.conf")
    assert [t["name"] for t in play["tasks"]] == list(bench.FW_TASKS)
    assert play["hosts"] == original["hosts"] == "k8s_worker"
    assert play["serial"] == original["serial"]
    assert play["vars"]["day2_api"] == original["vars"]["day2_api"]
    read = play["tasks"][0]["kubernetes.core.k8s_info"]
    assert read == {"kind": "Node", "field_selectors": ["spec.unschedulable=true"], "kubeconfig": "/tmp/admin.conf"}
    assert "become" not in json.dumps(play)
    # The gate's tasks come from the file the play imports, which is not changed.
    gate = yaml.safe_load(bench.CAPACITY_GATE.read_text())
    assert gate[0]["kubernetes.core.k8s_info"]["kubeconfig"] == "/etc/kubernetes/admin.conf"
    assert {"name": "Capacity gate (cordoned workers plus this batch within day2_max_unavailable)",
            "ansible.builtin.import_tasks": "tasks/capacity_gate.yml"} in original["tasks"]
    with pytest.raises(ValueError, match="no task"):
        bench.firmware_planning_play([{**original, "tasks": original["tasks"][:1]}], "/x")


def test_task_seconds_reads_the_json_callbacks_durations():
    def task(name, start, end):
        return {"task": {"name": name, "duration": {"start": start, "end": end}}, "hosts": {}}
    read = "Read the cordoned Nodes"
    report = {"plays": [{"tasks": [task(read, "2026-01-01T00:00:00.000000Z", "2026-01-01T00:00:01.500000Z"),
                                   task("other", "2026-01-01T00:00:01.5Z", "2026-01-01T00:00:02Z"),
                                   task(read, "2026-01-01T00:00:02Z", "2026-01-01T00:00:02.250000Z")]}]}
    assert bench.task_seconds(report, read) == [1.5, 0.25]


def test_kwok_is_a_benchmark_recipe_built_on_demand_only():
    build = load("lab_k8s_build", ROOT / "lab" / "k8s" / "build.py")
    [kwok] = build.bench_go_recipes()
    assert (kwok.component, kwok.version, kwok.main_module) == ("kwok", "v0.8.0", "sigs.k8s.io/kwok")
    assert kwok.binaries == {"kwok": "sigs.k8s.io/kwok/cmd/kwok"}
    assert "-X sigs.k8s.io/kwok/pkg/consts.Version=v0.8.0" in kwok.ldflags
    assert "replace" not in build.go_mod_text(kwok, "module sigs.k8s.io/kwok\n\ngo 1.26.0\n")
    assert "kwok" in build.BENCH_COMPONENTS
    # Not among what a full build (build.sh, make lab) builds.
    from artifacts import artifacts as lib  # noqa: PLC0415

    manifest = lib.load()
    full = [*build.go_recipes(build.versions(manifest)), *build.monitoring_recipes(manifest),
            *build.queue_recipes(manifest), *build.lab_go_recipes(build.versions(manifest))]
    assert "kwok" not in {r.component for r in full}
    assert all(s.endswith(".yaml") and s.startswith("kustomize/stage/node/") for s in build.KWOK_NODE_STAGES)


def test_decisions_are_told_apart_by_what_refused_them():
    reply = {"decisions": [
        {"decision": "queued", "reason": "isolate gpu1"},
        {"decision": "refused", "reason": "pool ceiling: bench-pool has 37 of 375 out (max 10%)"},
        {"decision": "refused", "reason": "rate limit: 5 isolations within 3600s (max 5)"},
        {"decision": "refused", "reason": "node gpu2 is locked by job 7"}]}
    decisions, failed = bench.classify([(0.1, 200, reply), (0.2, 500, {"error": "boom"})])
    assert decisions == {"queued": 1, "refused: pool ceiling": 1, "refused: rate limit": 1,
                         "refused: node locked": 1}
    assert failed == ["500 boom"]
