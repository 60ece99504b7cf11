"""No task prints a secret (issue 13, item 3): a template or copy task whose content uses a
secret variable (a name with password, secret, token, certificate_key, private_key, hmac_key)
says `no_log: true`, which censors its result, diff included, so neither `--diff` nor `-v` shows
it (the keepalived VRRP password was shown under --diff)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SECRET_WORDS = "password|secret|token|certificate_key|private_key|hmac_key"
SECRET = re.compile(r"\{\{[^}]*\b([a-z0-9_]*(?:" + SECRET_WORDS + r")[a-z0-9_]*)\b", re.I)
WRITERS = ("ansible.builtin.template", "ansible.builtin.copy")


def tasks(node):
    if isinstance(node, list):
        for item in node:
            yield from tasks(item)
    elif isinstance(node, dict):
        if any(k in node for k in WRITERS):
            yield node
        for key in ("block", "rescue", "always"):
            yield from tasks(node.get(key))


def secret_writers():
    found = []
    for path in sorted(REPO.glob("roles/*/tasks/*.yml")):
        role = path.parents[1]
        for task in tasks(yaml.safe_load(path.read_text())):
            module = next(k for k in WRITERS if k in task)
            args = task[module] or {}
            text = str(args.get("content", ""))
            src = args.get("src")
            if module.endswith("template") and isinstance(src, str) and (role / "templates" / src).is_file():
                text += (role / "templates" / src).read_text()
            names = sorted(set(SECRET.findall(text)))
            if names:
                found.append(pytest.param(task, names, id=f"{path.relative_to(REPO)}:{task.get('name')}"))
    return found


SECRET_WRITERS = secret_writers()


def test_the_scan_finds_the_keepalived_password():
    assert any("k8s_control_plane_vrrp_password" in p.values[1] for p in SECRET_WRITERS), SECRET_WRITERS


@pytest.mark.parametrize(("task", "names"), SECRET_WRITERS)
def test_tasks_writing_secrets_hide_them(task, names):
    assert task.get("no_log") is True, f"{task.get('name')} writes {names}: set no_log: true"
    assert task.get("diff") in (None, False)
