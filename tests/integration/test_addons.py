"""playbooks/addons.yml (site.yml, tag addons) on the lab: Istio's traffic objects for the inference
canary (roles/istio_traffic) and Karmada's PropagationPolicy for Volcano Jobs
(roles/karmada_propagation), the L1 design's as it writes them.

Neither Istio nor Karmada runs here. The test installs their resource definitions from the lab's
build record (Istio's from its API module istio.io/api v1.32.0, Karmada's PropagationPolicy from
the source cache, artifacts/sources.yml), so the lab's API server validates the objects against
the real schemas; the lab's own API server stands in for Karmada's (the role's kubeconfig option).
Asserted: without the definitions each role stops before it applies anything, naming what is
missing; with them the objects are exactly the design's (namespaces aside, see below); the design's
objects as written pass `kubectl apply --dry-run=server`, and one with a bad field does not; a
second run changes nothing. The test's own namespaces (not the design's `inference` and `default`,
which other tests use) and the definitions are removed at the end.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import yaml
from conftest import (
    CACHE,
    CONTROL_PLANES,
    KUBECTL,
    REPO,
    admin_kubeconfig,
    controller_kubectl,
    kubectl_json,
    on,
    playbook,
    recap,
    server_dry_run,
    tail,
)

PLAYBOOK = REPO / "playbooks" / "addons.yml"
CP = CONTROL_PLANES[0]
MESH_NS = "ai-l1-test-mesh"
KARMADA_NS = "ai-l1-test-karmada"
CLUSTERS = ["dc-shanghai-gpu", "dc-beijing-gpu"]

# The L1 design's objects, as it writes them (its VirtualService has no namespace; Karmada's
# PropagationPolicy none either: both are namespaced, the roles put them in their namespace option).
DESIGN_VIRTUAL_SERVICE = yaml.safe_load("""
apiVersion: networking.istio.io/v1beta1
kind: VirtualService
metadata:
  name: inference-gray
spec:
  hosts:
  - llm-service
  http:
  - match:
    - headers:
        x-version:
          exact: v2
    route:
    - destination:
        host: llm-service-v2
  - route:
    - destination:
        host: llm-service-v1
      weight: 90
    - destination:
        host: llm-service-v2
      weight: 10
""")
DESIGN_PROPAGATION_POLICY = yaml.safe_load("""
apiVersion: policy.karmada.io/v1alpha1
kind: PropagationPolicy
metadata:
  name: gpu-workload-propagation
spec:
  resourceSelectors:
  - apiVersion: batch.volcano.sh/v1alpha1
    kind: Job
  placement:
    clusterAffinity:
      clusterNames:
      - dc-shanghai-gpu
      - dc-beijing-gpu
    clusterTolerations:
    - key: "gpu-type"
      operator: "Equal"
      value: "A100"
    spreadConstraints:
    - spreadByField: "cluster"
      maxGroups: 1
""")


def crd_files() -> list[Path]:
    built = json.loads((CACHE / "k8s" / "lab-build.json").read_text())["artifacts"]
    missing = [n for n in ("istio-crds", "karmada-propagationpolicy-crd") if n not in built]
    if missing:
        pytest.fail(f"the lab build record has no {', '.join(missing)}: run make lab-artifacts")
    return [Path(built["istio-crds"]["path"]), Path(built["karmada-propagationpolicy-crd"]["path"])]


def run_play(tmp: Path, **overrides) -> tuple:
    extra = {"istio_traffic_enabled": True, "istio_traffic_namespace": MESH_NS,
             "karmada_propagation_enabled": True, "karmada_propagation_namespace": KARMADA_NS,
             "karmada_propagation_kubeconfig": "/etc/kubernetes/admin.conf",
             "karmada_propagation_clusters": CLUSTERS, **overrides}
    path = tmp / f"extra-{len(list(tmp.iterdir()))}.json"
    path.write_text(json.dumps(extra))
    proc = playbook(PLAYBOOK, "-e", f"@{path}", timeout=600)
    return proc, recap(proc.stdout)


def cleanup(files: list[Path]) -> None:
    on(CP, f"{KUBECTL} delete namespace {MESH_NS} {KARMADA_NS} --ignore-not-found --wait=true --timeout=120s",
       timeout=180)
    for path in files:
        controller_kubectl(admin_kubeconfig(), "delete", "--ignore-not-found", "-f", str(path))


@pytest.fixture(scope="module")
def applied(k8s_cluster):  # noqa: ARG001 (needs the converged lab)
    files = crd_files()
    cleanup(files)  # a run that was stopped may have left them
    with tempfile.TemporaryDirectory() as scratch:
        tmp = Path(scratch)
        try:
            refused = {"istio": run_play(tmp, karmada_propagation_enabled=False),
                       "karmada": run_play(tmp, istio_traffic_enabled=False)}
            made = on(CP, f"{KUBECTL} get namespace {MESH_NS} {KARMADA_NS} --ignore-not-found -o name")
            for path in files:
                proc = controller_kubectl(admin_kubeconfig(), "apply", "--server-side", "-f", str(path))
                assert proc.returncode == 0, f"installing {path.name}:\n{proc.stdout}{proc.stderr}"
            for name in ("virtualservices.networking.istio.io", "propagationpolicies.policy.karmada.io"):
                proc = controller_kubectl(admin_kubeconfig(), "wait", "--for=condition=Established",
                                          f"crd/{name}", "--timeout=60s")
                assert proc.returncode == 0, proc.stderr
            first = run_play(tmp)
            second = run_play(tmp)
            yield {"refused": refused, "made_while_refused": made, "first": first, "second": second}
        finally:
            cleanup(files)


def test_each_role_stops_before_applying_when_its_definitions_are_missing(applied):
    (istio, istio_recap), (karmada, karmada_recap) = applied["refused"]["istio"], applied["refused"]["karmada"]
    assert istio.returncode != 0 and istio_recap[CP]["changed"] == 0, tail(istio)
    assert "the cluster has no virtualservices.networking.istio.io, destinationrules.networking.istio.io, " \
           "peerauthentications.security.istio.io: install Istio first" in istio.stdout, tail(istio)
    assert karmada.returncode != 0 and karmada_recap[CP]["changed"] == 0, tail(karmada)
    assert "reaches an API server without propagationpolicies.policy.karmada.io" in karmada.stdout, tail(karmada)
    # Nothing was made: not even the namespaces.
    made = applied["made_while_refused"]
    assert made.returncode == 0 and made.stdout.strip() == "", made.stdout + made.stderr


def test_the_first_run_applies_and_the_second_changes_nothing(applied):
    (first, first_recap), (second, second_recap) = applied["first"], applied["second"]
    assert first.returncode == 0, tail(first, 120)
    assert first_recap[CP]["changed"] > 0 and first_recap[CP]["failed"] == 0
    assert second.returncode == 0 and second_recap[CP]["changed"] == 0, tail(second, 120)


def strip(obj: dict) -> dict:
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "metadata": {"name": obj["metadata"]["name"]},
            "spec": obj["spec"]}


def test_the_virtual_service_is_the_designs(applied):  # noqa: ARG001
    got = kubectl_json(f"-n {MESH_NS} get virtualservices.v1beta1.networking.istio.io inference-gray")
    assert strip(got) == DESIGN_VIRTUAL_SERVICE
    assert got["metadata"]["labels"]["app.kubernetes.io/part-of"] == "ai-platform-l1"


def test_destination_rules_give_each_destination_mutual_tls_and_the_namespace_is_strict(applied):  # noqa: ARG001
    rules = kubectl_json(f"-n {MESH_NS} get destinationrules.v1beta1.networking.istio.io")["items"]
    assert {r["spec"]["host"]: r["spec"]["trafficPolicy"] for r in rules} == {
        host: {"tls": {"mode": "ISTIO_MUTUAL"}} for host in ("llm-service-v1", "llm-service-v2")}
    peer = kubectl_json(f"-n {MESH_NS} get peerauthentications.v1beta1.security.istio.io default")
    assert peer["spec"] == {"mtls": {"mode": "STRICT"}}
    namespace = kubectl_json(f"get namespace {MESH_NS}")
    assert namespace["metadata"]["labels"]["istio-injection"] == "enabled"


def contains(got, want) -> bool:
    """`got` has every field of `want` with the same value; the API server's defaults may add others."""
    if isinstance(want, dict):
        return isinstance(got, dict) and all(k in got and contains(got[k], v) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and all(map(contains, got, want))
    return got == want


def test_the_propagation_policy_is_the_designs(applied):  # noqa: ARG001
    got = kubectl_json(f"-n {KARMADA_NS} get propagationpolicies.policy.karmada.io gpu-workload-propagation")
    # Karmada's CRD defaults fields the design leaves out (conflictResolution, preemption, priority).
    assert contains(strip(got), DESIGN_PROPAGATION_POLICY), strip(got)
    assert not contains(strip(got), {**DESIGN_PROPAGATION_POLICY, "spec": {"placement": {"clusterAffinity": {
        "clusterNames": CLUSTERS[:1]}}}}), "contains() must tell a different cluster list apart"


def test_the_designs_objects_pass_the_api_servers_validation_and_a_bad_one_does_not(applied):  # noqa: ARG001
    design = [
        {**DESIGN_VIRTUAL_SERVICE, "metadata": {**DESIGN_VIRTUAL_SERVICE["metadata"], "namespace": MESH_NS}},
        {**DESIGN_PROPAGATION_POLICY, "metadata": {**DESIGN_PROPAGATION_POLICY["metadata"], "namespace": KARMADA_NS}},
    ]
    proc = server_dry_run(design)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    bad = json.loads(json.dumps(design[0]))
    bad["spec"]["http"][1]["route"][0]["weight"] = "ninety"
    proc = server_dry_run([bad])
    assert proc.returncode != 0 and "weight" in proc.stderr, proc.stdout + proc.stderr
