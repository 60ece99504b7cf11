#!/usr/bin/env python3
"""The lab's source cache: upstream source archives (artifacts/sources.yml), checked by sha256.

    sources.py fill [--from DIR ...]    copy each listed archive into the cache, checked
    sources.py status                   what the cache holds

The cache is $AI_L1_CACHE/sources (default /var/cache/ai-l1/sources), one file per archive,
`<name>-<version>.tar.gz` or the source's `file` (an archive, or a single released .yaml file).
`fill` looks for that file name in each DIR (--from, else the folders in $AI_L1_SOURCE_DIRS
separated by ':', else ../shared/src, ../shared/charts and each folder of ../shared/crds beside
the repository), checks its sha256 and copies it in atomically; an
archive already cached with the right checksum is left alone. A source that some manifest
artifact is built from (`builds` not empty) must be found: `fill` fails naming where it looked.
Builds read archives through `cached()`, which checks the checksum again, so a file changed in
the cache is refused rather than built.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SOURCES = REPO / "artifacts" / "sources.yml"
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9.-]*$")
SHA_RE = re.compile(r"^[0-9a-f]{64}$")
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
FILE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\.(tar\.gz|tgz|yaml)$")


class SourceError(Exception):
    pass


@dataclass(frozen=True)
class Source:
    name: str
    version: str
    url: str
    commit: str
    sha256: str
    licence: str
    builds: tuple[str, ...]
    file: str = ""

    @property
    def filename(self) -> str:
        return self.file or f"{self.name}-{self.version}.tar.gz"


def cache_dir() -> Path:
    return Path(os.environ.get("AI_L1_CACHE", "/var/cache/ai-l1")) / "sources"


def field_problems(item: dict) -> list[str]:
    """What is wrong with a source entry's version, url, checksums, licence and file name."""
    file = str(item.get("file", ""))
    checks = [
        (str(item.get("version", "")).startswith("v"), "version must be the upstream tag (v...)"),
        (str(item.get("url", "")).startswith("https://"), "url must be the upstream https URL of the release"),
        (SHA_RE.match(str(item.get("sha256", ""))), "sha256 must be 64 lowercase hex digits"),
        (COMMIT_RE.match(str(item.get("commit", ""))), "commit must be the tag's 40-digit commit"),
        (item.get("licence"), "licence missing"),
        (not file or FILE_RE.match(file), f"file must be a plain file name ({FILE_RE.pattern})"),
    ]
    return [message for ok, message in checks if not ok]


def parse(data: object, where: str = "<sources>") -> dict[str, Source]:
    problems: list[str] = []
    items = data.get("sources") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        raise SourceError(f"{where}: expected a mapping with a non-empty list `sources`")
    result: dict[str, Source] = {}
    for i, item in enumerate(items):
        at = f"{where}: sources[{i}]"
        if not isinstance(item, dict):
            problems.append(f"{at}: not a mapping")
            continue
        name, sha, commit = str(item.get("name", "")), str(item.get("sha256", "")), str(item.get("commit", ""))
        at = f"{where}: {name or f'sources[{i}]'}"
        if not NAME_RE.match(name):
            problems.append(f"{at}: name must match {NAME_RE.pattern}")
        if name in result:
            problems.append(f"{at}: listed twice")
        problems += [f"{at}: {message}" for message in field_problems(item)]
        file = str(item.get("file", ""))
        builds = item.get("builds", [])
        if not isinstance(builds, list) or not all(isinstance(b, str) for b in builds):
            problems.append(f"{at}: builds must be a list of manifest artifact names")
            builds = []
        result[name] = Source(name, str(item.get("version", "")), str(item.get("url", "")), commit, sha,
                              str(item.get("licence", "")), tuple(builds), file)
    if problems:
        raise SourceError("\n".join(problems))
    return result


def load(path: Path = SOURCES) -> dict[str, Source]:
    try:
        return parse(yaml.safe_load(path.read_text()), str(path))
    except (OSError, yaml.YAMLError) as exc:
        raise SourceError(f"{path}: {exc}") from exc


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def default_dirs() -> list[Path]:
    configured = os.environ.get("AI_L1_SOURCE_DIRS", "")
    if configured:
        return [Path(d) for d in configured.split(":") if d]
    shared = REPO.parent / "shared"
    # Released files kept one folder per upstream release (the Karmada CRDs).
    return [shared / "src", shared / "charts", *sorted(p for p in (shared / "crds").glob("*") if p.is_dir())]


def fill(sources: dict[str, Source], dirs: list[Path], dest: Path | None = None) -> list[str]:
    """Copy every archive found into the cache; returns what was copied. Raises SourceError when an
    archive that a build needs is found nowhere, or when one found has another checksum."""
    dest = dest or cache_dir()
    dest.mkdir(parents=True, exist_ok=True)
    copied, problems = [], []
    for src in sources.values():
        target = dest / src.filename
        if target.is_file() and sha256_file(target) == src.sha256:
            continue
        found = [d / src.filename for d in dirs if (d / src.filename).is_file()]
        if not found:
            if src.builds:
                problems.append(f"{src.filename} (builds {', '.join(src.builds)}): not in "
                                f"{', '.join(str(d) for d in dirs)}; fetch {src.url} into one of them")
            continue
        got = sha256_file(found[0])
        if got != src.sha256:
            problems.append(f"{found[0]}: sha256 {got}, artifacts/sources.yml says {src.sha256}")
            continue
        fd, tmp = tempfile.mkstemp(dir=dest, prefix=f".{src.filename}.")
        os.close(fd)
        shutil.copyfile(found[0], tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
        copied.append(src.filename)
    if problems:
        raise SourceError("\n".join(problems))
    return copied


def cached(name: str, sources: dict[str, Source] | None = None, dest: Path | None = None) -> tuple[Source, Path]:
    """The cached archive of source `name`, its checksum checked."""
    sources = sources if sources is not None else load()
    if name not in sources:
        raise SourceError(f"{name}: not listed in artifacts/sources.yml")
    src = sources[name]
    path = (dest or cache_dir()) / src.filename
    if not path.is_file():
        raise SourceError(f"{path}: not in the source cache (python lab/sources.py fill)")
    got = sha256_file(path)
    if got != src.sha256:
        raise SourceError(f"{path}: sha256 {got}, artifacts/sources.yml says {src.sha256}; "
                          "remove it and run python lab/sources.py fill")
    return src, path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    fill_p = sub.add_parser("fill", help="copy the listed archives into the source cache")
    fill_p.add_argument("--from", dest="dirs", action="append", type=Path, help="a folder holding archives")
    sub.add_parser("status", help="what the source cache holds")
    args = parser.parse_args(argv)
    try:
        sources = load()
        if args.command == "fill":
            copied = fill(sources, args.dirs or default_dirs())
            print(f"sources: {len(copied)} copied into {cache_dir()}" + (f": {', '.join(copied)}" if copied else ""))
            return 0
        for src in sources.values():
            path = cache_dir() / src.filename
            state = ("absent" if not path.is_file()
                     else "ok" if sha256_file(path) == src.sha256 else "CHECKSUM MISMATCH")
            print(f"{src.filename}: {state}")
        return 0
    except SourceError as exc:
        print(f"sources: FAILED: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
