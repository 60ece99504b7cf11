"""The Stargz snapshotter's configuration as containerd 1.6 and the daemon read it (roles/stargz_snapshotter,
roles/containerd): rendered for real by ansible-playbook with the roles' templates and variables, then
parsed as TOML. The lab runs the same files (tests/integration/test_stargz.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
STARGZ = REPO / "roles" / "stargz_snapshotter"
CONTAINERD = REPO / "roles" / "containerd"
PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  vars_files: {vars_files}
  tasks:
    - ansible.builtin.copy:
        dest: "{{{{ out }}}}/{{{{ item }}}}"
        content: "{{{{ lookup('ansible.builtin.template', '{role}/templates/' ~ item) }}}}"
        mode: "0600"
      loop: "{{{{ templates }}}}"
"""


def render(tmp_path: Path, role: Path, templates: list[str], **extra) -> dict[str, str]:
    vars_files = [str(f) for f in (role / "defaults" / "main.yml", role / "vars" / "main.yml") if f.exists()]
    (tmp_path / "play.yml").write_text(PLAY.format(role=role, vars_files=json.dumps(vars_files)))
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    (tmp_path / "vars.json").write_text(json.dumps({"out": str(out), "templates": templates,
                                                    "ansible_python_interpreter": sys.executable, **extra}))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,",
                           str(tmp_path / "play.yml"), "-e", f"@{tmp_path / 'vars.json'}"],
                          capture_output=True, text=True, check=False, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return {t: (out / t).read_text() for t in templates}


def test_the_daemon_gets_the_seeds_settings_where_it_reads_them(tmp_path):
    files = render(tmp_path, STARGZ, ["config.toml.j2"])
    config = tomllib.loads(files["config.toml.j2"])
    # Seed 4.3.4, at the daemon's own keys (fs/config and service/config of v0.19.1).
    assert config == {"noprefetch": False, "prefetch_size": 524288000,
                      "directory_cache": {"max_cache_fds": 10000},
                      "registry": {"config_path": "/etc/containerd/certs.d"}}
    # Keys the seed has that the snapshotter does not know are not carried over.
    assert not {"convert_image_layer_to_stargz", "cache_on_root", "root_path"} & set(config)


def test_the_drop_in_holds_the_proxy_plugin_only(tmp_path):
    files = render(tmp_path, STARGZ, ["containerd-stargz.toml.j2", "stargz-snapshotter.service.j2"],
                   stargz_snapshotter_root="/mnt/nvme/containerd-stargz-grpc")
    drop_in = tomllib.loads(files["containerd-stargz.toml.j2"])
    # A [plugins] table in a drop-in would replace the containerd role's CRI table (containerd < 2.0).
    assert drop_in == {"version": 2, "proxy_plugins": {"stargz": {
        "type": "snapshot", "address": "/run/containerd-stargz-grpc/containerd-stargz-grpc.sock"}}}
    unit = files["stargz-snapshotter.service.j2"]
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    assert "--root=/mnt/nvme/containerd-stargz-grpc" in exec_start
    assert "--address=/run/containerd-stargz-grpc/containerd-stargz-grpc.sock" in exec_start
    assert "Type=notify" in unit and "Before=containerd.service" in unit


@pytest.mark.parametrize(("snapshotter", "annotations"), [("overlayfs", None), ("stargz", False)])
def test_containerd_keeps_the_cri_image_labels_for_stargz_only(tmp_path, snapshotter, annotations):
    files = render(tmp_path, CONTAINERD, ["config.toml.j2"], containerd_snapshotter=snapshotter,
                   containerd_sandbox_image="registry.k8s.io/pause:3.10.1", containerd_systemd_cgroup=True,
                   ansible_managed="managed")
    cri = tomllib.loads(files["config.toml.j2"])["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
    assert cri["snapshotter"] == snapshotter
    # containerd 1.6 defaults disable_snapshot_annotations to true: a remote snapshotter needs false.
    assert cri.get("disable_snapshot_annotations") is annotations


def test_the_rollout_installs_it_before_containerd_where_the_inventory_selects_it():
    plays = yaml.safe_load((REPO / "playbooks" / "kubernetes.yml").read_text())
    runtime = next(p for p in plays if p.get("name") == "Container runtime and node binaries")
    roles = [r["role"] for r in runtime["roles"]]
    assert roles.index("stargz_snapshotter") < roles.index("containerd")
    entry = runtime["roles"][roles.index("stargz_snapshotter")]
    # Listed for every node and ended at once where not selected (its first task).
    assert "when" not in entry
    selected = "{{ containerd_snapshotter | default('overlayfs') == 'stargz' }}"
    assert entry["vars"]["stargz_snapshotter_enabled"] == selected
    first = yaml.safe_load((STARGZ / "tasks" / "main.yml").read_text())[0]
    assert first["ansible.builtin.meta"] == "end_role" and first["when"] == "not stargz_snapshotter_enabled"
    schema = yaml.safe_load((REPO / "playbooks" / "vars" / "inventory_schema.yml").read_text())
    spec = schema["inventory_schema"]["role_argument_specs"]["stargz_snapshotter"]
    assert "stargz_snapshotter_enabled" in spec["set_by_playbook"]


def test_the_role_ends_at_once_where_not_selected(tmp_path):
    """Where containerd keeps overlayfs the role runs its argument check and its first task, nothing else."""
    (tmp_path / "play.yml").write_text(
        "- hosts: localhost\n  connection: local\n  gather_facts: false\n  roles:\n    - role: stargz_snapshotter\n"
        "      vars: {stargz_snapshotter_enabled: false, stargz_snapshotter_artifacts: {},"
        " stargz_snapshotter_root: " + str(tmp_path / "root") + "}\n")
    env = {**os.environ, "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json",
           "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json",
           "ANSIBLE_PYTHON_INTERPRETER": sys.executable}
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,",
                           str(tmp_path / "play.yml")], capture_output=True, text=True, check=False, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    tasks = [t["task"]["name"] for play in json.loads(proc.stdout)["plays"] for t in play["tasks"]]
    assert len(tasks) == 2 and tasks[1] == "stargz_snapshotter : End the role where containerd keeps overlayfs", tasks
    assert not (tmp_path / "root").exists()
