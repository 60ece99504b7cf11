"""The collection's release metadata must agree with itself and with what the project tests:
galaxy.yml's version is the newest release in changelogs/changelog.yaml (or a newer one still
collecting fragments), meta/runtime.yml's requires_ansible starts at the oldest ansible-core minor
the tests run (the pin in requirements.txt) and admits that pin, every role's min_ansible_version
says the same minor, and galaxy.yml points at no placeholder URL."""

import re
from pathlib import Path

import pytest
import yaml
from packaging.specifiers import SpecifierSet
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
COLLECTION = ROOT / "collections/ansible_collections/ai_platform/l1"
GALAXY_TEXT = (COLLECTION / "galaxy.yml").read_text()
GALAXY = yaml.safe_load(GALAXY_TEXT)
CHANGELOG = yaml.safe_load((COLLECTION / "changelogs/changelog.yaml").read_text())
RUNTIME = yaml.safe_load((COLLECTION / "meta/runtime.yml").read_text())


def pinned(name: str) -> Version:
    """The version requirements.txt pins for a package."""
    found = re.findall(rf"(?mi)^{re.escape(name)}==(\S+)$", (ROOT / "requirements.txt").read_text())
    assert len(found) == 1, f"requirements.txt pins {name} {len(found)} times"
    return Version(found[0])


def minors_under_test() -> list[Version]:
    """The ansible-core minors the tests run: today only the one requirements.txt pins."""
    core = pinned("ansible-core")
    return [Version(f"{core.major}.{core.minor}.0")]


def unreleased_fragments(collection: Path) -> list[str]:
    return sorted(p.name for p in (collection / "changelogs/fragments").glob("*.y*ml"))


def version_problem(galaxy_version: str, releases: dict, fragments: list[str]) -> str | None:
    """Why galaxy.yml's version does not fit the changelog, or None."""
    if not releases:
        return None if fragments else f"{galaxy_version}: no release in changelog.yaml and no fragment"
    newest = max(releases, key=Version)
    if Version(galaxy_version) == Version(newest):
        return None
    if Version(galaxy_version) < Version(newest):
        return f"galaxy.yml's version {galaxy_version} is older than the newest release {newest}"
    if not fragments:
        return f"galaxy.yml's version {galaxy_version} is newer than {newest} but no fragment says what changed"
    return None


def minimum(requires: str) -> Version:
    """The lower bound of a requires_ansible specifier (it must have exactly one)."""
    lower = [Version(s.version) for s in SpecifierSet(requires) if s.operator == ">="]
    assert len(lower) == 1, f"requires_ansible {requires!r} needs exactly one '>=' bound"
    return lower[0]


def test_galaxy_version_is_the_newest_release():
    problem = version_problem(GALAXY["version"], CHANGELOG["releases"], unreleased_fragments(COLLECTION))
    assert problem is None, problem


def test_the_release_has_a_date_and_changes():
    release = CHANGELOG["releases"][GALAXY["version"]]
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", str(release["release_date"]))
    assert release["changes"].get("release_summary")


@pytest.mark.parametrize(
    ("version", "releases", "fragments", "wrong"),
    [
        ("0.1.0", {"0.1.0": {}}, [], False),
        ("0.2.0", {"0.1.0": {}}, ["x.yml"], False),
        ("0.2.0", {"0.1.0": {}}, [], True),  # bumped, nothing to release
        ("0.1.0", {"0.1.0": {}, "0.2.0": {}}, [], True),  # behind the changelog
        ("0.10.0", {"0.9.0": {}, "0.10.0": {}}, [], False),  # versions compare as versions
    ],
)
def test_version_problem_can_fail(version, releases, fragments, wrong):
    assert (version_problem(version, releases, fragments) is not None) == wrong


def test_requires_ansible_admits_the_pinned_ansible_core():
    core = pinned("ansible-core")
    assert SpecifierSet(RUNTIME["requires_ansible"]).contains(core), (
        f"requires_ansible {RUNTIME['requires_ansible']!r} refuses the pinned ansible-core {core}")


def test_requires_ansible_starts_at_the_oldest_tested_minor():
    assert minimum(RUNTIME["requires_ansible"]) == min(minors_under_test())


def test_roles_require_the_same_minor():
    want = min(minors_under_test())
    wrong = {}
    for meta in sorted(ROOT.glob("roles/*/meta/main.yml")):
        have = str(yaml.safe_load(meta.read_text())["galaxy_info"].get("min_ansible_version"))
        if have != f"{want.major}.{want.minor}":
            wrong[meta.parent.parent.name] = have
    assert not wrong, f"min_ansible_version is not {want.major}.{want.minor} in {wrong}"


def test_galaxy_has_no_placeholder_urls():
    assert "example.invalid" not in GALAXY_TEXT
    for key in ("repository", "documentation", "homepage", "issues"):
        if key in GALAXY:
            assert re.match(r"https://", GALAXY[key]), f"galaxy.yml {key}: {GALAXY[key]!r}"
