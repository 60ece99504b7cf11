"""ai_platform.l1.files: several files' content and attributes in one task, as ansible.builtin.template writes each."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.ai_platform.l1.plugins.modules import files


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def entry(path, content, **extra):
    return dict(path=str(path), content=content, owner="root", group="root", mode="0644", **extra)


def test_writes_new_and_different_files_then_changes_nothing(run_module, tmp_path):
    same, old, new = tmp_path / "same.conf", tmp_path / "old.conf", tmp_path / "new.conf"
    same.write_text("kept\n")
    os.chmod(same, 0o644)
    old.write_text("old\n")
    os.chmod(old, 0o644)
    wanted = [entry(same, "kept\n", tag="a"), entry(old, "new value\n", tag="b"), entry(new, "fresh\n", tag="b")]
    out = run_module(files, files=wanted)
    assert out["_rc"] == 0 and out["changed"], out
    assert out["changed_paths"] == [str(old), str(new)] and out["changed_tags"] == ["b"]
    assert old.read_text() == "new value\n" and new.read_text() == "fresh\n" and mode(new) == 0o644
    assert [d["before"] for d in out["diff"]] == ["old\n", ""]
    assert [d["after"] for d in out["diff"]] == ["new value\n", "fresh\n"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")], "temporary file left behind"
    again = run_module(files, files=wanted)
    assert again["_rc"] == 0 and not again["changed"] and again["changed_paths"] == [] and again["changed_tags"] == []


def test_sets_the_mode_where_only_the_mode_differs(run_module, tmp_path):
    path = tmp_path / "f"
    path.write_text("x\n")
    os.chmod(path, 0o600)
    out = run_module(files, files=[entry(path, "x\n", tag="t")])
    assert out["changed"] and out["changed_tags"] == ["t"] and mode(path) == 0o644
    assert out["diff"] == [{"before_header": str(path), "after_header": str(path),
                            "before": f"{path} root:root 0600\n", "after": f"{path} root:root 0644\n"}]


def test_removes_absent_entries(run_module, tmp_path):
    gone, never = tmp_path / "gone", tmp_path / "never"
    gone.write_text("x\n")
    out = run_module(files, files=[dict(path=str(gone), state="absent", tag="g"),
                                   dict(path=str(never), state="absent")])
    assert out["changed"] and out["changed_paths"] == [str(gone)] and out["changed_tags"] == ["g"]
    assert not gone.exists()
    again = run_module(files, files=[dict(path=str(gone), state="absent")])
    assert not again["changed"]


def test_check_mode_reports_and_changes_nothing(run_module, tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    old.write_text("old\n")
    out = run_module(files, check_mode=True, files=[entry(old, "new\n"), entry(new, "fresh\n"),
                                                  entry(tmp_path / "later" / "f", "x\n")])
    assert out["changed"] and out["changed_paths"] == [str(old), str(new), str(tmp_path / "later" / "f")]
    assert old.read_text() == "old\n" and not new.exists()


def test_refuses_bad_entries_before_changing_anything(run_module, tmp_path):
    first = tmp_path / "first"
    (tmp_path / "dir").mkdir()
    cases = [
        ([entry(first, "x"), entry(tmp_path / "dir", "x")], "not a regular file"),
        ([entry(first, "x"), entry(tmp_path / "missing" / "f", "x")], "does not exist"),
        ([entry(first, "x"), entry("relative/f", "x")], "not an absolute path"),
        ([entry(first, "x"), entry(first, "y")], "given twice"),
        ([entry(first, "x"), dict(path=str(tmp_path / "nomode"), content="x")],
         "content (or src) and mode are required"),
        ([entry(first, "x"), dict(path=str(tmp_path / "raw"), src="t.j2", mode="0644")],
         "src is rendered by the action plugin"),
    ]
    for wanted, problem in cases:
        out = run_module(files, files=wanted)
        assert out["_rc"] == 1 and problem in out["msg"], out
        assert not first.exists()


ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = """
- hosts: localhost
  connection: local
  gather_facts: false
  vars:
    greeting: hello
  tasks:
    - name: Write the files
      ai_platform.l1.files:
        files: "{{ wanted }}"
      register: written
    - name: What the template lookup renders, for comparison
      ansible.builtin.set_fact:
        by_lookup: "{{ lookup('ansible.builtin.template', 'greeting.j2') }}"
"""


def run_files_playbook(tmp_path, wanted, *extra):
    (tmp_path / "templates").mkdir(exist_ok=True)
    (tmp_path / "templates" / "greeting.j2").write_text(
        "{{ greeting }} {{ item | default('nobody') }} from {{ template_path | basename }}\n"
        "{% for i in range(2) %}\nline {{ i }}\n{% endfor %}\n")
    (tmp_path / "templates" / "broken.j2").write_text("{{ undefined_variable }}\n")
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_CALLBACKS_ENABLED="ansible.posix.json", ANSIBLE_LOCALHOST_WARNING="false",
               ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), str(tmp_path / "play.yml"),
                           "-e", json.dumps({"wanted": wanted}), *extra], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)
    assert proc.stdout.startswith("{"), proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    results = [task["hosts"]["localhost"] for task in report["plays"][0]["tasks"]]
    return proc.returncode, results


@pytest.mark.parametrize("check", [False, True])
def test_action_renders_src_as_the_template_lookup_does(tmp_path, check):
    plain, with_vars, gone = tmp_path / "plain.conf", tmp_path / "vars.conf", tmp_path / "gone.conf"
    gone.write_text("x\n")
    wanted = [dict(path=str(plain), src="greeting.j2", mode="0644", tag="p"),
              dict(path=str(with_vars), src="greeting.j2", mode="0644", template_vars={"item": "registry"}),
              # Not rendered for an absent entry: this template would fail.
              dict(path=str(gone), src="broken.j2", state="absent")]
    rc, (written, lookup) = run_files_playbook(tmp_path, wanted, *(["--check", "--diff"] if check else []))
    assert rc == 0, written
    assert written["changed_paths"] == [str(plain), str(with_vars), str(gone)] and written["changed_tags"] == ["p"]
    expected = lookup["ansible_facts"]["by_lookup"]
    assert expected.startswith("hello nobody from greeting.j2\nline 0\nline 1\n"), expected
    if check:
        assert not plain.exists() and gone.exists()
        assert [d["after"] for d in written["diff"]][:2] == [expected, expected.replace("nobody", "registry")]
        return
    assert plain.read_text() == expected and with_vars.read_text() == expected.replace("nobody", "registry")
    assert not gone.exists()
    rc, (again, _) = run_files_playbook(tmp_path, wanted)
    assert rc == 0 and not again["changed"], again


@pytest.mark.parametrize(("entry_args", "problem"), [
    (dict(src="greeting.j2", content="x"), "give src or content, not both"),
    (dict(src="missing.j2"), "template missing.j2 not found"),
    (dict(content="x", template_vars={"a": 1}), "template_vars without src"),
    (dict(src="broken.j2"), "undefined_variable"),
])
def test_action_refuses_bad_src_entries(tmp_path, entry_args, problem):
    rc, (written, *_) = run_files_playbook(tmp_path, [dict(path=str(tmp_path / "f"), mode="0644", **entry_args)])
    assert rc == 2 and written["failed"] and problem in written["msg"], written
    assert not (tmp_path / "f").exists()


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_a_replaced_file_gets_its_mode_whatever_the_umask(tmp_path, umask):
    """file_state.replace (files, vendor_apt_repo, nccl_config, directories): Ansible's atomic_move
    gives a file that did not exist 0666 minus the umask, so on a hardened host (umask 027) a new
    file came out 0640 and the next run "changed" it to 0644."""
    from ansible.module_utils.basic import AnsibleModule  # noqa: PLC0415
    from ansible.module_utils.testing import patch_module_args  # noqa: PLC0415
    from ansible_collections.ai_platform.l1.plugins.module_utils import file_state  # noqa: PLC0415

    with patch_module_args({}):
        module = AnsibleModule(argument_spec={})
    path = tmp_path / "new.conf"
    old = os.umask(umask)
    try:
        file_state.replace(module, str(path), b"x\n", 0o644)
    finally:
        os.umask(old)
    assert mode(path) == 0o644 and path.read_bytes() == b"x\n"
