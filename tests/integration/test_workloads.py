"""GPU workloads on the lab: the L2 contract (docs/l2-contract.md) through the API.

The NVIDIA device plugin DaemonSet of role k8s_device_plugins runs NVIDIA's own plugin on the A100
nodes (v0.20.0, built by lab/k8s/build.py from its release archive) against the node's driver, the
simulated NVML: it advertises the GPUs the driver reports, allocates them through the kubelet's
device-plugin API and marks a GPU unhealthy on a critical XID event. Asserted here:

- every A100 node advertises nvidia.com/gpu equal to the GPUs its driver lists, through NVIDIA's
  plugin (its image is the manifest's, and it says it registered with the kubelet);
- an XID 79 on one GPU, as an NVML event, makes the plugin take that GPU out of allocatable, and an
  application XID (13) on another does not; the time from the event to the Node's change is printed;
- the seed's 5.1.1 Pod, scaled to the lab (8 GPUs, the seed's nodeAffinity on accelerator-model
  and accelerator-count Gt 7, its NCCL env; CPU and memory scaled down, no volcano scheduler
  or PVC in the lab) and mounting nothing, runs on gpu2, the node with the sample's runtime setup
  (NVIDIA's runtime by default, CDI mode; gpu1 is cordoned meanwhile): the kubelet gave it 8
  distinct GPUs of that node (its device checkpoint against nvidia-smi -L), the runtime applied
  the CDI spec (NVIDIA_VISIBLE_DEVICES=void in the container, as NVIDIA's CDI mode leaves it), and
  its /etc/nccl.conf is exactly what nccl_config wrote on that node, mounted by the spec;
- a Pod asking for one GPU more than any node has stays Pending, and the scheduler says why;
- time slicing through NVIDIA's plugin (`k8s_device_plugins_time_slicing_replicas: 4`): each A100
  node advertises 32, and 9 one-GPU Pods on one node all run, two of them on the same GPU;
- every node's allocatable CPU and memory is its capacity less kubeReserved and systemReserved
  from the inventory (seed 5.1.2: room for the system and the kubelet);
- the 910B node advertises huawei.com/Ascend910 (one per chip of its scenario; Huawei's DaemonSet
  with the stand-in in its image slot), and an NPU Pod runs there with 2 distinct chips in
  ASCEND_VISIBLE_DEVICES.

The lab proves NVIDIA's plugin's discovery, allocation and health logic, the DaemonSet and
scheduling, and the CDI spec's edits reaching the container (through the lab's stand-in of NVIDIA's
runtime, which applies them as upstream's CDI mode does); it does not prove a real driver, nor that
the container runtime gives a container working GPUs (a lab node has no device nodes).
"""

from __future__ import annotations

import json
import re
import time

import pytest
from conftest import CONTROL_PLANES, KUBECTL, LAB_INVENTORY, REPO, on, playbook, record, tail
from remediation_lab import fetch_kubeconfig

NS = "workload-test"
IMAGE = "10.89.100.1:5000/ai-l1-lab/workload:v0.1.0"
A100_NODES = ["gpu1", "gpu2"]


@pytest.fixture(scope="module")
def core(k8s_cluster, tmp_path_factory):  # noqa: ARG001 (the cluster must be up)
    from kubernetes import client, config  # noqa: PLC0415

    kubeconfig = fetch_kubeconfig(LAB_INVENTORY, CONTROL_PLANES[0], tmp_path_factory.mktemp("wl") / "admin.conf")
    api = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))
    try:
        api.create_namespace({"metadata": {"name": NS}})
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    yield api
    api.delete_namespace(NS)


def node_uuids(node: str) -> list[str]:
    proc = on(node, "nvidia-smi -L")
    assert proc.returncode == 0, tail(proc)
    return re.findall(r"^GPU \d+: .* \(UUID: (GPU-[^)]+)\)$", proc.stdout, re.M)


def seed_pod(name: str, gpus: int) -> dict:
    """Seed 5.1.1's vllm Pod, scaled to the lab. The seed's `requiredDuringScheduling` and
    `preferredDuringScheduling` are not API fields: the real names end in IgnoredDuringExecution."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"app": "vllm"},
                     "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "8000"}},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{
                # The workload image prints the file (the NCCL settings the node's CDI spec mounts).
                "name": "vllm", "image": IMAGE, "args": ["/etc/nccl.conf"],
                "env": [{"name": "NCCL_IB_DISABLE", "value": "0"}, {"name": "NCCL_NET_GDR_LEVEL", "value": "3"}],
                "resources": {"requests": {"nvidia.com/gpu": str(gpus), "cpu": "50m", "memory": "32Mi"},
                              "limits": {"nvidia.com/gpu": str(gpus), "cpu": "50m", "memory": "32Mi"}},
            }],
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{
                    "matchExpressions": [
                        {"key": "accelerator-model", "operator": "In", "values": ["A100-SXM-80GB"]},
                        {"key": "accelerator-count", "operator": "Gt", "values": ["7"]}]}]}},
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                    "weight": 100, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "vllm"}},
                                                       "topologyKey": "kubernetes.io/hostname"}}]},
            },
        },
    }


def wait_pod(core, name: str, phases: tuple[str, ...], timeout: float = 180, namespace: str = NS):
    end = time.monotonic() + timeout
    pod = None
    while time.monotonic() < end:
        pod = core.read_namespaced_pod(name, namespace)
        if pod.status.phase in phases:
            return pod
        time.sleep(2)
    raise AssertionError(f"pod {name} not {phases} after {timeout}s: {pod.status if pod else None}")


def test_every_a100_node_advertises_its_gpus(core):
    for node in A100_NODES:
        want = len(node_uuids(node))
        assert want == 8, f"{node}: the lab's A100 scenario has 8 GPUs, nvidia-smi lists {want}"
        end = time.monotonic() + 120
        while (have := (core.read_node(node).status.allocatable or {}).get("nvidia.com/gpu")) != str(want):
            assert time.monotonic() < end, f"{node}: allocatable nvidia.com/gpu is {have!r}, want {want}"
            time.sleep(3)
        assert core.read_node(node).status.capacity.get("nvidia.com/gpu") == str(want)


def plugin_pod(core, node: str):
    pods = core.list_namespaced_pod("kube-system", label_selector="app.kubernetes.io/name=nvidia-device-plugin",
                                    field_selector=f"spec.nodeName={node}").items
    running = [p for p in pods if p.status.phase == "Running" and not p.metadata.deletion_timestamp]
    return running[0] if running else None


def test_the_gpus_come_from_nvidias_plugin(core):
    for node in A100_NODES:
        pod = plugin_pod(core, node)
        assert pod, f"no running device plugin Pod on {node}"
        assert "/k8s-device-plugin:v0.20.0@sha256:" in pod.spec.containers[0].image, pod.spec.containers[0].image
        log = core.read_namespaced_pod_log(pod.metadata.name, "kube-system")
        assert "Registered device plugin for 'nvidia.com/gpu' with Kubelet" in log, log[-3000:]


def test_gpu_feature_discovery_from_the_plugins_release_reads_the_gpus(core):
    """gpu-feature-discovery, built from the same release into the plugin's image, run once on an
    A100 node as the plugin runs (the node's driver root, the plugin's config): its labels name what NVML reports. In
    production NFD publishes them; the lab has no NFD, so the test reads GFD's output file."""
    node, name = "gpu1", "gfd-oneshot"
    from kubernetes import client  # noqa: PLC0415

    plugin = client.AppsV1Api(core.api_client).read_namespaced_daemon_set("nvidia-device-plugin", "kube-system")
    container = plugin.spec.template.spec.containers[0]
    # The node's driver root and the plugin's config file (GFD reads the same file format), so
    # beside the plugin, in its namespace.
    shared = ("driver-root", "config")
    volumes = [v for v in plugin.spec.template.spec.volumes if v.name in shared]
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, namespace="kube-system"),
        spec=client.V1PodSpec(
            restart_policy="Never", node_selector={"kubernetes.io/hostname": node}, volumes=volumes,
            containers=[client.V1Container(
                name="gfd", image=container.image,
                # GFD loads libnvidia-ml.so.1 from the library path, where NVIDIA's runtime puts the
                # driver's libraries; on this node (hook mode, no driver in the lab) the node's own.
                env=[*container.env, client.V1EnvVar(name="NODE_NAME", value_from=client.V1EnvVarSource(
                    field_ref=client.V1ObjectFieldSelector(field_path="spec.nodeName"))),
                     client.V1EnvVar(name="LD_LIBRARY_PATH", value="/driver-root/usr/lib/x86_64-linux-gnu")],
                volume_mounts=[m for m in container.volume_mounts if m.name in shared],
                # NVML named: `auto` finds no NVIDIA device nodes on a lab node and gives up.
                command=["sh", "-c", "gpu-feature-discovery --oneshot --no-timestamp --output-file=/tmp/gfd "
                         "--driver-root-ctr-path=/driver-root --device-discovery-strategy=nvml "
                         "--use-node-feature-api=false "
                         "&& cat /tmp/gfd"])]))
    core.create_namespaced_pod("kube-system", pod)
    try:
        done = wait_pod(core, name, ("Succeeded", "Failed"), namespace="kube-system")
        log = core.read_namespaced_pod_log(name, "kube-system")
        assert done.status.phase == "Succeeded", log[-2000:]
    finally:
        core.delete_namespaced_pod(name, "kube-system", grace_period_seconds=0)
    labels = dict(line.split("=", 1) for line in log.splitlines() if line.startswith("nvidia.com/"))
    print("\n".join(f"{k}={v}" for k, v in sorted(labels.items())))
    assert labels.get("nvidia.com/gpu.count") == str(len(node_uuids(node))), labels
    assert labels.get("nvidia.com/gpu.product", "").startswith("NVIDIA-A100-SXM4-80GB"), labels
    assert labels.get("nvidia.com/gpu.memory") == "81920", labels
    # The scenario's driver 550.54.15 and its CUDA 12.4 driver API (the seed's A100 node).
    assert labels.get("nvidia.com/cuda.driver-version.full") == "550.54.15", labels
    assert labels.get("nvidia.com/cuda.runtime-version.full") == "12.4", labels
    assert (labels.get("nvidia.com/gpu.family"), labels.get("nvidia.com/mig.capable")) == ("ampere", "true")


def allocatable_gpus(core, node: str) -> int:
    return int((core.read_node(node).status.allocatable or {}).get("nvidia.com/gpu", "0"))


def restart_plugin(core, node: str) -> None:
    """A new plugin Pod on `node`, registered with the kubelet: NVIDIA's plugin never marks a device
    healthy again, a new one starts from what the driver says."""
    old = plugin_pod(core, node)
    if old:
        core.delete_namespaced_pod(old.metadata.name, "kube-system")
    end = time.monotonic() + 180
    while True:
        pod = plugin_pod(core, node)
        if pod and (not old or pod.metadata.name != old.metadata.name) and "Registered device plugin for" in \
                core.read_namespaced_pod_log(pod.metadata.name, "kube-system"):
            break
        assert time.monotonic() < end, f"{node}: no new device plugin Pod registered after 180 s"
        time.sleep(2)
    while allocatable_gpus(core, node) != 8:
        assert time.monotonic() < end, f"{node}: allocatable nvidia.com/gpu not back to 8 after the plugin restart"
        time.sleep(2)


def test_a_critical_xid_takes_its_gpu_out_of_allocatable(core):
    node, state = "gpu2", "/var/lib/ai-l1-fake/nvml-state"
    assert allocatable_gpus(core, node) == 8
    marker = "# ai-l1 test xid"
    try:
        # File order is delivery order: the application XID 13 (GPU 3) reaches the plugin first.
        t0 = time.monotonic()
        added = on(node, f"sudo mkdir -p {state.rsplit('/', 1)[0]} && printf '\\n%s\\n' '{marker}' "
                         f"'gpu.3.xid.9001=13' 'gpu.2.xid.9002=79' | sudo tee -a {state}")
        assert added.returncode == 0, tail(added)
        end = time.monotonic() + 120
        while (have := allocatable_gpus(core, node)) != 7:
            assert have == 8 and time.monotonic() < end, f"{node}: allocatable nvidia.com/gpu {have}, want 7"
            time.sleep(1)
        record("xid_to_allocatable_s", time.monotonic() - t0)  # the XID in the scenario -> allocatable 7
        time.sleep(10)
        assert allocatable_gpus(core, node) == 7, "the application XID 13 took a GPU out too"
        log = core.read_namespaced_pod_log(plugin_pod(core, node).metadata.name, "kube-system")
        assert "Xid=79" in log and "marking device as unhealthy" in log, log[-3000:]
    finally:
        on(node, f"sudo sed -i '/^{marker}$/,$d' {state}")
        restart_plugin(core, node)


CDI_NODE = "gpu2"  # inventories/lab/hosts.yml: the sample's runtime setup


def allocated_devices(node: str, pod_uid: str, resource: str = "nvidia.com/gpu") -> list[str]:
    """The device IDs the kubelet gave the Pod, from its device-manager checkpoint on the node."""
    proc = on(node, "cat /var/lib/kubelet/device-plugins/kubelet_internal_checkpoint")
    assert proc.returncode == 0, tail(proc)
    entries = json.loads(proc.stdout)["Data"]["PodDeviceEntries"] or []
    return [d for e in entries if e["PodUID"] == pod_uid and e["ResourceName"] == resource
            for ids in e["DeviceIDs"].values() for d in ids]


def test_seed_pod_gets_its_gpus_and_the_nodes_nccl_settings_without_a_mount(core):
    others = [n for n in A100_NODES if n != CDI_NODE]
    for other in others:
        core.patch_node(other, {"spec": {"unschedulable": True}})
    try:
        core.create_namespaced_pod(NS, seed_pod("vllm-llama3-70b-8gpu", 8))
        pod = wait_pod(core, "vllm-llama3-70b-8gpu", ("Succeeded", "Failed"))
    finally:
        for other in others:
            core.patch_node(other, {"spec": {"unschedulable": None}})
    assert pod.status.phase == "Succeeded", pod.status
    node = pod.spec.node_name
    assert node == CDI_NODE, node
    given = allocated_devices(node, pod.metadata.uid)
    assert len(given) == 8 and len(set(given)) == 8, given
    assert sorted(given) == sorted(node_uuids(node)), (given, node)
    log = core.read_namespaced_pod_log("vllm-llama3-70b-8gpu", NS)
    env = dict(line.split("=", 1) for line in log.split("== devices")[0].splitlines()[1:] if "=" in line)
    # NVIDIA's runtime in CDI mode replaced the plugin's device list with the spec's "void".
    assert env.get("NVIDIA_VISIBLE_DEVICES") == "void", env.get("NVIDIA_VISIBLE_DEVICES")
    assert env.get("NCCL_IB_DISABLE") == "0" and env.get("NCCL_NET_GDR_LEVEL") == "3", env
    # NCCL reads /etc/nccl.conf: the Pod sees exactly what nccl_config discovered on its node
    host = on(node, "cat /etc/nccl.conf")
    assert host.returncode == 0 and "NCCL_IB_HCA=" in host.stdout, tail(host)
    seen = log.split("== file /etc/nccl.conf\n", 1)[1].split("== end", 1)[0]
    assert seen == host.stdout, (seen, host.stdout)


def test_one_gpu_more_than_any_node_has_stays_pending(core):
    core.create_namespaced_pod(NS, seed_pod("too-many-gpus", 9))
    end = time.monotonic() + 60
    while time.monotonic() < end:
        pod = core.read_namespaced_pod("too-many-gpus", NS)
        cond = next((c for c in pod.status.conditions or [] if c.type == "PodScheduled"), None)
        if cond is not None and cond.status == "False":
            break
        time.sleep(2)
    else:
        raise AssertionError(f"no PodScheduled=False condition: {pod.status}")
    assert pod.status.phase == "Pending" and not pod.spec.node_name
    assert cond.reason == "Unschedulable", cond
    assert "Insufficient nvidia.com/gpu" in cond.message, cond.message


NPU_NODE = "npu1"


def device_plugins_play(*extra: str):
    return playbook(REPO / "playbooks" / "device_plugins.yml", *extra, timeout=600)


def test_time_sliced_gpus_are_shared_by_more_pods_than_the_node_has_gpus(core):
    node = "gpu1"
    names = [f"shared-{i}" for i in range(9)]
    try:
        run = device_plugins_play("-e", "k8s_device_plugins_time_slicing_replicas=4")
        assert run.returncode == 0, tail(run, 120)
        end = time.monotonic() + 180
        while (have := allocatable_gpus(core, node)) != 32:
            assert time.monotonic() < end, f"{node}: allocatable nvidia.com/gpu {have}, want 8 x 4 replicas"
            time.sleep(2)
        container = {"name": "w", "image": IMAGE, "env": [{"name": "AI_L1_WORKLOAD_SLEEP", "value": "600"}],
                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}
        for name in names:  # held at once: each keeps its replica while the others start
            core.create_namespaced_pod(NS, {
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
                "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                         "nodeSelector": {"kubernetes.io/hostname": node}, "containers": [container]}})
        given = []
        for name in names:
            pod = wait_pod(core, name, ("Running", "Failed"))
            assert pod.status.phase == "Running", pod.status
            log = ""
            end = time.monotonic() + 30
            while "== end" not in log and time.monotonic() < end:
                log = core.read_namespaced_pod_log(name, NS)
            given.append(re.search(r"^NVIDIA_VISIBLE_DEVICES=(.*)$", log, re.M).group(1))
        assert set(given) <= set(node_uuids(node)), given  # replicas map back to the node's GPUs
        assert len(set(given)) < len(given), f"9 Pods, {len(set(given))} GPUs: no GPU was shared"
    finally:
        for name in names:
            try:
                core.delete_namespaced_pod(name, NS, grace_period_seconds=0)
            except Exception:  # noqa: BLE001 (a Pod the test never created)
                pass
        back = device_plugins_play()
        assert back.returncode == 0, tail(back, 120)
    rollout = on(CONTROL_PLANES[0], f"{KUBECTL} -n kube-system rollout status ds/nvidia-device-plugin --timeout=300s",
                 timeout=330)
    assert rollout.returncode == 0, tail(rollout)
    end = time.monotonic() + 180
    while [allocatable_gpus(core, n) for n in A100_NODES] != [8, 8]:
        assert time.monotonic() < end, "allocatable nvidia.com/gpu not back to 8 on every A100 node"
        time.sleep(2)


def npu_chips() -> int:
    scenario = json.loads((REPO / "tests" / "hardware" / "npu" / "scenarios" / "910b.json").read_text())
    return scenario["npu_count"] * scenario.get("chips_per_npu", 1)


def test_the_910b_node_advertises_its_npus(core):
    want = str(npu_chips())
    end = time.monotonic() + 120
    while (have := (core.read_node(NPU_NODE).status.allocatable or {}).get("huawei.com/Ascend910")) != want:
        assert time.monotonic() < end, f"{NPU_NODE}: allocatable huawei.com/Ascend910 is {have!r}, want {want}"
        time.sleep(3)


def test_npu_pod_runs_on_the_910b_node_with_the_npus_allocated(core):
    want = {"huawei.com/Ascend910": "2", "cpu": "50m", "memory": "32Mi"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "npu-train", "namespace": NS},
           "spec": {"restartPolicy": "Never", "nodeSelector": {"accelerator": "huawei-ascend"},
                    "containers": [{"name": "train", "image": IMAGE,
                                    "resources": {"requests": want, "limits": want}}]}}
    core.create_namespaced_pod(NS, pod)
    done = wait_pod(core, "npu-train", ("Succeeded", "Failed"))
    assert done.status.phase == "Succeeded" and done.spec.node_name == NPU_NODE, (done.spec.node_name, done.status)
    log = core.read_namespaced_pod_log("npu-train", NS)
    env = dict(line.split("=", 1) for line in log.split("== devices")[0].splitlines()[1:] if "=" in line)
    given = env.get("ASCEND_VISIBLE_DEVICES", "").split(",")
    assert len(set(given)) == 2 and set(given) <= {str(n) for n in range(npu_chips())}, \
        env.get("ASCEND_VISIBLE_DEVICES")


def quantity(text: str) -> float:
    """A Kubernetes quantity (CPU or bytes) as a number: 1800m -> 1.8, 256Mi -> 268435456."""
    units = {"m": 1e-3, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 1e3, "M": 1e6, "G": 1e9}
    for unit, factor in sorted(units.items(), key=lambda u: -len(u[0])):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * factor
    return float(text)


def test_allocatable_keeps_the_reserved_room(core):
    import yaml  # noqa: PLC0415

    lab = yaml.safe_load((LAB_INVENTORY / "group_vars" / "all" / "k8s.yml").read_text())
    kube, system = lab["k8s_control_plane_kube_reserved"], lab["k8s_control_plane_system_reserved"]
    for node in core.list_node().items:
        cap, alloc = node.status.capacity, node.status.allocatable
        for res in ("cpu", "memory"):
            reserved = quantity(kube[res]) + quantity(system[res])
            # memory: the lab's evictionHard names no memory signal, so no eviction threshold is kept
            assert abs(quantity(cap[res]) - reserved - quantity(alloc[res])) < 1e-6 * quantity(cap[res]) + 1e-3, \
                (node.metadata.name, res, cap[res], alloc[res], reserved)


@pytest.mark.parametrize("node", A100_NODES)
def test_nvml_and_nvidia_smi_came_with_the_driver_packages(k8s_cluster, node):  # noqa: ARG001
    # The a100 profile installs no driver: NVML and nvidia-smi are the packages' files.
    proc = on(node, "dpkg -S /usr/bin/nvidia-smi \"$(readlink -f /usr/lib/$(uname -m)-linux-gnu/libnvidia-ml.so.1)\"")
    assert proc.returncode == 0, tail(proc)
    owners = sorted(line.split(":")[0] for line in proc.stdout.splitlines())
    assert owners == ["libnvidia-ml1", "nvidia-smi"], proc.stdout


def test_npu_smi_came_with_the_driver_installer(k8s_cluster):  # noqa: ARG001
    # The ascend_910b profile installs no driver: npu-smi is the driver installer's, at the role's pin.
    proc = on("npu1", "readlink -f \"$(command -v npu-smi)\"; "
                      "sed -n 's/^Version=//p' /usr/local/Ascend/driver/version.info")
    assert proc.returncode == 0, tail(proc)
    assert proc.stdout.split() == ["/usr/local/Ascend/driver/tools/npu-smi", "23.0.rc1"]
