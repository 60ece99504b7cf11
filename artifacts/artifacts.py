#!/usr/bin/env python3
"""The artifact manifest: load, validate, resolve through mirrors, build an offline bundle.

    artifacts.py validate [--overlay F]
    artifacts.py resolve  --arch A [--files-mirror URL] [--images-mirror HOST[:PORT]] [--overlay F]
    artifacts.py bundle   --arch A --out DIR [--files-mirror ...] [--images-mirror ...] [--overlay F]

The manifest (artifacts/manifest.yml) carries upstream URLs and upstream checksums. An
overlay (written by the lab's mirror, lab/mirror/mirror.py) replaces the checksums of the
artifacts it lists, so a site or the lab that builds its own artifacts never edits the
manifest and never weakens it. Resolution refuses an artifact that has no checksum for the
target arch and names it.

Only the standard library and PyYAML: the same code runs on a controller, in CI and on an
air-gapped jump host.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import yaml


def _load_mirror_rule():
    """The mirror rule shared with the filter ai_platform.l1.mirror_url (the collection's
    module_utils/mirror.py, standard library only), loaded by its path: no Ansible needed here."""
    path = (Path(__file__).resolve().parents[1] / "collections" / "ansible_collections" / "ai_platform" / "l1"
            / "plugins" / "module_utils" / "mirror.py")
    spec = importlib.util.spec_from_file_location("ai_l1_mirror_rule", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


mirror_rule = _load_mirror_rule()

MANIFEST = Path(__file__).resolve().parent / "manifest.yml"
KINDS_FILE = ("binary", "archive", "file")
KINDS = (*KINDS_FILE, "image")
PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
FILE_SHA_RE = re.compile(r"^[0-9a-f]{64}$")
IMAGE_SHA_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
BASE_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
# host[:port][/path] with no scheme, as image references are written.
IMAGE_BASE_RE = re.compile(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]{1,5})?(/[a-z0-9._/-]+)?$")
RESERVED = ("version", "arch")


class ManifestError(Exception):
    """Bad manifest, bad overlay or a refused resolution; the message names the artifacts."""

    def __init__(self, problems: list[str] | str) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("; ".join(self.problems))


@dataclass
class Artifact:
    name: str
    kind: str
    version: str
    template: str  # url for files, image reference for images
    sha256: dict[str, str] = field(default_factory=dict)
    aliases: list[str] = field(default_factory=list)

    @property
    def is_image(self) -> bool:
        return self.kind == "image"


@dataclass
class Manifest:
    arches: list[str]
    file_bases: dict[str, str]
    image_bases: dict[str, str]
    artifacts: dict[str, Artifact]
    path: str = ""

    def get(self, name: str) -> Artifact:
        try:
            return self.artifacts[name]
        except KeyError:
            raise ManifestError(f"unknown artifact '{name}' (known: {', '.join(self.artifacts)})") from None


# ---------------------------------------------------------------- loading and validation

def _check_template(where: str, template: object, allowed: set[str], problems: list[str]) -> None:
    if not isinstance(template, str) or not template:
        problems.append(f"{where}: template must be a non-empty string")
        return
    # Anything with braces that is not a well-formed placeholder is a typo, not a literal.
    leftover = PLACEHOLDER.sub("", template)
    if "{" in leftover or "}" in leftover:
        problems.append(f"{where}: malformed placeholder in '{template}' (use '{{{{ name }}}}')")
    for ph in PLACEHOLDER.findall(template):
        if ph not in allowed:
            problems.append(f"{where}: unknown placeholder '{{{{ {ph} }}}}' in '{template}' "
                            f"(allowed: {', '.join(sorted(allowed))})")


def _check_sha(where: str, kind: str, sha: object, arches: list[str], problems: list[str]) -> dict[str, str]:
    if sha is None:
        return {}
    if not isinstance(sha, dict):
        problems.append(f"{where}: sha256 must be a mapping arch -> checksum")
        return {}
    out = {}
    pattern = IMAGE_SHA_RE if kind == "image" else FILE_SHA_RE
    form = "sha256:<64 hex>" if kind == "image" else "<64 lowercase hex>"
    for arch, value in sha.items():
        if arch not in arches:
            problems.append(f"{where}: sha256 for unknown arch '{arch}' (manifest arches: {', '.join(arches)})")
            continue
        if value in (None, ""):
            continue  # an explicit blank means "not known": refused at resolution, not here
        if not isinstance(value, str) or not pattern.match(value):
            problems.append(f"{where}: sha256 for {arch} must be {form}, got {value!r}")
            continue
        out[arch] = value
    return out


def _parse_bases(data: dict, source: str, problems: list[str]) -> tuple[dict, dict]:
    bases = data.get("bases") or {}
    file_bases = bases.get("files") or {}
    image_bases = bases.get("images") or {}
    for bname, url in file_bases.items():
        parts = urlsplit(url) if isinstance(url, str) else None
        if not BASE_NAME_RE.match(str(bname)) or bname in RESERVED:
            problems.append(f"{source}: bad files base name '{bname}'")
        if not parts or parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
            problems.append(f"{source}: files base '{bname}' must be an http(s) URL, got {url!r}")
    for bname, ref in image_bases.items():
        if not BASE_NAME_RE.match(str(bname)) or bname in RESERVED or bname in file_bases:
            problems.append(f"{source}: bad images base name '{bname}'")
        if not isinstance(ref, str) or not IMAGE_BASE_RE.match(ref):
            problems.append(f"{source}: images base '{bname}' must be host[:port][/path], got {ref!r}")
    return dict(file_bases), dict(image_bases)


def _parse_artifact(item: dict, where: str, arches: list[str], bases_by_kind: tuple[dict, dict],
                    problems: list[str]) -> Artifact | None:
    name, kind, version = item.get("name"), item.get("kind"), item.get("version")
    file_bases, image_bases = bases_by_kind
    if kind not in KINDS:
        problems.append(f"{where}: kind must be one of {', '.join(KINDS)}, got {kind!r}")
        return None
    if not isinstance(version, str) or not version.strip():
        problems.append(f"{where}: version must be a non-empty string (quote numbers like \"3.10\")")
        return None
    if kind == "image":
        key, other, bases = "image", "url", image_bases
    else:
        key, other, bases = "url", "image", file_bases
    allowed = {"version", "arch", *bases}
    if other in item:
        problems.append(f"{where}: a {kind} has '{key}', not '{other}'")
    template = item.get(key)
    _check_template(f"{where} {key}", template, allowed, problems)
    if isinstance(template, str):
        # The template must start with a base so that a mirror variable can redirect it.
        first = PLACEHOLDER.match(template)
        if not first or first.group(1) not in bases:
            problems.append(f"{where}: {key} must start with a {'images' if kind == 'image' else 'files'} "
                            f"base placeholder so mirrors can redirect it "
                            f"(one of: {', '.join(bases) or 'none defined'})")
    aliases = item.get("aliases") or []
    if aliases and kind != "image":
        problems.append(f"{where}: only images have aliases")
    for alias in aliases:
        _check_template(f"{where} alias", alias, allowed, problems)
    sha = _check_sha(where, kind, item.get("sha256"), arches, problems)
    unknown = set(item) - {"name", "kind", "version", "url", "image", "aliases", "sha256"}
    if unknown:
        problems.append(f"{where}: unknown keys {', '.join(sorted(unknown))}")
    return Artifact(name, kind, version, template if isinstance(template, str) else "", sha, list(aliases))


def parse(data: object, source: str = "<manifest>") -> Manifest:
    """Validate a manifest document and return it; every problem is reported at once."""
    problems: list[str] = []
    if not isinstance(data, dict):
        raise ManifestError(f"{source}: a manifest is a mapping")
    if data.get("schema_version") != 1:
        problems.append(f"{source}: schema_version must be 1, got {data.get('schema_version')!r}")
    arches = data.get("arches")
    if not isinstance(arches, list) or not arches or not all(isinstance(a, str) and a for a in arches):
        problems.append(f"{source}: arches must be a non-empty list of names")
        arches = []
    file_bases, image_bases = _parse_bases(data, source, problems)
    artifacts: dict[str, Artifact] = {}
    items = data.get("artifacts")
    if not isinstance(items, list) or not items:
        problems.append(f"{source}: artifacts must be a non-empty list")
        items = []
    for idx, item in enumerate(items):
        if not isinstance(item, dict):
            problems.append(f"{source}: artifacts[{idx}] must be a mapping")
            continue
        name = item.get("name")
        where = f"artifact '{name}'" if name else f"{source}: artifacts[{idx}]"
        if not isinstance(name, str) or not NAME_RE.match(name):
            problems.append(f"{where}: name must match {NAME_RE.pattern}")
        elif name in artifacts:
            problems.append(f"{where}: duplicate name")
        else:
            art = _parse_artifact(item, where, arches, (file_bases, image_bases), problems)
            if art:
                artifacts[name] = art
    if problems:
        raise ManifestError(problems)
    return Manifest(list(arches), file_bases, image_bases, artifacts, source)


def apply_overlay(manifest: Manifest, overlay: object, source: str = "<overlay>") -> Manifest:
    """Replace checksums from an overlay: {artifacts: {name: {version, sha256: {arch: sum}}}}.

    An overlay entry for a different version than the manifest's is stale and refused: its
    checksum belongs to another file.
    """
    problems: list[str] = []
    if not isinstance(overlay, dict) or not isinstance(overlay.get("artifacts"), dict):
        raise ManifestError(f"{source}: an overlay is a mapping with an 'artifacts' mapping")
    for name, entry in overlay["artifacts"].items():
        if name not in manifest.artifacts:
            problems.append(f"{source}: artifact '{name}' is not in the manifest")
            continue
        art = manifest.artifacts[name]
        if not isinstance(entry, dict):
            problems.append(f"{source}: artifact '{name}' must be a mapping")
            continue
        if str(entry.get("version")) != art.version:
            problems.append(f"{source}: artifact '{name}' is for version {entry.get('version')!r}, "
                            f"the manifest pins {art.version!r} (rebuild the lab artifacts)")
            continue
        art.sha256 = _check_sha(f"{source}: artifact '{name}'", art.kind, entry.get("sha256"),
                                manifest.arches, problems)
    if problems:
        raise ManifestError(problems)
    return manifest


def load(path: str | os.PathLike | None = None, overlay: str | os.PathLike | None = None) -> Manifest:
    path = Path(path or MANIFEST)
    manifest = parse(yaml.safe_load(path.read_text()), str(path))
    if overlay:
        apply_overlay(manifest, yaml.safe_load(Path(overlay).read_text()), str(overlay))
    return manifest


# ---------------------------------------------------------------- resolution

def render(template: str, values: dict[str, str]) -> str:
    return PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def mirrored_file_base(base: str, files_mirror: str) -> str:
    """A files base through the files mirror: M/<base without its scheme> (artifacts/README.md)."""
    return mirror_rule.files_url(base.rstrip("/"), files_mirror)


def mirror_relpath(url: str) -> str:
    """Where a file lives under a files mirror: <host>/<path> of its upstream URL."""
    parts = urlsplit(url)
    return (parts.netloc + parts.path).strip("/")


def base_values(manifest: Manifest, files_mirror: str | None = None,
                images_mirror: str | None = None) -> dict[str, str]:
    values = {}
    for name, base in manifest.file_bases.items():
        values[name] = mirrored_file_base(base, files_mirror) if files_mirror else base.rstrip("/")
    for name, base in manifest.image_bases.items():
        values[name] = mirror_rule.image_ref(base, images_mirror, [base]) if images_mirror else base
    return values


def check_mirrors(files_mirror: str | None, images_mirror: str | None) -> None:
    if files_mirror:
        parts = urlsplit(files_mirror)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ManifestError(f"files mirror must be an http(s) URL, got {files_mirror!r}")
    if images_mirror and not IMAGE_BASE_RE.match(images_mirror):
        raise ManifestError(f"images mirror must be host[:port][/path], got {images_mirror!r}")


def resolve(manifest: Manifest, arch: str, *, files_mirror: str | None = None,
            images_mirror: str | None = None, names: list[str] | None = None,
            require_checksums: bool = True) -> list[dict]:
    """Concrete URLs/references and checksums for one arch, through the mirrors.

    Refuses (ManifestError naming every offender) an unknown arch and, unless told not to,
    any artifact without a checksum for that arch.
    """
    if arch not in manifest.arches:
        raise ManifestError(f"unknown arch '{arch}' (manifest arches: {', '.join(manifest.arches)})")
    check_mirrors(files_mirror, images_mirror)
    upstream = base_values(manifest)
    values = base_values(manifest, files_mirror, images_mirror)
    selected = [manifest.get(n) for n in names] if names else list(manifest.artifacts.values())
    missing = [f"{a.name} {a.version}" for a in selected if arch not in a.sha256]
    if missing and require_checksums:
        raise ManifestError(f"refusing artifacts without a sha256 for {arch}: {', '.join(missing)} "
                            "(add them to artifacts/manifest.yml or pass an overlay)")
    out = []
    for art in selected:
        ctx = {"version": art.version, "arch": arch}
        entry = {"name": art.name, "kind": art.kind, "version": art.version,
                 "sha256": art.sha256.get(arch)}
        if art.is_image:
            entry["image"] = render(art.template, {**values, **ctx})
            entry["aliases"] = [render(a, {**values, **ctx}) for a in art.aliases]
            entry["upstream"] = render(art.template, {**upstream, **ctx})
        else:
            entry["url"] = render(art.template, {**values, **ctx})
            entry["upstream"] = render(art.template, {**upstream, **ctx})
            entry["mirror_path"] = mirror_relpath(entry["upstream"])
        out.append(entry)
    return out


# ---------------------------------------------------------------- offline bundle

def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def download(url: str, dest: Path, sha: str) -> None:
    """Download url to dest unless a file with that sha256 is there; refuse a mismatch."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists() and sha256_file(dest) == sha:
        return
    tmp = dest.with_name(dest.name + ".partial")
    with urllib.request.urlopen(url, timeout=60) as resp, open(tmp, "wb") as out:  # noqa: S310
        shutil.copyfileobj(resp, out, 1 << 20)
    got = sha256_file(tmp)
    if got != sha:
        tmp.unlink()
        raise ManifestError(f"{url}: sha256 mismatch, manifest says {sha}, got {got}")
    tmp.replace(dest)


def repository(image: str) -> str:
    """An image reference without its tag or digest."""
    image = image.split("@", 1)[0]
    head, _, tail = image.rpartition(":")
    return head if head and "/" not in tail else image


def _podman(*args: str) -> str:
    proc = subprocess.run(["podman", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ManifestError(f"podman {' '.join(args)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout.strip()


def bundle(manifest: Manifest, arch: str, out: Path, *, files_mirror: str | None = None,
           images_mirror: str | None = None, insecure: bool = False, tar: bool = True) -> Path:
    """Download every file and image of one arch into an offline bundle.

    Layout: files/<host>/<path> (the files-mirror layout: unpack it into a web root),
    images/<name>.tar (`podman load`-able, carrying the upstream name and aliases),
    manifest.resolved.json and SHA256SUMS. With tar=True the directory is packed as
    <out>.tar next to it.
    """
    entries = resolve(manifest, arch, files_mirror=files_mirror, images_mirror=images_mirror)
    upstream_entries = {e["name"]: e for e in resolve(manifest, arch)}
    out.mkdir(parents=True, exist_ok=True)
    for entry in entries:
        if entry["kind"] == "image":
            # Pulled by digest: the registry and podman check the content is the pinned one.
            ref = f"{repository(entry['image'])}@{entry['sha256']}"
            pull = ["pull", "--quiet"]
            if insecure:
                pull.append("--tls-verify=false")
            _podman(*pull, ref)
            # Saved under the upstream names, so a site loads them and re-tags for its registry.
            up = upstream_entries[entry["name"]]
            names = [up["image"], *up["aliases"]]
            for name in names:
                _podman("tag", ref, name)
            dest = out / "images" / f"{entry['name']}.tar"
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.unlink(missing_ok=True)
            try:
                _podman("save", "--format", "docker-archive", "-m", "-o", str(dest), *names)
            finally:
                # The upstream names were only for the archive: leave the local store as it was.
                _podman("untag", ref, *names)
            entry["bundle_path"] = str(dest.relative_to(out))
        else:
            dest = out / "files" / entry["mirror_path"]
            download(entry["url"], dest, entry["sha256"])
            entry["bundle_path"] = str(dest.relative_to(out))
    (out / "manifest.resolved.json").write_text(json.dumps(
        {"arch": arch, "artifacts": entries}, indent=2, sort_keys=True) + "\n")
    sums = []
    for path in sorted(p for p in out.rglob("*") if p.is_file() and p.name != "SHA256SUMS"):
        sums.append(f"{sha256_file(path)}  {path.relative_to(out)}")
    (out / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    if not tar:
        return out
    tar_path = out.with_name(out.name + ".tar")
    with tempfile.NamedTemporaryFile(dir=tar_path.parent, delete=False, suffix=".partial") as tmp:
        with tarfile.open(fileobj=tmp, mode="w") as tf:
            tf.add(out, arcname=out.name)
    Path(tmp.name).replace(tar_path)
    return tar_path


# ---------------------------------------------------------------- CLI

def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifest", default=str(MANIFEST))
    parser.add_argument("--overlay", help="checksum overlay (the lab's: see lab/mirror/mirror.py status)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("validate", help="check the manifest (and overlay); lists artifacts missing checksums")
    for name in ("resolve", "bundle"):
        p = sub.add_parser(name)
        p.add_argument("--arch", required=True)
        p.add_argument("--files-mirror")
        p.add_argument("--images-mirror")
        if name == "resolve":
            p.add_argument("--allow-missing", action="store_true", help="list artifacts without checksums too")
        else:
            p.add_argument("--out", required=True, help="bundle directory; <out>.tar is written next to it")
            p.add_argument("--insecure-registry", action="store_true", help="pull images over plain HTTP")
            p.add_argument("--no-tar", action="store_true")
    args = parser.parse_args(argv)
    try:
        manifest = load(args.manifest, args.overlay)
        if args.cmd == "validate":
            for arch in manifest.arches:
                missing = [a.name for a in manifest.artifacts.values() if arch not in a.sha256]
                print(f"{arch}: {len(manifest.artifacts) - len(missing)}/{len(manifest.artifacts)} "
                      f"artifacts have a sha256" + (f"; missing: {', '.join(missing)}" if missing else ""))
            print(f"{args.manifest}: valid")
        elif args.cmd == "resolve":
            entries = resolve(manifest, args.arch, files_mirror=args.files_mirror,
                              images_mirror=args.images_mirror, require_checksums=not args.allow_missing)
            print(json.dumps(entries, indent=2))
        else:
            path = bundle(manifest, args.arch, Path(args.out), files_mirror=args.files_mirror,
                          images_mirror=args.images_mirror, insecure=args.insecure_registry,
                          tar=not args.no_tar)
            print(f"bundle: {path}")
    except ManifestError as exc:
        for problem in exc.problems:
            print(f"artifacts: {problem}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
