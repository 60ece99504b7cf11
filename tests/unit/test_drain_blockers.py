"""The drain_blockers filter: which Pods still keep a Node from being drained (kubectl drain rules)."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ai_platform.l1.plugins.filter.drain_blockers import FilterModule, drain_blockers


def pod(name, ns="default", owner=None, phase="Running", mirror=False):
    meta = {"name": name, "namespace": ns}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "x"}]
    if mirror:
        meta["annotations"] = {"kubernetes.io/config.mirror": "abc"}
    return {"metadata": meta, "status": {"phase": phase}}


@pytest.mark.parametrize(("pods", "left"), [
    ([], []),
    ([pod("web-1", owner="ReplicaSet")], ["default/web-1"]),
    ([pod("kube-proxy-x", "kube-system", owner="DaemonSet")], []),
    ([pod("etcd-cp1", "kube-system", mirror=True)], []),
    ([pod("done", owner="Job", phase="Succeeded"), pod("crashed", phase="Failed")], []),
    ([pod("bare")], ["default/bare"]),
    ([pod("b", "ns2", owner="StatefulSet"), pod("a", "ns1", owner="ReplicaSet"),
      pod("ds", owner="DaemonSet")], ["ns1/a", "ns2/b"]),
])
def test_blockers(pods, left):
    assert drain_blockers(pods) == left


def test_registered_k8s_info_result_is_accepted():
    assert drain_blockers({"resources": [pod("p", owner="ReplicaSet")], "changed": False}) == ["default/p"]


@pytest.mark.parametrize("bad", ["pods", 3, [1], {"items": []}])
def test_bad_input_is_refused(bad):
    with pytest.raises(AnsibleFilterError):
        drain_blockers(bad)


def test_registered_under_its_name():
    assert FilterModule().filters()["drain_blockers"] is drain_blockers
