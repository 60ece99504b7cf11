"""Every role's README.md is current: its generated part is what tests/role_readme.py renders from
meta/argument_specs.yml (and defaults/main.yml) today, below the hand-written intro. A stale one
fails here; `python tests/role_readme.py --write` refreshes them all."""

import importlib.util
import shutil
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("role_readme", ROOT / "tests/role_readme.py")
role_readme = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(role_readme)


def test_every_role_has_a_current_readme():
    stale = [str(p.relative_to(ROOT)) for p in role_readme.stale(ROOT / "roles")]
    assert not stale, f"stale role READMEs (run python tests/role_readme.py --write): {stale}"


def test_every_role_has_an_intro():
    for role in role_readme.role_dirs(ROOT / "roles"):
        intro = role_readme.intro(role).strip()
        assert intro.startswith(f"# {role.name}"), f"{role.name}: the intro starts with '# {role.name}'"
        assert len(intro.splitlines()) >= 3, f"{role.name}: the intro says what the role does"


@pytest.fixture
def roles(tmp_path):
    """A copy of one real role, its README current."""
    shutil.copytree(ROOT / "roles/dcgm", tmp_path / "roles/dcgm")
    assert role_readme.main(["--write", "--roles-dir", str(tmp_path / "roles")]) == 0
    assert role_readme.main(["--check", "--roles-dir", str(tmp_path / "roles")]) == 0
    return tmp_path / "roles"


def _edit_spec(role: Path, change):
    spec_file = role / "meta/argument_specs.yml"
    spec = yaml.safe_load(spec_file.read_text())
    change(spec["argument_specs"]["main"]["options"])
    spec_file.write_text(yaml.safe_dump(spec, sort_keys=False))


@pytest.mark.parametrize(
    "change",
    [
        lambda options: options["dcgm_version"].update(description="Another description."),
        lambda options: options.update(dcgm_new_option={"description": "New.", "type": "bool", "default": False}),
        lambda options: options.pop("dcgm_version"),
    ],
    ids=["description", "new option", "removed option"],
)
def test_a_spec_change_makes_the_check_fail(roles, change, capsys):
    _edit_spec(roles / "dcgm", change)
    assert role_readme.stale(roles) == [roles / "dcgm/README.md"]
    assert role_readme.main(["--check", "--roles-dir", str(roles)]) == 1
    assert "dcgm/README.md" in capsys.readouterr().err
    role_readme.main(["--write", "--roles-dir", str(roles)])
    assert role_readme.stale(roles) == []


def test_a_defaults_change_makes_the_check_fail(roles):
    # An option without a default in the spec shows the one defaults/main.yml gives.
    _edit_spec(roles / "dcgm", lambda options: options["dcgm_version"].pop("default"))
    defaults = roles / "dcgm/defaults/main.yml"
    values = yaml.safe_load(defaults.read_text())
    role_readme.write(roles)
    assert f"| `{values['dcgm_version']}` |" in (roles / "dcgm/README.md").read_text()
    defaults.write_text(yaml.safe_dump(dict(values, dcgm_version="9.9.9")))
    assert role_readme.stale(roles) == [roles / "dcgm/README.md"]


def test_the_intro_is_kept_and_a_missing_readme_is_stale(roles):
    readme = roles / "dcgm/README.md"
    text = readme.read_text()
    readme.write_text(text.replace("# dcgm:", "# dcgm (edited intro):", 1))
    assert role_readme.stale(roles) == []  # the intro is the author's: no generated content changed
    readme.unlink()
    assert role_readme.stale(roles) == [readme]


def test_a_readme_without_the_marker_becomes_the_intro(tmp_path):
    role = tmp_path / "roles/demo"
    (role / "meta").mkdir(parents=True)
    (role / "meta/argument_specs.yml").write_text("argument_specs:\n  main:\n    options: {}\n")
    (role / "README.md").write_text("# demo: hand-written\n\nText.\n\n\n")
    role_readme.write(tmp_path / "roles")
    text = (role / "README.md").read_text()
    assert text.startswith(f"# demo: hand-written\n\nText.\n\n{role_readme.MARKER}\n\n## Variables\n")
    assert "No options." in text
    assert role_readme.write(tmp_path / "roles") == []  # a second write changes nothing


def test_rendering(tmp_path):
    role = tmp_path / "roles/demo"
    (role / "meta").mkdir(parents=True)
    (role / "defaults").mkdir()
    (role / "tasks").mkdir()
    spec = {
        "argument_specs": {
            "other": {"short_description": "Other entry.", "options": {"demo_b": {"type": "int"}}},
            "main": {
                "short_description": "Demo C(role).",
                "description": ["First paragraph with O(demo_a).", "Second, with <tag> and a | pipe."],
                "options": {
                    "demo_a": {
                        "description": ["A cell with a | pipe and C(a|b). The rest is left out.", "Also this."],
                        "type": "list",
                        "elements": "dict",
                        "required": True,
                        "options": {
                            "name": {"description": "Name, e.g. Foo.", "type": "str", "choices": ["x", "y"]},
                            "sub": {"type": "dict", "options": {"deep": {"type": "bool", "default": True}}},
                        },
                    },
                    "demo_b": {"type": "int"},
                    "demo_c": {"description": "Spec default wins.", "type": "str", "default": "spec"},
                },
            },
        }
    }
    (role / "meta/argument_specs.yml").write_text(yaml.safe_dump(spec, sort_keys=False))
    (role / "defaults/main.yml").write_text("demo_b: 3\ndemo_c: defaults\n")
    text = role_readme.render(role)
    body = text.split(role_readme.MARKER, 1)[1]
    assert body.index("### Entry point `main`") < body.index("### Entry point `other` (`tasks_from: other`)")
    assert "Demo `role`.\n\nFirst paragraph with `demo_a`.\n\nSecond, with &lt;tag> and a | pipe.\n" in body
    rows = [line for line in body.splitlines() if line.startswith("| `") or line.startswith("| &emsp;")]
    assert rows[:5] == [
        "| `demo_a` | list of dict | yes |  |  | A cell with a \\| pipe and `a\\|b`. |",
        "| &emsp;`demo_a.name` | str | no |  | `x`, `y` | Name, e.g. Foo. |",
        "| &emsp;`demo_a.sub` | dict | no |  |  |  |",  # no description in the spec: an empty cell
        "| &emsp;&emsp;`demo_a.sub.deep` | bool | no | `true` |  |  |",
        "| `demo_b` | int | no | `3` |  |  |",  # the default from defaults/main.yml
    ]
    assert rows[5] == "| `demo_c` | str | no | `spec` |  | Spec default wins. |"
    assert role_readme.render(role) == text  # deterministic
