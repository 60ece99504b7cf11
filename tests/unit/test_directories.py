"""ai_platform.l1.directories: several directories in one task, as ansible.builtin.file would make each."""

from __future__ import annotations

import os
import stat

from ansible_collections.ai_platform.l1.plugins.modules import directories


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_creates_missing_directories_and_parents_then_changes_nothing(run_module, tmp_path):
    a, b = tmp_path / "etc/x/conf.d", tmp_path / "opt/cni/bin"
    out = run_module(directories, paths=[str(a), str(b), str(a)], mode="0750", owner="root", group="root")
    assert out["_rc"] == 0 and out["changed"], out
    assert out["created"] == [str(tmp_path / "etc"), str(tmp_path / "etc/x"), str(a),
                              str(tmp_path / "opt"), str(tmp_path / "opt/cni"), str(b)]
    assert all(mode(p) == 0o750 for p in out["created"])
    again = run_module(directories, paths=[str(a), str(b)], mode="0750", owner="root", group="root")
    assert again["_rc"] == 0 and not again["changed"] and again["created"] == [] and again["changed_paths"] == []


def test_sets_the_mode_where_it_differs_only(run_module, tmp_path):
    good, wrong = tmp_path / "good", tmp_path / "wrong"
    good.mkdir(mode=0o755)
    wrong.mkdir()
    os.chmod(wrong, 0o700)
    os.chmod(good, 0o755)
    out = run_module(directories, paths=[str(good), str(wrong)], mode="u=rwx,g=rx,o=rx")
    assert out["changed"] and out["changed_paths"] == [str(wrong)] and out["created"] == []
    assert mode(wrong) == 0o755
    assert out["diff"]["before"] == f"{good} root:root 0755\n{wrong} root:root 0700\n"
    assert out["diff"]["after"] == f"{good} root:root 0755\n{wrong} root:root 0755\n"


def test_check_mode_reports_and_changes_nothing(run_module, tmp_path):
    new, wrong = tmp_path / "new/sub", tmp_path / "wrong"
    wrong.mkdir()
    os.chmod(wrong, 0o700)
    out = run_module(directories, check_mode=True, paths=[str(new), str(wrong)], mode="0755")
    assert out["changed"] and out["created"] == [str(tmp_path / "new"), str(new)]
    assert out["changed_paths"] == [str(wrong)]
    assert not (tmp_path / "new").exists() and mode(wrong) == 0o700
    assert f"{new} absent\n" in out["diff"]["before"] and f"{new} directory (mode=0755)\n" in out["diff"]["after"]


def test_refuses_a_file_in_the_way_or_a_relative_path_before_changing_anything(run_module, tmp_path):
    (tmp_path / "file").write_text("x")
    out = run_module(directories, paths=[str(tmp_path / "first"), str(tmp_path / "file")], mode="0755")
    assert out["_rc"] == 1 and "not a directory" in out["msg"] and str(tmp_path / "file") in out["msg"]
    assert not (tmp_path / "first").exists()
    out = run_module(directories, paths=[str(tmp_path / "first"), "relative/dir"])
    assert out["_rc"] == 1 and "must be absolute" in out["msg"] and not (tmp_path / "first").exists()


def test_a_symlink_to_a_directory_is_a_directory(run_module, tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    out = run_module(directories, paths=[str(tmp_path / "link")])
    assert out["_rc"] == 0 and not out["changed"], out
