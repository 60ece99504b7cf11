"""The accelerator_pods filter: which unfinished Pods on a Node hold GPUs or NPUs."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ai_platform.l1.plugins.filter.accelerator_pods import FilterModule, accelerator_pods


def pod(name, ns="default", *, phase="Running", limits=None, requests=None, init=None):
    container = {"name": "c", "resources": {}}
    if limits:
        container["resources"]["limits"] = limits
    if requests:
        container["resources"]["requests"] = requests
    spec = {"containers": [container]}
    if init:
        spec["initContainers"] = [{"name": "i", "resources": {"limits": init}}]
    return {"metadata": {"name": name, "namespace": ns}, "spec": spec, "status": {"phase": phase}}


@pytest.mark.parametrize(("pods", "held"), [
    ([], []),
    ([pod("cpu", limits={"cpu": "1"})], []),
    ([pod("train", limits={"nvidia.com/gpu": 8})], ["default/train"]),
    ([pod("mig", "t", requests={"nvidia.com/mig-1g.10gb": 1})], ["t/mig"]),
    ([pod("shared", limits={"nvidia.com/gpu.shared": 1})], ["default/shared"]),
    ([pod("warmup", init={"nvidia.com/gpu": 1})], ["default/warmup"]),
    ([pod("done", phase="Succeeded", limits={"nvidia.com/gpu": 1}),
      pod("crashed", phase="Failed", limits={"nvidia.com/gpu": 1})], []),
    ([pod("pending", phase="Pending", limits={"nvidia.com/gpu": 1})], ["default/pending"]),
    ([pod("npu", limits={"huawei.com/Ascend910": 8})], []),
    ([pod("b", "ns2", limits={"nvidia.com/gpu": 1}), pod("a", "ns1", limits={"nvidia.com/gpu": 1})],
     ["ns1/a", "ns2/b"]),
])
def test_gpu_pods(pods, held):
    assert accelerator_pods(pods) == held


def test_other_prefixes_select_npus():
    pods = [pod("npu", limits={"huawei.com/Ascend910": 8}), pod("gpu", limits={"nvidia.com/gpu": 1})]
    assert accelerator_pods(pods, "huawei.com/") == ["default/npu"]
    assert accelerator_pods(pods, ["huawei.com/", "nvidia.com/"]) == ["default/gpu", "default/npu"]


def test_registered_k8s_info_result_is_accepted():
    assert accelerator_pods({"resources": [pod("p", limits={"nvidia.com/gpu": 1})]}) == ["default/p"]


def test_a_pod_without_spec_or_status_holds_nothing():
    assert accelerator_pods([{"metadata": {"name": "x"}}]) == []


@pytest.mark.parametrize(("bad", "prefixes"), [("pods", "nvidia.com/"), (3, "nvidia.com/"), ([1], "nvidia.com/"),
                                               ({"items": []}, "nvidia.com/"), ([], []), ([], [""]), ([], [3])])
def test_bad_input_is_refused(bad, prefixes):
    with pytest.raises(AnsibleFilterError):
        accelerator_pods(bad, prefixes)


def test_registered_under_its_name():
    assert FilterModule().filters() == {"accelerator_pods": accelerator_pods}
