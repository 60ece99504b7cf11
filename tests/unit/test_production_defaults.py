"""Production entry points default to production (issue 16, item 5): ansible.cfg names no
inventory and leaves host key checking on; the lab turns it off for its own hosts in its
inventory, and every lab entry point names the lab inventory itself. ai-l1-day2's refusal without
an inventory is tested in test_day2_tool.py, the receiver's run.inventory here."""

from __future__ import annotations

import configparser
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ai_l1_day2.remediation import config as config_mod
from remediation_fakes import HMAC_KEY, TOKEN

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def ansible_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    return env


def test_ansible_cfg_names_no_inventory_and_checks_host_keys():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "ansible.cfg")
    defaults = dict(cfg["defaults"])
    assert "inventory" not in defaults, defaults.get("inventory")
    assert defaults.get("host_key_checking", "true").lower() in ("true", "yes", "1")
    assert "StrictHostKeyChecking" not in " ".join(dict(cfg["ssh_connection"]).values())


def test_the_effective_configuration_is_production():
    """What ansible itself makes of ansible.cfg: the stock inventory, host keys checked."""
    proc = subprocess.run([str(BIN / "ansible-config"), "dump"], capture_output=True, text=True, cwd=ROOT,
                          env=ansible_env(), timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    found = re.findall(r"^(DEFAULT_HOST_LIST|HOST_KEY_CHECKING)\((.*?)\) = (.*)$", proc.stdout, re.M)
    settings = {key: (source, value) for key, source, value in found}
    assert settings["HOST_KEY_CHECKING"] == ("default", "True"), settings
    assert "inventories/lab" not in settings["DEFAULT_HOST_LIST"][1], settings


def test_the_lab_inventory_turns_host_key_checking_off_for_its_hosts():
    conn = yaml.safe_load((ROOT / "inventories/lab/group_vars/all/connection.yml").read_text())
    assert conn["ansible_host_key_checking"] is False
    proc = subprocess.run([str(BIN / "ansible-inventory"), "-i", str(ROOT / "inventories/lab"), "--host", "gpu1"],
                          capture_output=True, text=True, cwd=ROOT, env=ansible_env(), timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    host = yaml.safe_load(proc.stdout)
    assert host["ansible_host_key_checking"] is False
    assert "StrictHostKeyChecking=no" in host["ansible_ssh_common_args"]


def test_make_lab_names_the_lab_inventory():
    """The `lab` target's rollout passes -i (ansible.cfg no longer points at the lab)."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^lab:.*\n((?:\t.*\n)+)", makefile, re.M)
    assert recipe, "no lab target"
    playbooks = [line for line in recipe.group(1).splitlines() if "ansible-playbook" in line]
    assert playbooks and all(re.search(r"\s-i\s+inventories/lab\b", line) for line in playbooks), playbooks


def load(tmp_path, run):
    return config_mod.load(None, env={"AI_L1_REMEDIATE_TOKEN": TOKEN, "AI_L1_REMEDIATE_HMAC_KEY": HMAC_KEY},
                           overrides={"state_dir": str(tmp_path / "state"), "run": run})


def test_the_receiver_has_no_default_inventory(tmp_path):
    assert config_mod.Config(auth=config_mod.AuthConfig(), state_dir=tmp_path).inventory is None
    with pytest.raises(config_mod.ConfigError, match=r"run.inventory: required with run.backend runner"):
        load(tmp_path, {})


@pytest.mark.parametrize("inventory", ["inventories/production", "/nonexistent/hosts.yml"])
def test_the_receiver_refuses_an_inventory_that_does_not_exist(tmp_path, inventory):
    with pytest.raises(config_mod.ConfigError, match=r"run.inventory: inventory .* does not exist"):
        load(tmp_path, {"inventory": inventory})


def test_the_receiver_resolves_a_relative_inventory_like_its_runs(tmp_path, monkeypatch):
    """Relative to the current directory, else the project (runner.resolve_inventory); kept absolute."""
    monkeypatch.chdir(tmp_path)
    assert load(tmp_path, {"inventory": "inventories/lab"}).inventory == str(ROOT / "inventories" / "lab")
    (tmp_path / "site.yml").write_text("all: {}\n")
    assert load(tmp_path, {"inventory": "site.yml"}).inventory == str(tmp_path / "site.yml")


def test_no_shipped_receiver_configuration_names_a_missing_inventory():
    """Example configurations in the repository (the config docstring's run line included) name
    no relative inventory that does not exist (absolute paths are the deployment's)."""
    texts = {"config.py": config_mod.__doc__}
    for path in ROOT.rglob("*remediation*.y*ml"):
        if ".venv" not in path.parts and ".cache" not in path.parts:
            texts[str(path.relative_to(ROOT))] = path.read_text()
    found = []
    for name, text in texts.items():
        for raw in re.findall(r"\binventory:\s*([^\s,}]+)", text):
            inventory = raw.strip("'\"")
            if inventory.startswith(("{{", "/", "$")) or not inventory:
                continue
            found.append(inventory)
            assert (ROOT / inventory).exists(), f"{name} names inventory {inventory}, which does not exist"
    assert "inventories/production" not in found
