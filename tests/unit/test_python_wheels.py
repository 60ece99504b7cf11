"""roles/python_wheels: the wheel unpacker (files/unpack_wheel.py), how the wheels travel (manifest
entries with upstream checksums, published as is by the lab mirror), and that every pure-Python
wheel a node imports is installed through it from the manifest, nvidia-ml-py included."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
UNPACK = REPO / "roles" / "python_wheels" / "files" / "unpack_wheel.py"
WHEELS = ("python-kubernetes", "python-durationpy", "python-nvidia-ml-py")
sys.path.insert(0, str(REPO))
from artifacts import artifacts as lib  # noqa: E402


def wheel(tmp_path: Path, dist: str, version: str, body: str, *, purelib: str = "true",
          extra: dict[str, str] | None = None) -> Path:
    path = tmp_path / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{dist}/__init__.py", f"__version__ = {version!r}\n{body}")
        zf.writestr(f"{dist}-{version}.dist-info/METADATA", f"Name: {dist}\nVersion: {version}\n")
        zf.writestr(f"{dist}-{version}.dist-info/WHEEL",
                    f"Wheel-Version: 1.0\nRoot-Is-Purelib: {purelib}\nTag: py3-none-any\n")
        zf.writestr(f"{dist}-{version}.dist-info/RECORD", "")
        for name, text in (extra or {}).items():
            zf.writestr(name, text)
    return path


def unpack(site: Path, whl: Path) -> None:
    subprocess.run([sys.executable, str(UNPACK), str(site), str(whl)], check=True, capture_output=True)


def imported_version(site: Path, dist: str) -> str:
    code = f"import importlib.metadata, {dist}; print({dist}.__version__, importlib.metadata.version({dist!r}))"
    out = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(site)!r}); {code}"],
                         check=True, capture_output=True, text=True).stdout.split()
    assert out[0] == out[1], f"package {out[0]} but dist-info {out[1]}"
    return out[0]


def test_unpack_installs_and_an_upgrade_leaves_nothing_of_the_old_version(tmp_path):
    site = tmp_path / "site"  # created by the unpacker
    unpack(site, wheel(tmp_path, "kubernetes", "34.1.0", "OLD_ONLY = 1\n"))
    assert imported_version(site, "kubernetes") == "34.1.0"
    (site / "kubernetes" / "stale.py").write_text("")
    unpack(site, wheel(tmp_path, "kubernetes", "35.0.0", ""))
    assert imported_version(site, "kubernetes") == "35.0.0"
    assert sorted(p.name for p in site.iterdir()) == ["kubernetes", "kubernetes-35.0.0.dist-info"]
    assert not (site / "kubernetes" / "stale.py").exists()
    assert (site / "kubernetes-35.0.0.dist-info" / "INSTALLER").read_text() == "ai_platform python_wheels\n"


def test_an_unreadable_wheel_leaves_the_installed_version_and_no_marker(tmp_path):
    site = tmp_path / "site"
    unpack(site, wheel(tmp_path, "durationpy", "0.10", ""))
    bad = tmp_path / "durationpy-0.11-py3-none-any.whl"
    bad.write_bytes(b"not a zip")
    with pytest.raises(subprocess.CalledProcessError):
        unpack(site, bad)
    assert sorted(p.name for p in site.iterdir()) == ["durationpy", "durationpy-0.10.dist-info"]


@pytest.mark.parametrize(("purelib", "extra", "why"), [
    ("false", {}, "Root-Is-Purelib false"),
    ("true", {"x-1.0.data/scripts/x": "#!/bin/sh\n"}, "x-1.0.data"),
])
def test_a_wheel_that_is_not_pure_python_is_refused_before_anything_changes(tmp_path, purelib, extra, why):
    site = tmp_path / "site"
    unpack(site, wheel(tmp_path, "x", "0.9", ""))
    before = sorted(p.name for p in site.iterdir())
    proc = subprocess.run([sys.executable, str(UNPACK), str(site), str(wheel(tmp_path, "x", "1.0", "", purelib=purelib,
                                                                            extra=extra))],
                          capture_output=True, text=True, check=False)
    assert proc.returncode != 0 and why in proc.stderr and "not a pure-Python wheel" in proc.stderr, proc.stderr
    assert sorted(p.name for p in site.iterdir()) == before


def test_a_module_wheel_unpacks_its_top_level_modules(tmp_path):
    # nvidia-ml-py ships pynvml.py (and example.py) at the top, no package directory.
    path = tmp_path / "nvidia_ml_py-13.0.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("pynvml.py", "VERSION = 13\n")
        zf.writestr("nvidia_ml_py-13.0.0.dist-info/METADATA", "Name: nvidia-ml-py\nVersion: 13.0.0\n")
        zf.writestr("nvidia_ml_py-13.0.0.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\n")
    site = tmp_path / "site"
    unpack(site, path)
    code = ("import importlib.metadata, pynvml; "
            "print(pynvml.VERSION, importlib.metadata.version('nvidia-ml-py'))")
    out = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(site)!r}); {code}"],
                         check=True, capture_output=True, text=True).stdout.split()
    assert out == ["13", "13.0.0"]


def test_the_wheels_have_upstream_checksums_for_every_arch():
    manifest = lib.load()
    for name in WHEELS:
        art = manifest.get(name)
        assert art.kind == "file" and art.template.endswith("-none-any.whl"), name
        assert set(art.sha256) == set(manifest.arches), f"{name}: pure Python, one checksum per arch"
        assert len(set(art.sha256.values())) == 1, f"{name}: the same file serves every arch"
        [entry] = lib.resolve(manifest, "amd64", names=[name], files_mirror="http://m:8080")
        assert entry["url"].startswith("http://m:8080/files.pythonhosted.org/packages/")
        assert Path(entry["url"]).name.split("-")[1] == art.version


def test_mirror_publishes_an_upstream_file_as_is_and_keeps_the_manifest_checksum(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("lab_mirror_python_wheels", REPO / "lab" / "mirror" / "mirror.py")
    mirror = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mirror
    spec.loader.exec_module(mirror)
    content = b"wheel bytes"
    sha = hashlib.sha256(content).hexdigest()
    manifest = lib.parse({
        "schema_version": 1, "arches": ["amd64"],
        "bases": {"files": {"pypi": "https://files.example.org"}},
        "artifacts": [
            {"name": "tool", "kind": "binary", "version": "v1", "url": "{{ pypi }}/tool-{{ version }}",
             "sha256": {}},
            {"name": "python-x", "kind": "file", "version": "1.0",
             "url": "{{ pypi }}/packages/ab/x-{{ version }}-py3-none-any.whl", "sha256": {"amd64": sha}},
        ],
    })
    built = tmp_path / "tool"
    built.write_bytes(b"built")
    supplies = tmp_path / "wheels"
    supplies.mkdir()
    (supplies / "x-1.0-py3-none-any.whl").write_bytes(content)  # what an earlier download left
    for attr, value in {"FILES": tmp_path / "www", "SUPPLIES": supplies, "STATE": tmp_path / "pushed.json",
                        "OVERLAY": tmp_path / "overlay.yml"}.items():
        monkeypatch.setattr(mirror, attr, value)
    monkeypatch.setattr(mirror.manifestlib, "load", lambda overlay=None: manifest)
    record = {"arch": "amd64", "artifacts": {"tool": {"version": "v1", "path": str(built)}}}
    assert sorted(mirror.publish(manifest, record)["changed"]) == ["python-x", "tool"]
    served = tmp_path / "www" / "files.example.org" / "packages" / "ab" / "x-1.0-py3-none-any.whl"
    assert served.read_bytes() == content
    overlay = (tmp_path / "overlay.yml").read_text()
    assert '"tool"' in overlay and "python-x" not in overlay  # the upstream checksum stays in force
    assert mirror.publish(manifest, record)["changed"] == []
    # A file that is not the pinned one is refused, not published.
    (supplies / "x-1.0-py3-none-any.whl").write_bytes(b"tampered")
    served.unlink()
    monkeypatch.setattr(mirror.manifestlib.urllib.request, "urlopen",
                        lambda *a, **k: (_ for _ in ()).throw(OSError("offline")))
    with pytest.raises(OSError):
        mirror.publish(manifest, record)
    assert not served.exists()


def test_nvidia_ml_py_is_pinned_once_for_the_nodes_and_matches_the_controller():
    """The manifest is the nodes' only pin; requirements.txt (the controller's tests) follows it."""
    version = lib.load().get("python-nvidia-ml-py").version
    pins = re.findall(r"(?m)^nvidia-ml-py==(\S+)", (REPO / "requirements.txt").read_text())
    assert pins == [version]
    holders = sorted(str(p.relative_to(REPO)) for top in ("roles", "playbooks", "molecule", "inventories")
                     for p in (REPO / top).rglob("*") if p.is_file() and version in p.read_text(errors="replace"))
    assert holders == []


def test_no_task_puts_pynvml_on_pythonpath():
    """gpu_info finds pynvml in site-packages: an `environment: PYTHONPATH` would not reach a module
    mitogen runs in-process."""
    offenders = []
    for top in ("roles", "playbooks", "molecule"):
        for path in (REPO / top).rglob("*.yml"):
            for doc in yaml.safe_load_all(path.read_text()):
                stack = [doc]
                while stack:
                    node = stack.pop()
                    if isinstance(node, dict):
                        if "PYTHONPATH" in (node.get("environment") or {}):
                            offenders.append(f"{path.relative_to(REPO)}: {node.get('name')}")
                        stack.extend(node.values())
                    elif isinstance(node, list):
                        stack.extend(node)
    assert offenders == []


def test_the_roles_and_playbooks_install_wheels_through_python_wheels():
    def tasks(path: Path) -> list[dict]:
        out, stack = [], list(yaml.safe_load(path.read_text()) or [])
        while stack:
            task = stack.pop()
            out.append(task)
            stack.extend(t for key in ("block", "rescue", "always", "pre_tasks", "tasks") for t in task.get(key) or [])
        return out

    def uses(path: Path) -> list[dict]:
        return [t["vars"] for t in tasks(path) if (t.get("ansible.builtin.include_role") or {}).get("name")
                == "python_wheels"]

    [client] = uses(REPO / "roles/k8s_api_client/tasks/install.yml")
    assert client["python_wheels_names"] == "{{ k8s_api_client_wheels }}"
    [labels] = uses(REPO / "roles/node_labels/tasks/main.yml")
    assert labels["python_wheels_names"] == "{{ node_labels__wheels }}"
    assert yaml.safe_load((REPO / "roles/node_labels/vars/main.yml").read_text())["node_labels__wheels"] == [
        "python-nvidia-ml-py"]
    [nvidia] = uses(REPO / "playbooks/nvidia.yml")
    assert nvidia["python_wheels_names"] == ["python-nvidia-ml-py"] and nvidia["python_wheels_imports"] == ["pynvml"]
    assert not list((REPO / "roles").glob("*/tasks/pynvml.yml"))


# ---------------------------------------------------------------- the role, run for real

ROLE_PLAY = """\
- name: python_wheels on a local interpreter
  hosts: all
  gather_facts: false
  tasks:
    - name: Install the wheels
      ansible.builtin.include_role:
        name: python_wheels
      vars:
        python_wheels_names: [demo]
        python_wheels_python: "{{ t_python }}"
        python_wheels_imports: [demo_pkg]
        python_wheels_artifacts:
          demo: {name: demo, url: "file://{{ t_wheel }}", sha256: "{{ t_sha256 }}", version: "{{ t_version }}"}

    - name: Show the pending wheels
      ansible.builtin.debug:
        var: python_wheels_pending
"""


@pytest.fixture
def role_run(tmp_path):
    """run(version, *args) -> (rc, {task name: result for the host}, stats): the role installs demo_pkg at
    `version` into a fresh venv's site-packages, the wheel cache under tmp_path."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True)
    (tmp_path / "play.yml").write_text(ROLE_PLAY)

    def run(version, *args):
        whl = wheel(tmp_path, "demo_pkg", version, "")
        extra = {"t_python": str(tmp_path / "venv/bin/python"), "t_wheel": str(whl), "t_version": version,
                 "t_sha256": hashlib.sha256(whl.read_bytes()).hexdigest(),
                 "python_wheels__cache": str(tmp_path / "cache")}  # extra variables win over role variables
        env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
               "ANSIBLE_STDOUT_CALLBACK": "ansible.posix.json", "ANSIBLE_CALLBACKS_ENABLED": "ansible.posix.json",
               "ANSIBLE_CACHE_PLUGIN_CONNECTION": str(tmp_path / "facts")}
        proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), str(tmp_path / "play.yml"),
                               "-i", "host,", "-c", "local", "-e", f"ansible_python_interpreter={sys.executable}",
                               "-e", json.dumps(extra), *args],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
        report = json.loads(proc.stdout)
        tasks = {}
        for task in report["plays"][0]["tasks"]:
            result = task["hosts"].get("host")
            if result is not None and not result.get("skipped"):
                tasks.setdefault(task["task"]["name"].split(" : ", 1)[-1], []).append(result)
        return proc.returncode, tasks, report["stats"]["host"]

    return run


def venv_version(tmp_path) -> str:
    code = "import importlib.metadata, demo_pkg; print(demo_pkg.__version__, importlib.metadata.version('demo_pkg'))"
    return subprocess.run([str(tmp_path / "venv/bin/python"), "-c", code], check=True, capture_output=True,
                          text=True).stdout.strip()


def test_the_role_installs_then_a_converged_host_runs_only_the_check(tmp_path, role_run):
    # Check mode on a fresh interpreter: nothing unpacked, the wheel reported pending, no failure.
    rc, tasks, stats = role_run("1.0", "--check")
    assert rc == 0 and stats["failures"] == 0, tasks
    assert tasks["Show the pending wheels"][0]["python_wheels_pending"] == ["demo"]
    assert not (tmp_path / "cache").exists()

    rc, tasks, stats = role_run("1.0")
    assert rc == 0 and stats["changed"] > 0, tasks
    assert venv_version(tmp_path) == "1.0 1.0"
    assert "Unpack the wheels into site-packages" in tasks
    assert len(tasks["Check the wheels import under the interpreter with the pinned versions"]) == 2

    # Converged: one check on the host, nothing downloaded or unpacked, nothing changed.
    rc, tasks, stats = role_run("1.0")
    assert rc == 0 and stats["changed"] == 0, tasks
    remote = sorted(name for name in tasks if name not in (
        "Show the pending wheels", "Report the wheels not unpacked yet (check mode)",
        "Refuse wheels the manifest did not resolve, and wheels that are not pure Python", "Install the wheels")
        and not name.startswith("Validating arguments"))
    assert remote == ["Check the wheels import under the interpreter with the pinned versions"], remote
    assert tasks["Show the pending wheels"][0]["python_wheels_pending"] == []

    # A new pin: the check fails, the install runs, the new version imports.
    rc, tasks, stats = role_run("2.0")
    assert rc == 0 and stats["changed"] > 0, tasks
    assert venv_version(tmp_path) == "2.0 2.0"


def test_the_role_fails_when_the_installed_wheel_does_not_import(tmp_path, role_run):
    assert role_run("1.0")[0] == 0
    site = next((tmp_path / "venv/lib").glob("python3*/site-packages"))
    (site / "demo_pkg" / "__init__.py").write_text("raise ImportError('broken on purpose')\n")
    rc, tasks, _stats = role_run("1.0")
    # The probe sees it, the unpack keeps the pinned .dist-info (creates), the check after it fails.
    assert rc != 0
    [probe, after] = tasks["Check the wheels import under the interpreter with the pinned versions"]
    assert probe["rc"] != 0 and not probe.get("failed") and after.get("failed"), tasks
    assert "broken on purpose" in after["stderr"]
