"""Shell, command and raw tasks say why no module does the job, and none does a module's job.

Every task file (roles/*/tasks, roles/*/handlers, playbooks) is parsed with PyYAML, keeping
each task's line. A task using ansible.builtin.shell/command/raw (or their ansible.legacy
names) must carry a `#` comment: in the comment lines directly above it, between its first
line and the module's key, or at the end of the module's key line. And no such task may run
what a module does: sysctl (ansible.posix.sysctl), openssl (community.crypto) or
`kubectl apply` (kubernetes.core.k8s).
"""

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
SHELL_MODULES = {f"ansible.{ns}.{name}" for ns in ("builtin", "legacy") for name in ("shell", "command", "raw")}
# What a module does; the comment that explains a command does not excuse these.
FORBIDDEN = [
    (re.compile(r"(^|[\s;|&(`'\"])(\S*/)?sysctl(\s|$)"), "sysctl: use ansible.posix.sysctl"),
    (re.compile(r"(^|[\s;|&(`'\"])(\S*/)?openssl(\s|$)"), "openssl: use a community.crypto module"),
    (re.compile(r"(^|[\s;|&(`'\"])(\S*/)?kubectl\s[^;|&\n]*\bapply\b"), "kubectl apply: use kubernetes.core.k8s"),
]


class LineLoader(yaml.SafeLoader):
    """SafeLoader that records each mapping's first line (0-based) under '__line__'."""


def _mapping(loader, node):
    mapping = loader.construct_mapping(node, deep=True)
    mapping["__line__"] = node.start_mark.line
    return mapping


LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
# Ansible's own tags: their values are plain strings for this check.
for _tag in ("!unsafe", "!vault"):
    LineLoader.add_constructor(_tag, lambda loader, node: loader.construct_scalar(node))


def shell_tasks(data):
    """(task, module name) for every task in data, at any depth (plays, blocks, rescue, always)."""
    if isinstance(data, list):
        for item in data:
            if isinstance(item, dict):
                for module in SHELL_MODULES & set(item):
                    yield item, module
            yield from shell_tasks(item)
    elif isinstance(data, dict):
        for key, value in data.items():
            if key != "__line__":
                yield from shell_tasks(value)


def command_text(args):
    """The command a shell/command/raw task runs, as one string."""
    if isinstance(args, str):
        return args
    if isinstance(args, dict):
        if "argv" in args:
            argv = args["argv"]
            return " ".join(str(a) for a in argv) if isinstance(argv, list) else str(argv)
        return " ".join(str(args.get(k, "")) for k in ("cmd", "_raw_params"))
    return str(args)


def has_reason(lines, task, module):
    """A comment directly above the task, inside it before the module key, or on that key's line."""
    start = task["__line__"]
    if start > 0 and lines[start - 1].strip().startswith("#"):
        return True
    key_line = next((i for i in range(start, len(lines)) if lines[i].lstrip().lstrip("- ").startswith(module + ":")),
                    start)
    if any(lines[i].strip().startswith("#") for i in range(start + 1, key_line)):
        return True
    return re.search(r"\s#\s", lines[key_line]) is not None


def problems(text, name="<text>"):
    lines = text.splitlines()
    out = []
    for doc in yaml.load_all(text, Loader=LineLoader):
        for task, module in shell_tasks(doc):
            where = f"{name}:{task['__line__'] + 1} ({task.get('name', 'unnamed')})"
            if not has_reason(lines, task, module):
                out.append(f"{where}: {module} without a comment saying why no module does it")
            command = command_text(task[module])
            for pattern, message in FORBIDDEN:
                if pattern.search(command):
                    out.append(f"{where}: runs {message}")
    return out


def task_files():
    files = set()
    for pattern in ("roles/*/tasks/**/*.yml", "roles/*/handlers/**/*.yml", "playbooks/**/*.yml"):
        files.update(ROOT.glob(pattern))
    return sorted(files)


def test_task_files_are_found():
    files = task_files()
    assert ROOT / "roles/common/tasks/kernel.yml" in files
    assert ROOT / "playbooks/day2/remove_node.yml" in files
    assert len(files) > 50


@pytest.mark.parametrize("path", task_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shell_task_says_why(path):
    assert problems(path.read_text(), str(path.relative_to(ROOT))) == []


# ---- the check itself can fail ---------------------------------------------------------------

SNIPPET = """\
---
- name: Uncommented command
  ansible.builtin.command: containerd config dump
  changed_when: false

# A command: no module prints containerd's merged configuration.
- name: Commented command
  ansible.builtin.command: containerd config dump

- name: Comment inside the task
  # A command: kubeadm has no module.
  ansible.builtin.command: kubeadm reset --force

- name: Comment on the module line
  ansible.builtin.shell: ctr plugins ls  # no module asks containerd

- name: A block
  block:
    - name: Uncommented in a block
      ansible.builtin.raw: uptime
  rescue:
    # A command: kubeadm has no module.
    - name: Commented in a rescue
      ansible.legacy.command: kubeadm reset --force

- name: A comment further up does not count
  ansible.builtin.debug:
    msg: hello
  # about the debug task
  when: true
- name: Directly after another task
  ansible.builtin.command:
    argv: [uptime]

- name: User module's shell parameter is no shell task
  ansible.builtin.user:
    name: someone
    shell: /bin/bash

# Forbidden, comment or not.
- name: Apply sysctls live
  ansible.builtin.command:
    argv: [sysctl, -w, net.ipv4.ip_forward=1]

# Forbidden.
- name: Hash a key
  ansible.builtin.shell:
    cmd: set -o pipefail; openssl x509 -in ca.crt -noout -pubkey | /usr/bin/openssl pkey -pubin
    executable: /bin/bash

# Forbidden.
- name: Apply a manifest
  ansible.builtin.command:
    argv: [kubectl, --kubeconfig, /etc/kubernetes/admin.conf, apply, --server-side, -f, calico.yaml]

# Allowed: these only mention the words.
- name: Not sysctl itself
  ansible.builtin.command:
    argv: [cat, /etc/sysctl.d/90-ai-platform.conf, /usr/lib/systemd/systemd-sysctl]
"""


def test_synthetic_snippet_is_judged():
    assert problems(SNIPPET, "snippet.yml") == [
        "snippet.yml:2 (Uncommented command): ansible.builtin.command without a comment saying why no module does it",
        "snippet.yml:19 (Uncommented in a block): ansible.builtin.raw without a comment saying why no module does it",
        "snippet.yml:31 (Directly after another task): ansible.builtin.command without a comment saying why "
        "no module does it",
        "snippet.yml:41 (Apply sysctls live): runs sysctl: use ansible.posix.sysctl",
        "snippet.yml:46 (Hash a key): runs openssl: use a community.crypto module",
        "snippet.yml:52 (Apply a manifest): runs kubectl apply: use kubernetes.core.k8s",
    ]


def test_playbook_tasks_are_checked():
    play = """\
- name: A play
  hosts: all
  pre_tasks:
    - name: Uncommented
      ansible.builtin.shell: echo hi
  tasks:
    # A command: nothing else prints hi.
    - name: Commented
      ansible.builtin.shell: echo hi
"""
    assert problems(play, "play.yml") == [
        "play.yml:4 (Uncommented): ansible.builtin.shell without a comment saying why no module does it",
    ]
