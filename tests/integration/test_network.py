"""The seed's network layer on the lab: Calico is the pod network and enforces the seed's
NetworkPolicies (design section 4.4.3, roles/network_policies), proven with traffic.

Calico v3.32.1 runs as the lab's CNI, built from its release archive (lab/k8s/build.py) and applied
from the release's calico-vxlan.yaml by roles/k8s_cni, every pod packet between nodes in VXLAN
(k8s_cni_calico_encapsulation: Always). Pods here run the lab's python3 image: each server listens
on TCP 443, 8443, 29500 (an NCCL-style port) and answers UDP on 29501; a check connects from inside
another Pod (kubectl exec) and reports whether the server answered.

Asserted, each with the traffic that would show the opposite:
- calico-node is ready on every node, pod traffic between nodes goes through vxlan.calico;
- GPU Pods (accelerator=nvidia) of the training namespace reach each other on arbitrary TCP and
  UDP ports, across nodes;
- a Pod of a namespace without purpose=training cannot reach a GPU Pod, a Pod of another
  purpose=training namespace can;
- a GPU Pod still resolves names (DNS), reaches the API server and port 443 anywhere, and cannot
  reach another port outside the training namespaces (its egress is confined);
- block-external-gpu-access admits the monitoring namespace and refuses a Pod of another namespace,
  until the Pod's address is added to the rule's ipBlock ranges (then admitted); playbooks/network.yml
  puts the inventory's policy back and a second run changes nothing. The target is a plain Pod
  labelled app=gpu-operator, standing in for the operator's Pods: the policy selects by that label.
A policy that the API accepted but Calico did not enforce fails the refusal checks.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import sys
import textwrap
import time
import urllib.request

import pytest
import yaml
from ansible_collections.ai_platform.l1.plugins.filter.release_manifest import release_manifest
from conftest import (
    CONTROL_PLANES,
    LAB_INVENTORY,
    OVERLAY,
    REPO,
    admin_kubeconfig,
    controller_kubectl,
    kubectl_json,
    on,
    playbook,
    recap,
    server_dry_run,
    tail,
    wait_for,
)

IMAGE = "10.89.100.1:5000/ai-l1-lab/python3-debian:bookworm"
OCI_ACCEPT = ", ".join(["application/vnd.oci.image.index.v1+json", "application/vnd.oci.image.manifest.v1+json",
                        "application/vnd.docker.distribution.manifest.v2+json",
                        "application/vnd.docker.distribution.manifest.list.v2+json"])
NET_VARS = yaml.safe_load((LAB_INVENTORY / "group_vars" / "all" / "network.yml").read_text())
NETWORK_PLAY = REPO / "playbooks" / "network.yml"
TRAINING = NET_VARS["network_policies_training_namespaces"][0]
OUTSIDER, PEER_TEAM, MONITORING, OPERATOR_NS = "net-outsider", "net-peer-team", "monitoring", "kube-system"

SERVER = textwrap.dedent("""
    import socket, threading
    def tcp(port):
        s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("", port)); s.listen(16)
        while True:
            c, _ = s.accept(); c.sendall(b"ok"); c.close()
    for p in (443, 8443, 29500):
        threading.Thread(target=tcp, args=(p,), daemon=True).start()
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("", 29501))
    while True:
        data, peer = u.recvfrom(64); u.sendto(b"ok", peer)
""")
# argv: host port tcp|udp|connect|dns -> exit 0 when the server answered "ok" within 3 s (tcp, udp),
# accepted the connection (connect: a server that speaks first, such as TLS, waits for us), or the
# name resolved (dns).
CLIENT = textwrap.dedent("""
    import socket, sys
    host, port, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    try:
        if kind == "dns":
            socket.getaddrinfo(host, port); sys.exit(0)
        if kind == "udp":
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3)
            s.sendto(b"x", (host, port)); sys.exit(0 if s.recv(64) == b"ok" else 1)
        s = socket.create_connection((host, port), timeout=3)
        sys.exit(0 if kind == "connect" or s.recv(2) == b"ok" else 1)
    except OSError as exc:
        print(exc); sys.exit(1)
""")


def pod(namespace: str, name: str, node: str, labels: dict | None = None, host_network: bool = False) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {"ai-l1-test": "network", **(labels or {})}},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "hostNetwork": host_network,
                     "tolerations": [{"operator": "Exists"}], "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "net", "image": IMAGE, "command": ["python3", "-c", SERVER]}]}}


PODS = [
    pod(TRAINING, "gpu-a", "gpu1", {"accelerator": "nvidia"}),
    pod(TRAINING, "gpu-b", "gpu2", {"accelerator": "nvidia"}),
    pod(OUTSIDER, "client", "gpu2"),
    pod(OUTSIDER, "server", "gpu1"),
    pod(PEER_TEAM, "client", "gpu2"),
    pod(MONITORING, "net-client", "gpu2"),
    pod(OPERATOR_NS, "net-policy-target", "gpu1", {"app": "gpu-operator"}),
]


def kubectl(*args: str, stdin: str | None = None):
    return controller_kubectl(admin_kubeconfig(), *args, stdin=stdin)


@pytest.fixture(scope="module")
def pods(k8s_cluster):  # noqa: ARG001 (the cluster is up)
    namespaces = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OUTSIDER}},
                  {"apiVersion": "v1", "kind": "Namespace",
                   "metadata": {"name": PEER_TEAM, "labels": {"purpose": "training"}}},
                  {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": MONITORING}}]
    applied = kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all([*namespaces, *PODS]))
    assert applied.returncode == 0, applied.stderr
    ips = {}

    def ready():
        for p in PODS:
            ns, name = p["metadata"]["namespace"], p["metadata"]["name"]
            got = kubectl("get", "pod", "-n", ns, name, "-o", "json")
            if got.returncode != 0:
                return None
            obj = json.loads(got.stdout)
            if not any(c["type"] == "Ready" and c["status"] == "True" for c in obj["status"].get("conditions", [])):
                return None
            ips[(ns, name)] = obj["status"]["podIP"]
        return ips

    wait_for("the network test Pods to run", ready, timeout=240)
    yield ips
    for p in PODS:
        kubectl("delete", "pod", "-n", p["metadata"]["namespace"], p["metadata"]["name"], "--wait=false")
    kubectl("delete", "namespace", OUTSIDER, PEER_TEAM, "--wait=false")


def reach(src: tuple[str, str], host: str, port: int, kind: str = "tcp") -> bool:
    proc = kubectl("exec", "-n", src[0], src[1], "--", "python3", "-c", CLIENT, host, str(port), kind)
    return proc.returncode == 0


def test_calico_is_the_pod_network_on_every_node(k8s_cluster):
    ds = kubectl_json("get daemonset -n kube-system calico-node")
    assert ds["status"]["numberReady"] == ds["status"]["desiredNumberScheduled"] == \
        len(k8s_cluster.control_planes) + len(k8s_cluster.workers)
    images = {c["image"] for c in ds["spec"]["template"]["spec"]["containers"]}
    assert all(i.startswith("10.89.100.1:5000/calico/node:v3.32.1@sha256:") for i in images), images
    env = {e["name"]: e.get("value") for e in ds["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["CALICO_IPV4POOL_VXLAN"] == "Always" and env["CALICO_IPV4POOL_IPIP"] == "Never"
    # Felix's health asked by the kubelet itself (the pods above are ready through these probes).
    node = ds["spec"]["template"]["spec"]["containers"][0]
    felix = {"host": "localhost", "path": "/readiness", "port": 9099, "scheme": "HTTP"}
    assert node["readinessProbe"]["httpGet"] == felix
    assert node["livenessProbe"]["httpGet"]["path"] == "/liveness" and "exec" not in node["livenessProbe"]
    pools = kubectl_json("get ippools.crd.projectcalico.org")["items"]
    assert [(p["spec"]["cidr"], p["spec"]["vxlanMode"]) for p in pools] == [("10.244.0.0/16", "Always")]
    links = on("gpu1", "ip -d link show vxlan.calico")
    assert links.returncode == 0 and "vxlan id" in links.stdout, links.stdout + links.stderr


def test_gpu_pods_talk_on_any_port_across_nodes(pods):
    a = pods[(TRAINING, "gpu-a")]
    assert reach((TRAINING, "gpu-b"), a, 29500), "GPU Pod to GPU Pod, TCP 29500 (NCCL)"
    assert reach((TRAINING, "gpu-b"), a, 29501, "udp"), "GPU Pod to GPU Pod, UDP 29501"
    # The packet crossed nodes in the tunnel: gpu2's vxlan.calico counted it.
    tx = on("gpu2", "cat /sys/class/net/vxlan.calico/statistics/tx_packets")
    assert tx.returncode == 0 and int(tx.stdout.strip()) > 0, tx.stdout + tx.stderr


def test_a_namespace_without_purpose_training_cannot_reach_a_gpu_pod(pods):
    a = pods[(TRAINING, "gpu-a")]
    # The same client reaches an unconfined Pod on the same node as the GPU Pod: the network works.
    assert reach((OUTSIDER, "client"), pods[(OUTSIDER, "server")], 8443)
    assert not reach((OUTSIDER, "client"), a, 29500), "gpu-pod-isolation is not enforced (TCP)"
    assert not reach((OUTSIDER, "client"), a, 29501, "udp"), "gpu-pod-isolation is not enforced (UDP)"
    assert reach((PEER_TEAM, "client"), a, 29500), "a purpose=training namespace is refused"


def test_gpu_pod_egress_keeps_dns_the_api_and_https_only(pods):
    src = (TRAINING, "gpu-a")
    outsider = pods[(OUTSIDER, "server")]
    assert reach(src, "kubernetes.default.svc.cluster.local", 443, "dns"), "DNS refused"
    assert reach(src, "10.96.0.1", 443, "connect"), "the API server (Service 443 -> 6443) refused"
    assert reach(src, outsider, 443), "HTTPS (443) to another namespace refused"
    assert not reach(src, outsider, 8443), "egress to another port outside training namespaces is not confined"


def test_gpu_operator_admits_only_its_sources(pods):
    target = pods[(OPERATOR_NS, "net-policy-target")]
    outsider = (OUTSIDER, "client")
    assert reach((MONITORING, "net-client"), target, 8443), "the monitoring namespace is refused"
    assert not reach(outsider, target, 8443), "block-external-gpu-access is not enforced"
    # The ipBlock rule, proven with an address the lab controls: the outsider's own (Calico matches Pod
    # sources against ipBlock). A node's traffic cannot show it: Calico admits a node to its own Pods
    # whatever the policy, and a remote node's traffic arrives from its tunnel address (pod network).
    cidrs = [*NET_VARS["network_policies_gpu_operator_cidrs"], f"{pods[outsider]}/32"]
    widened = playbook(NETWORK_PLAY, "-e", json.dumps({"network_policies_gpu_operator_cidrs": cidrs}))
    assert widened.returncode == 0, tail(widened)
    try:
        assert wait_for("the outsider's /32 to be admitted", lambda: reach(outsider, target, 8443), timeout=30)
    finally:
        # The inventory's policy again: the role puts back exactly what the inventory says.
        restored = playbook(NETWORK_PLAY)
        assert restored.returncode == 0, tail(restored)
    assert recap(restored.stdout)[CONTROL_PLANES[0]]["changed"] == 1, "the policy was not put back"
    assert wait_for("the outsider to be refused again", lambda: not reach(outsider, target, 8443), timeout=30)
    second = playbook(NETWORK_PLAY)
    assert recap(second.stdout)[CONTROL_PLANES[0]]["changed"] == 0, "network.yml is not idempotent"


def test_the_policies_are_the_seeds_fixed(k8s_cluster):  # noqa: ARG001
    iso = kubectl_json(f"get networkpolicy -n {TRAINING} gpu-pod-isolation")["spec"]
    assert iso["podSelector"]["matchExpressions"] == [
        {"key": "accelerator", "operator": "In", "values": ["nvidia", "huawei-ascend"]}]
    assert iso["policyTypes"] == ["Ingress", "Egress"]
    nccl = iso["egress"][1]
    assert "ports" not in nccl, "the seed's port 0 must become every port"
    assert {(p["port"], p["protocol"]) for p in iso["egress"][0]["ports"]} == {
        (443, "TCP"), (6443, "TCP"), (53, "UDP"), (53, "TCP")}
    assert "to" not in iso["egress"][0]
    ns = kubectl_json(f"get namespace {TRAINING}")
    assert ns["metadata"]["labels"]["purpose"] == "training"
    block = kubectl_json(f"get networkpolicy -n {OPERATOR_NS} block-external-gpu-access")["spec"]
    assert block["ingress"][0]["from"] == [
        {"ipBlock": {"cidr": c}} for c in NET_VARS["network_policies_gpu_operator_cidrs"]] + [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": MONITORING}}}]


def test_every_node_keeps_its_pod_routes_after_calico_node_restarts(pods):
    """calico-node restarted on gpu2 (its Pod deleted): pod traffic resumes once the new one is ready."""
    before = kubectl_json("get pods -n kube-system -l k8s-app=calico-node --field-selector spec.nodeName=gpu2")
    name = before["items"][0]["metadata"]["name"]
    assert kubectl("delete", "pod", "-n", "kube-system", name).returncode == 0

    def ready():
        now = kubectl_json("get pods -n kube-system -l k8s-app=calico-node --field-selector spec.nodeName=gpu2")
        return [p for p in now["items"] if p["metadata"]["name"] != name and any(
            c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", []))]

    t0 = time.monotonic()
    wait_for("calico-node on gpu2 to be ready again", ready, timeout=180)
    print(f"\ncalico-node on gpu2 ready again in {time.monotonic() - t0:.1f}s")
    assert reach((TRAINING, "gpu-b"), pods[(TRAINING, "gpu-a")], 29500)
    assert not reach((OUTSIDER, "client"), pods[(TRAINING, "gpu-a")], 29500)



# ---- Multus and whereabouts (4.4.4): the lab's storage plane (lab_planes, eth1 on every node)
MULTUS_VARS = yaml.safe_load((LAB_INVENTORY / "group_vars" / "all" / "multus.yml").read_text())
STORAGE_NET = next(n for n in MULTUS_VARS["k8s_multus_networks"] if n["name"] == "storage-net")
STORAGE_RANGE = ipaddress.ip_network(STORAGE_NET["config"]["ipam"]["range"])
STOR1_STORAGE_IP = "10.89.101.41"  # stor1 on the storage plane (inventories/lab/hosts.yml, lab_planes)


def seed_multi_net_pod(name: str, node: str, networks: list[dict]) -> dict:
    """The seed's multi-network Pod (4.4.4): its annotation and GPU limit, the lab's python3 image
    (the seed's pytorch image is not here) serving on the storage interface. One GPU, not eight:
    the module shares the lab's 16 GPUs with the others."""
    p = pod("default", name, node)
    p["metadata"]["annotations"] = {"k8s.v1.cni.cncf.io/networks": json.dumps(networks)}
    p["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    p["spec"]["schedulerName"] = "default-scheduler"
    return p


def storage_ip(name: str) -> str:
    """The Pod's address on the attachment, from Multus' network-status annotation."""
    got = kubectl_json(f"get pod -n default {name}")
    status = json.loads(got["metadata"]["annotations"].get("k8s.v1.cni.cncf.io/network-status", "[]"))
    return next((ip for s in status if s.get("name") == "default/storage-net" for ip in s.get("ips", [])), "")


@pytest.fixture(scope="module")
def multi_net(k8s_cluster):  # noqa: ARG001
    names = ["multi-net-training", "multi-net-peer"]
    storage = [{"name": "storage-net", "namespace": "default"}]
    pods = [seed_multi_net_pod(names[0], "gpu1", storage), seed_multi_net_pod(names[1], "gpu2", storage)]
    assert kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(pods)).returncode == 0
    ips = wait_for("the multi-network Pods to run with a storage address",
                   lambda: all(storage_ip(n) for n in names) and {n: storage_ip(n) for n in names}, timeout=240)
    yield ips
    kubectl("delete", "pod", "-n", "default", *names, "--wait=false")


def test_multus_and_whereabouts_run_on_every_node(k8s_cluster):
    for name in ("kube-multus-ds", "whereabouts"):
        ds = kubectl_json(f"get daemonset -n kube-system {name}")
        assert ds["status"]["numberReady"] == ds["status"]["desiredNumberScheduled"] == \
            len(k8s_cluster.control_planes) + len(k8s_cluster.workers), name
        image = ds["spec"]["template"]["spec"]["containers"][0]["image"]
        assert image.startswith("10.89.100.1:5000/k8snetworkplumbingwg/") and "@sha256:" in image, image
    nads = {n["metadata"]["name"]: json.loads(n["spec"]["config"])
            for n in kubectl_json("get network-attachment-definitions -n default")["items"]}
    assert nads["storage-net"] == STORAGE_NET["config"]
    assert nads["ib-net"]["type"] == "ib-sriov" and nads["ib-net"]["ipam"]["type"] == "whereabouts"


def test_the_seeds_multi_network_pod_gets_a_storage_interface(multi_net):
    ip = multi_net["multi-net-training"]
    assert ipaddress.ip_address(ip) in STORAGE_RANGE, f"{ip} is outside whereabouts' range {STORAGE_RANGE}"
    links = kubectl("exec", "-n", "default", "multi-net-training", "--", "python3", "-c",
                    "import socket; print([n for _, n in socket.if_nameindex()])")
    assert "net1" in links.stdout, links.stdout + links.stderr
    # whereabouts records the allocation cluster-wide.
    pools = kubectl_json("get ippools.whereabouts.cni.cncf.io -n kube-system")["items"]
    allocated = {a["podref"] for p in pools for a in p["spec"].get("allocations", {}).values()}
    assert "default/multi-net-training" in allocated, allocated


def test_pods_talk_on_the_storage_plane(multi_net):
    src = ("default", "multi-net-peer")
    assert reach(src, multi_net["multi-net-training"], 29500), "Pod to Pod over storage-net"
    # The storage node (Ceph) on the storage plane, from a Pod's storage interface: sshd answers.
    assert reach(src, STOR1_STORAGE_IP, 22, "connect"), "the storage node on the storage plane"


def test_ceph_is_on_the_storage_plane(k8s_cluster):  # noqa: ARG001
    """The lab puts Ceph's public network on the storage plane: the monitor listens on stor1's storage
    address, and a GPU node reaches it through its storage interface, not the management one."""
    listening = on("stor1", "ss -Hltn")
    assert f"{STOR1_STORAGE_IP}:3300" in listening.stdout, listening.stdout
    route = on("gpu1", f"ip -o route get {STOR1_STORAGE_IP}")
    assert " dev eth1 " in route.stdout, route.stdout
    mons = on("stor1", "ceph mon dump --format json")
    assert STOR1_STORAGE_IP in mons.stdout, mons.stdout + mons.stderr


def test_the_planes_carry_no_default_route(k8s_cluster):
    """Storage and compute planes are node-to-node networks: every node keeps one default route, on
    management (eth0), so the node address the roles take from it (kubeadm, etcd) stays there."""
    for host in [*k8s_cluster.control_planes, *k8s_cluster.workers]:
        routes = on(host, "ip -o -4 route show default").stdout.splitlines()
        assert len(routes) == 1 and " dev eth0" in routes[0], f"{host}: {routes}"


def test_the_rdma_shared_device_plugin_passes_the_api(k8s_cluster):  # noqa: ARG001
    """NVIDIA/Mellanox's RDMA shared device plugin cannot run here (the lab's kernel has no RDMA
    subsystem): its release manifest from the lab mirror, with the lab's build of its image by digest
    (the release_manifest rule the role applies), and the ConfigMap of the sample inventory's resources
    pass the API server's validation; the image is in the lab registry."""
    sys.path.insert(0, str(REPO / "artifacts"))
    import artifacts  # noqa: PLC0415

    overlay = yaml.safe_load(OVERLAY.read_text())
    manifest = artifacts.load(overlay=OVERLAY)
    got = {a["name"]: a for a in artifacts.resolve(
        manifest, "amd64", files_mirror=overlay["files_mirror"], images_mirror=overlay["images_mirror"],
        names=["rdma-shared-dev-plugin-manifest", "rdma-shared-dev-plugin-image"])}
    image = got["rdma-shared-dev-plugin-image"]
    ref = f"{image['image']}@{image['sha256']}"
    with urllib.request.urlopen(got["rdma-shared-dev-plugin-manifest"]["url"], timeout=30) as resp:  # noqa: S310
        text = resp.read()
    assert hashlib.sha256(text).hexdigest() == got["rdma-shared-dev-plugin-manifest"]["sha256"]
    docs = [d for d in yaml.safe_load_all(text) if d]
    objects = release_manifest(docs, {"mellanox/k8s-rdma-shared-dev-plugin": ref})
    daemonset = next(o for o in objects if o["kind"] == "DaemonSet")
    assert [c["image"] for c in daemonset["spec"]["template"]["spec"]["containers"]] == [ref]
    sample = yaml.safe_load((REPO / "inventories" / "sample" / "group_vars" / "all" / "network.yml").read_text())
    config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "rdma-devices", "namespace": "kube-system"},
              "data": {"config.json": json.dumps({"periodicUpdateInterval": 300,
                                                  "configList": sample["k8s_multus_rdma_resources"]})}}
    proc = server_dry_run([config, *objects])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("(server dry run)") == len(objects) + 1, proc.stdout
    registry, _, repo = image["image"].partition("/")
    head = urllib.request.Request(f"http://{registry}/v2/{repo.rsplit(':', 1)[0]}/manifests/{image['sha256']}",
                                  method="HEAD", headers={"Accept": OCI_ACCEPT})
    with urllib.request.urlopen(head, timeout=30) as resp:  # noqa: S310
        assert resp.status == 200
