"""The day-2 tool (day2/ai_l1_day2): argument parsing, extra vars, exit codes, the summary, and
ansible-runner runs for real (a throwaway project whose day-2 playbooks run on localhost):
concurrent runs get distinct idents and private data directories, artifacts are kept per run.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from ai_l1_day2 import cli, runner
from ai_l1_day2.runner import OPERATIONS, BadInput, RunResult, run_operation

REPO = Path(__file__).resolve().parents[2]

PLAY = """---
- name: {name}
  hosts: all
  connection: local
  gather_facts: false
  tasks:
    - name: Say hello
      ansible.builtin.debug:
        msg: "hello {{{{ inventory_hostname }}}} {{{{ day2_reason | default('') }}}}"
{extra}
"""
FAIL = """    - name: Fail when asked
      ansible.builtin.fail:
        msg: "asked to fail"
      when: fail_please | default(false) | bool
"""
SLEEP = """    - name: Sleep when asked
      ansible.builtin.command: sleep {{ sleep_s | default(0) }}
      changed_when: false
"""


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project with every day-2 playbook running on localhost, and a two-host inventory."""
    root = tmp_path / "project"
    (root / "playbooks" / "day2").mkdir(parents=True)
    for op, playbook in OPERATIONS.items():
        (root / "playbooks" / "day2" / playbook).write_text(PLAY.format(name=op, extra=FAIL + SLEEP))
    local = "{ansible_connection: local, ansible_python_interpreter: '{{ ansible_playbook_python }}'}"
    (root / "inventory.yml").write_text(f"all:\n  hosts:\n    node1: {local}\n    node2: {local}\n")
    monkeypatch.setenv(runner.PROJECT_ENV, str(root))
    monkeypatch.setenv(runner.RUNS_ENV, str(tmp_path / "runs"))
    return root


# ------------------------------------------------------------------ parsing


def test_every_operation_has_a_subcommand_and_a_playbook_in_the_repo():
    parser = cli.build_parser()
    for op, playbook in OPERATIONS.items():
        assert (REPO / "playbooks" / "day2" / playbook).is_file(), playbook
        extra = {"isolate": ["--fault", "xid-79"], "mig-reconfigure": ["--config", "all-balanced"]}.get(op, [])
        if op in cli.WHOLE_CONTROL_PLANE:
            args = parser.parse_args([op, *extra])
            assert args.operation == op and args.nodes is None
            continue
        args = parser.parse_args([op, "--node", "gpu1", *extra])
        assert args.operation == op and args.nodes == ["gpu1"]


def test_restore_etcd_takes_no_node_and_passes_its_options(capsys):
    parser = cli.build_parser()
    with pytest.raises(SystemExit) as exc:
        parser.parse_args(["restore-etcd", "--node", "cp1"])
    assert exc.value.code == cli.EXIT_BAD_INPUT and "--node" in capsys.readouterr().err
    args = parser.parse_args(["restore-etcd", "--snapshot", "etcd-20261207T013000Z-r200.db.enc", "--force"])
    assert cli.extravars_from(args) == {"day2_snapshot": "etcd-20261207T013000Z-r200.db.enc", "day2_force": True}
    assert cli.extravars_from(parser.parse_args(["restore-etcd"])) == {}


def test_renew_certificates_takes_every_control_plane_and_no_option(capsys):
    parser = cli.build_parser()
    for argv in (["renew-certificates", "--node", "cp1"], ["renew-certificates", "--force"]):
        with pytest.raises(SystemExit) as exc:
            parser.parse_args(argv)
        assert exc.value.code == cli.EXIT_BAD_INPUT, argv
    capsys.readouterr()
    assert cli.extravars_from(parser.parse_args(["renew-certificates"])) == {}


def test_playbook_names_use_underscores():
    assert OPERATIONS["firmware-update"] == "firmware_update.yml"
    assert OPERATIONS["remove-node"] == "remove_node.yml"


@pytest.mark.parametrize("argv", [
    [],                                              # no operation
    ["explode", "--node", "gpu1"],                   # unknown operation
    ["drain"],                                       # drain needs --node
    ["isolate", "--node", "gpu1"],                   # isolate needs --fault
    ["mig-reconfigure", "--node", "gpu1"],           # mig-reconfigure needs --config
    ["firmware-update", "--max-unavailable", "0"],   # must be >= 1
    ["drain", "--node", "gpu1", "--timeout", "x"],
])
def test_bad_arguments_exit_3(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv)
    assert exc.value.code == cli.EXIT_BAD_INPUT
    assert "error" in capsys.readouterr().err


def test_firmware_update_may_run_without_node():
    args = cli.build_parser().parse_args(["firmware-update", "--max-unavailable", "2"])
    assert args.nodes is None
    assert cli.extravars_from(args) == {"day2_max_unavailable": 2}


def test_options_become_day2_variables(tmp_path):
    varfile = tmp_path / "v.yml"
    varfile.write_text("day2_api_host: cp2\nfw: {nvidia: x}\n")
    args = cli.build_parser().parse_args([
        "isolate", "-n", "gpu1", "--fault", "xid-79", "--details", "GPU 0 fell off the bus",
        "--alertmanager-url", "http://am:9093", "--drain-timeout", "60",
        "-e", "a=1", "-e", f"@{varfile}", "-e", '{"b": [1, 2]}', "-e", "s=text", "-e", "empty="])
    assert cli.extravars_from(args) == {
        "a": 1, "b": [1, 2], "s": "text", "empty": "", "day2_api_host": "cp2", "fw": {"nvidia": "x"},
        "day2_fault": "xid-79", "day2_fault_details": "GPU 0 fell off the bus",
        "day2_alertmanager_url": "http://am:9093", "day2_drain_timeout": 60}


@pytest.mark.parametrize("bad", ["novalue", "1x=2", "@/does/not/exist.yml", "{not: [closed"])
def test_bad_extra_vars_are_refused(bad):
    with pytest.raises(BadInput):
        cli.parse_extra([bad])


def test_unknown_node_is_refused_before_anything_runs(project, capsys):
    assert cli.main(["drain", "--node", "nosuchhost", "-i", str(project / "inventory.yml")]) == cli.EXIT_BAD_INPUT
    assert "nosuchhost" in capsys.readouterr().err
    assert not (Path(runner.default_runs_dir()).exists() and any(Path(runner.default_runs_dir()).iterdir()))


def test_missing_inventory_is_bad_input(project):
    assert cli.main(["cordon", "--node", "node1", "-i", str(project / "nope.yml")]) == cli.EXIT_BAD_INPUT
    with pytest.raises(BadInput):
        run_operation("cordon", inventory=project / "nope.yml", limit=["node1"], extravars={})
    with pytest.raises(BadInput):
        run_operation("reboot-everything", inventory=project / "inventory.yml", limit=None, extravars={})


def test_check_hosts_expands_patterns(project):
    assert cli.check_hosts(project / "inventory.yml", ["all"]) == ["node1", "node2"]
    assert cli.check_hosts(project / "inventory.yml", ["node2", "node*"]) == ["node2", "node1"]


# ------------------------------------------------------------------ pure helpers


def test_idents_are_unique_under_concurrency(tmp_path):
    got: list[tuple[str, Path]] = []
    lock = threading.Lock()

    def grab():
        for _ in range(25):
            item = runner.new_run_dir(tmp_path, "drain")
            with lock:
                got.append(item)

    threads = [threading.Thread(target=grab) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    idents = [i for i, _ in got]
    assert len(idents) == 200 and len(set(idents)) == 200
    assert len({p for _, p in got}) == 200 and all(p.is_dir() for _, p in got)
    assert all(re.fullmatch(r"\d{8}T\d{6}-drain-[0-9a-f]{8}", i) for i in idents)


def test_per_host_stats_and_failures():
    stats = {"ok": {"a": 3, "b": 1}, "changed": {"a": 1}, "failures": {"b": 1}, "dark": {"c": 1},
             "skipped": {}, "processed": {"a": 1, "b": 1, "c": 1}}
    hosts = runner.per_host_stats(stats)
    assert hosts["a"] == {"ok": 3, "changed": 1, "failed": 0, "unreachable": 0, "skipped": 0, "rescued": 0,
                          "ignored": 0}
    assert hosts["b"]["failed"] == 1 and hosts["c"]["unreachable"] == 1
    assert runner.per_host_stats(None) == {}
    failed = {"event": "runner_on_failed", "event_data": {"host": "b", "task": "T", "res": {"msg": "boom"}}}
    assert runner.failure_of(failed) == {"host": "b", "task": "T", "unreachable": False, "msg": "boom"}
    dark = {"event": "runner_on_unreachable", "event_data": {"host": "c", "task": "T", "res": {"msg": "no route"}}}
    assert runner.failure_of(dark)["unreachable"] is True
    ignored = {"event": "runner_on_failed", "event_data": {"host": "b", "ignore_errors": True, "res": {}}}
    assert runner.failure_of(ignored) is None
    assert runner.failure_of({"event": "runner_on_ok", "event_data": {}}) is None


def test_summary_is_json_and_complete(tmp_path):
    result = RunResult(ident="i", operation="drain", status="failed", rc=2, private_data_dir=tmp_path,
                       artifacts_dir=tmp_path / "artifacts" / "i", stats={"gpu1": {"ok": 1}}, started=0.0,
                       finished=12.5, limit=["gpu1"], failures=[{"host": "gpu1", "task": "t", "msg": "m"}])
    summary = json.loads(json.dumps(result.summary()))
    assert summary["status"] == "failed" and summary["rc"] == 2 and summary["duration_s"] == 12.5
    assert summary["hosts"] == {"gpu1": {"ok": 1}} and summary["limit"] == ["gpu1"]
    assert summary["started"] == "1970-01-01T00:00:00+00:00"
    assert set(summary) >= {"ident", "operation", "artifacts_dir", "private_data_dir", "failures", "finished"}


@pytest.mark.parametrize(("status", "code"), [("successful", 0), ("failed", 2), ("timeout", 4), ("canceled", 5)])
def test_status_to_exit_code(monkeypatch, tmp_path, project, status, code, capsys):  # noqa: PLR0917
    def fake_run(operation, **kwargs):
        return RunResult(ident="x", operation=operation, status=status, rc=0 if status == "successful" else 1,
                         private_data_dir=tmp_path, artifacts_dir=tmp_path, stats={}, started=1.0, finished=2.0)

    monkeypatch.setattr(cli, "run_operation", fake_run)
    assert cli.main(["cordon", "-n", "node1", "-i", str(project / "inventory.yml"), "--json"]) == code
    assert json.loads(capsys.readouterr().out)["status"] == status


def test_internal_error_exits_1(monkeypatch, project):
    def broken(*_a, **_k):
        raise RuntimeError("ansible-runner exploded")

    monkeypatch.setattr(cli, "run_operation", broken)
    assert cli.main(["cordon", "-n", "node1", "-i", str(project / "inventory.yml"), "-q"]) == cli.EXIT_ERROR


# ------------------------------------------------------------------ real ansible-runner runs


def test_concurrent_runs_have_their_own_private_dirs_and_artifacts(project):
    results: dict[str, RunResult] = {}
    events: dict[str, list[str]] = {}

    def one(name: str, host: str):
        seen: list[str] = []
        results[name] = run_operation("cordon", inventory=project / "inventory.yml", limit=[host],
                                      extravars={"day2_reason": name}, quiet=True,
                                      event_handler=lambda e: seen.append(e.get("event", "")))
        events[name] = seen

    threads = [threading.Thread(target=one, args=(f"run{i}", f"node{i % 2 + 1}")) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3
    idents = {r.ident for r in results.values()}
    dirs = {r.private_data_dir for r in results.values()}
    assert len(idents) == 3 and len(dirs) == 3
    for name, res in results.items():
        assert res.status == "successful" and res.rc == 0, res.summary()
        assert res.artifacts_dir == res.private_data_dir / "artifacts" / res.ident
        stdout = (res.artifacts_dir / "stdout").read_text()
        assert f"hello {res.limit[0]} {name}" in stdout      # this run's own extra vars, no one else's
        assert (res.artifacts_dir / "rc").read_text().strip() == "0"
        assert list(res.stats) == res.limit                   # only the limited host ran
        assert "playbook_on_task_start" in events[name] and "playbook_on_stats" in events[name]


def test_failed_run_exit_2_with_the_failure_in_the_summary(project, capsys):
    code = cli.main(["drain", "-n", "node1", "-i", str(project / "inventory.yml"), "-e", "fail_please=true", "--json"])
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert code == cli.EXIT_FAILED and summary["status"] == "failed"
    assert summary["hosts"]["node1"]["failed"] == 1
    assert summary["failures"][0]["task"] == "Fail when asked" and "asked to fail" in summary["failures"][0]["msg"]
    assert "TASK  Fail when asked" in captured.err and "node1        FAILED: asked to fail" in captured.err
    assert Path(summary["artifacts_dir"], "job_events").is_dir()


def test_timeout_exit_4(project, capsys):
    code = cli.main(["drain", "-n", "node1", "-i", str(project / "inventory.yml"), "-e", "sleep_s=60",
                     "--timeout", "8", "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert code == cli.EXIT_TIMEOUT and summary["status"] == "timeout", summary
    assert summary["duration_s"] < 60


LAB = REPO / "inventories" / "lab" / "hosts.yml"


def test_patterns_that_take_capacity_are_bounded_and_spare_control_planes(capsys):
    """`--node all` or a pattern must not drain the cluster (issue 13, item 2): more hosts than
    --max-nodes (default 1) and control planes without --allow-control-plane are refused (exit 3)
    before anything runs."""
    with pytest.raises(BadInput, match=r"selects 7 hosts .* more than --max-nodes 1"):
        cli.check_hosts(LAB, ["all"], max_nodes=1, allow_control_plane=False)
    with pytest.raises(BadInput, match="control-plane hosts cp1"):
        cli.check_hosts(LAB, ["cp1", "gpu1"], max_nodes=5, allow_control_plane=False)
    assert cli.check_hosts(LAB, ["gpu*"], max_nodes=2, allow_control_plane=False) == ["gpu1", "gpu2"]
    assert cli.check_hosts(LAB, ["cp1"], max_nodes=1, allow_control_plane=True) == ["cp1"]
    for argv in (["drain", "--node", "all"], ["cordon", "--node", "~.*"], ["isolate", "--node", "cp2", "--fault", "x"],
                 ["drain", "--node", "gpu*"]):
        assert cli.main([*argv, "-i", str(LAB)]) == cli.EXIT_BAD_INPUT, argv
        assert "ai-l1-day2:" in capsys.readouterr().err
    # uncordon gives capacity back: not bounded
    args = cli.build_parser().parse_args(["uncordon", "--node", "all"])
    assert not hasattr(args, "max_nodes")


def _limits(monkeypatch, project) -> list[dict]:
    """cli.run_operation replaced: records the limit and extra vars each run would get."""
    seen: list[dict] = []

    def fake_run(operation, **kwargs):
        seen.append(kwargs)
        return RunResult(ident="x", operation=operation, status="successful", rc=0, private_data_dir=project,
                         artifacts_dir=project, stats={}, started=1.0, finished=2.0)

    monkeypatch.setattr(cli, "run_operation", fake_run)
    return seen


@pytest.mark.parametrize(("node", "bad"), [
    ("gpu1,@{file}", "@{file}"),              # hosts read from a file by ansible-playbook
    ("gpu1:@{file}", "@{file}"),
    ("gpu1, @{file}", "@{file}"),
    ("@{file}", "@{file}"),
    ("&gpu_nvidia", "&gpu_nvidia"),           # intersection
    ("gpu1,&gpu_nvidia", "&gpu_nvidia"),
    ("!cp1", "!cp1"),                         # exclusion
    ("gpu1,!gpu2", "!gpu2"),
    ("~gpu.*", "~gpu.*"),                     # regular expression
    ("gpu1,~cp.*", "~cp.*"),
    ("gpu[0:3]", "gpu[0:3]"),                 # ranges and subscripts
    ("gpu_nvidia[0]", "gpu_nvidia[0]"),
    ("gpu1:k8s_worker[0:1]", "k8s_worker[0:1]"),
    ("gpu[12]", "gpu[12]"),                   # fnmatch class and '?'
    ("gpu?", "gpu?"),
    ("fe80::1", "fe80::1"),                   # an IPv6 address (one part to ansible-playbook)
])
@pytest.mark.parametrize("operation", ["cordon", "uncordon"])
def test_node_pattern_syntax_the_check_does_not_resolve_is_refused(  # noqa: PLR0917
        tmp_path, monkeypatch, capsys, node, bad, operation):
    """`--node 'gpu1,@FILE'` passed the check as gpu1 while ansible-playbook read its hosts from the
    file (a default --max-nodes 1 cordon reached a control plane and three workers): every part
    that is not a plain name or '*' glob is refused, naming it, before anything runs."""
    hosts = tmp_path / "hosts"
    hosts.write_text("cp1\ngpu1\ngpu2\nnpu1\n")
    node, bad = node.format(file=hosts), bad.format(file=hosts)
    seen = _limits(monkeypatch, tmp_path)
    extra = ["--max-nodes", "10", "--allow-control-plane"] if operation == "cordon" else []
    assert cli.main([operation, "--node", node, *extra, "-i", str(LAB), "-q"]) == cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert f"{bad!r} is not a host or group name" in err, err
    assert seen == []


def test_the_run_gets_the_checked_host_names_as_its_limit(monkeypatch, project, capsys):
    """The limit is the list of hosts the check resolved, never the patterns: what was checked runs."""
    seen = _limits(monkeypatch, project)
    assert cli.main(["cordon", "--node", "gpu1", "-i", str(LAB), "-q"]) == cli.EXIT_OK
    assert cli.main(["cordon", "--node", "gpu1,gpu2", "-i", str(LAB), "-q"]) == cli.EXIT_BAD_INPUT
    assert "selects 2 hosts (gpu1, gpu2), more than --max-nodes 1" in capsys.readouterr().err
    assert cli.main(["cordon", "--node", "gpu1:gpu2", "-i", str(LAB), "-q"]) == cli.EXIT_BAD_INPUT
    assert cli.main(["cordon", "-n", "gpu1", "-n", "gpu2", "-i", str(LAB), "-q"]) == cli.EXIT_BAD_INPUT
    assert cli.main(["cordon", "--node", "gpu1,gpu2", "--max-nodes", "2", "-i", str(LAB), "-q"]) == cli.EXIT_OK
    assert cli.main(["drain", "--node", "gpu1:gpu2", "--max-nodes", "2", "-i", str(LAB), "-q"]) == cli.EXIT_OK
    assert cli.main(["drain", "--node", "gpu*", "--max-nodes", "2", "-i", str(LAB), "-q"]) == cli.EXIT_OK
    assert cli.main(["uncordon", "--node", "gpu_nvidia,npu1", "-i", str(LAB), "-q"]) == cli.EXIT_OK
    assert cli.main(["add-node", "--node", "gpu*", "-i", str(LAB), "-q"]) == cli.EXIT_OK
    assert cli.main(["cordon", "--node", "gpu1,nosuch", "--max-nodes", "2", "-i", str(LAB), "-q"]) == \
        cli.EXIT_BAD_INPUT
    assert "no host of" in capsys.readouterr().err
    assert [kw["limit"] for kw in seen] == [["gpu1"], ["gpu1", "gpu2"], ["gpu1", "gpu2"], ["gpu1", "gpu2"],
                                           ["gpu1", "gpu2", "npu1"], None]
    assert seen[-1]["extravars"]["day2_new_nodes"] == ["gpu1", "gpu2"]


def test_a_selected_host_whose_name_is_pattern_syntax_is_refused(tmp_path):
    """The run's limit carries the resolved names verbatim: a glob selecting a host named like a
    pattern (here '@gpu9', a limit file to ansible-playbook) is refused."""
    inventory = tmp_path / "inventory.yml"
    inventory.write_text('all:\n  hosts:\n    "@gpu9":\n    gpu1:\n')
    with pytest.raises(BadInput, match="names cannot be a limit: @gpu9"):
        cli.check_hosts(inventory, ["*"], max_nodes=5)
    assert cli.check_hosts(inventory, ["gpu1"]) == ["gpu1"]


def test_unusable_runs_dir_is_bad_input(project, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for runs in (blocker / "runs", Path("/proc/ai-l1-no-such-dir")):
        code = cli.main(["cordon", "-n", "node1", "-i", str(project / "inventory.yml"), "--runs-dir", str(runs), "-q"])
        assert code == cli.EXIT_BAD_INPUT, runs
        assert "runs directory" in capsys.readouterr().err


# ------------------------------------------------------------------ no default inventory (issue 16, item 5)


@pytest.mark.parametrize("argv", [
    ["cordon", "-n", "node1"],
    ["firmware-update"],                 # no --node: nothing would check the inventory before the run
    ["isolate", "-n", "node1", "--fault", "xid-79", "--check"],
])
def test_no_inventory_is_refused_before_anything_runs(project, monkeypatch, capsys, argv):
    """Without -i and $AI_L1_INVENTORY nothing runs: there is no default (it used to be the lab's)."""
    monkeypatch.delenv(runner.INVENTORY_ENV, raising=False)
    monkeypatch.chdir(project)

    def must_not_run(*_a, **_k):
        raise AssertionError("run_operation was called without an inventory")

    monkeypatch.setattr(cli, "run_operation", must_not_run)
    assert cli.main(argv) == cli.EXIT_BAD_INPUT
    err = capsys.readouterr().err
    assert "no inventory" in err and "-i INVENTORY" in err and runner.INVENTORY_ENV in err, err
    assert not (Path(runner.default_runs_dir()).exists() and any(Path(runner.default_runs_dir()).iterdir()))


def test_blank_inventory_variable_is_no_inventory(monkeypatch, capsys):
    monkeypatch.setenv(runner.INVENTORY_ENV, "  ")
    assert cli.main(["cordon", "-n", "node1", "-q"]) == cli.EXIT_BAD_INPUT
    assert "no inventory" in capsys.readouterr().err


def test_inventory_from_the_environment(project, monkeypatch, capsys):
    """$AI_L1_INVENTORY stands for -i; -i wins over it."""
    seen = []

    def fake_run(operation, **kwargs):
        seen.append(kwargs["inventory"])
        return RunResult(ident="x", operation=operation, status="successful", rc=0, private_data_dir=project,
                         artifacts_dir=project, stats={}, started=1.0, finished=2.0)

    monkeypatch.setattr(cli, "run_operation", fake_run)
    monkeypatch.setenv(runner.INVENTORY_ENV, str(project / "inventory.yml"))
    assert cli.main(["cordon", "-n", "node1", "-q"]) == cli.EXIT_OK
    monkeypatch.setenv(runner.INVENTORY_ENV, str(project / "nope.yml"))
    assert cli.main(["cordon", "-n", "node1", "-q"]) == cli.EXIT_BAD_INPUT  # named, but missing
    assert "nope.yml does not exist" in capsys.readouterr().err
    assert cli.main(["cordon", "-n", "node1", "-q", "-i", str(project / "inventory.yml")]) == cli.EXIT_OK
    assert seen == [str(project / "inventory.yml")] * 2


# ------------------------------------------------------------------ --version, --check, JSON, replay (item 6)


def test_version(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == cli.EXIT_OK
    out = capsys.readouterr().out
    from ai_l1_day2 import __version__  # noqa: PLC0415

    expected = rf"ai-l1-day2 {re.escape(__version__)} \(ansible-core \d+\.\d+\S*, ansible-runner \d+\.\d+\S*\)\n"
    assert re.fullmatch(expected, out), out


def test_version_of_the_console_script():
    """The installed entry point answers too (no operation needed, exit 0)."""
    script = Path(sys.executable).parent / "ai-l1-day2"
    # make bootstrap installs day2 (editable) into .venv: missing means a broken setup, not a skip.
    assert script.exists(), f"{script} is missing: run `make bootstrap` (pip install -e day2)"
    proc = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0 and proc.stdout.startswith("ai-l1-day2 "), proc


def test_json_summary_uses_real_booleans(project, capsys):
    """--json: `check` and each failure's `unreachable` are JSON booleans, not strings."""
    code = cli.main(["drain", "-n", "node1", "-i", str(project / "inventory.yml"), "-e", "fail_please=true", "--json",
                     "-q"])
    out = capsys.readouterr().out
    assert code == cli.EXIT_FAILED
    summary = json.loads(out)
    assert summary["check"] is False
    assert summary["failures"] and all(f["unreachable"] is False for f in summary["failures"]), summary["failures"]
    assert '"unreachable": false' in out and '"check": false' in out


def test_check_mode_changes_nothing(project, tmp_path, capsys):
    """--check runs ansible-playbook --check: a task that would write a file reports changed, the
    file never appears; the summary and the replay record say so."""
    target = tmp_path / "written-by-the-play"
    (project / "playbooks" / "day2" / "cordon.yml").write_text(PLAY.format(name="cordon", extra=f"""\
    - name: Write a file
      ansible.builtin.copy:
        dest: "{target}"
        content: "x"
        mode: "0644"
"""))
    code = cli.main(["cordon", "-n", "node1", "-i", str(project / "inventory.yml"), "--check", "--json", "-q"])
    summary = json.loads(capsys.readouterr().out)
    assert code == cli.EXIT_OK, summary
    assert summary["check"] is True and summary["hosts"]["node1"]["changed"] == 1, summary
    assert not target.exists(), "check mode wrote the file"
    private = Path(summary["private_data_dir"])
    assert "--check" in (private / "env" / "cmdline").read_text().split()
    assert json.loads((private / runner.REPLAY_FILE).read_text())["check"] is True
    # the same without --check writes it
    assert cli.main(["cordon", "-n", "node1", "-i", str(project / "inventory.yml"), "-q"]) == cli.EXIT_OK
    assert target.read_text() == "x"


def test_the_private_data_directory_holds_what_a_replay_needs(project):
    """env/extravars, env/cmdline (the inventory, the limit), env/envvars, project/ and replay.json
    hold the run's own values; the run read them from there."""
    res = run_operation("drain", inventory=project / "inventory.yml", limit=["node2"],
                        extravars={"day2_reason": "{{ not rendered }}", "day2_drain_timeout": 60}, quiet=True)
    assert res.ok, res.summary()
    private = res.private_data_dir
    assert (private / "project").is_symlink() and (private / "project").resolve() == project.resolve()
    cmdline = (private / "env" / "cmdline").read_text().split()
    assert cmdline == ["-i", str((project / "inventory.yml").resolve()), "--limit", "node2"]
    extravars = (private / "env" / "extravars").read_text()
    assert "!unsafe '{{ not rendered }}'" in extravars.replace('"', "'") and "day2_drain_timeout: 60" in extravars
    envvars = json.loads(json.dumps(__import__("yaml").safe_load((private / "env" / "envvars").read_text())))
    assert envvars["ANSIBLE_NOCOLOR"] == "1"
    record = json.loads((private / runner.REPLAY_FILE).read_text())
    assert record == {"operation": "drain", "project": str(project.resolve()), "playbook": "playbooks/day2/drain.yml",
                      "inventory": str((project / "inventory.yml").resolve()), "limit": ["node2"], "check": False,
                      "replay": f"ansible-runner run {private} -p playbooks/day2/drain.yml"}
    # the run itself used exactly these (ansible-runner keeps the command it ran)
    command = json.loads((res.artifacts_dir / "command").read_text())["command"]
    played = command[command.index("--") + 1:]
    assert played[1:5] == cmdline and f"@{private / 'env' / 'extravars'}" in played
    assert played[-1] == str(project.resolve() / "playbooks" / "day2" / "drain.yml")
    assert list(res.stats) == ["node2"]


def test_a_run_replays_with_ansible_runner(project, monkeypatch):
    """`ansible-runner run <private_data_dir> -p <playbook>` (replay.json's command) runs the same
    playbook on the same host with the same extra variables, from any directory."""
    runner_cli = Path(sys.executable).parent / "ansible-runner"
    # ansible-runner is pinned in requirements.txt: missing means a broken setup, not a skip.
    assert runner_cli.exists(), f"{runner_cli} is missing: run `make bootstrap` (requirements.txt pins ansible-runner)"
    res = run_operation("cordon", inventory=project / "inventory.yml", limit=["node2"],
                        extravars={"day2_reason": "replayed {{ as data }}"}, quiet=True)
    assert res.ok, res.summary()
    assert "hello node2 replayed {{ as data }}" in (res.artifacts_dir / "stdout").read_text()
    record = json.loads((res.private_data_dir / runner.REPLAY_FILE).read_text())
    argv = record["replay"].split()
    assert argv[:2] == ["ansible-runner", "run"]
    monkeypatch.delenv(runner.PROJECT_ENV)
    proc = subprocess.run([str(runner_cli), *argv[1:], "--ident", "replay", "-j"], cwd="/", capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    replay = res.private_data_dir / "artifacts" / "replay"
    stdout = (replay / "stdout").read_text()
    assert "hello node2 replayed {{ as data }}" in stdout, stdout
    assert "node1" not in stdout  # the original run's limit
    assert (replay / "status").read_text().strip() == "successful"


# ------------------------------------------------------------------ one run per node at a time


def test_a_second_run_on_a_node_in_use_runs_nothing(monkeypatch, project, tmp_path, capsys):
    """Two ai-l1-day2 runs on one controller never act on one node at once: the second is refused
    (exit 6) while the first holds the node's lock, and runs once the first has ended."""
    started, release = threading.Event(), threading.Event()
    calls = []

    def slow_run(operation, **kwargs):
        calls.append(kwargs["limit"])
        started.set()
        release.wait(10)
        return RunResult(ident="x", operation=operation, status="successful", rc=0, private_data_dir=tmp_path,
                         artifacts_dir=tmp_path, stats={}, started=1.0, finished=2.0)

    monkeypatch.setattr(cli, "run_operation", slow_run)
    argv = ["cordon", "-n", "node1", "-i", str(project / "inventory.yml"), "-q"]
    first = threading.Thread(target=cli.main, args=(argv,))
    first.start()
    try:
        assert started.wait(10)
        assert cli.main(argv) == cli.EXIT_BUSY
        assert "node node1 is being acted on by another run" in capsys.readouterr().err
        assert cli.main(["cordon", "-n", "node2", "-i", str(project / "inventory.yml"), "-q"]) == cli.EXIT_OK
    finally:
        release.set()
        first.join(10)
    assert cli.main(argv) == cli.EXIT_OK
    assert calls == [["node1"], ["node2"], ["node1"]]


def test_the_runs_set_stats_data_is_returned_and_the_report_prints_its_drift(project, monkeypatch, capsys):
    """report.yml returns its report with set_stats: the run's data, in --json and in the summary lines."""
    compliance = {"summary": {"nodes": 2, "compliant": 1, "drifted": 1},
                  "drift": [{"node": "node2", "component": "kubelet", "observed": "1.33.7", "expected": ["1.34.4"],
                             "status": "drift"}]}
    stats = ("    - name: Return the report\n      ansible.builtin.set_stats:\n        data:\n"
             f"          compliance: {json.dumps(compliance)}\n        per_host: false\n")
    (project / "playbooks" / "day2" / "report.yml").write_text(PLAY.format(name="report", extra=stats))
    code = cli.main(["report", "-i", str(project / "inventory.yml"), "--json", "-q"])
    out, err = capsys.readouterr()
    assert code == cli.EXIT_OK, err
    assert json.loads(out)["data"] == {"compliance": compliance}
    res = run_operation("report", inventory=project / "inventory.yml", limit=None, extravars={}, quiet=True)
    cli.print_summary(res, sys.stderr)
    lines = capsys.readouterr().err.splitlines()
    assert "  1 of 2 nodes match the baseline" in lines
    assert "  DRIFT node2 kubelet: 1.33.7, baseline 1.34.4" in lines


def test_report_takes_no_node_lock(project, tmp_path):
    """A read-only report runs while another run holds a node's lock."""
    with cli.node_lock(tmp_path / "runs", "node1", "drain"):
        assert cli.main(["report", "-i", str(project / "inventory.yml"), "--node", "node1", "-q",
                         "--runs-dir", str(tmp_path / "runs")]) == cli.EXIT_OK
        assert cli.main(["cordon", "-i", str(project / "inventory.yml"), "--node", "node1", "-q",
                         "--runs-dir", str(tmp_path / "runs")]) == cli.EXIT_BUSY


def test_the_real_report_playbook_reads_this_machine_and_changes_nothing(tmp_path, monkeypatch, capsys):
    """playbooks/day2/report.yml itself, on this machine as a GPU worker (connection local): the
    kernel matches the baseline, the NVIDIA driver (no NVML here) is missing; day2_report_file gets
    the JSON, day2_report_textfile_dir the node's metrics (the only change on the node) and
    day2_report_strict fails the run on the drift."""
    import platform  # noqa: PLC0415

    monkeypatch.setenv(runner.PROJECT_ENV, str(REPO))
    monkeypatch.setenv(runner.RUNS_ENV, str(tmp_path / "runs"))
    local = "{ansible_connection: local, ansible_python_interpreter: '{{ ansible_playbook_python }}'}"
    baseline = {"all": {"kernel": platform.release()}, "gpu_nvidia": {"nvidia_driver": "550.54.15"}}
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(f"all:\n  vars:\n    fleet_baseline: {json.dumps(baseline)}\n  children:\n"
                         f"    k8s_worker:\n      children:\n        gpu_nvidia:\n          hosts:\n"
                         f"            gpu1: {local}\n")
    report_file = tmp_path / "report.json"
    # One run: strict fails it on the drift, after the report is returned and written.
    textfile_dir = tmp_path / "textfile"
    code = cli.main(["report", "-i", str(inventory), "--json", "-e", f"day2_report_file={report_file}",
                     "-e", "day2_report_strict=true", "-e", f"day2_report_textfile_dir={textfile_dir}"])
    out, err = capsys.readouterr()
    assert code == cli.EXIT_FAILED, err
    assert "1 of 1 nodes differ from the baseline" in err
    summary = json.loads(out)
    compliance = summary["data"]["compliance"]
    assert json.loads(report_file.read_text()) == compliance
    gpu1 = compliance["nodes"]["gpu1"]["components"]
    assert gpu1["kernel"] == {"observed": platform.release(), "expected": [platform.release()], "status": "ok"}
    assert gpu1["nvidia_driver"]["status"] == "missing"
    assert compliance["summary"] == {"nodes": 1, "compliant": 0, "drifted": 1}
    # The metrics run writes the node's textfile, and nothing else on it.
    metrics = (textfile_dir / "ai_l1_fleet_compliance.prom").read_text()
    assert ('ai_l1_fleet_component_drift{component="nvidia_driver",observed="not found",expected="550.54.15"} 1'
            in metrics.splitlines())
    # The textfile directory and the metrics file; the report file, written on the controller, counts on gpu1.
    assert summary["hosts"]["gpu1"]["changed"] == 3
