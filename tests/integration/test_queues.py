"""Team GPU queues, quotas and gang admission on the lab, against the lab's backend (Kueue).

site.yml deployed role gpu_queues with the lab's model (inventories/lab/group_vars/all/gpu_queues.yml):
Kueue built here from sigs.k8s.io/kueue v0.17.0, its chart from the same module, one ClusterQueue
per team in cohort gpu-pool, the GPUQuota CRD and its controller. The lab has 16 A100 GPUs (gpu1,
gpu2: 8 each). Asserted through the API, one scenario at a time:

- a 2-pod x 8-GPU job is admitted whole and both Pods run, one per A100 node (ai-platform-team:
  8 nominal + 8 borrowed from inference-prod); a 3-pod job of the same shape, beyond the team's
  capability, never gets a Pod; a second 2-pod job waits with no Pod while the first holds the
  GPUs and is admitted whole when they free;
- research-lab (exclusive, 4 GPUs) cannot go past its quota although other teams' GPUs are idle:
  Kueue's reason is asserted;
- borrowing and reclaim: ai-platform-team's job runs on inference-prod's idle quota; when
  inference-prod submits, Kueue preempts the borrower whole and admits the owner;
- GPUQuota: the CRD schema refuses invalid objects; 8 GPUs let an 8-GPU Pod in and the API server
  refuses a 9th GPU with its quota message; deleting it removes the ResourceQuota and queue it
  created; once validUntil passes, new Pods and jobs are refused while a running Pod keeps running;
The other backend, Volcano, runs live in test_volcano.py.
"""

from __future__ import annotations

import datetime
import json
import time

import pytest
import yaml
from ansible_collections.ai_platform.l1.plugins.module_utils import gpu_queues as model
from conftest import CONTROL_PLANES, LAB_INVENTORY, REPO, controller_kubectl, kube_api, on, tail, wait_for
from remediation_lab import fetch_kubeconfig

IMAGE = "10.89.100.1:5000/ai-l1-lab/workload:v0.1.0"
KUEUE = ("kueue.x-k8s.io", "v1beta2")
A100 = "a100-sxm-80gb"


@pytest.fixture(scope="module")
def kube(k8s_cluster, tmp_path_factory):  # noqa: ARG001 (the cluster must be up)
    return kube_api(fetch_kubeconfig(LAB_INVENTORY, CONTROL_PLANES[0], tmp_path_factory.mktemp("q") / "admin.conf"))


def gang_job(name: str, namespace: str, queue: str, *, pods: int, gpus: int, sleep: int = 600) -> dict:
    """A gang training job as the Kueue backend takes it (roles/gpu_queues/examples/kueue-gang-job.yml,
    scaled to the lab): `pods` Pods of `gpus` GPUs, one per node."""
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": {"kueue.x-k8s.io/queue-name": queue}},
        "spec": {
            "parallelism": pods, "completions": pods, "completionMode": "Indexed", "suspend": True,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "train", "image": IMAGE,
                                    "env": [{"name": "AI_L1_WORKLOAD_SLEEP", "value": str(sleep)}],
                                    "resources": {"requests": {"nvidia.com/gpu": str(gpus), "cpu": "10m",
                                                               "memory": "16Mi"},
                                                  "limits": {"nvidia.com/gpu": str(gpus)}}}],
                    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                        "labelSelector": {"matchLabels": {"app": name}},
                        "topologyKey": "kubernetes.io/hostname"}]}},
                },
            },
        },
    }


def workload(kube, namespace: str, job: str) -> dict | None:
    items = kube.custom.list_namespaced_custom_object(*KUEUE, namespace, "workloads")["items"]
    for item in items:
        if any(ref.get("name") == job for ref in item["metadata"].get("ownerReferences") or []):
            return item
    return None


def condition(obj: dict | None, ctype: str) -> dict:
    for cond in ((obj or {}).get("status") or {}).get("conditions") or []:
        if cond["type"] == ctype:
            return cond
    return {}


def job_pods(kube, namespace: str, job: str) -> list:
    return kube.core.list_namespaced_pod(namespace, label_selector=f"job-name={job}").items


def running_pods(kube, namespace: str, job: str) -> list:
    return [p for p in job_pods(kube, namespace, job) if p.status.phase == "Running"]


def delete_job(kube, namespace: str, job: str) -> None:
    try:
        kube.batch.delete_namespaced_job(job, namespace, propagation_policy="Foreground", grace_period_seconds=0)
    except kube.ApiException as exc:
        if exc.status != 404:
            raise
    wait_for(f"job {namespace}/{job} and its Pods gone",
             lambda: not job_pods(kube, namespace, job) and not any(
                 j.metadata.name == job for j in kube.batch.list_namespaced_job(namespace).items), timeout=120)


@pytest.fixture
def jobs(kube):
    """Jobs created by a test, deleted after it (their GPUs free for the next scenario)."""
    created: list[tuple[str, str]] = []

    def submit(job: dict) -> str:
        kube.batch.create_namespaced_job(job["metadata"]["namespace"], job)
        created.append((job["metadata"]["namespace"], job["metadata"]["name"]))
        return job["metadata"]["name"]
    yield submit
    for namespace, name in reversed(created):
        delete_job(kube, namespace, name)


def cluster_queue(kube, name: str) -> dict:
    return kube.custom.get_cluster_custom_object(*KUEUE, "clusterqueues", name)


def gpu_usage(queue: dict, field: str = "total") -> int:
    for flavor in (queue.get("status") or {}).get("flavorsUsage") or []:
        for res in flavor["resources"]:
            if res["name"] == "nvidia.com/gpu":
                return int(res.get(field, 0))
    return 0


# ---------------------------------------------------------------------------------- the backend

def test_kueue_runs_with_the_teams_of_the_model(kube):
    deploy = kube.apps.read_namespaced_deployment("kueue-controller-manager", "kueue-system")
    assert deploy.status.ready_replicas == 1
    image = deploy.spec.template.spec.containers[0].image
    assert image.startswith("10.89.100.1:5000/kueue/kueue:v0.17.0"), image
    flavor = kube.custom.get_cluster_custom_object(*KUEUE, "resourceflavors", A100)
    assert flavor["spec"]["nodeLabels"] == {"accelerator-model": "A100-SXM-80GB"}
    for team, namespace in (("ai-platform-team", "ai-platform"), ("research-lab", "research"),
                            ("inference-prod", "inference")):
        queue = cluster_queue(kube, team)
        assert condition(queue, "Active").get("status") == "True", queue.get("status")
        assert queue["spec"]["cohortName"] == "gpu-pool"
        local = kube.custom.get_namespaced_custom_object(*KUEUE, namespace, "localqueues", team)
        assert local["spec"]["clusterQueue"] == team
        labels = kube.core.read_namespace(namespace).metadata.labels
        assert labels["ai-platform.io/team"] == team


def test_gang_job_is_admitted_whole_or_not_at_all(kube, jobs):
    ns = "ai-platform"
    first = jobs(gang_job("gang-2x8", ns, "ai-platform-team", pods=2, gpus=8))
    pods = wait_for("both Pods of gang-2x8 running", lambda: len(running_pods(kube, ns, first)) == 2 and
                    running_pods(kube, ns, first))
    assert sorted(p.spec.node_name for p in pods) == ["gpu1", "gpu2"]
    assert condition(workload(kube, ns, first), "Admitted")["status"] == "True"
    # 8 of the 16 are borrowed from the cohort (inference-prod's lendable quota).
    assert gpu_usage(cluster_queue(kube, "ai-platform-team"), "borrowed") == 8

    too_big = jobs(gang_job("gang-3x8", ns, "ai-platform-team", pods=3, gpus=8))
    second = jobs(gang_job("gang-2x8-b", ns, "ai-platform-team", pods=2, gpus=8))
    for name in (too_big, second):
        reason = wait_for(f"{name} to be refused quota", lambda n=name: condition(
            workload(kube, ns, n), "QuotaReserved").get("message"))
        assert "insufficient" in reason and "nvidia.com/gpu" in reason, reason
        assert condition(workload(kube, ns, name), "Admitted").get("status") != "True"
    time.sleep(10)  # long enough for a partial placement to show
    assert job_pods(kube, ns, too_big) == [] and job_pods(kube, ns, second) == []
    assert kube.batch.read_namespaced_job(too_big, ns).spec.suspend is True

    delete_job(kube, ns, first)
    pods = wait_for("gang-2x8-b admitted whole once the GPUs are free",
                    lambda: len(running_pods(kube, ns, second)) == 2 and running_pods(kube, ns, second), timeout=240)
    assert sorted(p.spec.node_name for p in pods) == ["gpu1", "gpu2"]
    # 24 GPUs exceed the team's capability of 16: never admitted, never a Pod.
    message = condition(workload(kube, ns, too_big), "QuotaReserved")["message"]
    assert "nvidia.com/gpu" in message and job_pods(kube, ns, too_big) == []


def test_research_lab_cannot_go_past_its_quota(kube, jobs):
    ns = "research"
    first = jobs(gang_job("research-4", ns, "research-lab", pods=1, gpus=4))
    wait_for("research-4 running", lambda: running_pods(kube, ns, first))
    extra = jobs(gang_job("research-1", ns, "research-lab", pods=1, gpus=1))
    reason = wait_for("research-1 to wait for quota", lambda: condition(
        workload(kube, ns, extra), "QuotaReserved").get("message"))
    # 12 A100 GPUs sit idle, but research-lab never borrows (not reclaimable, borrowingLimit 0).
    assert f"insufficient unused quota for nvidia.com/gpu in flavor {A100}" in reason, reason
    assert job_pods(kube, ns, extra) == []
    assert gpu_usage(cluster_queue(kube, "research-lab")) == 4


def test_borrowed_quota_is_reclaimed_by_preemption(kube, jobs):
    ns = "ai-platform"
    borrower = jobs(gang_job("borrower-2x8", ns, "ai-platform-team", pods=2, gpus=8))
    wait_for("borrower-2x8 running", lambda: len(running_pods(kube, ns, borrower)) == 2)
    assert gpu_usage(cluster_queue(kube, "ai-platform-team"), "borrowed") == 8
    owner = jobs(gang_job("owner-1x8", "inference", "inference-prod", pods=1, gpus=8))
    preempted = wait_for("the borrower preempted", lambda: condition(workload(kube, ns, borrower), "Preempted")
                         .get("status") == "True" and condition(workload(kube, ns, borrower), "Preempted"))
    # The owner is within its nominal quota: reclamation (InCohortFairSharing when Kueue's
    # FairSharingPreemptWithinNominal gate is off and fair sharing decides it).
    assert preempted["reason"] in ("InCohortReclamation", "InCohortFairSharing"), preempted
    wait_for("owner-1x8 running", lambda: running_pods(kube, "inference", owner), timeout=240)
    # The whole gang went back to the queue: no Pod of it left running beside the owner.
    wait_for("the borrower's Pods gone", lambda: not running_pods(kube, ns, borrower), timeout=120)
    assert condition(workload(kube, ns, borrower), "Admitted").get("status") != "True"


# ------------------------------------------------------------------------------------- GPUQuota

GQ_NS = f"gpuquota-test-{int(time.time()) % 100000}"


@pytest.fixture(scope="module")
def gq_namespace(kube):
    try:
        kube.core.create_namespace({"metadata": {"name": GQ_NS}})
    except kube.ApiException as exc:
        if exc.status != 409:
            raise
    yield GQ_NS
    kube.core.delete_namespace(GQ_NS)


def gpuquota(name: str, **spec) -> dict:
    return {"apiVersion": "ai.internal/v1", "kind": "GPUQuota", "metadata": {"name": name, "namespace": GQ_NS},
            "spec": spec}


def create_gq(kube, body: dict) -> dict:
    return kube.custom.create_namespaced_custom_object("ai.internal", "v1", GQ_NS, "gpuquotas", body)


def gq_status(kube, name: str) -> dict:
    return kube.custom.get_namespaced_custom_object("ai.internal", "v1", GQ_NS, "gpuquotas", name).get("status") or {}


def gpu_pod(name: str, gpus: int, sleep: int = 600) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": GQ_NS},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "w", "image": IMAGE,
                                     "env": [{"name": "AI_L1_WORKLOAD_SLEEP", "value": str(sleep)}],
                                     "resources": {"requests": {"nvidia.com/gpu": str(gpus)},
                                                   "limits": {"nvidia.com/gpu": str(gpus)}}}]}}


@pytest.mark.parametrize(("spec", "message"), [
    ({"team": "t", "totalGPUs": -1}, "spec.totalGPUs: Invalid value: -1: spec.totalGPUs in body should be "
                                     "greater than or equal to 0"),
    ({"team": "t", "totalGPUs": 8, "priority": 7}, 'spec.priority: Unsupported value: 7: supported values: '
                                                   '"1", "2", "3", "4", "5"'),
    ({"totalGPUs": 8}, "spec.team: Required value"),
    ({"team": "t", "totalGPUs": 8, "validUntil": "next week"}, "spec.validUntil: Invalid value"),
    # The date-time format alone admits these; the pattern does not.
    ({"team": "t", "totalGPUs": 8, "validUntil": "2026-12-02T11:00:00ZtFOO"}, "spec.validUntil: Invalid value"),
    ({"team": "t", "totalGPUs": 8, "validUntil": "0000-01-01T00:00:00Z"}, "spec.validUntil: Invalid value"),
    ({"team": "t", "totalGPUs": 100001}, "spec.totalGPUs: Invalid value: 100001: spec.totalGPUs in body should be "
                                         "less than or equal to 100000"),
])
def test_an_invalid_gpuquota_is_refused_by_the_schema(kube, gq_namespace, spec, message):  # noqa: ARG001
    with pytest.raises(kube.ApiException) as exc:
        create_gq(kube, gpuquota("bad", **spec))
    assert exc.value.status == 422
    assert message in json.loads(exc.value.body)["message"], exc.value.body


def test_gpuquota_caps_the_namespace_and_is_removed_whole(kube, gq_namespace):
    create_gq(kube, gpuquota("team-a", team="team-a", totalGPUs=8, priority=4, allowedModels=["A100-SXM-80GB"]))
    ready = wait_for("GPUQuota team-a reconciled", lambda: {c["type"]: c for c in gq_status(kube, "team-a")
                                                            .get("conditions", [])}.get("Ready"), timeout=120)
    assert (ready["status"], ready["reason"]) == ("True", "Reconciled"), ready
    quota = kube.core.read_namespaced_resource_quota("gpuquota-team-a", gq_namespace)
    assert quota.spec.hard == {"requests.nvidia.com/gpu": "8", "requests.huawei.com/Ascend910": "0"}
    queue_name = model.gpuquota_names("team-a", gq_namespace)["queue"]  # gpuquota-<ns>-team-a-<hash>
    queue = cluster_queue(kube, queue_name)
    gpu_group = [g for g in queue["spec"]["resourceGroups"] if g["coveredResources"] == ["nvidia.com/gpu"]][0]
    assert gpu_group["flavors"][0]["resources"][0]["nominalQuota"] in ("8", 8)
    assert queue["spec"]["fairSharing"]["weight"] in ("4", 4)
    kube.custom.get_namespaced_custom_object(*KUEUE, gq_namespace, "localqueues", "team-a")
    events = kube.core.list_namespaced_event(gq_namespace, field_selector="involvedObject.name=team-a").items
    assert "Reconciled" in {e.reason for e in events}

    kube.core.create_namespaced_pod(gq_namespace, gpu_pod("eight", 8))
    with pytest.raises(kube.ApiException) as exc:
        kube.core.create_namespaced_pod(gq_namespace, gpu_pod("ninth", 1))
    assert exc.value.status == 403
    assert ("exceeded quota: gpuquota-team-a, requested: requests.nvidia.com/gpu=1, used: "
            "requests.nvidia.com/gpu=8, limited: requests.nvidia.com/gpu=8") in exc.value.body
    kube.core.delete_namespaced_pod("eight", gq_namespace, grace_period_seconds=0)

    kube.custom.delete_namespaced_custom_object("ai.internal", "v1", gq_namespace, "gpuquotas", "team-a")

    def gone():
        try:
            kube.core.read_namespaced_resource_quota("gpuquota-team-a", gq_namespace)
            return False
        except kube.ApiException as err:
            if err.status != 404:
                raise
        queues = kube.custom.list_cluster_custom_object(*KUEUE, "clusterqueues")["items"]
        names = [q["metadata"]["name"] for q in queues]
        locals_ = kube.custom.list_namespaced_custom_object(*KUEUE, gq_namespace, "localqueues")["items"]
        return queue_name not in names and not locals_
    wait_for("the ResourceQuota, ClusterQueue and LocalQueue of team-a removed", gone, timeout=120)


def test_an_expired_gpuquota_stops_new_admissions(kube, gq_namespace):
    until = (datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=45)).strftime(
        "%Y-%m-%dT%H:%M:%SZ")
    create_gq(kube, gpuquota("short", team="team-b", totalGPUs=2, validUntil=until))
    wait_for("GPUQuota short in force", lambda: gq_status(kube, "short").get("gpus") == 2, timeout=120)
    kube.core.create_namespaced_pod(gq_namespace, gpu_pod("before", 1))
    wait_for("Pod before running", lambda: kube.core.read_namespaced_pod("before", gq_namespace).status.phase
             == "Running")
    expired = wait_for("GPUQuota short expired", lambda: gq_status(kube, "short").get("expired"), timeout=150)
    assert expired is True
    reasons = {c["type"]: c["reason"] for c in gq_status(kube, "short")["conditions"]}
    assert reasons == {"Ready": "Expired", "Expired": "ValidUntilPassed"}
    with pytest.raises(kube.ApiException) as exc:
        kube.core.create_namespaced_pod(gq_namespace, gpu_pod("after", 1))
    assert exc.value.status == 403 and "exceeded quota: gpuquota-short" in exc.value.body
    # Kueue admits nothing new through its queue either: every resource of it is at 0.
    kube.batch.create_namespaced_job(gq_namespace, gang_job("late", gq_namespace, "short", pods=1, gpus=1))
    message = wait_for("the late job refused quota", lambda: condition(
        workload(kube, gq_namespace, "late"), "QuotaReserved").get("message"))
    assert "insufficient quota" in message and "maximum capacity (0)" in message, message
    # Running work is not killed.
    assert kube.core.read_namespaced_pod("before", gq_namespace).status.phase == "Running"
    kube.custom.delete_namespaced_custom_object("ai.internal", "v1", gq_namespace, "gpuquotas", "short")


def test_the_controller_has_only_the_rights_it_needs(kube):
    deploy = kube.apps.read_namespaced_deployment("gpuquota-controller", "ai-l1-gpuquota")
    assert deploy.status.ready_replicas == 1
    sa = "system:serviceaccount:ai-l1-gpuquota:gpuquota-controller"
    for verb, resource, allowed in (("patch", "resourcequotas", "yes"), ("patch", "gpuquotas.ai.internal", "yes"),
                                    ("delete", "clusterqueues.kueue.x-k8s.io", "yes"), ("delete", "pods", "no"),
                                    ("get", "secrets", "no"), ("delete", "gpuquotas.ai.internal", "no"),
                                    ("create", "queues.scheduling.volcano.sh", "no")):
        proc = controller_kubectl(kube.path, "auth", "can-i", verb, resource, "--as", sa, "-A")
        assert proc.stdout.strip() == allowed, f"{verb} {resource}: {proc.stdout}{proc.stderr}"


def test_the_gpuquota_crd_is_the_seeds(kube):
    crd = yaml.safe_load((REPO / "roles/gpu_queues/files/gpuquota-crd.yml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert schema["required"] == ["team", "totalGPUs"]
    assert schema["properties"]["priority"]["enum"] == [1, 2, 3, 4, 5]
    proc = on(CONTROL_PLANES[0], "kubectl --kubeconfig /etc/kubernetes/admin.conf get crd gpuquotas.ai.internal "
              "-o jsonpath='{.spec.versions[0].schema.openAPIV3Schema.properties.spec.required}'")
    assert proc.returncode == 0 and json.loads(proc.stdout) == ["team", "totalGPUs"], tail(proc)
