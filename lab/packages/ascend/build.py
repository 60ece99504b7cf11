#!/usr/bin/env python3
"""Build the lab's Huawei Ascend `.run` installers and publish them on the lab files mirror.

    python lab/packages/ascend/build.py            # build (cached) and publish, print the mirror dir
    python lab/packages/ascend/build.py --list     # print what would be built

Each installer is a self-extracting archive as Huawei ships them (makeself style): a POSIX
shell header, then a gzip'ed tar payload holding `install.sh` and the files it installs.
The header understands the options the real packages take (`--full`, `--upgrade`,
`--check`, `--quiet`, `--version`, `--install-path=DIR`, `--help`) and returns 0 on
success; the firmware installer returns 2 for "installed, takes effect after a reboot".
What they install is the simulated hardware's software side from tests/hardware/npu:

  firmware   <root>/firmware/version.info
  driver     <root>/driver/version.info, the fake npu-smi (<root>/driver/tools/npu-smi and
             /usr/local/sbin/npu-smi), /etc/ascend_install.info; refuses without the
             HwHiAiUser user, as the real one does
  toolkit    <root>/ascend-toolkit/<version>/<arch>-linux/ascend_toolkit_install.info, `latest`
             and set_env.sh
  docker     <root>/Ascend-Docker-Runtime/{ascend-docker-runtime,ascend-docker-hook} (shims
             that run runc: the OCI runtime containerd is configured with)

`--full` refuses an installed package (use --upgrade), `--upgrade` refuses a missing one;
both are no-ops (exit 0) at the same version. A file /etc/ai-l1-fake/npu-firmware-fail makes
the firmware installer fail with its content as the reason (the error-path test).

Outputs are cached under $AI_L1_CACHE/packages/ascend-<hash of this file and the fakes>
(seconds when warm) and hard-linked to $AI_L1_CACHE/mirror/files/ascend/ with a
SHA256SUMS file (served at http://<mirror>:8080/ascend/ by lab/mirror/mirror.py).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import os
import platform
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
NPU = REPO / "tests/hardware/npu"
CACHE = Path(os.environ.get("AI_L1_CACHE", "/var/cache/ai-l1"))
MIRROR_DIR = CACHE / "mirror/files/ascend"

ARCH = platform.machine()                     # x86_64 / aarch64
HDK_ARCH = ARCH.replace("_", "-")             # Huawei's HDK file names say x86-64

# (kind, version, file name, extra): the versions the lab serves.
PACKAGES = [
    ("firmware", "7.0.0.5.242", "Ascend-hdk-910b-npu-firmware_7.0.0.5.242.run"),
    ("firmware", "7.1.0.3.220", "Ascend-hdk-910b-npu-firmware_7.1.0.3.220.run"),
    ("driver", "23.0.rc1", f"Ascend-hdk-910b-npu-driver_23.0.rc1_linux-{HDK_ARCH}.run"),
    ("driver", "23.0.rc3", f"Ascend-hdk-910b-npu-driver_23.0.rc3_linux-{HDK_ARCH}.run"),
    ("toolkit", "7.0.0", f"Ascend-cann-toolkit_7.0.0_linux-{ARCH}.run"),
    ("docker", "5.0.RC3", f"Ascend-docker-runtime_5.0.RC3_linux-{ARCH}.run"),
]

HEADER = r'''#!/bin/sh
# Self-extracting installer (lab build of lab/packages/ascend/build.py): @NAME@
# Payload: gzip'ed tar after line @SKIP@, sha256 @SHA@.
PKG_KIND='@KIND@'
PKG_VERSION='@VERSION@'
PKG_NAME='@NAME@'
PKG_SHA256='@SHA@'
SKIP=@SKIP@
mode=''; quiet=0; root=/usr/local/Ascend
usage() {
  cat <<EOF
Usage: $0 [--full | --upgrade | --check | --version] [--quiet] [--install-path=DIR]
  --full           install on a node without this package
  --upgrade        upgrade an installed package to $PKG_VERSION
  --check          check the package's integrity
  --quiet          no questions, less output
  --install-path   install root (default /usr/local/Ascend)
Exit codes: 0 done, 1 failed, 2 done and a reboot is needed for it to take effect.
EOF
}
for arg in "$@"; do
  case $arg in
    --full|--install) mode=full ;;
    --upgrade) mode=upgrade ;;
    --check) mode=check ;;
    --version) echo "$PKG_VERSION"; exit 0 ;;
    --quiet) quiet=1 ;;
    --install-path=*) root=${arg#--install-path=} ;;
    --nox11|--accept-eula) ;;
    -h|--help) usage; exit 0 ;;
    *) echo "[ERROR] unknown option $arg" >&2; usage >&2; exit 1 ;;
  esac
done
[ -n "$mode" ] || { usage >&2; exit 1; }
payload_sha() { tail -n +"$SKIP" "$0" | sha256sum | cut -d' ' -f1; }
if [ "$(payload_sha)" != "$PKG_SHA256" ]; then
  echo "[ERROR] $PKG_NAME: the package is damaged (payload checksum mismatch)" >&2
  exit 1
fi
if [ "$mode" = check ]; then
  [ "$quiet" = 1 ] || echo "[INFO] $PKG_NAME: integrity check OK"
  exit 0
fi
[ "$(id -u)" = 0 ] || { echo "[ERROR] $PKG_NAME: run as root" >&2; exit 1; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
tail -n +"$SKIP" "$0" | tar -xzf - -C "$tmp" || { echo "[ERROR] $PKG_NAME: cannot extract" >&2; exit 1; }
PKG_MODE=$mode PKG_ROOT=$root PKG_QUIET=$quiet PKG_DIR=$tmp PKG_NAME=$PKG_NAME PKG_VERSION=$PKG_VERSION \
  sh "$tmp/install.sh"
rc=$?
# 2 only when the installer said a reboot is needed; any other failure is 1.
if [ "$rc" = 2 ] && [ -f "$tmp/reboot-required" ]; then exit 2; fi
[ "$rc" = 0 ] && exit 0
echo "[ERROR] $PKG_NAME: installation failed (rc $rc)" >&2
exit 1
'''

COMMON = r'''set -u
say() { [ "$PKG_QUIET" = 1 ] || echo "[INFO] $*"; }
die() { echo "[ERROR] $PKG_NAME: $*" >&2; exit 1; }
installed_version() { sed -n "s/^$2=//p" "$1" 2>/dev/null | head -n1; }
# --full on an installed package and --upgrade of a missing one are refused, as by the real ones.
decide() {   # $1: installed version ('' = none)
  if [ -n "$1" ] && [ "$1" = "$PKG_VERSION" ]; then
    say "$PKG_NAME: version $PKG_VERSION is already installed"; exit 0
  fi
  if [ "$PKG_MODE" = full ] && [ -n "$1" ]; then
    die "version $1 is installed; use --upgrade (or uninstall it first)"
  fi
  if [ "$PKG_MODE" = upgrade ] && [ -z "$1" ]; then
    die "nothing to upgrade: the package is not installed; use --full"
  fi
}
'''

INSTALL = {
    "firmware": r'''
info=$PKG_ROOT/firmware/version.info
have=$(installed_version "$info" Version)
decide "$have"
if [ -f /etc/ai-l1-fake/npu-firmware-fail ]; then
  die "upgrade failed on NPU 0: $(cat /etc/ai-l1-fake/npu-firmware-fail)"
fi
mkdir -p "$PKG_ROOT/firmware"
printf 'Version=%s\nfirmware_version=1.0\npackage_version=%s\n' "$PKG_VERSION" "$PKG_VERSION" > "$info"
say "$PKG_NAME: firmware ${have:-none} -> $PKG_VERSION written to every NPU"
echo "[INFO] Firmware $PKG_VERSION installed; it takes effect after a reboot (reboot required)"
: > "$PKG_DIR/reboot-required"
exit 2
''',
    "driver": r'''
info=$PKG_ROOT/driver/version.info
have=$(installed_version "$info" Version)
decide "$have"
id HwHiAiUser >/dev/null 2>&1 || die "the HwHiAiUser user does not exist (create the HwHiAiUser user and group first)"
command -v python3 >/dev/null 2>&1 || die "python3 is required"
mkdir -p "$PKG_ROOT/driver/tools" /usr/local/sbin
cp "$PKG_DIR/npu-smi" "$PKG_ROOT/driver/tools/npu-smi"
chmod 0755 "$PKG_ROOT/driver/tools/npu-smi"
ln -sf "$PKG_ROOT/driver/tools/npu-smi" /usr/local/sbin/npu-smi
python3 "$PKG_DIR/ascend_tree.py" "$PKG_DIR/tree" --scenario "$PKG_DIR/versions.json" --arch "$(uname -m)"
cp "$PKG_DIR/tree/driver/version.info" "$info"
chown -R HwHiAiUser:HwHiAiUser "$PKG_ROOT/driver"
printf 'UserName=HwHiAiUser\nUserGroup=HwHiAiUser\nDriver_Install_Type=%s\nDriver_Install_Path_Param=%s\n' \
  "$PKG_MODE" "$PKG_ROOT" > /etc/ascend_install.info
say "$PKG_NAME: driver ${have:-none} -> $PKG_VERSION installed"
exit 0
''',
    "toolkit": r'''
arch=$(uname -m)
info=$PKG_ROOT/ascend-toolkit/latest/$arch-linux/ascend_toolkit_install.info
have=$(installed_version "$info" version)
decide "$have"
python3 "$PKG_DIR/ascend_tree.py" "$PKG_DIR/tree" --scenario "$PKG_DIR/versions.json" --arch "$arch"
dest=$PKG_ROOT/ascend-toolkit/$PKG_VERSION/$arch-linux
mkdir -p "$dest"
sed "s#^path=.*#path=$dest#" "$PKG_DIR/tree/ascend-toolkit/latest/$arch-linux/ascend_toolkit_install.info" \
  > "$dest/ascend_toolkit_install.info"
rm -rf "$PKG_ROOT/ascend-toolkit/latest"
ln -s "$PKG_VERSION" "$PKG_ROOT/ascend-toolkit/latest"
printf 'export ASCEND_TOOLKIT_HOME=%s/ascend-toolkit/latest\nexport ASCEND_HOME_PATH=$ASCEND_TOOLKIT_HOME\n' \
  "$PKG_ROOT" > "$PKG_ROOT/ascend-toolkit/set_env.sh"
[ -z "$have" ] || [ "$have" = "$PKG_VERSION" ] || rm -rf "$PKG_ROOT/ascend-toolkit/$have"
say "$PKG_NAME: CANN toolkit ${have:-none} -> $PKG_VERSION installed"
exit 0
''',
    "docker": r'''
dir=$PKG_ROOT/Ascend-Docker-Runtime
have=$(installed_version "$dir/version.info" Version)
decide "$have"
mkdir -p "$dir"
for f in ascend-docker-runtime ascend-docker-hook; do cp "$PKG_DIR/$f" "$dir/$f"; chmod 0755 "$dir/$f"; done
printf 'Version=%s\n' "$PKG_VERSION" > "$dir/version.info"
say "$PKG_NAME: Ascend Docker Runtime ${have:-none} -> $PKG_VERSION installed"
exit 0
''',
}

RUNTIME_SHIM = r'''#!/bin/sh
# Lab build of the Ascend Docker Runtime: an OCI runtime that hands over to runc. The real one
# adds ASCEND_VISIBLE_DEVICES' /dev/davinciN, davinci_manager, devmm_svm and hisi_hdc and the
# driver's libraries to the container spec through its prestart hook first.
for runc in /usr/sbin/runc /usr/bin/runc /usr/local/sbin/runc; do
  [ -x "$runc" ] && exec "$runc" "$@"
done
echo "ascend-docker-runtime: runc not found" >&2
exit 1
'''

HOOK_SHIM = r'''#!/bin/sh
# Lab build of the Ascend Docker prestart hook: nothing to mount without NPU devices.
exit 0
'''


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tar_payload(files: dict[str, tuple[bytes, int]]) -> bytes:
    """Reproducible tar.gz: sorted names, mtime 0, root owner."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name in sorted(files):
            data, mode = files[name]
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def versions_json(kind: str, version: str) -> bytes:
    key = {"driver": "driver", "toolkit": "cann"}.get(kind)
    return (('{"versions": {"%s": "%s"}}\n' % (key, version)) if key else "{}\n").encode()


def build_one(kind: str, version: str, name: str) -> bytes:
    files = {
        "install.sh": ((COMMON + INSTALL[kind]).encode(), 0o755),
        "versions.json": (versions_json(kind, version), 0o644),
    }
    if kind in ("driver", "toolkit"):
        files["ascend_tree.py"] = ((NPU / "ascend_tree.py").read_bytes(), 0o755)
    if kind == "driver":
        files["npu-smi"] = ((NPU / "npu_smi_fake.py").read_bytes(), 0o755)
    if kind == "docker":
        files["ascend-docker-runtime"] = (RUNTIME_SHIM.encode(), 0o755)
        files["ascend-docker-hook"] = (HOOK_SHIM.encode(), 0o755)
    payload = tar_payload(files)
    header = HEADER.replace("@KIND@", kind).replace("@VERSION@", version).replace("@NAME@", name)
    header = header.replace("@SHA@", sha256(payload))
    skip = header.count("\n") + 1          # the payload starts on the line after the header
    header = header.replace("@SKIP@", str(skip))
    assert header.count("\n") + 1 == skip
    return header.encode() + payload


def source_hash() -> str:
    h = hashlib.sha256()
    for path in (Path(__file__), NPU / "ascend_tree.py", NPU / "npu_smi_fake.py"):
        h.update(path.read_bytes())
    h.update(ARCH.encode())
    return h.hexdigest()[:16]


def build() -> Path:
    out = CACHE / "packages" / f"ascend-{source_hash()}"
    if not (out / "SHA256SUMS").exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".ascend-build.", dir=out.parent))
        try:
            sums = []
            for kind, version, name in PACKAGES:
                data = build_one(kind, version, name)
                (tmp / name).write_bytes(data)
                (tmp / name).chmod(0o755)
                sums.append(f"{sha256(data)}  {name}\n")
            (tmp / "SHA256SUMS").write_text("".join(sums))
            tmp.chmod(0o755)
            try:
                tmp.rename(out)               # atomic: concurrent builders see all or nothing
            except OSError:
                if not (out / "SHA256SUMS").exists():
                    raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        for old in out.parent.glob("ascend-*"):   # builds of older sources
            if old != out:
                shutil.rmtree(old, ignore_errors=True)
    return out


def publish(out: Path) -> None:
    MIRROR_DIR.mkdir(parents=True, exist_ok=True)
    for src in sorted(out.iterdir()):
        dest = MIRROR_DIR / src.name
        if dest.exists() and dest.stat().st_ino == src.stat().st_ino:
            continue
        tmp = dest.with_name(dest.name + ".partial")
        tmp.unlink(missing_ok=True)
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copy2(src, tmp)
        tmp.replace(dest)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--list", action="store_true", help="print the packages and exit")
    parser.add_argument("--no-publish", action="store_true", help="build into the cache only")
    args = parser.parse_args(argv)
    if args.list:
        for kind, version, name in PACKAGES:
            print(f"{kind:<9} {version:<12} {name}")
        return 0
    out = build()
    if not args.no_publish:
        publish(out)
    print(out if args.no_publish else MIRROR_DIR)
    return 0


if __name__ == "__main__":
    sys.exit(main())
