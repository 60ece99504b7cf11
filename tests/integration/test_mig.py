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
from conftest import CONTROL_PLANES, KUBECTL, LAB_INVENTORY, LAB_NAME, REPO, on, recap, sh, tail

NODE = "gpu1"
NAMESPACE = "mig-test"
STATE = "/var/lib/ai-l1-fake/nvml-state"
CONFIG = {
    "version": "v1",
    "mig-configs": {
        "mig-test": [{"devices": [0], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}],
    },
}
ORDER = ["MIG cordon (1/5)", "MIG drain (2/5)", "MIG apply |", "MIG verify |", "MIG uncordon (5/5)"]


def node_json() -> dict:
    proc = on(CONTROL_PLANES[0], f"{KUBECTL} get node {NODE} -o json")
    assert proc.returncode == 0, tail(proc)
    return json.loads(proc.stdout)


def gpu_instances() -> str:
    proc = on(NODE, "nvidia-smi mig -lgi")
    assert proc.returncode in (0, 6), tail(proc)
    return proc.stdout


def run_role(tmp_path, name: str) -> subprocess.CompletedProcess:
    playbook = tmp_path / f"{name}.yml"
    playbook.write_text(textwrap.dedent(f"""\
        - name: MIG layout on {NODE}
          hosts: {NODE}
          become: true
          gather_facts: false
          roles:
            - role: nvidia_mig
              vars:
                nvidia_mig_config: mig-test
                nvidia_mig_drain_timeout: 180
        """))
    extra = tmp_path / "mig-vars.json"
    extra.write_text(json.dumps({"nvidia_mig_configs": CONFIG}))
    t0 = time.monotonic()
    proc = sh("ansible-playbook", "-i", LAB_INVENTORY, "-e", f"@{extra}", playbook, timeout=900)
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
