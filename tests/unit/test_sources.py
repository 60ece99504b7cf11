"""lab/sources.py: the source cache the lab builds upstream releases from (artifacts/sources.yml)."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("lab_sources", REPO / "lab" / "sources.py")
sources = importlib.util.module_from_spec(_spec)
sys.modules["lab_sources"] = sources
_spec.loader.exec_module(sources)


def entry(key: str, data: bytes, builds: list[str] | None = None, **over) -> dict:
    name = key
    item = {"name": name, "version": "v1.0.0", "url": f"https://example.org/{name}/v1.0.0.tar.gz",
            "commit": "a" * 40, "sha256": hashlib.sha256(data).hexdigest(), "licence": "Apache-2.0",
            "builds": builds if builds is not None else ["x-image"]}
    return {**item, **over}


def test_the_repositorys_list_parses_and_names_each_archive_once():
    listed = sources.load()
    assert "k8s-device-plugin" in listed
    assert len({s.filename for s in listed.values()}) == len(listed)
    manifest = yaml.safe_load((REPO / "artifacts" / "manifest.yml").read_text())
    names = {a["name"] for a in manifest["artifacts"]}
    for src in listed.values():
        assert set(src.builds) <= names, f"{src.name} builds artifacts the manifest does not list"


@pytest.mark.parametrize(("over", "message"), [
    ({"sha256": "abc"}, "sha256 must be 64"),
    ({"url": "http://example.org/x.tgz"}, "url must be the upstream https"),
    ({"version": "1.0"}, "version must be the upstream tag"),
    ({"commit": "main"}, "commit must be the tag's"),
    ({"name": "Bad Name"}, "name must match"),
    ({"licence": ""}, "licence missing"),
    ({"file": "../charts/x.tgz"}, "file must be a plain file name"),
    ({"file": "x.zip"}, "file must be a plain file name"),
])
def test_a_bad_entry_is_refused_naming_it(over, message):
    with pytest.raises(sources.SourceError, match=message):
        sources.parse({"sources": [entry("a", b"x", **over)]})


def test_a_release_archive_keeps_its_own_file_name(tmp_path):
    """A packaged chart keeps the name it was mirrored under (`file`), found and checked like any archive."""
    data = b"chart"
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "c-v1.0.0.tgz").write_bytes(data)
    listed = sources.parse({"sources": [entry("c", data, ["c-chart"], file="c-v1.0.0.tgz")]})
    assert listed["c"].filename == "c-v1.0.0.tgz"
    assert sources.fill(listed, [tmp_path / "src"], tmp_path / "cache") == ["c-v1.0.0.tgz"]
    assert (tmp_path / "cache" / "c-v1.0.0.tgz").read_bytes() == data


def test_fill_copies_checks_and_leaves_a_good_copy_alone(tmp_path):
    shelf, cache = tmp_path / "shelf", tmp_path / "cache"
    shelf.mkdir()
    (shelf / "a-v1.0.0.tar.gz").write_bytes(b"archive a")
    listed = sources.parse({"sources": [entry("a", b"archive a"), entry("b", b"b", builds=[])]})
    assert sources.fill(listed, [tmp_path / "nowhere", shelf], cache) == ["a-v1.0.0.tar.gz"]
    assert (cache / "a-v1.0.0.tar.gz").read_bytes() == b"archive a"
    assert sources.fill(listed, [shelf], cache) == []  # cached and right: nothing copied
    src, path = sources.cached("a", listed, cache)
    assert path == cache / "a-v1.0.0.tar.gz" and src.version == "v1.0.0"
    with pytest.raises(sources.SourceError, match="not in the source cache"):
        sources.cached("b", listed, cache)  # needed by nothing, absent: not filled


def test_an_archive_a_build_needs_must_be_found(tmp_path):
    listed = sources.parse({"sources": [entry("a", b"archive a")]})
    with pytest.raises(sources.SourceError, match=r"a-v1.0.0.tar.gz \(builds x-image\): not in .*fetch https://"):
        sources.fill(listed, [tmp_path], tmp_path / "cache")


def test_a_wrong_checksum_is_refused_on_fill_and_on_use(tmp_path):
    shelf, cache = tmp_path / "shelf", tmp_path / "cache"
    shelf.mkdir()
    (shelf / "a-v1.0.0.tar.gz").write_bytes(b"tampered")
    listed = sources.parse({"sources": [entry("a", b"archive a")]})
    with pytest.raises(sources.SourceError, match="sha256 .* artifacts/sources.yml says"):
        sources.fill(listed, [shelf], cache)
    assert not (cache / "a-v1.0.0.tar.gz").exists()
    cache.mkdir(exist_ok=True)
    (cache / "a-v1.0.0.tar.gz").write_bytes(b"changed in the cache")
    with pytest.raises(sources.SourceError, match="remove it and run"):
        sources.cached("a", listed, cache)
