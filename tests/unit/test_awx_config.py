"""The AWX configuration as code (awx/configure.yml) against what it configures and what it runs.

1. Every object, as the awx.awx module would receive it (module_defaults merged, templated with the
   play's variables, with and without the optional secrets), passes that module's own argument spec:
   the spec main() builds in the bundled awx.awx collection, checked with Ansible's
   ArgumentSpecValidator (the workflow's nodes against the suboptions the module documents), and
   the surveys pass AWX's survey format.
2. Every survey field agrees with the day-2 playbook's own validation, found by evaluating the
   playbook's request checks (the `assert` tasks it runs once on the controller, validate_request.yml
   included) with Ansible's templar: required exactly where the playbook refuses a run without the
   variable; integer bounds and text lengths exactly where the playbook's checks put them; the
   playbook's own default; booleans as the strings Ansible's `bool` reads; Limit prompted wherever
   the playbook refuses a run without one. Every operator variable a day-2 playbook reads is asked
   for by its survey or listed in NOT_SURVEYED with the reason.
The checks are shown to fail on surveys and objects that are wrong on purpose.
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib
import re
from pathlib import Path
from unittest import mock

import pytest
import yaml
from ansible.errors import AnsibleError
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar
from ansible_collections.awx.awx.plugins.module_utils.controller_api import ControllerAPIModule, ControllerModule
from test_site_tags import LAYER_TAGS

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "awx" / "configure.yml"
DAY2 = ROOT / "playbooks" / "day2"
MISSING = object()

# Variables a day-2 playbook reads that its job template does not ask for, and why.
NOT_SURVEYED = {
    "day2_api_host": "validate_request.yml picks the first control plane that answers; a site pins one (inventory)",
    "day2_kubeconfig": "set by the remediation receiver's in-cluster runs; AWX runs use the control plane's admin.conf",
    "day2_firmware_commands": "a per-site dict of argument vectors per accelerator group: inventory (group_vars)",
    "day2_reboot_timeout": "not checked by the playbook (it only applies | int): inventory",
    "day2_new_nodes": "a list of inventory names, which no survey type gives: the template prompts for Variables",
    "day2_report_file": "a path on the controller, lost with AWX's job container: AWX keeps the report as the job's "
                        "artifacts (set_stats)",
    "day2_report_strict": "for a scheduled report that must fail on drift: the schedule's extra variables",
    "day2_report_textfile_dir": "the daily metrics run's: its schedule passes it (awx.awx.schedule)",
}
# Operator variables given through the Variables prompt (no survey type fits), with a valid example.
PROMPTED = {"day2_new_nodes": ["gpu1"]}
SECRETS = {
    "ai_l1_awx_ssh_private_key": "-----BEGIN OPENSSH PRIVATE KEY-----\nx\n-----END OPENSSH PRIVATE KEY-----\n",
    "ai_l1_awx_feishu": {"critical_url": "https://open.feishu.example/hook/1", "critical_secret": "s1",
                         "warning_url": "https://open.feishu.example/hook/2",
                         "info_url": "https://open.feishu.example/hook/3"},
    "ai_l1_awx_receiver": {"token": "0123456789abcdef0123"},
}
# The controller-side context of a day-2 request: a small inventory, a limit naming a GPU worker.
CONTEXT = {
    "groups": {"all": ["cp1", "cp2", "cp3", "gpu1", "npu1"], "k8s_control_plane": ["cp1", "cp2", "cp3"],
               "k8s_worker": ["gpu1", "npu1"], "gpu_nvidia": ["gpu1"], "npu_ascend": ["npu1"]},
    "ansible_limit": "gpu1", "ansible_play_hosts_all": ["gpu1"], "ansible_play_hosts": ["gpu1"],
    "ansible_play_batch": ["gpu1"], "inventory_hostname": "gpu1", "group_names": ["gpu_nvidia", "k8s_worker"],
}
SURVEY_SPEC = {
    "name": {"type": "str", "required": True},
    "description": {"type": "str", "required": True},
    "spec": {"type": "list", "elements": "dict", "required": True, "options": {
        "question_name": {"type": "str", "required": True},
        "question_description": {"type": "str"},
        "variable": {"type": "str", "required": True},
        "type": {"type": "str", "required": True,
                 "choices": ["text", "textarea", "password", "integer", "float", "multiplechoice", "multiselect"]},
        "required": {"type": "bool", "required": True},
        "default": {"type": "raw"},
        "min": {"type": "int"},
        "max": {"type": "int"},
        "choices": {"type": "list", "elements": "str"},
    }},
}


# ---- the configuration as the modules receive it

def load_config(extra_vars: dict | None = None) -> list[tuple[str, str, dict]]:
    """(module, task name, arguments) of every task that runs, templated as Ansible would."""
    loader = DataLoader()
    [play] = loader.load_from_file(str(CONFIG), trusted_as_template=True)
    templar = Templar(loader=loader, variables={**play["vars"], **(extra_vars or {})})
    out = []
    for task in play["tasks"]:
        modules = [k for k in task if "." in k]
        assert len(modules) == 1 and modules[0].startswith("awx.awx."), f"{task['name']}: only awx.awx modules here"
        module = modules[0]
        whens = task.get("when", [])
        if not all(templar.evaluate_conditional(w) for w in (whens if isinstance(whens, list) else [whens])):
            continue
        args = {**(play.get("module_defaults") or {}).get(module, {}), **task[module]}
        out.append((module, task["name"], templar.template(args)))
    return out


@functools.cache
def module_argspec(module: str) -> tuple[dict, dict]:
    """The argument spec (with the connection options) and the constraints main() gives ControllerAPIModule."""

    class Captured(Exception):
        pass

    def capture(self, argument_spec=None, **kwargs):
        raise Captured(argument_spec, kwargs)

    mod = importlib.import_module(f"ansible_collections.awx.awx.plugins.modules.{module.rsplit('.', 1)[-1]}")
    with mock.patch.object(ControllerAPIModule, "__init__", capture), pytest.raises(Captured) as caught:
        mod.main()
    spec, kwargs = caught.value.args
    return {**ControllerModule.AUTH_ARGSPEC, **spec}, kwargs


def doc_spec(options: dict) -> dict:
    """An argument spec from a module's documented options (for suboptions the module does not declare)."""
    keys = ("type", "elements", "choices", "required", "default", "aliases")
    return {name: {**{k: o[k] for k in keys if k in o}, **({"options": doc_spec(o["suboptions"])} if "suboptions" in o
                                                          else {})}
            for name, o in options.items()}


def argument_errors(module: str, args: dict) -> list[str]:
    spec, kwargs = module_argspec(module)
    constraints = ("mutually_exclusive", "required_together", "required_one_of", "required_if", "required_by")
    errors = list(ArgumentSpecValidator(spec, **{k: kwargs[k] for k in constraints if k in kwargs})
                  .validate(args).error_messages)
    if module == "awx.awx.workflow_job_template":
        mod = importlib.import_module("ansible_collections.awx.awx.plugins.modules.workflow_job_template")
        node_spec = doc_spec(yaml.safe_load(mod.DOCUMENTATION)["options"]["workflow_nodes"]["suboptions"])
        for node in args.get("workflow_nodes") or []:
            errors += [f"workflow node {node.get('identifier')}: {e}"
                       for e in ArgumentSpecValidator(node_spec).validate(node).error_messages]
    for survey in [args["survey_spec"]] if "survey_spec" in args else []:
        errors += [f"survey: {e}" for e in survey_format_errors(survey)]
    return errors


def survey_format_errors(survey: dict) -> list[str]:
    """AWX's survey format: the fields, unique identifiers, defaults of the question's type and within its bounds."""
    errors = list(ArgumentSpecValidator(SURVEY_SPEC).validate(survey).error_messages)
    variables = [q.get("variable") for q in survey.get("spec") or []]
    if len(set(variables)) != len(variables):
        errors.append(f"a variable is asked twice: {variables}")
    for q in survey.get("spec") or []:
        name, kind, default = q.get("variable"), q.get("type"), q.get("default", MISSING)
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(name)):
            errors.append(f"{name}: not a variable name")
        if kind in ("multiplechoice", "multiselect") and not q.get("choices"):
            errors.append(f"{name}: {kind} without choices")
        if default is MISSING or default == "":
            continue
        if kind == "integer" and (not isinstance(default, int) or isinstance(default, bool)
                                  or not q.get("min", default) <= default <= q.get("max", default)):
            errors.append(f"{name}: default {default!r} is not an integer within its bounds")
        if kind in ("text", "textarea", "password") and not q.get("min", 0) <= len(default) <= q.get("max", 10 ** 9):
            errors.append(f"{name}: default {default!r} is outside its length bounds")
        if kind == "multiplechoice" and default not in q.get("choices", []):
            errors.append(f"{name}: default {default!r} is not one of its choices")
    return errors


# ---- the day-2 playbooks' own validation

def yaml_file(path: Path):
    return DataLoader().load_from_file(str(path), trusted_as_template=True)


def listify(value) -> list:
    return value if isinstance(value, list) else [value]


def walk_tasks(tasks, inherited_vars=None, inherited_when=()):
    """Every task of a task list, blocks expanded, with the vars and when of the blocks around it."""
    for task in tasks or []:
        task_vars = {**(inherited_vars or {}), **(task.get("vars") or {})}
        when = [*inherited_when, *listify(task.get("when", []))]
        if "block" in task:
            for key in ("block", "rescue", "always"):
                yield from walk_tasks(task.get(key), task_vars, when)
        else:
            yield task, task_vars, when


def playbook_files(playbook: Path, seen: list | None = None) -> list[Path]:
    """The playbook and the day-2 files it imports or includes (not ../validate.yml or ../site.yml)."""
    seen = [] if seen is None else seen
    if playbook in seen:
        return seen
    seen.append(playbook)

    def visit(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("ansible.builtin.import_playbook", "ansible.builtin.include_tasks",
                           "ansible.builtin.import_tasks"):
                    target = (playbook.parent / value).resolve()
                    if DAY2 in target.parents:
                        playbook_files(target, seen)
                visit(value)
        elif isinstance(node, list):
            for item in node:
                visit(item)

    visit(yaml.safe_load(playbook.read_text()))
    return seen


def request_checks(playbook: Path, import_vars: dict | None = None) -> list[tuple[list, dict, list]]:
    """(conditions, variables, when) of each request check: an assert run once on the controller."""
    out = []
    for play in yaml_file(playbook):
        if "ansible.builtin.import_playbook" in play:
            target = (playbook.parent / play["ansible.builtin.import_playbook"]).resolve()
            if target.parent == DAY2:
                out += request_checks(target, {**(import_vars or {}), **(play.get("vars") or {})})
            continue
        play_vars = dict(import_vars or {})
        for vars_file in play.get("vars_files") or []:
            play_vars.update(yaml_file(playbook.parent / vars_file))
        play_vars.update(play.get("vars") or {})
        for section in ("pre_tasks", "tasks", "post_tasks"):
            for task, task_vars, when in walk_tasks(play.get(section), play_vars):
                if ("ansible.builtin.assert" in task and task.get("run_once")
                        and task.get("delegate_to") == "localhost"):
                    out.append((listify(task["ansible.builtin.assert"]["that"]), task_vars, when))
    return out


def refusals(checks, answers: dict, without: tuple = ()) -> list[str]:
    """The request checks' conditions that fail for these answers (a template error fails the run too)."""
    failed = []
    context = {k: v for k, v in CONTEXT.items() if k not in without}
    for conditions, variables, when in checks:
        templar = Templar(loader=DataLoader(), variables={**context, **variables, **answers})
        try:
            if not all(templar.evaluate_conditional(w) for w in when):
                continue
            failed += [c for c in conditions if not templar.evaluate_conditional(c)]
        except AnsibleError as exc:
            failed.append(f"{conditions}: {exc.message}")
    return failed


def strings(node, skip=("fail_msg", "msg", "success_msg")):
    """Every string value of a YAML tree, messages left out (their defaults are for the text only)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key not in skip:
                yield from strings(value, skip)
    elif isinstance(node, list):
        for item in node:
            yield from strings(item, skip)
    elif isinstance(node, str):
        yield node


def defined_names(node, base: Path) -> set[str]:
    """Variables a day-2 file defines itself: vars, registers, set_fact, vars_files."""
    out = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "vars" and isinstance(value, dict):
                out |= set(value)
            elif key == "register":
                out.add(value)
            elif key == "ansible.builtin.set_fact" and isinstance(value, dict):
                out |= set(value)
            elif key == "vars_files":
                for f in value:
                    out |= set(yaml.safe_load((base / f).read_text()))
            out |= defined_names(value, base)
    elif isinstance(node, list):
        for item in node:
            out |= defined_names(item, base)
    return out


def operator_variables(playbook: Path) -> set[str]:
    """The day2_* variables the playbook (and its included tasks) reads but nothing in it or its imports sets."""
    files = playbook_files(playbook)
    own = [f for f in files if f.name != "validate_request.yml"]
    read = {n for f in own for s in strings(yaml.safe_load(f.read_text()), skip=()) for n in
            re.findall(r"\bday2_[a-z0-9_]+\b", s)}
    defined = set().union(*(defined_names(yaml.safe_load(f.read_text()), f.parent) for f in files))
    return {n for n in read - defined if not n.startswith("day2_validate_")}


def playbook_defaults(playbook: Path, variable: str) -> set:
    """The literals the playbook's own files default the variable to (`variable | default(<literal>)`)."""
    found = set()
    pattern = re.compile(rf"\b{variable}\s*\|\s*default\(\s*('[^']*'|\"[^\"]*\"|-?\d+|true|false)\s*[,)]")
    for f in playbook_files(playbook):
        if f.name == "validate_request.yml":
            continue
        for s in strings(yaml.safe_load(f.read_text())):
            for literal in pattern.findall(s):
                found.add({"true": True, "false": False}.get(literal, None) if literal in ("true", "false")
                          else ast.literal_eval(literal))
    return found


def read_as_bool(playbook: Path, variable: str) -> bool:
    pattern = re.compile(rf"\b{variable}\s*(\|\s*default\([^)]*\)\s*)?\|\s*bool\b")
    return any(pattern.search(s) for f in playbook_files(playbook) for s in strings(yaml.safe_load(f.read_text())))


def example(question: dict):
    """The smallest answer the survey itself allows."""
    if question["type"] == "integer":
        return question.get("default", question.get("min", 1))
    if question["type"] in ("multiplechoice", "multiselect"):
        return question.get("default", question["choices"][0])
    return "a" * max(question.get("min", 0), 1)


class Probe:
    """Answers the playbook's request checks accept or refuse, around a baseline of valid answers."""

    def __init__(self, playbook: Path, base: dict):
        self.checks = request_checks(playbook)
        self.base = base

    def refused(self, without: tuple = ()) -> list[str]:
        return refusals(self.checks, self.base, without)

    def accepts(self, variable: str, value) -> bool:
        answers = {k: v for k, v in self.base.items() if k != variable}
        if value is not MISSING:
            answers[variable] = value
        return not refusals(self.checks, answers)


def integer_problems(probe: Probe, q: dict) -> list[str]:
    var, low, high = q["variable"], q.get("min"), q.get("max")
    problems = []
    if probe.accepts(var, "not-a-number"):
        problems.append(f"{var}: integer in the survey, but the playbook does not check it is one")
    if low is None or not probe.accepts(var, low) or probe.accepts(var, low - 1):
        problems.append(f"{var}: survey min {low} is not the playbook's lowest accepted value")
    if high is None and not probe.accepts(var, 10 ** 9):
        problems.append(f"{var}: the playbook has an upper bound the survey does not")
    if high is not None and (not probe.accepts(var, high) or probe.accepts(var, high + 1)):
        problems.append(f"{var}: survey max {high} is not the playbook's highest accepted value")
    return problems


def text_problems(probe: Probe, q: dict) -> list[str]:
    var, limit = q["variable"], 4096
    problems = []
    shortest = next((n for n in range(65) if probe.accepts(var, "a" * n)), None)
    if shortest != q.get("min", 0):
        problems.append(f"{var}: survey min length {q.get('min', 0)}, the playbook's shortest is {shortest}")
    if shortest is None:
        return problems  # no text of the kind is taken: not a text for the playbook
    if probe.accepts(var, "a" * limit):
        if "max" in q:
            problems.append(f"{var}: survey max length {q['max']}, the playbook sets none")
        return problems
    low, high = shortest or 0, limit  # the longest accepted length, by bisection
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if probe.accepts(var, "a" * mid) else (low, mid)
    if q.get("max") != low:
        problems.append(f"{var}: survey max length {q.get('max')}, the playbook's longest is {low}")
    return problems


def choice_problems(probe: Probe, q: dict, playbook: Path) -> list[str]:
    var = q["variable"]
    problems = [f"{var}: the playbook refuses the choice {c!r}" for c in q["choices"] if not probe.accepts(var, c)]
    if not read_as_bool(playbook, var) or sorted(q["choices"]) != ["false", "true"]:
        problems.append(f"{var}: a choice must be a boolean the playbook reads with | bool, as 'true'/'false'")
    return problems


def default_problems(q: dict, playbook: Path) -> list[str]:
    var = q["variable"]
    defaults = playbook_defaults(playbook, var)
    if len(defaults) != 1:
        return [f"{var}: the playbook defaults it to {defaults or 'nothing'}, not to one value"]
    if "default" not in q:
        return [f"{var}: the survey has no default, the playbook's is {defaults}"]
    value = boolean(q["default"]) if q["type"] == "multiplechoice" else q["default"]
    return [] if {value} == defaults else [f"{var}: survey default {q['default']!r}, the playbook's {defaults.pop()!r}"]


def question_problems(probe: Probe, q: dict, playbook: Path) -> list[str]:
    var, kind = q["variable"], q["type"]
    required = not probe.accepts(var, MISSING)
    problems = [] if q["required"] == required else [
        f"{var}: survey required={q['required']}, the playbook {'refuses' if required else 'runs'} without it"]
    if kind == "integer":
        problems += integer_problems(probe, q)
    elif kind in ("text", "textarea", "password"):
        problems += text_problems(probe, q)
    elif kind == "multiplechoice":
        problems += choice_problems(probe, q, playbook)
    else:
        problems.append(f"{var}: survey type {kind} is not used for day-2 variables")
    return problems + ([] if q["required"] else default_problems(q, playbook))


def survey_problems(playbook: Path, questions: list[dict], ask_limit: bool, ask_variables: bool = False) -> list[str]:
    """Where the survey (and the Limit and Variables prompts) and the playbook's own validation disagree."""
    operator = operator_variables(playbook)
    asked = {q["variable"] for q in questions}
    # What a person gives: the survey's smallest answers, and a list through the Variables prompt.
    base = {q["variable"]: example(q) for q in questions if q["required"]}
    base.update({name: value for name, value in PROMPTED.items() if name in operator})
    probe = Probe(playbook, base)
    if refused := probe.refused():
        # An optional question the playbook cannot run without?
        needed = [q["variable"] for q in questions if not q["required"]
                  and not refusals(probe.checks, {**base, q["variable"]: example(q)})]
        return [f"{var}: survey required=False, the playbook refuses a run without it" for var in needed] or [
            f"the playbook refuses the smallest answers {base}: {refused}"]
    problems = []
    if probe.refused(without=("ansible_limit",)) and not ask_limit:
        problems.append("the playbook refuses a run without a limit: the template must prompt for the Limit")
    problems += [f"{name}: read by the playbook, not asked by the survey and not in NOT_SURVEYED"
                 for name in sorted(operator - asked - set(NOT_SURVEYED))]
    for q in questions:
        if q["variable"] not in operator:
            problems.append(f"{q['variable']}: the playbook does not read it")
        else:
            problems += question_problems(probe, q, playbook)
    for name in sorted(set(PROMPTED) & operator - asked):
        # A list: a survey answer (a string) is refused, a list is taken; only the Variables prompt gives one.
        if probe.accepts(name, "gpu1") or not probe.accepts(name, ["gpu1"]):
            problems.append(f"{name}: the playbook no longer requires a list; survey it")
        if not ask_variables:
            problems.append(f"{name}: no survey type gives a list: the template must prompt for Variables")
    return problems


# ---- fixtures

@pytest.fixture(scope="module", params=["without secrets", "with secrets"])
def config(request):
    return load_config(SECRETS if request.param == "with secrets" else None)


@pytest.fixture(scope="module")
def objects():
    """module -> {name: arguments}, all secrets given (every object created)."""
    out = {}
    for module, _, args in load_config(SECRETS):
        out.setdefault(module, {})[args["name"]] = args
    return out


def day2_templates(objects) -> dict[Path, dict]:
    return {ROOT / jt["playbook"]: jt for jt in objects["awx.awx.job_template"].values()
            if jt["playbook"].startswith("playbooks/day2/")}


# ---- 1. the objects through the modules' argument specs

def test_every_object_passes_its_module_argument_spec(config):
    assert config, "no awx.awx task found"
    problems = {name: errors for module, name, args in config if (errors := argument_errors(module, args))}
    assert problems == {}


def test_the_configuration_covers_the_project(objects):
    assert set(objects) == {"awx.awx.organization", "awx.awx.execution_environment", "awx.awx.credential_type",
                            "awx.awx.credential", "awx.awx.project", "awx.awx.inventory", "awx.awx.inventory_source",
                            "awx.awx.job_template", "awx.awx.workflow_job_template", "awx.awx.schedule"}
    playbooks = {jt["playbook"] for jt in objects["awx.awx.job_template"].values()}
    day2 = {f"playbooks/day2/{p.name}" for p in DAY2.glob("*.yml") if p.name != "validate_request.yml"}
    assert playbooks == {"playbooks/site.yml", *day2}
    assert {ct for ct in objects["awx.awx.credential_type"]} == {"ai-l1 Feishu bot", "ai-l1 remediation receiver"}
    [source] = objects["awx.awx.inventory_source"].values()
    assert source["source"] == "scm" and (ROOT / source["source_path"]).is_dir()
    assert (ROOT / source["source_path"] / "hosts.yml").is_file()


def test_references_name_objects_of_the_configuration(objects):
    names = {module.rsplit(".", 1)[-1]: set(found) for module, found in objects.items()}
    [org] = names["organization"]
    for found in objects.values():
        for name, args in found.items():
            assert args.get("organization", org) == org, name
    for jt in [*objects["awx.awx.job_template"].values(), *objects["awx.awx.inventory_source"].values()]:
        assert jt.get("project", jt.get("source_project")) in names["project"], jt["name"]
        assert jt["inventory"] in names["inventory"], jt["name"]
        assert jt["execution_environment"] in names["execution_environment"], jt["name"]
    for jt in objects["awx.awx.job_template"].values():
        assert (ROOT / jt["playbook"]).is_file(), jt["playbook"]
        assert set(jt["credentials"]) <= names["credential"], jt["name"]
    for project in objects["awx.awx.project"].values():
        assert project["default_environment"] in names["execution_environment"]


def test_each_schedule_runs_a_template_with_variables_its_playbook_reads(objects):
    templates = objects["awx.awx.job_template"]
    for name, schedule in objects["awx.awx.schedule"].items():
        template = templates[schedule["unified_job_template"]]
        assert schedule["rrule"].startswith("DTSTART:") and "RRULE:FREQ=" in schedule["rrule"], name
        assert template.get("ask_variables_on_launch") is True, f"{name}: AWX drops a schedule's extra_data otherwise"
        assert set(schedule["extra_data"]) <= operator_variables(ROOT / template["playbook"]), name
    metrics = objects["awx.awx.schedule"]["ai-l1 fleet compliance metrics"]
    assert metrics["extra_data"]["day2_report_textfile_dir"] == yaml.safe_load(
        (ROOT / "roles/k8s_control_plane/defaults/main.yml").read_text())["k8s_control_plane_textfile_dir"]


def test_credentials_fit_their_types(objects):
    types = objects["awx.awx.credential_type"]
    for name, credential in objects["awx.awx.credential"].items():
        if credential["credential_type"] == "Machine":
            assert set(credential["inputs"]) <= {"username", "password", "ssh_key_data", "ssh_key_unlock",
                                                 "become_method", "become_username", "become_password"}, name
            continue
        inputs = types[credential["credential_type"]]["inputs"]
        fields = {f["id"] for f in inputs["fields"]}
        assert set(credential["inputs"]) <= fields, name
        assert set(inputs["required"]) <= set(credential["inputs"]), name
    for name, ctype in types.items():
        fields = {f["id"] for f in ctype["inputs"]["fields"]}
        assert ctype["kind"] == "cloud" and set(ctype["inputs"]["required"]) <= fields, name
        for var, template in ctype["injectors"]["extra_vars"].items():
            assert re.fullmatch(r"\{\{ (\w+) \}\}", template) and template[3:-3] in fields, (name, var)


def test_injected_variables_are_the_ones_the_project_reads(objects):
    types = objects["awx.awx.credential_type"]
    feishu = set(types["ai-l1 Feishu bot"]["injectors"]["extra_vars"])
    sample = (ROOT / "inventories/sample/group_vars/all/monitoring_k8s.yml").read_text()
    assert set(re.findall(r"\bvault_feishu_\w+", sample)) <= feishu
    receiver = set(types["ai-l1 remediation receiver"]["injectors"]["extra_vars"])
    spec = yaml.safe_load((ROOT / "roles/remediation_receiver/meta/argument_specs.yml").read_text())
    assert receiver <= set(spec["argument_specs"]["main"]["options"])


def test_site_template_prompts_for_the_layer_tags(objects):
    site = objects["awx.awx.job_template"]["ai-l1 site rollout"]
    assert site["playbook"] == "playbooks/site.yml"
    assert site["ask_tags_on_launch"] and site["ask_skip_tags_on_launch"] and site["ask_limit_on_launch"]
    # All secrets given: the nodes' SSH key, the Feishu bot and the receiver's token reach the rollout.
    assert site["credentials"] == ["ai-l1 nodes (SSH)", "ai-l1 Feishu bot", "ai-l1 remediation receiver"]


def test_site_template_without_the_optional_secrets_needs_only_ssh():
    [site] = [args for module, _, args in load_config() if args["name"] == "ai-l1 site rollout"]
    assert site["credentials"] == ["ai-l1 nodes (SSH)"]


# ---- 2. the surveys against the day-2 playbooks' own validation

def test_request_checks_are_found():
    """Guard against a vacuous comparison: the checks the surveys are held to are there."""
    drain = [c for conditions, _, _ in request_checks(DAY2 / "drain.yml") for c in conditions]
    assert any("day2_drain_timeout" in c for c in drain)
    assert any("ansible_limit" in c for c in drain)
    assert any("day2_fault_kind" in c for conditions, _, _ in request_checks(DAY2 / "isolate.yml") for c in conditions)
    assert refusals(request_checks(DAY2 / "drain.yml"), {"day2_drain_timeout": 0})
    assert not refusals(request_checks(DAY2 / "drain.yml"), {"day2_drain_timeout": 600})


def test_every_day2_template_matches_its_playbook(objects):
    problems = {}
    for playbook, jt in day2_templates(objects).items():
        questions = jt["survey_spec"]["spec"] if jt.get("survey_enabled") else []
        if found := survey_problems(playbook, questions, jt["ask_limit_on_launch"], jt["ask_variables_on_launch"]):
            problems[playbook.name] = found
    assert problems == {}


def test_the_workflow_survey_matches_the_firmware_update_playbook(objects):
    [workflow] = objects["awx.awx.workflow_job_template"].values()
    assert workflow["survey_enabled"]
    assert survey_problems(DAY2 / "firmware_update.yml", workflow["survey_spec"]["spec"],
                           workflow["ask_limit_on_launch"]) == []


def test_the_workflow_runs_approval_update_relabel(objects):
    [workflow] = objects["awx.awx.workflow_job_template"].values()
    templates = objects["awx.awx.job_template"]
    nodes = {n["identifier"]: n for n in workflow["workflow_nodes"]}
    assert [n["unified_job_template"]["type"] for n in workflow["workflow_nodes"]] == [
        "workflow_approval", "job_template", "job_template"]
    for node in nodes.values():
        for kind in ("success_nodes", "failure_nodes", "always_nodes"):
            for target in (node.get("related") or {}).get(kind, []):
                assert target["identifier"] in nodes, node["identifier"]
        ujt = node["unified_job_template"]
        if ujt["type"] != "job_template":
            continue
        jt = templates[ujt["name"]]
        # The workflow's Limit reaches a node only when its template prompts for one: without it the
        # node would run on every host of the inventory.
        if workflow["ask_limit_on_launch"]:
            assert jt["ask_limit_on_launch"], ujt["name"]
        if "job_tags" in node:
            assert jt["ask_tags_on_launch"] and set(node["job_tags"].split(",")) <= set(LAYER_TAGS), node
    update = templates[nodes["update"]["unified_job_template"]["name"]]
    assert update["playbook"] == "playbooks/day2/firmware_update.yml"
    assert nodes["approve"]["related"]["success_nodes"] == [{"identifier": "update"}]
    assert nodes["update"]["related"]["success_nodes"] == [{"identifier": "relabel"}]
    assert "failure_nodes" not in nodes["update"]["related"]  # a failed update stops: its node stays cordoned


def test_the_isolate_template_takes_what_the_remediation_receiver_sends(objects):
    isolate = objects["awx.awx.job_template"]["ai-l1 day2 isolate"]
    assert isolate["ask_limit_on_launch"] and isolate["ask_variables_on_launch"]


def test_not_surveyed_lists_only_variables_a_playbook_reads():
    read = set().union(*(operator_variables(p) for p in DAY2.glob("*.yml")))
    assert set(NOT_SURVEYED) <= read


# ---- the checks can fail

def test_argument_spec_refuses_wrong_objects():
    assert argument_errors("awx.awx.job_template", {"name": "x", "surveys": {}})  # unknown option
    assert argument_errors("awx.awx.job_template", {"name": "x", "forks": "many"})  # wrong type
    assert argument_errors("awx.awx.inventory", {"name": "x"})  # organization is required
    assert argument_errors("awx.awx.credential", {"name": "x", "credential_type": "Machine", "organization": "o",
                                                  "user": "u"})  # mutually exclusive
    assert argument_errors("awx.awx.workflow_job_template", {"name": "x", "workflow_nodes": [{"related": {}}]})
    assert argument_errors("awx.awx.job_template", {"name": "x", "survey_spec": {"name": "s", "description": "",
                                                                                "spec": [{"variable": "v"}]}})


def mutate(objects, template: str, variable: str, change: dict):
    jt = copy.deepcopy(objects["awx.awx.job_template"][template])
    questions = jt["survey_spec"]["spec"]
    for q in questions:
        if q["variable"] == variable:
            for key, value in change.items():
                if value is MISSING:
                    q.pop(key, None)
                else:
                    q[key] = value
    return ROOT / jt["playbook"], questions, jt["ask_limit_on_launch"]


@pytest.mark.parametrize(("template", "variable", "change", "expected"), [
    ("ai-l1 day2 drain", "day2_drain_timeout", {"min": 0}, "survey min 0"),
    ("ai-l1 day2 drain", "day2_drain_timeout", {"default": 600}, "survey default 600"),
    ("ai-l1 day2 drain", "day2_drain_timeout", {"type": "text", "min": MISSING}, "min length"),
    ("ai-l1 day2 drain", "day2_drain_timeout", {"variable": "day2_drain_timout"}, "does not read it"),
    ("ai-l1 day2 drain", "day2_reason", {"required": True}, "required=True"),
    ("ai-l1 day2 isolate", "day2_fault", {"max": 64}, "survey max length 64"),
    ("ai-l1 day2 isolate", "day2_fault", {"required": False, "default": ""}, "required=False"),
    ("ai-l1 day2 firmware-update", "day2_max_unavailable", {"max": 4}, "survey max 4"),
    ("ai-l1 day2 mig-reconfigure", "day2_mig_config", {"min": 2}, "min length 2"),
    ("ai-l1 day2 uncordon", "day2_clear_fault", {"choices": ["false", "true", "maybe"]}, "as 'true'/'false'"),
    ("ai-l1 day2 remove-node", "day2_delete_node", {"default": "false"}, "survey default 'false'"),
])
def test_survey_drift_is_found(objects, template, variable, change, expected):
    playbook, questions, ask_limit = mutate(objects, template, variable, change)
    problems = survey_problems(playbook, questions, ask_limit)
    assert any(expected in p for p in problems), problems


def test_a_missing_question_or_limit_prompt_is_found(objects):
    playbook, questions, _ = mutate(objects, "ai-l1 day2 drain", "day2_reason", {})
    problems = survey_problems(playbook, [q for q in questions if q["variable"] != "day2_drain_timeout"], False)
    assert any("day2_drain_timeout: read by the playbook, not asked" in p for p in problems), problems
    assert any("must prompt for the Limit" in p for p in problems), problems
    add_node = survey_problems(DAY2 / "add_node.yml", [], ask_limit=False, ask_variables=False)
    assert any("must prompt for Variables" in p for p in add_node), add_node
