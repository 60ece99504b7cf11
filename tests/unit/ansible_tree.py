"""Walking the project's Ansible YAML in static tests: every task of a tasks file or playbook
(blocks, rescues, handlers and play sections included) and the files that hold tasks."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TASK_LISTS = ("tasks", "pre_tasks", "post_tasks", "handlers", "block", "rescue", "always")


def walk_tasks(node):
    """Every mapping of a parsed tasks file or playbook: plays, tasks, and the tasks inside them."""
    if isinstance(node, list):
        for item in node:
            yield from walk_tasks(item)
    elif isinstance(node, dict):
        yield node
        for key in TASK_LISTS:
            yield from walk_tasks(node.get(key))


def task_files():
    """The YAML files under roles/ and playbooks/ that can hold tasks (not templates or role metadata)."""
    for top in ("roles", "playbooks"):
        for path in sorted((ROOT / top).rglob("*.yml")):
            if "/templates/" not in str(path) and "/meta/" not in str(path):
                yield path
