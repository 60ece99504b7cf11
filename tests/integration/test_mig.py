"""nvidia_mig on a Kubernetes node of the lab (gpu1, simulated 8 x A100 with MIG).

The role runs through ansible-playbook against inventories/lab, as an operator would. A test
Deployment pinned to gpu1 gives the drain something to evict. Asserted from the output: the
order cordon -> drain -> apply -> verify -> uncordon, the new layout read back with nvidia-smi
on the node, the Pod evicted and the Node schedulable again without the cordon annotation; then
a second run with the same layout changes nothing and cordons nothing.

gpu1's MIG state lives in the fake NVML's state file (/var/lib/ai-l1-fake/nvml-state): it is
saved first and put back afterwards, and the layout is checked to be the one found.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import textwrap
import time

import pytest
from conftest import CONTROL_PLANES, KUBECTL, LAB_NAME, REPO, on, recap, sh, tail
from conftest import playbook as run_playbook

NODE = "gpu1"
NAMESPACE = "mig-test"
STATE = "/var/lib/ai-l1-fake/nvml-state"
CONFIG = {
    "version": "v1",
    "mig-configs": {
        "mig-test": [{"devices": [0], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
    },
}
# GPU 0 into seven 1g.10gb instances, GPU 7 out of MIG: both kinds of resource under `mixed`.
RESOURCES_CONFIG = {
    "version": "v1",
    "mig-configs": {
        "mig-resources": [{"devices": [0], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
                          {"devices": [7], "mig-enabled": False}],
        "all-disabled": [{"devices": "all", "mig-enabled": False}],
    },
}
WORKLOAD_IMAGE = "10.89.100.1:5000/ai-l1-lab/workload:v0.1.0"
# NVIDIA's plugin advertises MIG devices (strategy mixed) only with the driver's MIG capability
# files (/proc/driver/nvidia/capabilities, /proc/driver/nvidia-caps), which a lab node's /proc
# cannot hold: for the mixed strategy the lab runs its stand-in (tests/hardware/device_plugin) in
# the plugin's image slot. The layout changes and the drain around them are the role's, either way.
MIXED_STRATEGY_IMAGE = "10.89.100.1:5000/ai-l1-lab/nvidia-device-plugin-standin:v0.1.0"
ORDER = ["MIG cordon (1/5)", "MIG drain (2/5)", "MIG apply |", "MIG verify |", "MIG uncordon (5/5)"]


def node_json() -> dict:
    proc = on(CONTROL_PLANES[0], f"{KUBECTL} get node {NODE} -o json")
    assert proc.returncode == 0, tail(proc)
    return json.loads(proc.stdout)


def gpu_instances() -> str:
    proc = on(NODE, "nvidia-smi mig -lgi")
    assert proc.returncode in (0, 6), tail(proc)
    return proc.stdout


def run_role(tmp_path, name: str, config: str = "mig-test", configs: dict = CONFIG) -> subprocess.CompletedProcess:
    playbook = tmp_path / f"{name}.yml"
    playbook.write_text(textwrap.dedent(f"""\
        - name: MIG layout on {NODE}
          hosts: {NODE}
          become: true
          gather_facts: false
          roles:
            - role: nvidia_mig
              vars:
                nvidia_mig_config: {config}
                nvidia_mig_drain_timeout: 180
        """))
    extra = tmp_path / "mig-vars.json"
    extra.write_text(json.dumps({"nvidia_mig_configs": configs}))
    t0 = time.monotonic()
    proc = run_playbook("-e", f"@{extra}", playbook, timeout=900)
    print(f"{name}: ansible-playbook took {time.monotonic() - t0:.1f}s")
    return proc


@pytest.fixture
def gpu1_restored(k8s_cluster):  # noqa: ARG001 (needs the cluster)
    node = node_json()
    if node["spec"].get("unschedulable"):
        reason = node["metadata"].get("annotations", {}).get("ai-platform.io/cordon-reason", "no reason recorded")
        pytest.fail(f"{NODE} is cordoned before the test ({reason}): someone else is using it; this test "
                    "uncordons it at the end, so it refuses to start")
    # The fake must answer `nvidia-smi mig`: on a node built before that, replace the fake's two
    # binaries only (its scenario, which other tests edit, stays), as the a100 profile lays them out.
    if "unsupported argument" in on(NODE, "nvidia-smi mig -lgi").stderr:
        build = sh("bash", REPO / "tests/hardware/nvml/build.sh", check=True).stdout.strip().splitlines()[-1]
        container = f"{LAB_NAME}-{NODE}"
        driver = on(NODE, "nvidia-smi --query-gpu=driver_version --format=csv,noheader -i 0").stdout.strip()
        lib = on(NODE, f"ls /usr/lib/*-linux-gnu/libnvidia-ml.so.{driver}").stdout.strip()
        assert driver and lib, f"no fake NVML library found on {NODE}"
        sh("podman", "cp", f"{build}/libnvidia-ml.so.1", f"{container}:{lib}", check=True)
        sh("podman", "cp", f"{build}/nvidia-smi", f"{container}:/usr/bin/nvidia-smi", check=True)
        assert "unsupported argument" not in on(NODE, "nvidia-smi mig -lgi").stderr
    saved = on(NODE, f"cat {STATE}")
    had_state = saved.returncode == 0
    before = gpu_instances()
    yield before
    on(CONTROL_PLANES[0], f"{KUBECTL} delete namespace {NAMESPACE} --ignore-not-found --wait=false")
    if had_state:
        restore = on(NODE, f"printf %s {shlex.quote(saved.stdout)} > {STATE}")
    else:
        restore = on(NODE, f"rm -f {STATE}")
    assert restore.returncode == 0, tail(restore)
    assert gpu_instances() == before, f"{NODE}'s MIG layout was not restored"
    # A failed run leaves the node cordoned with a MIG reason: undo only that.
    node = node_json()
    reason = node["metadata"].get("annotations", {}).get("ai-platform.io/cordon-reason", "")
    if node["spec"].get("unschedulable") and reason.startswith("MIG reconfiguration"):
        on(CONTROL_PLANES[0], f"{KUBECTL} uncordon {NODE} && "
           f"{KUBECTL} annotate node {NODE} ai-platform.io/cordon-reason- ai-platform.io/drain-failed-")


def test_mig_reconfiguration_drains_and_uncordons(tmp_path, gpu1_restored):
    before = gpu1_restored
    assert len(re.findall(r"^\|\s+0\s+MIG 1g\.10gb\s", before, re.M)) != 7, "gpu1 already has the test layout"
    # A Pod on gpu1 for the drain to evict (the sandbox image is in the lab registry).
    manifest = textwrap.dedent(f"""\
        apiVersion: v1
        kind: Namespace
        metadata: {{name: {NAMESPACE}}}
        ---
        apiVersion: apps/v1
        kind: Deployment
        metadata: {{name: gpu-client, namespace: {NAMESPACE}}}
        spec:
          replicas: 1
          selector: {{matchLabels: {{app: gpu-client}}}}
          template:
            metadata: {{labels: {{app: gpu-client}}}}
            spec:
              nodeSelector: {{kubernetes.io/hostname: {NODE}}}
              terminationGracePeriodSeconds: 1
              containers:
                - name: pause
                  image: 10.89.100.1:5000/pause:3.10.1
        """)
    applied = on(CONTROL_PLANES[0], f"printf %s {shlex.quote(manifest)} | {KUBECTL} apply -f - && "
                 f"{KUBECTL} -n {NAMESPACE} rollout status deploy/gpu-client --timeout=180s", timeout=240)
    assert applied.returncode == 0, tail(applied)
    pod_before = on(CONTROL_PLANES[0], f"{KUBECTL} -n {NAMESPACE} get pods -o name").stdout.split()

    first = run_role(tmp_path, "first")
    out = first.stdout
    assert first.returncode == 0, tail(first, 150)
    found = {step: out.find(step) for step in ORDER}
    print("step positions in the output:", found)
    assert all(p >= 0 for p in found.values()), f"a step is missing from the output: {found}"
    assert list(found.values()) == sorted(found.values()), f"steps out of order: {found}"
    assert recap(out)[NODE]["changed"] > 0

    node = node_json()
    assert not node["spec"].get("unschedulable"), f"{NODE} is still cordoned after the role"
    assert "ai-platform.io/cordon-reason" not in node["metadata"].get("annotations", {})
    after = gpu_instances()
    assert len(re.findall(r"^\|\s+0\s+MIG 1g\.10gb\s", after, re.M)) == 7, after
    # GPUs the config does not select are untouched.
    assert [line for line in after.splitlines() if re.match(r"^\|\s+[1-7]\s", line)] == \
        [line for line in before.splitlines() if re.match(r"^\|\s+[1-7]\s", line)]
    # The drain evicted the Pod; the Deployment's replacement landed on gpu1 after the uncordon.
    ready = on(CONTROL_PLANES[0], f"{KUBECTL} -n {NAMESPACE} rollout status deploy/gpu-client --timeout=180s",
               timeout=240)
    assert ready.returncode == 0, tail(ready)
    pod_after = on(CONTROL_PLANES[0], f"{KUBECTL} -n {NAMESPACE} get pods -o name").stdout.split()
    assert pod_after and pod_after != pod_before, f"the Pod was not evicted: {pod_before} -> {pod_after}"

    second = run_role(tmp_path, "second")
    assert second.returncode == 0, tail(second, 150)
    assert "already applied" in second.stdout
    assert "MIG cordon" not in second.stdout
    assert recap(second.stdout)[NODE]["changed"] == 0


def test_mig_failure_leaves_node_cordoned_with_reason(tmp_path, gpu1_restored):
    # A GPU client outside Kubernetes (the drain cannot stop it): applying must refuse after the
    # drain, and the node must stay cordoned with the reason (the fixture undoes both).
    inject = on(NODE, f"mkdir -p {STATE.rsplit('/', 1)[0]} && echo gpu.0.process.0=4242,python3,2048 >> {STATE}")
    assert inject.returncode == 0, tail(inject)
    failed = run_role(tmp_path, "failing")
    assert failed.returncode != 0, "the role succeeded although a process uses GPU 0"
    out = failed.stdout
    assert out.find("MIG cordon (1/5)") < out.find("MIG drain (2/5)") < out.find("MIG apply |")
    assert "MIG uncordon (5/5)" not in out
    node = node_json()
    reason = node["metadata"].get("annotations", {}).get("ai-platform.io/cordon-reason", "")
    print("cordon reason left on the node:", reason)
    assert node["spec"].get("unschedulable"), f"{NODE} was uncordoned although the MIG change failed"
    assert reason.startswith("MIG reconfiguration to mig-test failed"), reason
    assert "pid 4242" in reason, reason
    assert gpu_instances() == gpu1_restored, "the refused change touched the GPU instances"


# ---------------------------------------------------------------- MIG resources on the Node

def advertised() -> dict[str, int]:
    """gpu1's nonzero nvidia.com/* allocatable (a resource whose plugin left stays at 0)."""
    have = node_json()["status"].get("allocatable", {})
    return {k: int(v) for k, v in have.items() if k.startswith("nvidia.com/") and int(v) > 0}


def driver_view(strategy: str) -> tuple[dict[str, int], dict[str, list[str]]]:
    """What the node's driver lists (nvidia-smi -L), as resources under a MIG strategy, and each
    resource's device UUIDs."""
    proc = on(NODE, "nvidia-smi -L")
    assert proc.returncode == 0, tail(proc)
    uuids: dict[str, list[str]] = {}
    gpu = None
    migs: list[tuple[str, str]] = []

    def close():
        if gpu is None:
            return
        if strategy == "mixed" and migs:
            for profile, uuid in migs:
                uuids.setdefault(f"nvidia.com/mig-{profile}", []).append(uuid)
        else:
            uuids.setdefault("nvidia.com/gpu", []).append(gpu)

    for line in proc.stdout.splitlines():
        if m := re.match(r"^GPU \d+: .* \(UUID: (GPU-[^)]+)\)$", line):
            close()
            gpu, migs = m.group(1), []
        elif m := re.match(r"^\s+MIG (\S+)\s+Device\s+\d+: \(UUID: (MIG-[^)]+)\)$", line):
            migs.append((m.group(1), m.group(2)))
    close()
    return {k: len(v) for k, v in uuids.items()}, uuids


def wait_advertised(want: dict[str, int], timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while (have := advertised()) != want:
        assert time.monotonic() < end, f"{NODE} advertises {have}, its driver says {want}"
        time.sleep(3)


def set_strategy(strategy: str) -> None:
    image = ["-e", f"k8s_device_plugins_nvidia_image={MIXED_STRATEGY_IMAGE}"] if strategy == "mixed" else []
    proc = run_playbook(REPO / "playbooks/device_plugins.yml",
              "-e", f"k8s_device_plugins_mig_strategy={strategy}", *image, timeout=600)
    assert proc.returncode == 0, tail(proc)


@pytest.fixture
def mixed_strategy(gpu1_restored):  # noqa: ARG001 (restores the layout after this is undone)
    set_strategy("mixed")
    yield
    set_strategy("none")
    wait_advertised({"nvidia.com/gpu": 8})


def run_on_gpu1(name: str, resource: str) -> str:
    """A Pod on gpu1 asking for one `resource`; returns the devices it was given."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NAMESPACE},
           "spec": {"restartPolicy": "Never", "nodeSelector": {"kubernetes.io/hostname": NODE},
                    "containers": [{"name": "w", "image": WORKLOAD_IMAGE,
                                    "resources": {"limits": {resource: "1"}}}]}}
    ns = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}
    manifest = json.dumps({"apiVersion": "v1", "kind": "List", "items": [ns, pod]})
    made = on(CONTROL_PLANES[0], f"printf %s {shlex.quote(manifest)} | {KUBECTL} apply -f - && "
              f"{KUBECTL} -n {NAMESPACE} wait pod/{name} --for=jsonpath='{{.status.phase}}'=Succeeded "
              f"--timeout=180s && {KUBECTL} -n {NAMESPACE} logs {name}", timeout=240)
    assert made.returncode == 0, tail(made)
    given = re.search(r"^NVIDIA_VISIBLE_DEVICES=(.*)$", made.stdout, re.M)
    assert given, made.stdout
    return given.group(1)


def test_mig_resources_follow_the_layout(tmp_path, mixed_strategy):  # noqa: ARG001
    want, _ = driver_view("mixed")
    assert "nvidia.com/gpu" not in want, f"the lab scenario starts with MIG on every GPU: {want}"
    wait_advertised(want)

    changed = run_role(tmp_path, "resources", "mig-resources", RESOURCES_CONFIG)
    assert changed.returncode == 0, tail(changed, 150)
    assert "MIG | restart the device plugin" in changed.stdout
    want, uuids = driver_view("mixed")
    assert want.get("nvidia.com/mig-1g.10gb") == 7 and want.get("nvidia.com/gpu") == 1, want
    wait_advertised(want)
    # One MIG device and the whole GPU that left MIG, each to a Pod, each exactly what the driver lists.
    assert run_on_gpu1("mig-1g", "nvidia.com/mig-1g.10gb") in uuids["nvidia.com/mig-1g.10gb"]
    assert run_on_gpu1("whole-gpu", "nvidia.com/gpu") == uuids["nvidia.com/gpu"][0]

    # Back to no MIG: the MIG resources go, all eight GPUs return.
    disabled = run_role(tmp_path, "disabled", "all-disabled", RESOURCES_CONFIG)
    assert disabled.returncode == 0, tail(disabled, 150)
    wait_advertised({"nvidia.com/gpu": 8})
