"""Build .deb packages with dpkg-deb and a signed flat APT repository from them.

Shared by the lab's vendor-package builders (lab/packages/<vendor>/build.py). Nothing here
knows a vendor: a package is a control dict plus a staging tree; a repository is a directory
of .deb files with Packages, Packages.gz, Release, InRelease and Release.gpg, signed by the
lab's own key (kept under $AI_L1_CACHE/packages/gnupg, created once). Nodes trust that key
through `signed-by`, exactly as they trust a vendor's key.
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

CACHE = Path(os.environ.get("AI_L1_CACHE", "/var/cache/ai-l1"))
GNUPG = CACHE / "packages" / "gnupg"
KEY_UID = "ai-l1 lab packages <lab-packages@ai-l1.invalid>"
EPOCH = "1700000000"  # SOURCE_DATE_EPOCH: the same inputs give the same .deb


class BuildError(Exception):
    pass


def run(argv: list[str], **kw) -> str:
    env = {**os.environ, "GNUPGHOME": str(GNUPG), "SOURCE_DATE_EPOCH": EPOCH, **kw.pop("env", {})}
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, env=env, **kw)
    if proc.returncode != 0:
        raise BuildError(f"{' '.join(argv[:3])}: {proc.stderr.strip()[-1500:]}")
    return proc.stdout


@contextlib.contextmanager
def locked(name: str):
    lock_dir = CACHE / "locks"
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / f"{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def tree_hash(paths: list[Path]) -> str:
    """sha256 over the files (names and contents) under paths, sorted."""
    h = hashlib.sha256()
    for root in paths:
        files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
        for f in files:
            if "__pycache__" in f.parts:
                continue
            h.update(str(f.relative_to(root.parent)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def build_deb(stage: Path, control: dict[str, str], out_dir: Path, scripts: dict[str, str] | None = None) -> Path:
    """Write DEBIAN/control (+ maintainer scripts) into stage and build <out_dir>/<name>_<ver>_<arch>.deb."""
    debian = stage / "DEBIAN"
    debian.mkdir(parents=True, exist_ok=True)
    text = "".join(f"{k}: {v}\n" for k, v in control.items() if v)
    (debian / "control").write_text(text)
    for name, body in (scripts or {}).items():
        (debian / name).write_text(body)
        (debian / name).chmod(0o755)
    conffiles = [str("/" / p.relative_to(stage)) for p in sorted((stage / "etc").rglob("*"))
                 if p.is_file()] if (stage / "etc").is_dir() else []
    if conffiles:
        (debian / "conffiles").write_text("\n".join(conffiles) + "\n")
    version = control["Version"].split(":", 1)[-1]
    deb = out_dir / f"{control['Package']}_{version}_{control['Architecture']}.deb"
    run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(stage), str(deb)])
    return deb


def ensure_key() -> str:
    """The lab signing key's fingerprint (created on first use)."""
    GNUPG.mkdir(parents=True, exist_ok=True)
    GNUPG.chmod(0o700)
    with locked("packages-gnupg"):
        out = run(["gpg", "--batch", "--with-colons", "--list-secret-keys"], env={}) \
            if any(GNUPG.glob("private-keys-v1.d/*")) else ""
        fprs = [ln.split(":")[9] for ln in out.splitlines() if ln.startswith("fpr:")]
        if fprs:
            return fprs[0]
        run(["gpg", "--batch", "--passphrase", "", "--quick-gen-key", KEY_UID, "ed25519", "sign", "never"])
        out = run(["gpg", "--batch", "--with-colons", "--list-secret-keys"])
        return [ln.split(":")[9] for ln in out.splitlines() if ln.startswith("fpr:")][0]


def flat_repo(repo: Path, debs: list[Path], origin: str, key_name: str) -> None:
    """Make repo a signed flat repository (`deb [signed-by=KEY] URL /`) holding exactly debs."""
    repo.mkdir(parents=True, exist_ok=True)
    for deb in debs:
        if deb.parent != repo:
            shutil.copy2(deb, repo / deb.name)
    packages = run(["dpkg-scanpackages", "--multiversion", "."], cwd=repo)
    (repo / "Packages").write_text(packages)
    with gzip.GzipFile(repo / "Packages.gz", "wb", mtime=int(EPOCH)) as gz:
        gz.write(packages.encode())
    lines = [f"Origin: {origin}", f"Label: {origin}", "Suite: stable", "Codename: stable",
             f"Date: {run(['date', '-R', '-u', '-d', '@' + EPOCH]).strip()}", "Architectures: amd64 all",
             "Acquire-By-Hash: no"]
    for field, algo in (("MD5Sum", "md5"), ("SHA256", "sha256")):
        lines.append(f"{field}:")
        for name in ("Packages", "Packages.gz"):
            data = (repo / name).read_bytes()
            lines.append(f" {hashlib.new(algo, data).hexdigest()} {len(data):>8} {name}")
    (repo / "Release").write_text("\n".join(lines) + "\n")
    fpr = ensure_key()
    for f in ("InRelease", "Release.gpg"):
        (repo / f).unlink(missing_ok=True)
    run(["gpg", "--batch", "--yes", "--local-user", fpr, "--clearsign", "-o", str(repo / "InRelease"),
         str(repo / "Release")])
    run(["gpg", "--batch", "--yes", "--local-user", fpr, "--armor", "--detach-sign", "-o",
         str(repo / "Release.gpg"), str(repo / "Release")])
    (repo / key_name).write_text(run(["gpg", "--batch", "--armor", "--export", fpr]))


def publish_tree(src: Path, dest: Path) -> bool:
    """Make dest hold exactly src's files (hard links where possible). True when something changed."""
    changed = False
    dest.mkdir(parents=True, exist_ok=True)
    want = {p.name for p in src.iterdir() if p.is_file()}
    for stale in dest.iterdir():
        if stale.is_file() and stale.name not in want:
            stale.unlink()
            changed = True
    for name in sorted(want):
        s, d = src / name, dest / name
        if d.exists() and d.stat().st_ino == s.stat().st_ino:
            continue
        tmp = d.with_name(d.name + ".partial")
        tmp.unlink(missing_ok=True)
        try:
            os.link(s, tmp)
        except OSError:
            shutil.copy2(s, tmp)
        tmp.replace(d)
        changed = True
    return changed
