"""roles/k8s_api_client: the wheel unpacker (files/unpack_wheel.py) and how the client's wheels
travel (manifest entries with upstream checksums, published as is by the lab mirror)."""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
UNPACK = REPO / "roles" / "k8s_api_client" / "files" / "unpack_wheel.py"
sys.path.insert(0, str(REPO))
from artifacts import artifacts as lib  # noqa: E402


def wheel(tmp_path: Path, dist: str, version: str, body: str) -> Path:
    path = tmp_path / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{dist}/__init__.py", f"__version__ = {version!r}\n{body}")
        zf.writestr(f"{dist}-{version}.dist-info/METADATA", f"Name: {dist}\nVersion: {version}\n")
        zf.writestr(f"{dist}-{version}.dist-info/RECORD", "")
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
    assert (site / "kubernetes-35.0.0.dist-info" / "INSTALLER").read_text().startswith("ai_platform")


def test_an_unreadable_wheel_leaves_the_installed_version_and_no_marker(tmp_path):
    site = tmp_path / "site"
    unpack(site, wheel(tmp_path, "durationpy", "0.10", ""))
    bad = tmp_path / "durationpy-0.11-py3-none-any.whl"
    bad.write_bytes(b"not a zip")
    with pytest.raises(subprocess.CalledProcessError):
        unpack(site, bad)
    assert sorted(p.name for p in site.iterdir()) == ["durationpy", "durationpy-0.10.dist-info"]


def test_the_client_wheels_have_upstream_checksums_for_every_arch():
    manifest = lib.load()
    for name in ("python-kubernetes", "python-durationpy"):
        art = manifest.get(name)
        assert art.kind == "file" and art.template.endswith("-none-any.whl"), name
        assert set(art.sha256) == set(manifest.arches), f"{name}: pure Python, one checksum per arch"
        assert len(set(art.sha256.values())) == 1, f"{name}: the same file serves every arch"
        [entry] = lib.resolve(manifest, "amd64", names=[name], files_mirror="http://m:8080")
        assert entry["url"].startswith("http://m:8080/files.pythonhosted.org/packages/")
        assert Path(entry["url"]).name.split("-")[1] == art.version


def test_mirror_publishes_an_upstream_file_as_is_and_keeps_the_manifest_checksum(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("lab_mirror_k8s_api_client", REPO / "lab" / "mirror" / "mirror.py")
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
    (supplies / "x-1.0-py3-none-any.whl").write_bytes(content)  # what make lab-supplies / a download left
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
