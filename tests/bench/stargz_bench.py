#!/usr/bin/env python3
"""Pod start of a large image with overlayfs and with Stargz, side by side (issue 18).

    python tests/bench/stargz_bench.py [--size-mib 1024] [--runs 3] [--json out.json]

Needs the lab up (`make lab`): gpu1 runs containerd's overlayfs snapshotter, gpu2 the Stargz
snapshotter (roles/stargz_snapshotter). The benchmark builds a large image once: the lab's workload
image plus a layer of --size-mib of incompressible files (a model's weights, say), pushes it to the
lab registry, and converts it to eStargz with the lab's converter (lab/k8s/estargz). Then, per run
and node, the image is removed from the node and a Pod that reads one small file starts; the time
from the Pod's creation to its container running is printed, with the bytes the node fetched
(Stargz: what its remote layers' state files report at start; overlayfs fetches the whole image).
The cases are interleaved, and the host's page cache is dropped before each start (--page-cache
drop, the default), so every pull reads the registry's blobs from disk, not from memory.

The figures are the lab's: registry and nodes share one 2-core machine, so a pull costs CPU
(decompressing, unpacking) more than network. No assertion on times.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
from remediation_lab import ensure_namespace, fetch_kubeconfig  # noqa: E402

INVENTORY = ROOT / "inventories" / "lab"
REGISTRY_HOST, REGISTRY_NODE = "127.0.0.1:5000", "10.89.100.1:5000"
BASE = "ai-l1-lab/workload:v0.1.0"
REPO = "ai-l1-lab/bench-large"
NODES = {"overlayfs": "gpu1", "stargz": "gpu2"}
NS = "stargz-bench"
BUILD_RECORD = Path(os.environ.get("AI_L1_CACHE", "/var/cache/ai-l1")) / "k8s" / "lab-build.json"
STARGZ_ROOT = "/var/lib/containerd/io.containerd.snapshotter.v1.stargz"
# Shell on a node: remove every reference to the manifests of the images whose reference matches the
# extended regular expression {pattern} (the tag, repo@digest, CRI's sha256:<id>); fails while any is left.
REMOVE_IMAGES = """
digests=$(ctr -n k8s.io images ls | awk -v re='{pattern}' '$1 ~ re {{print $3}}' | sort -u)
[ -z "$digests" ] && exit 0
refs=$(ctr -n k8s.io images ls | awk -v ds="$digests" 'BEGIN {{split(ds, d, "\\n"); for (i in d) want[d[i]] = 1}}
                                                      want[$3] {{print $1}}')
ctr -n k8s.io images rm --sync $refs >/dev/null
! ctr -n k8s.io images ls | awk -v ds="$digests" 'BEGIN {{split(ds, d, "\\n"); for (i in d) want[d[i]] = 1}}
                                                  want[$3]' | grep -q .
"""


def sh(*cmd: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, **kw)
    if check and proc.returncode != 0:
        sys.exit(f"{' '.join(cmd[:6])} failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return proc


def on(node: str, command: str, check: bool = True) -> subprocess.CompletedProcess:
    return sh("podman", "exec", f"ai-l1-{node}", "bash", "-c", command, check=check)


def build_image(size_mib: int) -> tuple[str, str]:
    """The large image (tag by size) and its eStargz copy, in the lab registry; reused when present."""
    tag = f"{size_mib}m"
    plain, lazy = f"{REPO}:{tag}", f"{REPO}:{tag}-estargz"
    have = sh("curl", "-sf", "-o", "/dev/null", "-H", "Accept: application/vnd.oci.image.manifest.v1+json",
              f"http://{REGISTRY_HOST}/v2/{REPO}/manifests/{tag}-estargz", check=False)
    if have.returncode == 0:
        return plain, lazy
    with tempfile.TemporaryDirectory() as tmp:
        weights = Path(tmp) / "weights"
        weights.mkdir()
        for i in range(size_mib // 64):
            (weights / f"shard-{i:03d}.bin").write_bytes(os.urandom(64 << 20))
        (Path(tmp) / "Containerfile").write_text(f"FROM {REGISTRY_HOST}/{BASE}\nCOPY weights/ /opt/model/\n")
        t0 = time.monotonic()
        sh("podman", "build", "--tls-verify=false", "-t", f"localhost/{plain}", tmp)
        sh("podman", "push", "--tls-verify=false", "--format", "oci", f"localhost/{plain}", f"docker://{REGISTRY_HOST}/{plain}")
        print(f"built and pushed {plain} in {time.monotonic() - t0:.1f} s", flush=True)
    tool = json.loads(BUILD_RECORD.read_text())["lab_tools"]["ai-l1-estargz-convert"]
    t0 = time.monotonic()
    sh(tool, "--insecure", f"{REGISTRY_HOST}/{plain}", f"{REGISTRY_HOST}/{lazy}")
    print(f"converted to eStargz in {time.monotonic() - t0:.1f} s", flush=True)
    return plain, lazy


def pod(name: str, node: str, image: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
            "spec": {"nodeName": node, "restartPolicy": "Never", "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "main", "image": image, "args": ["/etc/debian_version"],
                                     "env": [{"name": "AI_L1_WORKLOAD_SLEEP", "value": "300"}],
                                     "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}}}]}}


def layer_digests(image: str) -> set[str]:
    repo, tag = image.split("/", 1)[1].rsplit(":", 1)
    proc = sh("curl", "-sf", "-H", "Accept: application/vnd.oci.image.manifest.v1+json",
              f"http://{REGISTRY_HOST}/v2/{repo}/manifests/{tag}")
    return {layer["digest"] for layer in json.loads(proc.stdout)["layers"]}


def fetched_at_start(node: str, digests: set[str]) -> tuple[int, int]:
    """Bytes fetched so far and total, over the image's remote layers (their FUSE state files)."""
    proc = on(node, f"cat {STARGZ_ROOT}/snapshotter/snapshots/*/fs/.stargz-snapshotter/* 2>/dev/null", check=False)
    states = {s["digest"]: s for s in (json.loads(line) for line in proc.stdout.splitlines() if line.strip())}
    mine = [states[d] for d in digests if d in states]
    return sum(s["fetchedSize"] for s in mine), sum(s["size"] for s in mine)


def remove_image(node: str, image: str) -> None:
    """The image off the node, so the next Pod pulls it again: every reference to its manifest
    (the tag, repo@digest and CRI's sha256:<id>; CRI follows containerd's image events), then
    --sync: its blobs and snapshots are collected before ctr returns."""
    proc = on(node, REMOVE_IMAGES.format(pattern="^" + re.escape(image) + "$"), check=False)
    if proc.returncode != 0:
        sys.exit(f"{image} still on {node}: {proc.stdout}{proc.stderr}")


def start(core, name: str, node: str, image: str, lazy: bool) -> tuple[float, tuple[int, int] | None]:
    from kubernetes import client  # noqa: PLC0415

    remove_image(node, image)
    t0 = time.monotonic()
    core.create_namespaced_pod(NS, pod(name, node, image))
    while True:
        status = core.read_namespaced_pod(name, NS).status
        running = [c for c in status.container_statuses or [] if c.state.running]
        if running:
            elapsed = time.monotonic() - t0
            fetched = fetched_at_start(node, layer_digests(image)) if lazy else None
            break
        if status.phase not in ("Pending", "Running") or time.monotonic() - t0 > 600:
            sys.exit(f"{name} on {node}: {status}")
        time.sleep(0.2)
    core.delete_namespaced_pod(name, NS, grace_period_seconds=0)
    while True:
        try:
            core.read_namespaced_pod(name, NS)
        except client.ApiException as exc:
            if exc.status == 404:
                return elapsed, fetched
        time.sleep(0.5)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mib", type=int, default=1024, help="size of the image's large layer (default 1024)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--page-cache", choices=["drop", "keep"], default="drop",
                        help="drop the host's page cache before each start (default; needs root): the registry "
                             "then reads the image from disk as a first pull would, instead of from memory")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from kubernetes import client, config  # noqa: PLC0415

    plain, lazy = build_image(args.size_mib)
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = fetch_kubeconfig(INVENTORY, "cp1", Path(tmp) / "admin.conf")
        core = client.CoreV1Api(config.new_client_from_config(str(kubeconfig)))
    ensure_namespace(core, NS)
    cases = [("overlayfs", NODES["overlayfs"], f"{REGISTRY_NODE}/{plain}"),
             ("overlayfs, eStargz image", NODES["overlayfs"], f"{REGISTRY_NODE}/{lazy}"),
             ("stargz, eStargz image", NODES["stargz"], f"{REGISTRY_NODE}/{lazy}")]
    cold = args.page_cache == "drop"
    print(f"image: {args.size_mib} MiB of weights over the workload image; {args.runs} runs of each case, "
          f"cases interleaved; page cache {'dropped before each start (registry reads from disk)' if cold else 'kept'}",
          flush=True)
    times = {label: [] for label, _, _ in cases}
    fetched = []
    for i in range(args.runs):
        for label, node, image in cases:
            if cold:
                Path("/proc/sys/vm/drop_caches").write_text("1\n")
            elapsed, state = start(core, f"bench-{i}", node, image, lazy=node == NODES["stargz"])
            times[label].append(elapsed)
            if state:
                fetched.append(state)
    rows = []
    for label, node, image in cases:
        row = {"case": label, "node": node, "image": image, "page_cache": args.page_cache,
               "start_s": [round(t, 2) for t in times[label]], "median_s": round(statistics.median(times[label]), 2)}
        note = ""
        if node == NODES["stargz"] and fetched:
            row["fetched_bytes_at_start"] = [f for f, _ in fetched]
            row["remote_layer_bytes"] = fetched[-1][1]
            median_fetched = statistics.median(f for f, _ in fetched)
            note = f"   fetched at start {median_fetched / 2**20:.1f} of {fetched[-1][1] / 2**20:.1f} MiB"
        rows.append(row)
        print(f"{label:<26} on {node}: median {row['median_s']:6.2f} s   runs {row['start_s']}{note}", flush=True)
    core.delete_namespace(NS)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
