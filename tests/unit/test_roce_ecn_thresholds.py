"""The seed's ECN marking thresholds (4.4.2): red_min_threshold / red_max_threshold 24, red_probability 100.

The role's defaults carry them, roce_sysfs writes them to <sysfs>/class/net/IF/ecn/redp on the lab's
simulated NIC (tests/hardware/nic), and the boot script re-applies them.
"""

import os
import shlex
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
import yaml
from ansible_collections.ai_platform.l1.plugins.modules import roce_sysfs

ROOT = Path(__file__).resolve().parents[2]
HW = ROOT / "tests/hardware"
ROLE = ROOT / "roles/rdma_network"
SEED = {"red_min_threshold": "24", "red_max_threshold": "24", "red_probability": "100"}


def role_ecn_red():
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
    return dict(min_threshold=defaults["rdma_network_ecn_red_min_threshold"],
                max_threshold=defaults["rdma_network_ecn_red_max_threshold"],
                probability=defaults["rdma_network_ecn_red_probability"])


def test_role_defaults_are_the_seeds():
    assert role_ecn_red() == dict(min_threshold=24, max_threshold=24, probability=100)
    spec = yaml.safe_load((ROLE / "meta/argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    for key, value in (("min_threshold", 24), ("max_threshold", 24), ("probability", 100)):
        assert spec["rdma_network_ecn_red_" + key]["default"] == value
        assert spec["rdma_network_ecn_red_" + key]["type"] == "int"


def redp(sysfs, netdev="ens1f0"):
    base = sysfs / "class/net" / netdev / "ecn/redp"
    return {name: (base / name).read_text().strip() for name in SEED}


def test_lab_nic_has_the_files(sysfs):
    assert redp(sysfs) == dict.fromkeys(SEED, "0")
    assert redp(sysfs, "ens1f1") == dict.fromkeys(SEED, "0")


def test_roce_sysfs_writes_the_seeds_thresholds(run_module, sysfs):
    args = dict(interface="ens1f0", ecn_red=role_ecn_red(), sysfs_root=str(sysfs))
    check = run_module(roce_sysfs, check_mode=True, **args)
    assert check["changed"] and len(check["changes"]) == 3 and check["ecn_red"] == "present", check
    assert redp(sysfs) == dict.fromkeys(SEED, "0")          # check mode wrote nothing
    assert "ecn/redp/red_probability = 100" in check["diff"]["after"]
    first = run_module(roce_sysfs, **args)
    assert first["_rc"] == 0 and first["changed"], first
    assert redp(sysfs) == SEED
    assert redp(sysfs, "ens1f1") == dict.fromkeys(SEED, "0")  # the other port is left alone
    again = run_module(roce_sysfs, **args)
    assert not again["changed"] and again["diff"]["before"] == again["diff"]["after"]
    # drift on one file: only that one is rewritten
    (sysfs / "class/net/ens1f0/ecn/redp/red_max_threshold").write_text("1500\n")
    third = run_module(roce_sysfs, **args)
    assert third["changes"] == ["%s: 1500 -> 24" % (sysfs / "class/net/ens1f0/ecn/redp/red_max_threshold")]


def test_driver_without_redp_is_warned_not_failed(run_module, sysfs):
    for name in SEED:
        (sysfs / "class/net/ens1f0/ecn/redp" / name).unlink()
    (sysfs / "class/net/ens1f0/ecn/redp").rmdir()
    result = run_module(roce_sysfs, interface="ens1f0", ecn_red=role_ecn_red(), ecn_priorities=[3],
                        sysfs_root=str(sysfs))
    assert result["_rc"] == 0 and result["ecn_red"] == "absent", result
    assert len(result["changes"]) == 2       # ECN on priority 3 (np, rp) only
    assert not (sysfs / "class/net/ens1f0/ecn/redp").exists()


@pytest.mark.parametrize("red", [
    dict(min_threshold=25, max_threshold=24, probability=100),
    dict(min_threshold=-1, max_threshold=24, probability=100),
    dict(min_threshold=24, max_threshold=24, probability=101),
])
def test_roce_sysfs_refuses_bad_thresholds(run_module, sysfs, red):
    result = run_module(roce_sysfs, interface="ens1f0", ecn_red=red, sysfs_root=str(sysfs))
    assert result["failed"] and "min_threshold <= max_threshold" in result["msg"], result
    assert redp(sysfs) == dict.fromkeys(SEED, "0")


def render_boot_script(sysfs, mlnx_qos):
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(ROLE / "templates")), keep_trailing_newline=True)
    env.filters["quote"] = lambda v: shlex.quote(str(v))
    variables = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
    priority = variables["rdma_network_priority"]
    variables.update(rdma_network_interfaces=["ens1f0"], rdma_network_sysfs_root=str(sysfs),
                     rdma_network_mlnx_qos_path=mlnx_qos, rdma_network_persist_wait=1, ansible_managed="test",
                     rdma_network_pfc_vector=[0] * priority + [1] + [0] * (7 - priority))
    return env.get_template("ai-platform-roce.sh.j2").render(**variables)


def test_boot_script_reapplies_the_seeds_thresholds(sysfs, tmp_path):
    state = tmp_path / "mlnx_qos.json"
    tool = tmp_path / "mlnx_qos"
    tool.write_text("#!/bin/sh\nexec %s %s \"$@\"\n" % (sys.executable, HW / "nic/mlnx_qos_fake.py"))
    tool.chmod(0o755)
    env = dict(os.environ, AI_L1_FAKE_MLNX_QOS_STATE=str(state))
    subprocess.run([str(tool), "--init", "ens1f0", "ens1f1"], check=True, env=env, capture_output=True)
    script = tmp_path / "ai-platform-roce"
    script.write_text(render_boot_script(sysfs, str(tool)))
    result = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert redp(sysfs) == SEED
    assert (sysfs / "class/net/ens1f0/ecn/roce_np/enable/3").read_text().strip() == "1"
