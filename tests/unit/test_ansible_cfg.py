"""ansible.cfg keeps Ansible's per-run files out of paths another user on the controller can
create first (a fixed name under the shared /tmp): local temporary files and SSH control sockets
live under the running user's home."""

from __future__ import annotations

import configparser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("section", "key"), [("defaults", "local_tmp"), ("ssh_connection", "control_path_dir")])
def test_per_run_paths_are_per_user(section, key):
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(ROOT / "ansible.cfg")
    value = cfg.get(section, key, fallback="~/.ansible")  # unset: Ansible's per-user default
    assert value.startswith("~/"), f"ansible.cfg [{section}] {key} = {value}: not under the user's home"
