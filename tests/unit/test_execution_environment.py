"""The execution environment (execution-environment.yml, ansible-builder v3) stays buildable and in step.

- its ansible-core, ansible-runner and Python pins are requirements.txt's, its Galaxy requirements
  the project's requirements.yml, the promtool/amtool images the manifest's versions;
- `ansible-builder create` writes a complete build context (as `make ee` does, here into a
  temporary directory): the collection's tarball from this tree, the requirement files, the base
  image as the EE_BASE_IMAGE build argument;
- the collection's meta/execution-environment.yml is read by ansible-builder's own introspection
  (the code that runs inside the build) and yields the controller-side libraries, in range of the pins.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from ansible_builder._target_scripts import introspect
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
EE = yaml.safe_load((ROOT / "execution-environment.yml").read_text())
COLLECTION = ROOT / "collections" / "ansible_collections" / "ai_platform" / "l1"
BIN = Path(sys.executable).parent


def pins() -> dict[str, str]:
    """requirements.txt as {lower-case name: version}."""
    out = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, version = line.split("==")
            out[name.lower()] = version.strip()
    return out


def test_ansible_core_and_runner_are_the_pinned_ones():
    deps = EE["dependencies"]
    assert EE["version"] == 3
    assert deps["ansible_core"]["package_pip"] == f"ansible-core=={pins()['ansible-core']}"
    assert deps["ansible_runner"]["package_pip"] == f"ansible-runner=={pins()['ansible-runner']}"


def test_python_dependencies_are_pinned_as_in_requirements_txt():
    python = [Requirement(r) for r in EE["dependencies"]["python"]]
    assert {r.name for r in python} >= {"netmiko", "kubernetes"}
    assert "nvidia-ml-py" not in {r.name for r in python}  # node side only
    for r in python:
        assert str(r.specifier) == f"=={pins()[r.name.lower()]}", r


def test_galaxy_requirements_are_the_projects():
    assert EE["dependencies"]["galaxy"] == "requirements.yml"


def test_base_image_is_a_tagged_default_of_the_build_argument():
    name = EE["images"]["base_image"]["name"]
    assert ":" in name.rsplit("/", 1)[-1], name


def test_promtool_and_amtool_come_at_the_manifest_versions():
    manifest = {a["name"]: a for a in yaml.safe_load((ROOT / "artifacts/manifest.yml").read_text())["artifacts"]}
    steps = EE["additional_build_steps"]["append_final"]
    for artifact, binary in (("prometheus-image", "promtool"), ("alertmanager-image", "amtool")):
        image = manifest[artifact]["image"].replace("{{ quay_io }}", "quay.io").replace(
            "{{ version }}", manifest[artifact]["version"])
        assert f"COPY --from={image} /bin/{binary} /usr/local/bin/{binary}" in steps


def test_collection_metadata_as_ansible_builder_reads_it():
    """introspect runs inside the build, on the installed collection; its paths are the collection root's."""
    python, system = introspect.process_collection(str(COLLECTION))
    requirements = [Requirement(line) for line in python]
    assert [r.name for r in requirements] == ["netmiko"]
    for r in requirements:
        assert r.specifier.contains(pins()[r.name.lower()]), r
    assert system == []


@pytest.fixture(scope="module")
def context(tmp_path_factory):
    """`make ee` in a scratch copy: the collection tarball, then ansible-builder create."""
    work = tmp_path_factory.mktemp("ee")
    for name in ("execution-environment.yml", "requirements.yml"):
        shutil.copy(ROOT / name, work / name)
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "PATH": f"{BIN}:{os.environ['PATH']}"}
    subprocess.run([str(BIN / "ansible-galaxy"), "collection", "build", "--force", "--output-path",
                    str(work / ".cache/ee/collection"), str(COLLECTION)], check=True, env=env, capture_output=True,
                   timeout=600)
    proc = subprocess.run([str(BIN / "ansible-builder"), "create", "-f", str(work / "execution-environment.yml"),
                           "--context", str(work / "context")], env=env, capture_output=True, text=True, timeout=600,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No matches" not in proc.stdout + proc.stderr
    return work / "context"


def test_create_writes_the_build_context(context):
    containerfile = (context / "Containerfile").read_text()
    assert f'ARG EE_BASE_IMAGE="{EE["images"]["base_image"]["name"]}"' in containerfile
    assert "FROM $EE_BASE_IMAGE AS base" in containerfile
    assert (f'ARG ANSIBLE_INSTALL_REFS="ansible-core=={pins()["ansible-core"]} '
            f'ansible-runner=={pins()["ansible-runner"]}"') in containerfile
    assert "ansible-galaxy collection install --offline" in containerfile
    build = context / "_build"
    assert yaml.safe_load((build / "requirements.yml").read_text()) == yaml.safe_load(
        (ROOT / "requirements.yml").read_text())
    assert set((build / "requirements.txt").read_text().split()) == set(EE["dependencies"]["python"])
    assert "openssh-clients [platform:rpm]" in (build / "bindep.txt").read_text().splitlines()


def test_the_context_carries_this_trees_collection(context):
    version = yaml.safe_load((COLLECTION / "galaxy.yml").read_text())["version"]
    [tarball] = (context / "_build" / "collection").iterdir()
    assert tarball.name == f"ai_platform-l1-{version}.tar.gz"
    with tarfile.open(tarball) as tar:
        names = tar.getnames()
    assert "meta/execution-environment.yml" in names and "meta/ee-requirements.txt" in names
    assert "plugins/modules/switch_roce.py" in names
    assert not [n for n in names if n.startswith("tests/output")]
