"""tests/stages.py, the order of `make test`: a stage starts only after the stages it waits for
have passed; after a failure nothing new starts and what runs is waited for."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location("stages", Path(__file__).resolve().parents[1] / "stages.py")
stages = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(stages)


class FakeRuns:
    """Stages that end after `polls[stage]` polls with `codes[stage]` (0 unless given)."""

    def __init__(self, polls: dict[str, int], codes: dict[str, int] | None = None):
        self.left = dict(polls)
        self.codes = codes or {}
        self.started: list[str] = []
        self.ended: list[str] = []
        self.running_at_start: dict[str, set[str]] = {}

    def start(self, stage: str) -> None:
        self.running_at_start[stage] = {s for s in self.started if s not in self.ended}
        self.started.append(stage)

    def poll(self, stage: str) -> int | None:
        self.left[stage] -= 1
        if self.left[stage] > 0:
            return None
        self.ended.append(stage)
        return self.codes.get(stage, 0)


def run(plan, polls, codes=None):
    fake = FakeRuns(polls, codes)
    return stages.schedule(plan, fake.start, fake.poll, interval=0), fake


def test_the_project_plan_starts_every_gate_beside_the_integration_tests_the_others_niced():
    polls = {"bootstrap": 1, "lab-prerequisites": 1, "lint": 2, "sanity": 2, "unit": 5, "ee": 1,
             "molecule-scenarios": 20, "integration-tests": 30}
    codes, fake = run(stages.STAGES, polls)
    assert codes == dict.fromkeys(stages.STAGES, 0)
    assert fake.started[:2] == ["bootstrap", "lab-prerequisites"]
    # Everything else starts together once the lab's prerequisites are built.
    assert set(fake.started[2:]) == set(stages.STAGES) - {"bootstrap", "lab-prerequisites"}
    assert fake.running_at_start["integration-tests"] == set()
    # Only the integration tests, the critical path, keep the normal CPU priority.
    assert set(stages.NICE) == set(stages.STAGES) - {"bootstrap", "lab-prerequisites", "integration-tests"}


def test_a_stage_waits_for_every_stage_it_needs():
    plan = {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"]}
    codes, fake = run(plan, {"a": 1, "b": 3, "c": 1, "d": 1})
    assert codes == {"a": 0, "b": 0, "c": 0, "d": 0}
    assert fake.running_at_start["b"] == set() and fake.running_at_start["c"] == {"b"}
    assert fake.ended.index("b") < fake.started.index("d") and fake.ended.index("c") < fake.started.index("d")


def test_after_a_failure_nothing_starts_and_the_running_stages_finish():
    plan = {"a": [], "fails": ["a"], "slow": ["a"], "after_fail": ["fails"], "after_slow": ["slow"]}
    codes, fake = run(plan, {"a": 1, "fails": 1, "slow": 4, "after_fail": 1, "after_slow": 1}, {"fails": 2})
    assert codes == {"a": 0, "fails": 2, "slow": 0}
    assert "after_fail" not in fake.started and "after_slow" not in fake.started


@pytest.mark.parametrize("argv", [["unit"], ["lint", "unit"]])
def test_named_stages_run_without_what_they_wait_for(monkeypatch, tmp_path, argv):
    started = []
    real_popen = stages.subprocess.Popen

    class Proc:
        """Records the stage; a real `true` stands in for make (the run waits for it by its pid)."""

        def __init__(self, cmd, **_):
            started.append(cmd[-1])
            # Kept referenced: a dropped Popen is reaped by the next Popen, before the run's wait4.
            self.true = real_popen(["true"])
            self.pid, self.returncode = self.true.pid, None

    monkeypatch.setattr(stages, "LOGS", tmp_path)
    monkeypatch.setattr(stages, "ROOT", tmp_path.parent)
    monkeypatch.setattr(stages.subprocess, "Popen", Proc)
    monkeypatch.setattr(stages.time, "sleep", lambda _: None)
    assert stages.main(argv) == 0
    assert sorted(started) == sorted(argv)


def test_an_unknown_stage_is_refused():
    assert stages.main(["no-such-stage"]) == 2


def test_cpu_use_is_the_busy_share_of_the_jiffies_between_two_samples():
    assert stages.busy_percent((100.0, 400.0), (250.0, 600.0)) == " 75 %"
    assert stages.busy_percent((1.0, 1.0), (1.0, 1.0)) == "  ?"
    busy, total = stages.cpu_times()
    assert 0 <= busy <= total


def test_a_failed_stage_is_named_by_its_failing_lines_at_the_end():
    log = "\n".join(["collected 3 items", "..F", "=== short test summary info ===",
                     "FAILED tests/unit/test_x.py::test_y - AssertionError: 1 != 2", "1 failed, 2 passed in 3.0s",
                     "make[1]: *** [Makefile:86: unit] Error 1"])
    assert stages.failure_lines(log) == ["FAILED tests/unit/test_x.py::test_y - AssertionError: 1 != 2",
                                         "make[1]: *** [Makefile:86: unit] Error 1"]
    ansible = "TASK [x]\nfatal: [gpu1]: FAILED! => {\"msg\": \"no\"}\nPLAY RECAP\ngpu1 : ok=3 changed=0 failed=1\n"
    assert stages.failure_lines(ansible) == ['fatal: [gpu1]: FAILED! => {"msg": "no"}',
                                             "gpu1 : ok=3 changed=0 failed=1"]
    # Nothing recognisable: the log's last lines.
    assert stages.failure_lines("\n".join(str(i) for i in range(30)), most=3) == ["27", "28", "29"]


def test_container_cpu_reads_the_lab_and_podman_groups_only(tmp_path):
    for group, ns in (("ai-l1-lab-lab", "2500000000"), ("libpod_parent", "1000000000"), ("user.slice", "9")):
        (tmp_path / group).mkdir()
        (tmp_path / group / "cpuacct.usage").write_text(ns + "\n")
    assert stages.container_cpu(tmp_path) == {"ai-l1-lab-lab": 2.5, "libpod_parent": 1.0}
    assert stages.container_cpu(tmp_path / "absent") == {}


def test_a_stage_reports_the_cpu_time_of_its_process_tree(monkeypatch, tmp_path, capsys):
    """A stage whose child burns CPU reports that CPU time, read from wait4's rusage."""
    monkeypatch.setattr(stages, "LOGS", tmp_path)
    monkeypatch.setattr(stages, "ROOT", tmp_path)
    monkeypatch.setattr(stages, "STAGES", {"burn": []})
    (tmp_path / "burn.py").write_text("import time\nwhile time.process_time() < 1.5:\n    pass\n")
    (tmp_path / "Makefile").write_text("burn:\n\t@python3 burn.py\n")
    assert stages.main([]) == 0
    [row] = [line for line in capsys.readouterr().out.splitlines() if line.strip().startswith("burn ")]
    cpu_time = row.split("CPU time")[0].split("%")[-1].strip()
    minutes, _, secs, _ = cpu_time.split()
    assert int(minutes) * 60 + float(secs) >= 1.4, row
