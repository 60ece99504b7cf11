"""Untrusted text never becomes a template (issue 13, item 1).

Alert labels and annotations and operators' free text reach the day-2 playbooks as extra
variables, and ansible-core renders a trusted string holding `{{ }}`. Each entry point is run
for real here, through ansible-runner and ansible-playbook, with a template expression in every
free-text field: the playbook (a stand-in for isolate.yml that records what it was given) must
see the text verbatim, and the expression's command must never run. The same is proven against
the real isolate playbook and a Node annotation in tests/integration (test_day2, test_remediation).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from ai_l1_day2 import cli, runner
from ai_l1_day2.remediation.executor import SubprocessExecutor
from ai_l1_day2.remediation.service import Service
from ai_l1_day2.remediation.store import Store
from ai_l1_day2.runner import OPERATIONS, BadInput, run_operation
from remediation_fakes import FakeNodes, alert, make_config, payload

RECORD = """---
- name: Record what the run was given
  hosts: all
  connection: local
  gather_facts: false
  tasks:
    - name: Write the free-text variables, as the playbook sees them
      ansible.builtin.copy:
        dest: "{{ record_dir }}/{{ inventory_hostname }}.json"
        mode: "0600"
        content: >-
          {{ {'fault': day2_fault | default(''), 'details': day2_fault_details | default(''),
              'reason': day2_reason | default(''), 'nested': day2_nested | default({}),
              'text': ('fault isolation: ' ~ day2_fault | default('') ~ ': ' ~ day2_fault_details | default(''))}
             | to_json }}
"""


def attacks(marker: Path) -> list[str]:
    """Template expressions that, if rendered, create `marker` (or show they were rendered)."""
    return [
        f"{{{{ lookup('ansible.builtin.pipe', 'touch {marker}') }}}}",
        f"{{% set x = lookup('pipe', 'touch {marker}') %}}rendered",
        f"GPU-{{{{ query('pipe', 'touch {marker}') }}}} {{# comment #}}",
    ]


@pytest.fixture
def project(tmp_path, monkeypatch):
    root = tmp_path / "project"
    (root / "playbooks" / "day2").mkdir(parents=True)
    for playbook in OPERATIONS.values():
        (root / "playbooks" / "day2" / playbook).write_text(RECORD)
    records = tmp_path / "records"
    records.mkdir()
    host = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
            "record_dir": str(records)}
    # The workers in k8s_worker, as the real isolate playbook requires (the receiver refuses others).
    (root / "inventory.yml").write_text(yaml.safe_dump(
        {"all": {"children": {"k8s_worker": {"hosts": {"gpu1": host, "gpu2": host}}}}}))
    monkeypatch.setenv(runner.PROJECT_ENV, str(root))
    monkeypatch.setenv(runner.RUNS_ENV, str(tmp_path / "runs"))
    return root


def record(project: Path, host: str) -> dict:
    return json.loads((project.parent / "records" / f"{host}.json").read_text())


def test_extravars_file_tags_every_string_unsafe(tmp_path):
    (tmp_path / "run").mkdir()
    path = runner.write_extravars(tmp_path / "run", {"a": "{{ x }}", "n": 3, "b": True,
                                                     "nested": {"k": ["{{ y }}", 1]}})
    text = path.read_text()
    assert path.stat().st_mode & 0o777 == 0o600
    assert text.count("!unsafe") == 2, text  # the two strings, not the number, bool or keys
    with pytest.raises(BadInput, match="identifiers"):
        runner.write_extravars(tmp_path / "run2", {"bad name": "x"})


def test_run_operation_passes_text_verbatim(project, tmp_path):
    marker = tmp_path / "pwned"
    for text in attacks(marker):
        res = run_operation("isolate", inventory=project / "inventory.yml", limit=["gpu1"], quiet=True,
                            extravars={"day2_fault": "xid-79", "day2_fault_details": text, "day2_reason": text,
                                       "day2_nested": {"list": [text]}})
        assert res.ok, res.summary()
        seen = record(project, "gpu1")
        assert seen["details"] == text and seen["reason"] == text and seen["nested"] == {"list": [text]}
        assert seen["text"] == f"fault isolation: xid-79: {text}"
        assert not marker.exists(), f"{text!r} was rendered: {marker} exists"


def test_an_empty_string_reaches_the_playbook_as_an_empty_string(project):
    """ansible-core 2.19 reads `!unsafe ""` as None: the writer leaves empty strings plain."""
    res = run_operation("isolate", inventory=project / "inventory.yml", limit=["gpu1"], quiet=True,
                        extravars={"day2_fault": "xid-79", "day2_fault_details": "", "day2_reason": ""})
    assert res.ok, res.summary()
    seen = record(project, "gpu1")
    assert seen["details"] == "" and seen["reason"] == "", seen


@pytest.mark.parametrize("argv", [
    ["isolate", "--fault", "xid-79", "--details", "{text}"],
    ["drain", "--reason", "{text}"],
    ["cordon", "-e", "day2_reason={text}"],
    ["cordon", "-e", '{"day2_reason": {json}}'],
])
def test_cli_free_text_is_data(project, tmp_path, argv, capsys):
    marker = tmp_path / "pwned"
    text = attacks(marker)[0]
    args = [a.replace("{text}", text).replace("{json}", json.dumps(text)) for a in argv]
    code = cli.main([*args, "-n", "gpu2", "-i", str(project / "inventory.yml"), "-q"])
    assert code == cli.EXIT_OK, capsys.readouterr().err
    seen = record(project, "gpu2")
    assert text in (seen["details"], seen["reason"]), seen
    assert not marker.exists(), "the CLI text was rendered as a template"


def test_receiver_alert_labels_and_annotations_are_data(project, tmp_path):
    """A webhook through the receiver's real service, store and executor (a detached child running
    ansible-runner): the UUID label and the summary annotation hold template expressions."""
    marker = tmp_path / "pwned"
    uuid_attack, summary_attack = attacks(marker)[0], attacks(marker)[2]
    conf = make_config(tmp_path, ceiling={"max_fraction": 1.0, "pool_label": "accelerator"},
                       run={"inventory": str(project / "inventory.yml"), "workers": 1,
                            "precordon": False, "timeout_s": 120})
    svc = Service(conf, Store(conf.db_path), FakeNodes(names=("gpu1", "gpu2")), SubprocessExecutor(conf.jobs_dir))
    xid = alert("GPUXidError", "gpu1", xid=79)
    xid["labels"]["UUID"] = uuid_attack
    ecc = alert("GPUECCUncorrectableError", "gpu2")
    for key in ("gpu", "UUID"):
        ecc["labels"].pop(key, None)
    ecc["annotations"] = {"summary": summary_attack}
    svc.start()
    try:
        decisions = svc.handle_payload(payload(xid, ecc))
        assert [d["decision"] for d in decisions] == ["queued", "queued"], decisions
        end = time.monotonic() + 120
        while time.monotonic() < end and any(svc.store.job(d["job_id"])["state"] in ("queued", "running")
                                             for d in decisions):
            time.sleep(0.5)
        jobs = [svc.store.job(d["job_id"]) for d in decisions]
    finally:
        svc.stop()
    assert [j["state"] for j in jobs] == ["done", "done"], jobs
    assert uuid_attack in record(project, "gpu1")["details"], record(project, "gpu1")
    assert record(project, "gpu2")["details"] == f"GPUECCUncorrectableError: {summary_attack}"
    assert not marker.exists(), "alert text was rendered as a template"


def test_runs_get_no_secrets_from_the_environment(project, monkeypatch):
    """The receiver's token and HMAC key, or an operator's shell secret, never reach a run's
    ansible-playbook nor its kept artifacts (artifacts/<ident>/command)."""
    secrets_env = {"AI_L1_REMEDIATE_TOKEN": "tok-0123456789abcdef", "AI_L1_REMEDIATE_HMAC_KEY": "hmac-0123456789",
                   "AWS_SECRET_ACCESS_KEY": "aws-0123456789"}
    for key, value in secrets_env.items():
        monkeypatch.setenv(key, value)
    (project / "playbooks" / "day2" / "cordon.yml").write_text(RECORD.replace(
        "'reason': day2_reason | default(''),",
        "'reason': lookup('ansible.builtin.env', 'AI_L1_REMEDIATE_TOKEN', default='absent'),"))
    res = run_operation("cordon", inventory=project / "inventory.yml", limit=["gpu1"], extravars={}, quiet=True)
    assert res.ok, res.summary()
    assert record(project, "gpu1")["reason"] == "absent"
    for path in res.private_data_dir.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            assert not any(v in text for v in secrets_env.values()), f"a secret is kept in {path}"
    command = json.loads((res.artifacts_dir / "command").read_text())
    assert "PATH" in command["env"] and not set(secrets_env) & set(command["env"])
