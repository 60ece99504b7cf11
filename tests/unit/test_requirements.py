"""requirements.yml must stay true: the bundled collections satisfy its ranges, and the
collection's galaxy.yml declares the same dependencies."""

import json
from pathlib import Path

import ansible_collections  # namespace package: the `ansible` bundle installs collections into it
import pytest
import yaml
from ansible.galaxy.dependency_resolution.versioning import meets_requirements

ROOT = Path(__file__).resolve().parents[2]
REQUIREMENTS = yaml.safe_load((ROOT / "requirements.yml").read_text())["collections"]
GALAXY = yaml.safe_load((ROOT / "collections/ansible_collections/ai_platform/l1/galaxy.yml").read_text())


def installed_version(fqcn: str) -> str:
    """Version of a collection as installed by the pinned `ansible` package (its MANIFEST.json)."""
    namespace, name = fqcn.split(".")
    for base in ansible_collections.__path__:
        manifest = Path(base) / namespace / name / "MANIFEST.json"
        if manifest.is_file():
            return json.loads(manifest.read_text())["collection_info"]["version"]
    raise AssertionError(f"collection {fqcn} is not installed in this environment (is .venv bootstrapped?)")


@pytest.mark.parametrize("req", REQUIREMENTS, ids=[r["name"] for r in REQUIREMENTS])
def test_bundled_collection_satisfies_requirements_yml(req):
    version = installed_version(req["name"])
    assert meets_requirements(version, req["version"]), f"{req['name']} {version} is outside {req['version']}"


def test_galaxy_dependencies_match_requirements_yml():
    assert GALAXY["dependencies"] == {r["name"]: r["version"] for r in REQUIREMENTS}


def test_meets_requirements_can_fail():
    # Guard against a vacuous check: a version outside the range must be refused.
    assert not meets_requirements("7.0.0", ">=5.0.0,<7.0.0")
