"""Stargz lazy pulling on the lab (issue 18, item 4).

gpu2 runs the Stargz snapshotter (roles/stargz_snapshotter, inventories/lab/hosts.yml), gpu1 keeps
overlayfs. lab/mirror/mirror.py publishes the workload image a second time as eStargz
(`<tag>-estargz`, converted by lab/k8s/estargz). Asserted here:

- containerd on gpu2 runs CRI on the `stargz` proxy plugin, with the image labels a remote
  snapshotter needs, and the snapshotter holds the seed's settings;
- a Pod of the eStargz image starts on gpu2 with every layer mounted remotely: each layer's snapshot
  carries the snapshotter's `containerd.io/snapshot/remote` label, containerd's content store never
  received the layer blobs (an overlayfs pull stores each one before unpacking), and each layer's
  FUSE mount reports through its state file (`.stargz-snapshotter/`) what it fetched;
- the same image on gpu1 (overlayfs) is pulled whole: its blobs are in the content store.

What the lab does not prove: cache behaviour on a real NVMe device and pull times over a data-centre
network (tests/bench/stargz_bench.py prints the lab's Pod start times side by side).
"""

from __future__ import annotations

import json
import sys
import time

import pytest
from conftest import CONTROL_PLANES, LAB_INVENTORY, REPO, on, tail
from remediation_lab import ensure_namespace, fetch_kubeconfig

sys.path.insert(0, str(REPO / "tests" / "bench"))
from stargz_bench import REMOVE_IMAGES  # noqa: E402 (one way to take images off a node)

NS = "stargz-test"
REGISTRY = "10.89.100.1:5000"
IMAGE = f"{REGISTRY}/ai-l1-lab/workload:v0.1.0-estargz"
STARGZ_NODE, OVERLAY_NODE = "gpu2", "gpu1"
STARGZ_ROOT = "/var/lib/containerd/io.containerd.snapshotter.v1.stargz"
TOC_ANNOTATION = "containerd.io/snapshot/stargz/toc.digest"
# Each remote layer's FUSE mount has a state file: {"digest", "size", "fetchedSize", ...}.
STATE_FILES = f"{STARGZ_ROOT}/snapshotter/snapshots/*/fs/.stargz-snapshotter/*"
SAMPLES = "/tmp/ai-l1-stargz-state-samples"


@pytest.fixture(scope="module")
def core(k8s_cluster, tmp_path_factory):  # noqa: ARG001 (the cluster must be up)
    from kubernetes import client, config  # noqa: PLC0415

    kubeconfig = fetch_kubeconfig(LAB_INVENTORY, CONTROL_PLANES[0], tmp_path_factory.mktemp("sgz") / "admin.conf")
    api = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))
    ensure_namespace(api, NS)
    yield api
    api.delete_namespace(NS)


def layer_digests() -> list[str]:
    """The eStargz image's layers, each with its TOC annotation (from the registry, as nodes see it)."""
    import urllib.request  # noqa: PLC0415

    req = urllib.request.Request("http://127.0.0.1:5000/v2/ai-l1-lab/workload/manifests/v0.1.0-estargz",
                                 headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
    with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 (the lab registry)
        manifest = json.load(resp)
    layers = manifest["layers"]
    assert layers and all(TOC_ANNOTATION in layer.get("annotations", {}) for layer in layers), layers
    return [layer["digest"] for layer in layers]


def pod(name: str, node: str) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
        "spec": {
            "nodeName": node, "restartPolicy": "Never",
            "tolerations": [{"operator": "Exists"}],
            "containers": [{"name": "main", "image": IMAGE, "imagePullPolicy": "IfNotPresent",
                            "args": ["/etc/debian_version"], "env": [{"name": "AI_L1_WORKLOAD_SLEEP", "value": "600"}],
                            "resources": {"requests": {"cpu": "10m", "memory": "16Mi"},
                                          "limits": {"cpu": "100m", "memory": "64Mi"}}}],
        },
    }


def start_fresh(core, name: str, node: str, sample_state: bool = False) -> None:
    """Remove any earlier Pod and the image from the node, then start the Pod and wait for Running.
    sample_state: record the snapshotter's layer states on the node (SAMPLES) until the Pod runs."""
    from kubernetes import client  # noqa: PLC0415

    try:
        core.delete_namespaced_pod(name, NS, grace_period_seconds=0)
    except client.ApiException as exc:
        if exc.status != 404:
            raise
    end = time.monotonic() + 120
    while time.monotonic() < end:
        try:
            core.read_namespaced_pod(name, NS)
        except client.ApiException as exc:
            if exc.status == 404:
                break
        time.sleep(1)
    # Every eStargz image: they share layers (the workload image's converted layers are the same
    # blobs in any image built on it), and a layer another image keeps stays mounted.
    removed = on(node, REMOVE_IMAGES.format(pattern="-estargz$"))
    assert removed.returncode == 0, f"eStargz images still on {node}: {tail(removed)}"
    if sample_state:
        # Every 0.1 s, the remote layers' state files (one JSON line each) until stopped.
        # Lines "<state file> <its JSON>"; the files already there (layers of other images) first.
        on(node, f"ls {STATE_FILES} >{SAMPLES}.before 2>/dev/null; rm -f {SAMPLES}; "
                 f"nohup bash -c 'while :; do for f in {STATE_FILES}; do [ -e \"$f\" ] && "
                 f"echo \"$f $(cat \"$f\")\"; done; sleep 0.1; done' >{SAMPLES} 2>/dev/null & echo $! >{SAMPLES}.pid")
    core.create_namespaced_pod(NS, pod(name, node))
    end = time.monotonic() + 240
    status = None
    try:
        while time.monotonic() < end:
            status = core.read_namespaced_pod(name, NS).status
            if status.phase == "Running":
                return
            assert status.phase == "Pending", status
            time.sleep(0.2)
    finally:
        if sample_state:
            on(node, f"kill $(cat {SAMPLES}.pid)")
    raise AssertionError(f"{name} on {node} not Running after 240 s: {status}")


def content_digests(node: str) -> set[str]:
    proc = on(node, "ctr -n k8s.io content ls -q")
    assert proc.returncode == 0, tail(proc)
    return set(proc.stdout.split())


def stargz_snapshots(node: str) -> list[dict]:
    """Every snapshot of the stargz snapshotter with its labels (ctr snapshots info is JSON)."""
    keys = on(node, "ctr -n k8s.io snapshots --snapshotter stargz ls | awk 'NR > 1 {print $1}'")
    assert keys.returncode == 0, tail(keys)
    out = []
    for key in keys.stdout.split():
        info = on(node, f"ctr -n k8s.io snapshots --snapshotter stargz info {key}")
        assert info.returncode == 0, tail(info)
        out.append(json.loads(info.stdout))
    return out


def test_containerd_runs_cri_on_the_stargz_proxy_plugin(k8s_cluster):  # noqa: ARG001
    plugins = on(STARGZ_NODE, "ctr plugins ls")
    assert plugins.returncode == 0, tail(plugins)
    assert any(line.split()[:2] == ["io.containerd.snapshotter.v1", "stargz"] and line.split()[-1] == "ok"
               for line in plugins.stdout.splitlines()), plugins.stdout
    dump = on(STARGZ_NODE, "containerd config dump")
    lines = {line.strip() for line in dump.stdout.splitlines()}
    assert {'snapshotter = "stargz"', "disable_snapshot_annotations = false"} <= lines, dump.stdout
    assert 'address = "/run/containerd-stargz-grpc/containerd-stargz-grpc.sock"' in lines
    overlay = on(OVERLAY_NODE, "containerd config dump")
    assert 'snapshotter = "overlayfs"' in {line.strip() for line in overlay.stdout.splitlines()}
    state = on(STARGZ_NODE, "systemctl is-active stargz-snapshotter; "
                            "cat /etc/containerd-stargz-grpc/config.toml")
    assert state.stdout.startswith("active\n"), tail(state)
    config = state.stdout
    # The seed's settings, where the daemon reads them.
    for setting in ("noprefetch = false", "prefetch_size = 524288000", "max_cache_fds = 10000",
                    'config_path = "/etc/containerd/certs.d"'):
        assert setting in config, config


def test_estargz_pod_starts_with_its_layers_mounted_lazily(core):
    layers = layer_digests()
    start_fresh(core, "lazy", STARGZ_NODE, sample_state=True)
    snapshots = {s.get("Labels", {}).get("containerd.io/snapshot/cri.layer-digest"): s
                 for s in stargz_snapshots(STARGZ_NODE)}
    for digest in layers:
        assert digest in snapshots, f"no stargz snapshot for layer {digest}: {sorted(snapshots, key=str)}"
        labels = snapshots[digest]["Labels"]
        assert "containerd.io/snapshot/remote" in labels, f"layer {digest} was not mounted remotely: {labels}"
    # containerd never downloaded them: the snapshotter fetches from the registry on demand.
    stored = content_digests(STARGZ_NODE)
    assert not stored & set(layers), f"layer blobs were pulled into containerd's content store: {stored & set(layers)}"
    # The snapshotter's own account, sampled from the Pod's creation until it ran: the layers were
    # mounted, and the container started on them, before their bytes were all fetched (the rest
    # comes on first read, or in the background once the node is quiet).
    samples = on(STARGZ_NODE, f"cat {SAMPLES}")
    before = set(on(STARGZ_NODE, f"cat {SAMPLES}.before").stdout.split())
    assert samples.returncode == 0, tail(samples)
    lines = samples.stdout.splitlines()
    states = []
    for i, (path, _, state) in enumerate(line.partition(" ") for line in lines):
        if not state.startswith("{") or path in before:
            continue
        try:
            states.append(json.loads(state))
        except ValueError:
            # The sampler is stopped when the Pod runs: its last line may be cut mid-write.
            assert i == len(lines) - 1, f"a sample that is not JSON: {state}"
    for digest in layers:
        seen = [st for st in states if st["digest"] == digest]
        assert seen, f"no state of layer {digest} sampled before the Pod ran"
        assert not any(st.get("error") for st in seen), seen[-1]
        print(f"{digest[:19]}: {len(seen)} samples before start; fetched at least {seen[0]['fetchedSize']}, "
              f"at most {seen[-1]['fetchedSize']} of {seen[-1]['size']} bytes")
    base = max(layers, key=lambda d: max(st["size"] for st in states if st["digest"] == d))
    fetched = min(st["fetchedSize"] for st in states if st["digest"] == base)
    size = max(st["size"] for st in states if st["digest"] == base)
    assert fetched < size, f"layer {base} was whole ({fetched} of {size} bytes) at every sample before the Pod ran"
    logs = core.read_namespaced_pod_log("lazy", NS)
    assert "== file /etc/debian_version\n12" in logs, logs


def test_the_same_image_on_overlayfs_is_pulled_whole(core):
    layers = layer_digests()
    start_fresh(core, "whole", OVERLAY_NODE)
    stored = content_digests(OVERLAY_NODE)
    assert set(layers) <= stored, f"overlayfs pull should store every layer blob; missing {set(layers) - stored}"
