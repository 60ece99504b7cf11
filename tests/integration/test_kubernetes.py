"""The Kubernetes rollout on the lab, for real: 3 control planes (stacked etcd) behind the
keepalived + haproxy virtual IP, 3 workers, every node Ready, etcd with 3 healthy members, the
API still answering through the VIP while the control plane holding it is stopped, and a
second `site.yml` run that changes nothing on any host and keeps every Ceph OSD (the only
second run of the layers site.yml imports: their own files do not repeat it). Also, on the live
cluster: the accelerator discovery labels (seed 4.1.2, roles/node_labels) on the GPU and NPU
Nodes, computed here from the simulated hardware itself, and the k8s_worker role's taint
reconciliation through kubernetes.core.

Needs root podman, the node image (`make image`), the lab's Kubernetes artifacts
(`bash lab/k8s/build.sh`) and the mirror serving them (`python lab/mirror/mirror.py up`);
each missing piece fails with what to run. The lab is removed at the end unless
AI_L1_KEEP_LAB=1. Timings are printed (pytest -s) and written to .cache/integration-timings.json.
"""

from __future__ import annotations

import importlib.util
import json
import re
import ssl
import time
import urllib.error
import urllib.request

import pytest
import yaml
from conftest import (
    CONTROL_PLANES,
    INV,
    KUBECTL,
    LAB_INVENTORY,
    LAB_NAME,
    REPO,
    SITE,
    WORKERS,
    group_hosts,
    kubectl_json,
    on,
    playbook,
    recap,
    record,
    sh,
    tail,
    wait_for,
    wait_nodes_ready,
)

K8S_VARS = yaml.safe_load((LAB_INVENTORY / "group_vars" / "all" / "k8s.yml").read_text())
VIP = K8S_VARS["k8s_control_plane_vip"]
VIP_URL = f"https://{VIP}:8443/readyz"
HW = REPO / "tests" / "hardware"
CEPH_MON = yaml.safe_load((LAB_INVENTORY / "group_vars" / "storage" / "ceph.yml").read_text())["ceph_mon_hosts"][0]
WORKER_NODE_PLAY = REPO / "tests" / "integration" / "playbooks" / "k8s_worker_node.yml"


def vip_ready(timeout: float = 3.0) -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(VIP_URL, timeout=timeout, context=ctx) as resp:  # noqa: S310
            return resp.status == 200
    except (OSError, urllib.error.URLError):
        return False


def etcd_members(host: str) -> tuple[list[dict], list[dict]]:
    etcdctl = (f"{KUBECTL} -n kube-system exec etcd-{host} -- "
               "etcdctl --endpoints=https://127.0.0.1:2379 --cacert=/etc/kubernetes/pki/etcd/ca.crt "
               "--cert=/etc/kubernetes/pki/etcd/healthcheck-client.crt "
               "--key=/etc/kubernetes/pki/etcd/healthcheck-client.key ")
    members = on(host, etcdctl + "member list -w json")
    assert members.returncode == 0, f"etcdctl member list on {host}:\n{tail(members)}"
    health = on(host, etcdctl + "endpoint health --cluster -w json")
    assert health.returncode == 0, f"etcdctl endpoint health on {host}:\n{tail(health)}"
    return json.loads(members.stdout)["members"], json.loads(health.stdout)


@pytest.fixture(scope="module")
def cluster(k8s_cluster):
    if k8s_cluster.first_run_s is not None:
        record("site_first_run_s", k8s_cluster.first_run_s)
    return k8s_cluster


def test_every_node_is_ready(cluster):
    nodes = kubectl_json("get nodes")["items"]
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


# ---------------------------------------------------------------- discovery labels (node_labels)
# The expectation is derived from the simulated hardware the lab's profiles install (the NVML
# scenario, the npu-smi scenario, the fake sysfs tree), following seed 4.1.2's example nodes;
# it does not read what the role computed.

def _sysfs_profiles() -> dict:
    spec = importlib.util.spec_from_file_location("lab_build_sysfs", HW / "sysfs" / "build_sysfs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.PROFILES


def _tib(total_bytes: int) -> str:
    text = f"{total_bytes / 2**40:.1f}"
    return (text[:-2] if text.endswith(".0") else text) + "Ti"


def _host_labels(profile: dict) -> dict:
    up = {dev: speed for dev, (speed, state) in profile["net"].items() if speed and speed > 0 and state == "up"}
    labels = {"node-type": "gpu-compute",
              "storage.local-nvme": _tib(sum(profile["nvme"].values()))}
    rdma = sorted(ib for ib, dev in profile["infiniband"].items() if dev in up)
    if rdma:  # the RDMA NIC's link, else the fastest NIC
        labels["network.interface"] = rdma[0]
        labels["network.bandwidth"] = f"{up[profile['infiniband'][rdma[0]]] // 1000}Gbps"
    else:
        labels["network.bandwidth"] = f"{max(up.values()) // 1000}Gbps"
    return labels


def expected_a100_labels() -> dict:
    conf = {}
    for line in (HW / "nvml" / "scenarios" / "a100-8x-nvswitch-mig.conf").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            conf[key.strip()] = value.strip()
    cuda = int(conf["cuda_driver_version"])
    # "NVIDIA A100-SXM4-80GB" -> the seed's "A100-SXM-80GB": no vendor, no SXM generation.
    model = re.sub(r"-SXM\d+-", "-SXM-", conf["gpu.*.name"].removeprefix("NVIDIA "))
    profiles = sorted((v.split(",") for k, v in conf.items() if k.startswith("gpu.*.mig_profile.")),
                      key=lambda p: int(p[2]))
    assert (conf["p2p_nvlink"], conf["gpu.*.nvlink_remote"]) == ("all", "switch"), "not the NVSwitch A100 node"
    return {
        "accelerator": "nvidia",
        "accelerator-model": model,
        "accelerator-memory": f"{round(int(conf['gpu.*.memory_total_mib']) / 1024)}Gi",
        "accelerator-count": conf["gpu_count"],
        # Every GPU on NVSwitch: each pair talks over NVLink.
        "accelerator-topology": "nvlink-fullmesh",
        "accelerator-mig-enabled": "true" if conf["gpu.*.mig_mode"].split(",")[0] == "1" else "false",
        # The seed writes the profiles comma-separated; a label value cannot hold a comma.
        "accelerator-mig-profiles": "_".join(p[0].removeprefix("MIG ") for p in profiles),
        "accelerator-driver-version": conf["driver_version"],
        "accelerator-cuda-version": f"{cuda // 1000}.{cuda % 1000 // 10}",
        **_host_labels(_sysfs_profiles()["a100"]),
    }


def expected_910b_labels() -> dict:
    scenario = json.loads((HW / "npu" / "scenarios" / "910b.json").read_text())
    family = re.match(r"\d+[A-Z]?", scenario["chip"]["name"]).group(0)  # 910B3 -> 910B
    assert scenario["topology"] == "hccs-fullmesh"
    return {
        "accelerator": "huawei-ascend",
        "accelerator-model": f"Ascend-{family}",
        "accelerator-memory": f"{scenario['chip']['hbm_mb'] // 1024}Gi",
        "accelerator-count": str(scenario["npu_count"] * scenario["chips_per_npu"]),
        # The seed labels its 910B node, every NPU pair linked over HCCS, "hccs-ring".
        "accelerator-topology": "hccs-ring",
        "accelerator-driver-version": scenario["versions"]["driver"],
        "accelerator-cann-version": scenario["versions"]["cann"],
        **_host_labels(_sysfs_profiles()["ascend_910b"]),
    }


def test_discovery_labels_are_on_the_gpu_and_npu_nodes(cluster):
    workers = INV["children"]["k8s_worker"]["children"]
    expected = {h: expected_a100_labels() for h in group_hosts(workers["gpu_nvidia"])}
    expected |= {h: expected_910b_labels() for h in group_hosts(workers["npu_ascend"])}
    assert expected, "the lab inventory has no GPU or NPU workers"
    nodes = {n["metadata"]["name"]: n["metadata"].get("labels", {}) for n in kubectl_json("get nodes")["items"]}
    for host, want in sorted(expected.items()):
        got = nodes[host]
        print(f"{host}: " + ", ".join(f"{k}={got.get(k)}" for k in sorted(want)))
        wrong = {k: (got.get(k), v) for k, v in want.items() if got.get(k) != v}
        assert not wrong, f"{host}: labels (on the Node, expected): {wrong}"
        extra = sorted(k for k in got if k.startswith("accelerator") and k not in want)
        assert not extra, f"{host}: accelerator labels the hardware does not justify: {extra}"
    for host in CONTROL_PLANES:
        assert not any(k.startswith("accelerator") for k in nodes[host]), f"{host}: {nodes[host]}"


# ---------------------------------------------------------------- topology policies (k8s_node)
# The GPU nodes' kubelets run the inventory's Topology and CPU Manager policies (from the kubeadm
# patch at join); a changed policy on a joined node is applied and the node's kubelet comes back
# (the CPU Manager's checkpoint of the old policy removed), and the inventory's policy comes back
# the same way. Read from the kubelet itself (/configz through the API server's node proxy).
TOPOLOGY = yaml.safe_load((LAB_INVENTORY / "group_vars" / "gpu_nvidia" / "topology.yml").read_text())


def kubelet_policies(host: str) -> tuple[str, str] | None:
    proc = on(CONTROL_PLANES[0], f"{KUBECTL} get --raw /api/v1/nodes/{host}/proxy/configz")
    if proc.returncode != 0:
        return None
    config = json.loads(proc.stdout)["kubeletconfig"]
    return config.get("topologyManagerPolicy"), config.get("cpuManagerPolicy")


def test_gpu_nodes_run_the_inventorys_topology_policies(cluster):
    workers = INV["children"]["k8s_worker"]["children"]
    want = (TOPOLOGY["k8s_node_topology_manager_policy"], TOPOLOGY["k8s_node_cpu_manager_policy"])
    assert want != ("none", "none")
    for host in group_hosts(workers["gpu_nvidia"]):
        assert kubelet_policies(host) == want, host
    for host in group_hosts(workers["npu_ascend"]):
        assert kubelet_policies(host) == ("none", "none"), host


def test_a_changed_policy_reaches_a_joined_nodes_kubelet(cluster):
    host = group_hosts(INV["children"]["k8s_worker"]["children"]["gpu_nvidia"])[-1]
    want = (TOPOLOGY["k8s_node_topology_manager_policy"], TOPOLOGY["k8s_node_cpu_manager_policy"])
    runs = []
    for policies in (("restricted", "none"), want):
        t0 = time.monotonic()
        proc = playbook(SITE, "--tags", "container_runtime", "--limit", host,
                        "-e", f"k8s_node_topology_manager_policy={policies[0]}",
                        "-e", f"k8s_node_cpu_manager_policy={policies[1]}")
        runs.append(time.monotonic() - t0)
        assert proc.returncode == 0, tail(proc, 80)
        assert "Restart the kubelet with its new configuration" in proc.stdout
        wait_for(f"{host}'s kubelet running {policies}", lambda p=policies: kubelet_policies(host) == p,
                 timeout=120)
    record("kubelet_policy_change_s", runs[0])
    assert not wait_nodes_ready(timeout=120)


# ---------------------------------------------------------------- inventory taints (k8s_worker)

def _reconcile(host: str, labels: dict, taints: list[dict]) -> dict:
    proc = playbook(WORKER_NODE_PLAY, "-e",
              json.dumps({"target": host, "k8s_worker_node_labels": labels, "k8s_worker_node_taints": taints}))
    assert proc.returncode == 0, f"k8s_worker labels/taints on {host} failed:\n{tail(proc)}"
    return recap(proc.stdout)[host]


def _node(host: str) -> tuple[dict, list[dict], dict]:
    node = kubectl_json(f"get node {host}")
    meta = node["metadata"]
    return meta.get("labels", {}), node["spec"].get("taints", []), meta.get("annotations", {})


def test_inventory_taints_are_reconciled_and_foreign_taints_stay(cluster):
    host = WORKERS[-1]
    key = "ai-platform.io/k8s-worker-test"
    foreign = "ai-platform.io/k8s-worker-test-foreign"
    # PreferNoSchedule only: other engineers' workloads on the shared lab still schedule.
    taint = {"key": key, "value": "integration", "effect": "PreferNoSchedule"}
    on(CONTROL_PLANES[0], f"{KUBECTL} taint node {host} {foreign}=keep:PreferNoSchedule --overwrite")
    try:
        assert _reconcile(host, {key: "1"}, [taint])["changed"] > 0
        labels, taints, annotations = _node(host)
        assert labels.get(key) == "1"
        assert {"key": key, "value": "integration", "effect": "PreferNoSchedule"} in taints, taints
        assert json.loads(annotations["ai-platform.io/inventory-taints"]) == [f"{key}:PreferNoSchedule"]

        assert _reconcile(host, {key: "1"}, [taint])["changed"] == 0, "a converged node was written to"

        assert _reconcile(host, {key: "1"}, [dict(taint, value="changed")])["changed"] > 0
        _, taints, _ = _node(host)
        assert [t.get("value") for t in taints if t["key"] == key] == ["changed"], taints

        # Dropped from the inventory: the role's own taint goes, the foreign one stays.
        assert _reconcile(host, {}, [])["changed"] > 0
        _, taints, annotations = _node(host)
        keys = [t["key"] for t in taints]
        assert key not in keys and foreign in keys, taints
        assert "ai-platform.io/inventory-taints" not in annotations
    finally:
        on(CONTROL_PLANES[0], f"{KUBECTL} taint node {host} {foreign}- {key}- ; "
                              f"{KUBECTL} label node {host} {key}- ; "
                              f"{KUBECTL} annotate node {host} ai-platform.io/inventory-taints-")


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


def ceph_osds() -> dict[int, tuple[str, int]]:
    proc = on(CEPH_MON, "sudo ceph osd dump -f json")
    assert proc.returncode == 0, f"ceph osd dump on {CEPH_MON}:\n{tail(proc)}"
    return {o["osd"]: (o["uuid"], o["up"]) for o in json.loads(proc.stdout)["osds"]}


def test_second_run_changes_nothing(cluster):
    # Under the mitogen strategy (conftest.playbook), as the tests' other runs; the first run is linear.
    osds = ceph_osds()
    t0 = time.monotonic()
    second = playbook(SITE)
    record("site_second_run_s", time.monotonic() - t0)
    assert second.returncode == 0, f"second site.yml run failed:\n{tail(second, 150)}"
    result = recap(second.stdout)
    missing = set(CONTROL_PLANES + WORKERS + group_hosts(INV["children"]["storage"])) - set(result)
    assert not missing, f"hosts missing from the recap: {missing}"
    changed = {h: r["changed"] for h, r in result.items() if r["changed"]}
    assert not changed, f"second run changed something: {changed}\n{tail(second, 150)}"
    # The storage layer re-ran without recreating an OSD (same ids, uuids, all up).
    assert ceph_osds() == osds
