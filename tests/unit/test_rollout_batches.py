"""Rollout batches from the inventory (playbooks/vars/rollout.yml): the host layers' plays take
`serial` and `max_fail_percentage` from the inventory's group_vars/all/rollout.yml, and a batch
with too many failures stops the run before the next batch is touched.

The behaviour is shown with the real playbooks/os_baseline.yml against hosts that refuse every
connection (127.0.0.x, port 1): each attempted host is unreachable at once, so the JSON report
says exactly which hosts each batch touched.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleError
from ansible.parsing.dataloader import DataLoader
from ansible_collections.ai_platform.l1.plugins.lookup.rollout import LookupModule
from test_validation_play import ROOT, run_playbook

PLAYBOOKS = ROOT / "playbooks"
# Plays that run host by host on the fleet: batched. The control plane joins one at a time by
# itself (throttle) and the pod network's plays wait for every node: not batched.
BATCHED = {
    "os_baseline.yml": ["OS baseline"],
    "rdma.yml": ["RDMA network"],
    "kubernetes.yml": ["Container runtime and node binaries", "Workers"],
    "nvidia.yml": ["NVIDIA driver, RDMA network, container toolkit and DCGM"],
    "ascend.yml": ["Ascend firmware, driver and CANN"],
    "node_labels.yml": ["Accelerator node labels"],
}
SERIAL = "{{ lookup('ai_platform.l1.rollout', 'rollout_batch_size') }}"
MAX_FAIL = "{{ lookup('ai_platform.l1.rollout', 'rollout_max_fail_percentage') }}"
HOSTS = ["cp1", "cp2", "cp3", "gpu1", "gpu2", "npu1"]


@pytest.mark.parametrize("playbook", sorted(BATCHED))
def test_host_layers_read_the_inventory_batches(playbook):
    plays = {p["name"]: p for p in yaml.safe_load((PLAYBOOKS / playbook).read_text())}
    for name, play in plays.items():
        if name not in BATCHED[playbook]:
            assert "serial" not in play, f"{playbook}: {name} is batched but not listed here"
            continue
        assert play["serial"] == SERIAL, name
        assert play["max_fail_percentage"] == MAX_FAIL, name
        # A templated vars_files path is templated again for every host on every task.
        assert "vars_files" not in play, name


def test_validation_play_sees_what_the_layers_see():
    (play,) = yaml.safe_load((PLAYBOOKS / "validate.yml").read_text())
    args = play["tasks"][0]["ai_platform.l1.inventory_validate"]
    assert args["play_level_vars"] == {"rollout_batch_size": SERIAL, "rollout_max_fail_percentage": MAX_FAIL}


def refusing_inventory(tmp_path: Path, rollout: dict | None) -> Path:
    """The lab's groups on loopback addresses whose port 1 refuses the SSH connection."""
    addresses = {host: f"127.0.0.{10 + i}" for i, host in enumerate(HOSTS)}
    inventory = {"all": {
        "vars": {"ansible_port": 1, "ansible_connection": "ssh"},
        "children": {
            "k8s_control_plane": {"hosts": {h: {"ansible_host": addresses[h]} for h in HOSTS[:3]}},
            "k8s_worker": {"children": {
                "gpu_nvidia": {"hosts": {h: {"ansible_host": addresses[h]} for h in HOSTS[3:5]}},
                "npu_ascend": {"hosts": {"npu1": {"ansible_host": addresses["npu1"]}}},
            }},
        },
    }}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    if rollout is not None:
        (tmp_path / "group_vars" / "all").mkdir(parents=True)
        (tmp_path / "group_vars" / "all" / "rollout.yml").write_text(yaml.safe_dump(rollout))
    return tmp_path


def touched_per_play(report):
    """Hosts with a result in each play that started (one play per batch)."""
    return [sorted({h for task in play["tasks"] for h in task["hosts"]}) for play in report["plays"]]


@pytest.mark.parametrize(("rollout", "batches"), [
    # A batch of one that fails (unreachable counts) is over a 0 % ceiling: the run stops there.
    ({"rollout_batch_size": 1, "rollout_max_fail_percentage": 0}, [["cp1"]]),
    # Batches of two: the first one fails whole, which always stops the play.
    ({"rollout_batch_size": 2}, [["cp1", "cp2"]]),
    # The defaults: one batch of every host; all are tried.
    (None, [HOSTS]),
])
def test_a_failed_batch_stops_the_run_before_the_next(tmp_path, rollout, batches):
    inventory = refusing_inventory(tmp_path, rollout)
    # A fact cache of its own: the lab's cached facts for hosts of the same names would skip the
    # fact gathering that finds these hosts unreachable.
    proc, report = run_playbook("playbooks/os_baseline.yml", inventory / "hosts.yml",
                                env={"ANSIBLE_CACHE_PLUGIN_CONNECTION": str(tmp_path / "facts")})
    assert report is not None, proc.stdout + proc.stderr
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr  # 4: hosts unreachable
    assert touched_per_play(report) == batches
    stats = report["stats"]
    assert sorted(stats) == sorted(h for batch in batches for h in batch)  # the others never started
    assert all(s["unreachable"] == 1 for s in stats.values())


def rollout_lookup(playbook_dir: Path):
    loader = DataLoader()
    loader.set_basedir(str(playbook_dir))
    return LookupModule(loader=loader)


def test_rollout_lookup_overlays_the_inventory_file_on_the_defaults(tmp_path):
    inventory = refusing_inventory(tmp_path, {"rollout_batch_size": "10%"})
    lookup = rollout_lookup(PLAYBOOKS)
    variables = {"ansible_inventory_sources": [str(inventory / "hosts.yml")]}
    assert lookup.run(["rollout_batch_size", "rollout_max_fail_percentage"], variables) == ["10%", 100]
    # A directory given as the inventory is its own inventory directory.
    variables = {"ansible_inventory_sources": [str(inventory)]}
    assert lookup.run(["rollout_batch_size"], variables) == ["10%"]
    # No file next to the inventory: the defaults.
    assert lookup.run(["rollout_batch_size"], {"ansible_inventory_sources": [str(ROOT / "inventories/lab")]}) \
        == [yaml.safe_load((PLAYBOOKS / "vars/rollout.yml").read_text())["rollout_batch_size"]]


def test_rollout_lookup_refuses_unknown_names_and_non_mappings(tmp_path):
    lookup = rollout_lookup(PLAYBOOKS)
    with pytest.raises(AnsibleError, match="unknown rollout setting 'rollout_batch'"):
        lookup.run(["rollout_batch"], {"ansible_inventory_sources": []})
    (tmp_path / "group_vars" / "all").mkdir(parents=True)
    (tmp_path / "group_vars" / "all" / "rollout.yml").write_text("- 1\n")
    with pytest.raises(AnsibleError, match="must hold a mapping"):
        lookup.run(["rollout_batch_size"], {"ansible_inventory_sources": [str(tmp_path)]})
    with pytest.raises(AnsibleError, match="not in the play's search path"):
        rollout_lookup(tmp_path).run(["rollout_batch_size"], {})
