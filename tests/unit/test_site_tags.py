"""Tags on the site layers: `ansible-playbook playbooks/site.yml --tags <layer>` runs one layer.

Each layer playbook's plays carry the layer's tag (queues.yml's from its import line in site.yml),
the inventory validation and the Kubernetes preflight are tagged `always`, and the NVIDIA layer has
a tag per role. Checked through ansible-playbook itself (--list-tags, --list-tasks --tags X on the
sample inventory) and by a real run of one layer: a layer that is not selected must not fail on
what only its own run would produce (facts, the control planes' results), which the role argument
checks, tagged `always` by Ansible, would otherwise read.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from test_kubernetes_preflight import overlay
from test_validation_play import ROOT, SAMPLE_SECRET, run_playbook

SITE = ROOT / "playbooks" / "site.yml"
SAMPLE = ROOT / "inventories" / "sample"
# site.yml's imports -> the tag of the layer (None: the two plays that always run).
LAYERS = {
    "validate.yml": None,
    "kubernetes_preflight.yml": None,
    "os_baseline.yml": "baseline",
    "kubernetes.yml": "kubernetes",
    "nvidia.yml": "nvidia",
    "ascend.yml": "ascend",
    "node_labels.yml": "labels",
    "device_plugins.yml": "device_plugins",
    "queues.yml": "queues",
    "network.yml": "network",
    "monitoring.yml": "monitoring",
    "storage.yml": "storage",
    "etcd_backup.yml": "backup",
    "addons.yml": "addons",
}
LAYER_TAGS = sorted(t for t in LAYERS.values() if t)
ROLE_TAGS = ["dcgm", "nvidia_container_toolkit", "nvidia_driver", "rdma"]  # within the nvidia layer
# A play's own tag besides its layer's: the first play of kubernetes.yml alone (containerd and the
# node binaries, no cluster; tests/bench/fleet_scale.py runs the host layers with it).
PLAY_TAGS = {"Container runtime and node binaries": "container_runtime"}
SELECTED = [*LAYER_TAGS, "nvidia_driver", "rdma", "container_runtime"]  # run with --list-tasks --tags
ARGSPEC_TASK = "Validating arguments against arg spec"
PLAY_LINE = re.compile(r"^\s+play #\d+ \((?P<hosts>[^)]*)\): (?P<name>.*?)\tTAGS: \[(?P<tags>[^\]]*)\]$")
TASK_LINE = re.compile(r"^\s{6}(?P<name>.*?)\tTAGS: \[(?P<tags>[^\]]*)\]$")


def ansible_playbook(*args: str) -> str:
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0",
           "ANSIBLE_NOCOLOR": "1"}
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), str(SITE), "-i", str(SAMPLE), *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def tags(text: str) -> set[str]:
    return {t.strip() for t in text.split(",") if t.strip()}


def listed_plays(output: str) -> list[dict]:
    """--list-tags / --list-tasks output: [{name, tags, tasks: [(name, tags)], task_tags}] in play order."""
    plays = []
    for line in output.splitlines():
        if m := PLAY_LINE.match(line):
            plays.append({"name": m["name"], "tags": tags(m["tags"]), "tasks": [], "task_tags": set()})
        elif plays and (m := re.match(r"^\s+TASK TAGS: \[(?P<tags>[^\]]*)\]$", line)):
            plays[-1]["task_tags"] = tags(m["tags"])
        elif plays and (m := TASK_LINE.match(line)):
            plays[-1]["tasks"].append((m["name"], tags(m["tags"])))
    return plays


def site_plays() -> list[tuple[str, str | None, str]]:
    """(imported playbook, expected layer tag, play name) for every play site.yml runs, in order."""
    out = []

    def expand(playbook: Path, layer):
        for play in yaml.safe_load(playbook.read_text()):
            if "ansible.builtin.import_playbook" in play:
                expand(playbook.parent / play["ansible.builtin.import_playbook"], layer)
            else:
                out.append((playbook.name, None if playbook.name in ("validate.yml", "kubernetes_preflight.yml")
                            else layer, play["name"]))

    for entry in yaml.safe_load(SITE.read_text()):
        name = entry["ansible.builtin.import_playbook"]
        expand(SITE.parent / name, LAYERS[name])
    return out


@pytest.fixture(scope="module")
def list_tags():
    return listed_plays(ansible_playbook("--list-tags"))


@pytest.fixture(scope="module")
def list_tasks():
    """--list-tasks --tags X for every layer tag and one role tag, a few at a time (each is mostly start-up)."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = {tag: pool.submit(ansible_playbook, "--list-tasks", "--tags", tag) for tag in SELECTED}
        return {tag: listed_plays(f.result()) for tag, f in futures.items()}


def test_site_imports_every_layer_once():
    imports = [e["ansible.builtin.import_playbook"] for e in yaml.safe_load(SITE.read_text())]
    assert sorted(imports) == sorted(LAYERS)


def test_list_tags(list_tags):
    expected = site_plays()
    assert [p["name"] for p in list_tags] == [name for _, _, name in expected]
    for play, (source, layer, _) in zip(list_tags, expected, strict=True):
        # Each play carries exactly its layer's tag (and its own, PLAY_TAGS), or `always` for the
        # validation and the preflight.
        own = {PLAY_TAGS[play["name"]]} if play["name"] in PLAY_TAGS else set()
        assert play["tags"] == ({layer, *own} if layer else {"always"}), (source, play)
    everything = set().union(*(p["task_tags"] for p in list_tags))
    assert everything == {"always", *LAYER_TAGS, *ROLE_TAGS, *PLAY_TAGS.values()}


def test_validation_and_preflight_always_run(list_tasks):
    for tag, plays in list_tasks.items():
        names = [p["name"] for p in plays if p["tasks"]]
        assert names[:2] == ["Validate the inventory", "Kubernetes preflight"], (tag, names)
        assert "Check groups, per-host values and role arguments" in [t for t, _ in plays[0]["tasks"]], tag


def test_container_runtime_selects_its_play_only(list_tasks):
    plays = list_tasks["container_runtime"]
    selected = [p["name"] for p in plays if any("container_runtime" in t for _, t in p["tasks"])]
    assert selected == ["Container runtime and node binaries"], selected
    [play] = [p for p in plays if p["name"] == selected[0]]
    assert any(t.startswith("containerd : ") for t, _ in play["tasks"]), play["tasks"]
    assert any(t.startswith("k8s_node : ") for t, _ in play["tasks"]), play["tasks"]


@pytest.mark.parametrize("tag", [t for t in SELECTED if t not in PLAY_TAGS.values()])
def test_one_tag_selects_one_layer(list_tasks, tag):
    expected = site_plays()
    plays = list_tasks[tag]
    assert [p["name"] for p in plays] == [name for _, _, name in expected]
    layer = tag if tag in LAYER_TAGS else "nvidia"
    for play, (_, play_layer, name) in zip(plays, expected, strict=True):
        for task, task_tags in play["tasks"]:
            if play_layer is None or play_layer == layer:
                assert tag in task_tags or "always" in task_tags, (name, task)
            else:
                # Outside the selected layer only the role argument checks Ansible tags `always` are listed.
                assert task.split(" : ", 1)[-1].startswith(ARGSPEC_TASK) and "always" in task_tags, (tag, name, task)
    selected = [p for p, (_, play_layer, _) in zip(plays, expected, strict=True)
                if play_layer == layer and any(tag in t for _, t in p["tasks"])]
    assert selected, f"--tags {tag} selects no task"
    if tag in LAYER_TAGS:
        # Every play of the layer has tasks under its tag.
        assert len(selected) == sum(1 for _, play_layer, _ in expected if play_layer == tag), tag


NVIDIA_PLAY = "NVIDIA driver, RDMA network, container toolkit and DCGM"


def test_rdma_lists_only_the_rdma_tasks(list_tasks):
    """--tags rdma: the RDMA role's tasks, inside the NVIDIA play (after the driver), and nothing else."""
    plays = {p["name"]: p for p in list_tasks["rdma"]}
    nvidia = [t for t, _ in plays[NVIDIA_PLAY]["tasks"]]
    assert any(t.startswith("rdma_network : ") and ARGSPEC_TASK not in t for t in nvidia), nvidia
    assert all(t.startswith("rdma_network : ") or ARGSPEC_TASK in t for t in nvidia), nvidia
    others = [t for p in list_tasks["rdma"] if p["name"] not in (NVIDIA_PLAY, "Validate the inventory",
                                                                  "Kubernetes preflight") for t, _ in p["tasks"]]
    assert all(ARGSPEC_TASK in t for t in others), others


def test_rdma_runs_after_the_driver_before_the_toolkit():
    """nvidia-peermem and `nvidia-smi topo -m` need the driver; the toolkit's CDI spec mounts /etc/nccl.conf."""
    [play] = [p for p in yaml.safe_load((SITE.parent / "nvidia.yml").read_text()) if p["name"] == NVIDIA_PLAY]
    assert [r["role"] for r in play["roles"]] == ["nvidia_driver", "rdma_network", "nvidia_container_toolkit", "dcgm"]


def test_one_layer_runs_alone_without_touching_the_other_layers(tmp_path, monkeypatch):
    """A real run of `--tags monitoring` on the sample inventory (monitoring is off there, so no host is reached):
    the validation and the preflight run, every other layer's plays start and do nothing but the role argument
    checks, which must pass without the facts and results of the layers that did not run. A fresh fact cache:
    cached facts would hide a check that reads them."""
    monkeypatch.setenv("ANSIBLE_CACHE_PLUGIN_CONNECTION", str(tmp_path / "facts"))
    limit = "k8s_control_plane:gpu-a100-01.dc1.example.com:npu-910b-32.dc1.example.com"
    proc, report = run_playbook("playbooks/site.yml", SAMPLE, *SAMPLE_SECRET, "--tags", "monitoring", "--limit", limit,
                                "-e", json.dumps({"artifacts_overlay": str(overlay(tmp_path))}))
    assert report is not None, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.returncode == 0, json.dumps(report["plays"][-1], indent=1)[-3000:]
    assert all(s["unreachable"] == 0 and s["failures"] == 0 and s["changed"] == 0 for s in report["stats"].values())
    layer_of = {name: layer for _, layer, name in site_plays()}
    ran = {}
    for play in report["plays"]:
        for task in play["tasks"]:
            if any(not r.get("skipped") for r in task["hosts"].values()):
                ran.setdefault(play["play"]["name"], []).append(task["task"]["name"])
    assert "Check groups, per-host values and role arguments" in ran["Validate the inventory"]
    assert ran["Kubernetes preflight"]
    for name, tasks in ran.items():
        if layer_of[name] not in (None, "monitoring"):
            assert all(ARGSPEC_TASK in t for t in tasks), (name, tasks)
    # The unselected layers' argument checks did run, and passed.
    assert any(ARGSPEC_TASK in t for t in ran["Container runtime and node binaries"])
    assert any(ARGSPEC_TASK in t for t in ran[NVIDIA_PLAY])
