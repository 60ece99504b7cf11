"""The nvidia_driver_problems filter: version format, branch, GPU generation table."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "collections"))
from ansible.errors import AnsibleFilterError  # noqa: E402
from ansible_collections.ai_platform.l1.plugins.filter.nvidia_driver_problems import (  # noqa: E402
    FilterModule,
    nvidia_driver_problems,
)

A100 = {"index": 0, "name": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0"}
H100 = {"index": 0, "name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}
L40S = {"index": 0, "name": "NVIDIA L40S", "compute_capability": "8.9"}
K80 = {"index": 0, "name": "Tesla K80", "compute_capability": "3.7"}
V100 = {"index": 0, "name": "Tesla V100-SXM2-32GB", "compute_capability": "7.0"}


@pytest.mark.parametrize("gpus,version,branch,expect", [
    ([A100] * 8, "550.54.15", "550", []),
    ([A100], "535.183.01", "535", []),
    ([A100], "450.51.06", None, []),
    ([A100], "440.118.02", None, ["needs driver branch >= 450; 440.118.02 is branch 440"]),
    ([H100], "525.60.13", "525", []),
    ([H100], "520.61.05", None, ["NVIDIA H100 80GB HBM3 (Hopper, compute capability 9.0) needs driver branch >= 525"]),
    ([L40S], "515.105.01", None, ["(Ada Lovelace, compute capability 8.9) needs driver branch >= 525"]),
    ([K80], "470.256.02", None, []),
    ([K80], "535.183.01", None, ["Tesla K80 (Kepler, compute capability 3.7) is not supported after driver"]),
    ([V100], "580.65.06", None, []),
    ([V100], "590.10.01", None, ["not supported after driver branch 580"]),
    ([{"name": "Future", "compute_capability": "13.0"}], "600.10.01", None, ["does not know"]),
    ([A100], "550.54.15", "535", ["driver version 550.54.15 is not in branch 535 (it is branch 550)"]),
    ([A100], "latest", None, ["is not an NVIDIA driver version"]),
    ([A100], "550", None, ["is not an NVIDIA driver version"]),
    ([], "550.54.15", "550", []),
    ([{"name": "no cc", "compute_capability": None}], "418.226.00", None, []),
])
def test_problems(gpus, version, branch, expect):
    got = nvidia_driver_problems(gpus, version, branch)
    assert len(got) == len(expect), got
    for fragment, message in zip(expect, got, strict=True):
        assert fragment in message


def test_one_message_per_model_and_sorted():
    got = nvidia_driver_problems([A100, H100, A100, H100], "418.226.00")
    assert len(got) == 2
    assert got == sorted(got)
    assert "A100" in got[0] and "H100" in got[1]


def test_input_must_be_a_list():
    with pytest.raises(AnsibleFilterError):
        nvidia_driver_problems({"gpus": []}, "550.54.15")


def test_registered_as_filter():
    assert FilterModule().filters()["nvidia_driver_problems"] is nvidia_driver_problems
