"""The artifact manifest loader, validator, resolver and bundle (artifacts/artifacts.py)."""

from __future__ import annotations

import copy
import hashlib
import http.server
import json
import re
import sys
import tarfile
import threading
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from artifacts import artifacts as lib  # noqa: E402

SHA_A = "a" * 64
SHA_B = "b" * 64


def doc(**over) -> dict:
    base = {
        "schema_version": 1,
        "arches": ["amd64", "arm64"],
        "bases": {"files": {"dl": "https://dl.example.org/pub"}, "images": {"reg": "registry.example.org"}},
        "artifacts": [
            {"name": "tool", "kind": "binary", "version": "v1.2.3",
             "url": "{{ dl }}/{{ version }}/linux/{{ arch }}/tool", "sha256": {"amd64": SHA_A}},
            {"name": "tool-image", "kind": "image", "version": "v1.2.3",
             "image": "{{ reg }}/tool:{{ version }}", "aliases": ["{{ reg }}/x/tool:{{ version }}"],
             "sha256": {"amd64": "sha256:" + SHA_B}},
        ],
    }
    base.update(over)
    return base


def with_artifact(**fields) -> dict:
    d = doc()
    d["artifacts"][0].update(fields)
    return d


def problems(data: dict) -> str:
    with pytest.raises(lib.ManifestError) as err:
        lib.parse(data)
    return str(err.value)


# ---------------------------------------------------------------- the real manifest

def test_repository_manifest_is_valid():
    manifest = lib.load()
    assert {a.kind for a in manifest.artifacts.values()} <= set(lib.KINDS)
    for name in ("kubeadm", "kubelet", "kubectl", "cni-plugins", "kube-apiserver-image",
                 "kube-controller-manager-image", "kube-scheduler-image", "kube-proxy-image",
                 "etcd-image", "coredns-image", "pause-image"):
        assert name in manifest.artifacts, name


def test_repository_manifest_pins_supported_kubernetes():
    manifest = lib.load()
    major, minor = (int(x) for x in manifest.get("kubeadm").version.lstrip("v").split(".")[:2])
    assert (major, minor) >= (1, 28), "the seed requires Kubernetes 1.28+"
    versions = {manifest.get(n).version for n in ("kubeadm", "kubelet", "kubectl", "kube-apiserver-image")}
    assert len(versions) == 1, f"one Kubernetes version everywhere, got {versions}"


def test_repository_manifest_resolves_upstream_urls():
    entries = {e["name"]: e for e in lib.resolve(lib.load(), "arm64", require_checksums=False)}
    assert entries["kubeadm"]["url"] == "https://dl.k8s.io/release/v1.34.4/bin/linux/arm64/kubeadm"
    assert entries["coredns-image"]["image"] == "registry.k8s.io/coredns/coredns:v1.12.1"
    assert entries["coredns-image"]["aliases"] == ["registry.k8s.io/coredns:v1.12.1"]


def test_repository_manifest_checksums_are_not_invented():
    """Every checksum in the repo must be one somebody verified; the lab's live in an overlay."""
    text = (REPO / "artifacts" / "manifest.yml").read_text()
    for art in yaml.safe_load(text)["artifacts"]:
        for arch, value in (art.get("sha256") or {}).items():
            assert value not in (SHA_A, "0" * 64), f"{art['name']} {arch}: placeholder checksum"


# ---------------------------------------------------------------- refusals

def test_missing_checksum_is_refused_with_the_artifact_name():
    manifest = lib.parse(doc())
    with pytest.raises(lib.ManifestError) as err:
        lib.resolve(manifest, "arm64")
    assert "tool v1.2.3" in str(err.value)
    assert "tool-image v1.2.3" in str(err.value)
    assert "arm64" in str(err.value)


def test_missing_checksum_only_names_the_missing_ones():
    d = doc()
    d["artifacts"][1]["sha256"] = {}
    with pytest.raises(lib.ManifestError) as err:
        lib.resolve(lib.parse(d), "amd64")
    assert "tool-image" in str(err.value)
    assert "tool v1.2.3" not in str(err.value)


def test_blank_checksum_counts_as_missing():
    d = with_artifact(sha256={"amd64": ""})
    with pytest.raises(lib.ManifestError, match="tool v1.2.3"):
        lib.resolve(lib.parse(d), "amd64", names=["tool"])


def test_unknown_arch_is_refused():
    with pytest.raises(lib.ManifestError, match=r"unknown arch 'ppc64le' \(manifest arches: amd64, arm64\)"):
        lib.resolve(lib.parse(doc()), "ppc64le")


def test_checksum_for_unknown_arch_is_refused():
    assert "sha256 for unknown arch 'riscv64'" in problems(with_artifact(sha256={"riscv64": SHA_A}))


@pytest.mark.parametrize(("url", "expected"), [
    ("{{ dl }}/{{ verison }}/tool", "unknown placeholder '{{ verison }}'"),
    ("{{ dl }}/{{ version }/tool", "malformed placeholder"),
    ("{{ dl }}/{version}/tool", "malformed placeholder"),
    ("https://dl.example.org/{{ version }}/tool", "must start with a files base placeholder"),
    ("{{ reg }}/{{ version }}/tool", "unknown placeholder '{{ reg }}'"),
    ("", "template must be a non-empty string"),
])
def test_bad_url_template_is_refused(url, expected):
    assert expected in problems(with_artifact(url=url))


def test_image_must_start_with_an_images_base():
    d = doc()
    d["artifacts"][1]["image"] = "docker.io/tool:{{ version }}"
    assert "must start with a images base placeholder" in problems(d)


@pytest.mark.parametrize(("fields", "expected"), [
    ({"kind": "rpm"}, "kind must be one of binary, archive, file, image"),
    ({"version": 3.10}, "version must be a non-empty string"),
    ({"sha256": {"amd64": "ABC"}}, "must be <64 lowercase hex>"),
    ({"sha256": {"amd64": "sha256:" + SHA_A}}, "must be <64 lowercase hex>"),
    ({"image": "{{ reg }}/x:1"}, "a binary has 'url', not 'image'"),
    ({"aliases": ["{{ dl }}/y"]}, "only images have aliases"),
    ({"checksum": SHA_A}, "unknown keys checksum"),
    ({"name": "Tool"}, "name must match"),
])
def test_bad_artifact_fields_are_refused(fields, expected):
    assert expected in problems(with_artifact(**fields))


def test_image_checksum_must_be_a_digest():
    d = doc()
    d["artifacts"][1]["sha256"] = {"amd64": SHA_B}
    assert "must be sha256:<64 hex>" in problems(d)


def test_duplicate_names_are_refused():
    d = doc()
    d["artifacts"].append(copy.deepcopy(d["artifacts"][0]))
    assert "artifact 'tool': duplicate name" in problems(d)


@pytest.mark.parametrize(("bases", "expected"), [
    ({"files": {"dl": "ftp://x"}, "images": {"reg": "r.example"}}, "must be an http(s) URL"),
    ({"files": {"dl": "https://x"}, "images": {"reg": "https://r.example"}}, "must be host[:port][/path]"),
    ({"files": {"version": "https://x", "dl": "https://y"}, "images": {"reg": "r"}}, "bad files base name 'version'"),
])
def test_bad_bases_are_refused(bases, expected):
    assert expected in problems(doc(bases=bases))


def test_every_problem_is_reported_at_once():
    d = doc(schema_version=2)
    d["artifacts"][0]["kind"] = "rpm"
    d["artifacts"][1]["sha256"] = {"s390x": "x"}
    text = problems(d)
    assert "schema_version must be 1" in text
    assert "kind must be one of" in text
    assert "unknown arch 's390x'" in text


# ---------------------------------------------------------------- mirrors and overlays

def test_files_mirror_redirects_every_url_keeping_host_and_path():
    [entry] = lib.resolve(lib.parse(doc()), "amd64", files_mirror="http://10.89.100.1:8080/", names=["tool"])
    assert entry["url"] == "http://10.89.100.1:8080/dl.example.org/pub/v1.2.3/linux/amd64/tool"
    assert entry["upstream"] == "https://dl.example.org/pub/v1.2.3/linux/amd64/tool"
    assert entry["mirror_path"] == "dl.example.org/pub/v1.2.3/linux/amd64/tool"
    assert entry["sha256"] == SHA_A


def test_images_mirror_redirects_image_and_aliases():
    [entry] = lib.resolve(lib.parse(doc()), "amd64", images_mirror="10.89.100.1:5000", names=["tool-image"])
    assert entry["image"] == "10.89.100.1:5000/tool:v1.2.3"
    assert entry["aliases"] == ["10.89.100.1:5000/x/tool:v1.2.3"]
    assert entry["upstream"] == "registry.example.org/tool:v1.2.3"


@pytest.mark.parametrize(("kw", "expected"), [
    ({"files_mirror": "10.89.100.1:8080"}, "files mirror must be an http(s) URL"),
    ({"images_mirror": "http://10.89.100.1:5000"}, "images mirror must be host[:port][/path]"),
])
def test_bad_mirror_values_are_refused(kw, expected):
    with pytest.raises(lib.ManifestError, match=re.escape(expected)):
        lib.resolve(lib.parse(doc()), "amd64", **kw)


def test_overlay_replaces_checksums(tmp_path):
    overlay = {"artifacts": {"tool": {"version": "v1.2.3", "sha256": {"arm64": SHA_B}}}}
    manifest = lib.apply_overlay(lib.parse(doc()), overlay)
    assert manifest.get("tool").sha256 == {"arm64": SHA_B}
    [entry] = lib.resolve(manifest, "arm64", names=["tool"])
    assert entry["sha256"] == SHA_B


def test_overlay_for_another_version_is_refused():
    overlay = {"artifacts": {"tool": {"version": "v1.2.2", "sha256": {"amd64": SHA_B}}}}
    with pytest.raises(lib.ManifestError, match="'tool' is for version 'v1.2.2', the manifest pins 'v1.2.3'"):
        lib.apply_overlay(lib.parse(doc()), overlay)


def test_overlay_for_unknown_artifact_is_refused():
    with pytest.raises(lib.ManifestError, match="artifact 'nope' is not in the manifest"):
        lib.apply_overlay(lib.parse(doc()), {"artifacts": {"nope": {"version": "1", "sha256": {}}}})


def test_load_reads_manifest_and_overlay_files(tmp_path):
    (tmp_path / "m.yml").write_text(yaml.safe_dump(doc()))
    (tmp_path / "o.yml").write_text(json.dumps({"files_mirror": "x", "artifacts": {
        "tool-image": {"version": "v1.2.3", "sha256": {"arm64": "sha256:" + SHA_A}}}}))
    manifest = lib.load(tmp_path / "m.yml", tmp_path / "o.yml")
    assert manifest.get("tool-image").sha256 == {"arm64": "sha256:" + SHA_A}


# ---------------------------------------------------------------- CLI and bundle

def test_cli_refusal_exits_2_with_the_names(tmp_path, capsys):
    (tmp_path / "m.yml").write_text(yaml.safe_dump(doc()))
    assert lib.main(["--manifest", str(tmp_path / "m.yml"), "resolve", "--arch", "arm64"]) == 2
    err = capsys.readouterr().err
    assert "refusing artifacts without a sha256 for arm64: tool v1.2.3, tool-image v1.2.3" in err


def test_cli_validate_lists_missing_checksums(tmp_path, capsys):
    (tmp_path / "m.yml").write_text(yaml.safe_dump(doc()))
    assert lib.main(["--manifest", str(tmp_path / "m.yml"), "validate"]) == 0
    out = capsys.readouterr().out
    assert "amd64: 2/2 artifacts have a sha256" in out
    assert "arm64: 0/2 artifacts have a sha256; missing: tool, tool-image" in out


@pytest.fixture
def file_server(tmp_path):
    root = tmp_path / "www"
    root.mkdir()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(root), **kw)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def files_only_manifest(sha: str) -> lib.Manifest:
    d = doc()
    d["artifacts"] = [d["artifacts"][0]]
    d["artifacts"][0]["sha256"] = {"amd64": sha}
    return lib.parse(d)


def test_bundle_downloads_through_the_mirror_and_verifies(tmp_path, file_server):
    root, url = file_server
    payload = b"#!/bin/sh\necho tool\n"
    target = root / "dl.example.org/pub/v1.2.3/linux/amd64/tool"
    target.parent.mkdir(parents=True)
    target.write_bytes(payload)
    manifest = files_only_manifest(hashlib.sha256(payload).hexdigest())
    tar = lib.bundle(manifest, "amd64", tmp_path / "bundle", files_mirror=url)
    assert tar == tmp_path / "bundle.tar"
    assert (tmp_path / "bundle/files/dl.example.org/pub/v1.2.3/linux/amd64/tool").read_bytes() == payload
    resolved = json.loads((tmp_path / "bundle/manifest.resolved.json").read_text())
    assert resolved["artifacts"][0]["bundle_path"] == "files/dl.example.org/pub/v1.2.3/linux/amd64/tool"
    sums = (tmp_path / "bundle/SHA256SUMS").read_text()
    assert f"{hashlib.sha256(payload).hexdigest()}  files/dl.example.org" in sums
    with tarfile.open(tar) as tf:
        assert "bundle/files/dl.example.org/pub/v1.2.3/linux/amd64/tool" in tf.getnames()


def test_bundle_refuses_a_checksum_mismatch(tmp_path, file_server):
    root, url = file_server
    target = root / "dl.example.org/pub/v1.2.3/linux/amd64/tool"
    target.parent.mkdir(parents=True)
    target.write_bytes(b"tampered")
    with pytest.raises(lib.ManifestError, match=f"sha256 mismatch, manifest says {SHA_A}"):
        lib.bundle(files_only_manifest(SHA_A), "amd64", tmp_path / "bundle", files_mirror=url, tar=False)
    assert not (tmp_path / "bundle/files/dl.example.org/pub/v1.2.3/linux/amd64/tool").exists()


def test_bundle_refuses_before_downloading_when_a_checksum_is_missing(tmp_path):
    with pytest.raises(lib.ManifestError, match="tool-image"):
        lib.bundle(lib.parse(doc()), "arm64", tmp_path / "bundle", files_mirror="http://127.0.0.1:9")
    assert not (tmp_path / "bundle").exists()


@pytest.mark.parametrize(("image", "repo"), [
    ("registry.k8s.io/kube-apiserver:v1.34.4", "registry.k8s.io/kube-apiserver"),
    ("10.89.100.1:5000/coredns/coredns:v1.12.1", "10.89.100.1:5000/coredns/coredns"),
    ("10.89.100.1:5000/pause", "10.89.100.1:5000/pause"),
    ("127.0.0.1:5000/etcd@sha256:" + SHA_A, "127.0.0.1:5000/etcd"),
])
def test_repository_strips_tag_and_digest_but_not_the_port(image, repo):
    assert lib.repository(image) == repo
