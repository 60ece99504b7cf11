"""Volcano, live: role gpu_queues with gpu_queues_backend: volcano on the lab.

The lab's inventory runs Kueue (tests/integration/test_queues.py); this module deploys the other
backend the way a site that chose it would, `playbooks/queues.yml` with `gpu_queues_backend:
volcano`: Volcano v1.15.1's chart and its three images, built here from the release archive
(artifacts/sources.yml, lab/k8s/build.py, lab/charts/build.py), served by digest-pinned tags from
the lab registry; the lab's three teams as Volcano Queues; the GPUQuota controller switched to
Volcano Queues. The two backends do not conflict (Kueue admits Jobs by queue label, Volcano
schedules the Pods that name it), so Kueue's objects stay. At the end the queues play runs again
with the lab's backend and Volcano's release is removed. Asserted, one scenario at a time (16 A100
GPUs: gpu1 and gpu2, 8 each). Volcano keeps every queue's guarantee for it: the others can use at
most what is left (16 - 8 for ai-platform-team - 2 for inference-prod = 6 for any other queue, 14
for ai-platform-team), so the scenarios are sized within that:

- the scheduler, controller manager and admission webhook run from the lab's builds; every team's
  Queue is Open with the model's weight, capability, guarantee and reclaimable;
- the design document's gang job (a vcjob, one trainer per node, minAvailable equal to the
  replicas; 4 GPUs each) runs whole on both nodes; a second one, which does not fit beside it in
  the team's share, gets no Pod at all and runs whole once the first is deleted;
- research-lab's capability (4 GPUs) holds while 12 GPUs are idle: a 5-GPU job gets no Pod;
- reclaim: ai-platform-team (reclaimable) runs 12 GPUs, past its guarantee of 8; when
  inference-prod submits 8, Volcano evicts the borrower and runs the owner;
- the L2 contract's Pod with `schedulerName: volcano` (in the default queue, so scaled to 4 GPUs)
  is scheduled by Volcano and runs;
- a GPUQuota with the Volcano backend makes a Queue that caps the namespace's jobs;
- the sample fleet's Queues, the gang job and a GPUQuota's Queue pass `kubectl apply
  --dry-run=server` against the running release (CRDs and admission webhook); broken ones fail
  with the API's message.
"""

from __future__ import annotations

import copy
import datetime
import json
import subprocess
import time

import pytest
import yaml
from ansible_collections.ai_platform.l1.plugins.module_utils import gpu_queues as model
from conftest import (
    CONTROL_PLANES,
    LAB_INVENTORY,
    REPO,
    controller_kubectl,
    kube_api,
    on,
    playbook,
    record,
    tail,
    wait_for,
)
from remediation_lab import fetch_kubeconfig

IMAGE = "10.89.100.1:5000/ai-l1-lab/workload:v0.1.0"
BATCH = ("batch.volcano.sh", "v1alpha1")
SCHEDULING = ("scheduling.volcano.sh", "v1beta1")
QUEUES_PLAY = REPO / "playbooks" / "queues.yml"
TEAMS = yaml.safe_load((LAB_INVENTORY / "group_vars" / "all" / "gpu_queues.yml").read_text())["gpu_queues_teams"]


def queues_play(backend: str) -> subprocess.CompletedProcess:
    return playbook(QUEUES_PLAY, "-e", f"gpu_queues_backend={backend}", timeout=1200)


@pytest.fixture(scope="module")
def kube(k8s_cluster, tmp_path_factory):  # noqa: ARG001 (the cluster must be up)
    t0 = time.monotonic()
    run = queues_play("volcano")
    assert run.returncode == 0, f"queues.yml with the Volcano backend failed:\n{tail(run, 150)}"
    record("queues_play_volcano_s", time.monotonic() - t0)
    yield kube_api(fetch_kubeconfig(LAB_INVENTORY, CONTROL_PLANES[0], tmp_path_factory.mktemp("vc") / "admin.conf"))
    back = queues_play("kueue")
    helm = on(CONTROL_PLANES[0], "sudo sh -c 'helm=$(ls /opt/ai-platform/helm/*/linux-*/helm | head -1) && "
              "$helm --kubeconfig /etc/kubernetes/admin.conf -n volcano-system uninstall volcano --wait'",
              timeout=300)
    assert back.returncode == 0, f"queues.yml back to the lab's backend failed:\n{tail(back, 150)}"
    assert helm.returncode == 0, tail(helm)


def vcjob(name: str, namespace: str, queue: str, *, replicas: int, gpus: int, sleep: int = 600) -> dict:
    """The design document's gang job (roles/gpu_queues/examples/volcano-gang-job.yml) scaled to the
    lab: `replicas` trainers of `gpus` GPUs, one per node, minAvailable equal to the replicas."""
    job = yaml.safe_load((REPO / "roles/gpu_queues/examples/volcano-gang-job.yml").read_text())
    job["metadata"] = {"name": name, "namespace": namespace}
    job["spec"].update(minAvailable=replicas, queue=queue)
    task = job["spec"]["tasks"][0]
    task["replicas"] = replicas
    pod = task["template"]["spec"]
    pod["terminationGracePeriodSeconds"] = 1
    container = pod["containers"][0]
    container.update(image=IMAGE, env=[{"name": "AI_L1_WORKLOAD_SLEEP", "value": str(sleep)}])
    container.pop("command")
    container["resources"] = {"requests": {"nvidia.com/gpu": gpus, "cpu": "10m", "memory": "16Mi"},
                              "limits": {"nvidia.com/gpu": gpus}}
    pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][0][
        "labelSelector"]["matchExpressions"][0]["values"] = [name]
    return job


def job_pods(kube, namespace: str, job: str) -> list:
    return kube.core.list_namespaced_pod(namespace, label_selector=f"volcano.sh/job-name={job}").items


def running(kube, namespace: str, job: str) -> list:
    return [p for p in job_pods(kube, namespace, job) if p.status.phase == "Running"]


def podgroup(kube, namespace: str, job: str) -> dict:
    groups = kube.custom.list_namespaced_custom_object(*SCHEDULING, namespace, "podgroups")["items"]
    mine = [g for g in groups if any(r.get("name") == job for r in g["metadata"].get("ownerReferences") or [])]
    return mine[0] if mine else {}


def delete_vcjob(kube, namespace: str, name: str) -> None:
    try:
        kube.custom.delete_namespaced_custom_object(*BATCH, namespace, "jobs", name)
    except kube.ApiException as exc:
        if exc.status != 404:
            raise
    wait_for(f"vcjob {namespace}/{name} and its Pods gone", lambda: not job_pods(kube, namespace, name), timeout=120)


@pytest.fixture
def jobs(kube):
    created: list[tuple[str, str]] = []

    def submit(job: dict) -> str:
        namespace, name = job["metadata"]["namespace"], job["metadata"]["name"]
        kube.custom.create_namespaced_custom_object(*BATCH, namespace, "jobs", job)
        created.append((namespace, name))
        return name
    yield submit
    for namespace, name in reversed(created):
        delete_vcjob(kube, namespace, name)


def queue(kube, name: str) -> dict:
    return kube.custom.get_cluster_custom_object(*SCHEDULING, "queues", name)


# ---------------------------------------------------------------------------------- the backend

def test_volcano_runs_from_the_lab_builds_with_the_teams_queues(kube):
    for deploy, image in (("volcano-scheduler", "vc-scheduler"), ("volcano-controllers", "vc-controller-manager"),
                          ("volcano-admission", "vc-webhook-manager")):
        d = kube.apps.read_namespaced_deployment(deploy, "volcano-system")
        assert d.status.ready_replicas == 1, (deploy, d.status)
        # Pinned by digest, as the manifest's overlay gives it.
        ref = d.spec.template.spec.containers[0].image
        assert ref.startswith(f"10.89.100.1:5000/volcanosh/{image}:v1.15.1@sha256:"), ref
    for team, want in ((t["name"], t) for t in TEAMS):
        q = queue(kube, team)
        assert q["status"]["state"] == "Open", q.get("status")
        assert q["spec"]["weight"] == want["weight"] and q["spec"]["reclaimable"] == want["reclaimable"]
        assert q["spec"]["capability"]["nvidia.com/gpu"] == str(want["capability"]["nvidia.com/gpu"])
    assert queue(kube, "ai-platform-team")["spec"]["guarantee"]["resource"] == {"nvidia.com/gpu": "8"}


def test_the_gang_job_runs_whole_or_gets_no_pod(kube, jobs):
    ns = "ai-platform"
    t0 = time.monotonic()
    first = jobs(vcjob("train-2x4", ns, "ai-platform-team", replicas=2, gpus=4))
    pods = wait_for("both trainers of train-2x4 running", lambda: len(running(kube, ns, first)) == 2 and
                    running(kube, ns, first), timeout=240)
    record("volcano_gang_admission_s", time.monotonic() - t0)  # both trainers running, from the submission
    assert sorted(p.spec.node_name for p in pods) == ["gpu1", "gpu2"]
    assert all(p.spec.scheduler_name == "volcano" for p in pods)
    # 8 more GPUs would take the team to 16, past the 14 its share allows.
    second = jobs(vcjob("train-2x4-b", ns, "ai-platform-team", replicas=2, gpus=4))
    wait_for("train-2x4-b's PodGroup pending", lambda: podgroup(kube, ns, second).get("status", {})
             .get("phase") == "Pending")
    time.sleep(15)  # long enough for a partial placement to show
    assert job_pods(kube, ns, second) == [], "the second gang got Pods"
    delete_vcjob(kube, ns, first)
    pods = wait_for("train-2x4-b running whole once the first is gone",
                    lambda: len(running(kube, ns, second)) == 2 and running(kube, ns, second), timeout=240)
    assert sorted(p.spec.node_name for p in pods) == ["gpu1", "gpu2"]


def test_research_lab_stays_within_its_capability(kube, jobs):
    ns = "research"
    fits = jobs(vcjob("research-4", ns, "research-lab", replicas=1, gpus=4))
    wait_for("research-4 running", lambda: running(kube, ns, fits), timeout=240)
    over = jobs(vcjob("research-1", ns, "research-lab", replicas=1, gpus=1))
    time.sleep(20)
    # 12 A100 GPUs are idle; research-lab's capability is 4.
    assert [p for p in job_pods(kube, ns, over) if p.spec.node_name] == []
    assert podgroup(kube, ns, over).get("status", {}).get("phase") != "Running"


def test_the_owner_reclaims_what_a_reclaimable_queue_borrowed(kube, jobs):
    ns = "ai-platform"
    borrower = jobs(vcjob("borrower-2x6", ns, "ai-platform-team", replicas=2, gpus=6))
    wait_for("borrower-2x6 running on 12 GPUs", lambda: len(running(kube, ns, borrower)) == 2, timeout=240)
    owner = jobs(vcjob("owner-1x8", "inference", "inference-prod", replicas=1, gpus=8))
    t0 = time.monotonic()
    wait_for("owner-1x8 running", lambda: running(kube, "inference", owner), timeout=300)
    record("volcano_reclaim_s", time.monotonic() - t0)  # inference-prod's job running, from its submission
    assert len(running(kube, ns, borrower)) < 2, "the borrower kept both nodes"


def test_the_l2_pod_scheduled_by_volcano_runs(kube):
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "l2-volcano", "namespace": "ai-platform"},
           "spec": {"schedulerName": "volcano", "restartPolicy": "Never",
                    "containers": [{"name": "vllm", "image": IMAGE,
                                    "resources": {"requests": {"nvidia.com/gpu": "4", "cpu": "50m", "memory": "32Mi"},
                                                  "limits": {"nvidia.com/gpu": "4"}}}],
                    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchExpressions": [
                            {"key": "accelerator-model", "operator": "In", "values": ["A100-SXM-80GB"]},
                            {"key": "accelerator-count", "operator": "Gt", "values": ["7"]}]}]}}}}}
    kube.core.create_namespaced_pod("ai-platform", pod)
    try:
        done = wait_for("the L2 Pod done", lambda: (p := kube.core.read_namespaced_pod("l2-volcano", "ai-platform"))
                        .status.phase in ("Succeeded", "Failed") and p, timeout=240)
        assert done.status.phase == "Succeeded", done.status
        assert done.spec.node_name in ("gpu1", "gpu2")
        events = kube.core.list_namespaced_event("ai-platform", field_selector="involvedObject.name=l2-volcano").items
        assert any(e.reason == "Scheduled" and (e.reporting_component or e.source.component or "") == "volcano"
                   for e in events), [(e.reason, e.reporting_component, e.source.component) for e in events]
    finally:
        kube.core.delete_namespaced_pod("l2-volcano", "ai-platform", grace_period_seconds=0)


NUMA = ("nodeinfo.volcano.sh", "v1alpha1")
TOPOLOGY = yaml.safe_load((LAB_INVENTORY / "group_vars" / "gpu_nvidia" / "topology.yml").read_text())


def exporter_numatopology(kube, node: str) -> dict:
    """The Numatopology Volcano's resource exporter would publish for `node` (the exporter is a
    separate project, not in the lab's source cache): the policies the node's kubelet reports
    (/configz) and its CPUs, all on NUMA node 0 as on every lab node."""
    proc = controller_kubectl(kube.path, "get", "--raw", f"/api/v1/nodes/{node}/proxy/configz")
    assert proc.returncode == 0, proc.stderr
    config = json.loads(proc.stdout)["kubeletconfig"]
    cpus = int(kube.core.read_node(node).status.capacity["cpu"])
    return {"apiVersion": "nodeinfo.volcano.sh/v1alpha1", "kind": "Numatopology", "metadata": {"name": node},
            "spec": {"policies": {"CPUManagerPolicy": config.get("cpuManagerPolicy", "none"),
                                  "TopologyManagerPolicy": config.get("topologyManagerPolicy", "none")},
                     "numares": {"cpu": {"allocatable": f"0-{cpus - 1}", "capacity": cpus}},
                     "cpuDetail": {str(c): {"numa": 0, "socket": 0, "core": c} for c in range(cpus)}}}


def test_numaaware_places_a_numa_policy_task_where_the_node_runs_that_policy(kube, jobs):
    """The scheduler's numa-aware plugin is live: a Guaranteed task naming the GPU nodes' Topology
    Manager policy gets no node while no node publishes its NUMA topology, then runs on the one
    that does, whose kubelet (static CPU Manager, that policy) admits it."""
    ns, policy = "ai-platform", TOPOLOGY["k8s_node_topology_manager_policy"]
    job = vcjob("numa-1", ns, "ai-platform-team", replicas=1, gpus=1)
    task = job["spec"]["tasks"][0]
    task["topologyPolicy"] = policy
    # Whole CPUs: Volcano's admission refuses a NUMA policy for a fraction (the static CPU Manager
    # gives whole CPUs exclusively; a lab node has 2, one of them reserved).
    guaranteed = {"nvidia.com/gpu": 1, "cpu": "1", "memory": "16Mi"}
    task["template"]["spec"]["containers"][0]["resources"] = {"requests": guaranteed, "limits": guaranteed}
    name = jobs(job)
    pods = wait_for("numa-1's Pod created", lambda: job_pods(kube, ns, name))
    assert pods[0].metadata.annotations.get("volcano.sh/numa-topology-policy") == policy
    time.sleep(15)
    assert [p for p in job_pods(kube, ns, name) if p.spec.node_name] == [], "placed without a node's NUMA topology"
    kube.custom.create_cluster_custom_object(*NUMA, "numatopologies", exporter_numatopology(kube, "gpu1"))
    try:
        pod = wait_for("numa-1 running", lambda: running(kube, ns, name) and running(kube, ns, name)[0],
                       timeout=180)
        assert pod.spec.node_name == "gpu1"
        assert pod.status.qos_class == "Guaranteed"
    finally:
        kube.custom.delete_cluster_custom_object(*NUMA, "numatopologies", "gpu1")


def test_a_gpuquota_with_the_volcano_backend_caps_its_queue(kube, jobs):
    ns = f"gq-volcano-{int(time.time()) % 100000}"
    kube.core.create_namespace({"metadata": {"name": ns}})
    body = {"apiVersion": "ai.internal/v1", "kind": "GPUQuota", "metadata": {"name": "team-v", "namespace": ns},
            "spec": {"team": "team-v", "totalGPUs": 4}}
    try:
        kube.custom.create_namespaced_custom_object("ai.internal", "v1", ns, "gpuquotas", body)
        name = model.gpuquota_names("team-v", ns)["queue"]
        q = wait_for(f"the GPUQuota's Volcano Queue {name} open", lambda: (
            q := kube.custom.list_cluster_custom_object(*SCHEDULING, "queues", field_selector=f"metadata.name={name}")
            ["items"]) and q[0].get("status", {}).get("state") == "Open" and q[0], timeout=120)
        assert q["spec"]["capability"]["nvidia.com/gpu"] == "4", q["spec"]
        fits = jobs(vcjob("gq-4", ns, name, replicas=1, gpus=4))
        wait_for("gq-4 running", lambda: running(kube, ns, fits), timeout=240)
        over = jobs(vcjob("gq-1", ns, name, replicas=1, gpus=1))
        time.sleep(20)
        assert [p for p in job_pods(kube, ns, over) if p.spec.node_name] == []
    finally:
        kube.custom.delete_namespaced_custom_object("ai.internal", "v1", ns, "gpuquotas", "team-v")
        for job in ("gq-1", "gq-4"):
            delete_vcjob(kube, ns, job)
        kube.core.delete_namespace(ns)


# ------------------------------------------------- the sample fleet's objects, against the release

def dry_run(kube, objects: list[dict]) -> subprocess.CompletedProcess:
    text = yaml.safe_dump_all(objects, sort_keys=False)
    return controller_kubectl(kube.path, "apply", "--dry-run=server", "--server-side", "--field-manager",
                              "ai-l1-tests", "-f", "-", stdin=text)


def sample_volcano_objects() -> list[dict]:
    sample = REPO / "inventories/sample/group_vars/all/gpu_queues.yml"
    teams = yaml.safe_load(sample.read_text())["gpu_queues_teams"]
    queues = [o for o in model.queue_objects("volcano", teams, [], "gpu-pool") if o["kind"] == "Queue"]
    for q in queues:  # not the lab's own Queues of the same names
        q["metadata"]["name"] = f"sample-{q['metadata']['name']}"
    gang = yaml.safe_load((REPO / "roles/gpu_queues/examples/volcano-gang-job.yml").read_text())
    objects, _ = model.gpuquota_objects("team-a", "ai-platform", {"team": "a", "totalGPUs": 8, "priority": 2},
                                        backend="volcano", flavors=[], cohort="gpu-pool",
                                        now=datetime.datetime.now(datetime.timezone.utc),
                                        cpu_per_gpu="16", memory_per_gpu="128Gi")
    return [*queues, gang, *(o for o in objects if o["kind"] == "Queue")]


def test_the_sample_fleets_objects_pass_the_release_server_side(kube):
    objects = sample_volcano_objects()
    assert sorted(o["kind"] for o in objects) == ["Job", "Queue", "Queue", "Queue", "Queue"]
    proc = dry_run(kube, objects)
    assert proc.returncode == 0, tail(proc)
    assert proc.stdout.count("(server dry run)") == len(objects), proc.stdout


@pytest.mark.parametrize(("broken", "message"), [
    (lambda objs: objs[0]["spec"].update(weight="heavy"), ".spec.weight: expected numeric (int or float), got string"),
    (lambda objs: objs[3]["spec"].update(minAvailable="eight"),
     ".spec.minAvailable: expected numeric (int or float), got string"),
    (lambda objs: objs[3]["spec"]["tasks"][0].update(replicas=-1), "spec.tasks[0].replicas: Invalid value: -1"),
])
def test_a_broken_volcano_object_fails_with_the_api_message(kube, broken, message):
    objects = copy.deepcopy(sample_volcano_objects())
    broken(objects)
    proc = dry_run(kube, objects)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr
