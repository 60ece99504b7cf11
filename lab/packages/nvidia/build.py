#!/usr/bin/env python3
"""Build the lab's NVIDIA vendor repositories and publish them on the lab's file mirror.

    python lab/packages/nvidia/build.py          # build (cached) and publish; prints the URLs

Two signed flat APT repositories, laid out as the files mirror maps upstream URLs
(http://<mirror>/<upstream host>/<upstream path>, see lab/mirror/mirror.py):

  developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/   (the CUDA repository)
      nvidia-driver, nvidia-kernel-dkms, libnvidia-ml1, nvidia-smi, nvidia-persistenced,
      nvidia-fabricmanager-<branch>   for every version in DRIVERS
      datacenter-gpu-manager, datacenter-gpu-manager-exporter
  nvidia.github.io/libnvidia-container/stable/deb/amd64/              (the toolkit repository)
      nvidia-container-toolkit

And the driver's .run installer for every version in DRIVERS, at both of its upstream paths:

  us.download.nvidia.com/tesla/<v>/NVIDIA-Linux-x86_64-<v>.run           (data center drivers)
  download.nvidia.com/XFree86/Linux-x86_64/<v>/NVIDIA-Linux-x86_64-<v>.run

a self-extracting shell script with a tar payload that takes the real installer's options
(--silent/-s, --dkms, --no-questions/-q, --ui=none, --disable-nouveau, --uninstall, --version,
--check, --extract-only/-x; anything else is an error) and installs the same fake NVML and
nvidia-smi as the packages, recording what it installed for --uninstall and for the next
version's installer (which removes the previous one first, as nvidia-installer does). It
refuses a node whose NVML comes from a package (dpkg) and a damaged payload.

Each repository carries the lab's signing key as ai-l1-lab-packages.asc. The packages install
the simulated driver of tests/hardware/nvml (fake libnvidia-ml.so.1 and nvidia-smi) and lab
fakes of the daemons and tools (lab/packages/nvidia/files). Installing nvidia-kernel-dkms
stands for loading its kernel module: it sets the driver version the fake NVML reports to
the package's version, so a role's verify step reads back what it installed.

Output is cached under $AI_L1_CACHE/packages/nvidia-<hash of every input>; a warm run only
re-links the published tree.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[2]
sys.path.insert(0, str(HERE.parent))
import debrepo  # noqa: E402

FILES = HERE / "files"
NVML = REPO_ROOT / "tests" / "hardware" / "nvml"
FAKE_EXPORTER = REPO_ROOT / "tests" / "hardware" / "dcgm" / "fake_dcgm_exporter.py"
MIRROR_FILES = debrepo.CACHE / "mirror" / "files"
CUDA_PATH = "developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64"
TOOLKIT_PATH = "nvidia.github.io/libnvidia-container/stable/deb/amd64"
RUNFILE_PATHS = ("us.download.nvidia.com/tesla/{v}", "download.nvidia.com/XFree86/Linux-x86_64/{v}")
RUNFILE_NAME = "NVIDIA-Linux-x86_64-{v}.run"
KEY_NAME = "ai-l1-lab-packages.asc"
ARCH = "amd64"
LIBDIR = "usr/lib/x86_64-linux-gnu"
MAINTAINER = "ai_platform L1 lab <lab-packages@ai-l1.invalid>"

# Driver versions in the lab's CUDA repository: two in branch 550 (pin and upgrade), one in 535.
# value: the CUDA driver API version the fake reports (nvmlSystemGetCudaDriverVersion).
DRIVERS = {"535.183.01": 12020, "550.54.15": 12040, "550.127.05": 12040}
DCGM_VERSION = "1:3.3.9"
EXPORTER_VERSION = "3.3.9-3.6.1-1"
TOOLKIT_VERSION = "1.17.8-1"

UNIT = """[Unit]
Description={desc} (lab fake)
{after}
[Service]
Type=simple
ExecStart={exec}
Restart=on-failure

[Install]
WantedBy=multi-user.target
"""

DAEMON = """#!/bin/sh
# Lab fake of {name}: stays up like the real daemon and does nothing else.
[ "$1" = "--version" ] && {{ echo "{name}: version {version}"; exit 0; }}
exec sleep infinity
"""

# What a reboot into the new kernel module does on hardware: the (fake) NVML now reports it.
DKMS_POSTINST = """#!/bin/sh
set -e
if [ "$1" = configure ]; then
    if command -v dkms >/dev/null 2>&1 && ! dkms status -m nvidia -v {version} | grep -q .; then
        dkms add -m nvidia -v {version} >/dev/null 2>&1 || true
    fi
    scenario=/etc/ai-l1-fake/nvml-scenario
    if [ -f "$scenario" ]; then
        sed -i -e '/^driver_version=/d' -e '/^cuda_driver_version=/d' "$scenario"
        printf 'driver_version=%s\\ncuda_driver_version=%s\\n' {version} {cuda} >> "$scenario"
    fi
fi
"""

LDCONFIG = "#!/bin/sh\nset -e\n[ \"$1\" = configure ] && ldconfig\nexit 0\n"
SYSTEMD_POSTINST = """#!/bin/sh
set -e
if [ "$1" = configure ] && [ -d /run/systemd/system ]; then
    systemctl daemon-reload >/dev/null 2>&1 || true
    systemctl try-restart {unit} >/dev/null 2>&1 || true
fi
"""

# The .run installer (makeself style, as NVIDIA ships it): this header, then a gzip'ed tar.
RUNFILE_HEADER = r"""#!/bin/sh
# NVIDIA-Linux-x86_64-@VERSION@.run: lab build of lab/packages/nvidia/build.py (fake driver).
# Payload: gzip'ed tar from line @SKIP@, sha256 @SHA@.
VERSION='@VERSION@'
CUDA='@CUDA@'
SKIP=@SKIP@
PAYLOAD_SHA256='@SHA@'
LIBDIR=/usr/lib/x86_64-linux-gnu
STATE=/var/lib/nvidia
MANIFEST=$STATE/ai-l1-runfile.manifest
LOG=/var/log/nvidia-installer.log
mode=install; silent=0; dkms=0; logging=0
usage() {
  cat <<EOF
Usage: sh $0 [options]
  -s, --silent        no questions, no UI
  --dkms              register the kernel module source with DKMS
  --uninstall         remove the installed driver
  -v, --version       print the driver version
  --check             check the payload's integrity
  -x, --extract-only  unpack into ./NVIDIA-Linux-x86_64-$VERSION
  accepted: -a, --accept-license, -q, --no-questions, --ui=none, --disable-nouveau,
            --no-nouveau-check, --no-dkms, -n, --no-x-check, -N, --no-network
EOF
}
log() { if [ "$logging" = 1 ]; then echo "$*" >> "$LOG"; fi; return 0; }
die() { echo "ERROR: $*" >&2; log "ERROR: $*"; exit 1; }
say() { [ "$silent" = 1 ] || echo "$*"; log "$*"; }
for arg in "$@"; do
  case $arg in
    -s|--silent) silent=1 ;;
    --dkms) dkms=1 ;;
    --no-dkms) dkms=0 ;;
    --uninstall) mode=uninstall ;;
    -v|--version) echo "$0: version $VERSION"; exit 0 ;;
    --check) mode=check ;;
    -x|--extract-only) mode=extract ;;
    -a|--accept-license|-q|--no-questions|--ui=none|--disable-nouveau|--no-nouveau-check) ;;
    -n|--no-x-check|-N|--no-network) ;;
    -h|--help) usage; exit 0 ;;
    *) echo "ERROR: unrecognized option: '$arg'" >&2; usage >&2; exit 1 ;;
  esac
done
[ "$(tail -n +"$SKIP" "$0" | sha256sum | cut -d' ' -f1)" = "$PAYLOAD_SHA256" ] \
  || die "the installer $0 is damaged (payload checksum mismatch); download it again"
if [ "$mode" = check ]; then echo "$0: integrity check OK"; exit 0; fi
if [ "$mode" = extract ]; then
  mkdir -p "NVIDIA-Linux-x86_64-$VERSION" && tail -n +"$SKIP" "$0" | tar -xzf - -C "NVIDIA-Linux-x86_64-$VERSION"
  exit $?
fi
[ "$(id -u)" = 0 ] || die "nvidia-installer must be run as root"
remove_installed() {
  [ -f "$MANIFEST" ] || return 0
  old=$(sed -n 's/^version=//p' "$MANIFEST")
  say "Removing the installed NVIDIA driver $old"
  sed -n 's/^file=//p' "$MANIFEST" | while read -r f; do rm -f "$f"; done
  if [ -n "$old" ] && command -v dkms >/dev/null 2>&1; then
    dkms remove -m nvidia -v "$old" --all >/dev/null 2>&1 || true
  fi
  if [ -n "$old" ]; then rm -rf "/usr/src/nvidia-$old"; fi
  rm -f "$MANIFEST"
  ldconfig
}
if [ "$mode" = uninstall ]; then
  [ -f "$MANIFEST" ] || die "no NVIDIA driver installed by a .run installer ($MANIFEST is missing)"
  remove_installed
  exit 0
fi
mkdir -p "$STATE" "${LOG%/*}" && : > "$LOG" && logging=1
# As nvidia-installer: a driver from the distribution's packages must be removed first.
if command -v dpkg >/dev/null 2>&1 && owner=$(dpkg -S "$LIBDIR/libnvidia-ml.so.1" 2>/dev/null); then
  die "an NVIDIA driver is installed by the package manager (${owner%%:*}); remove it before running $0"
fi
tmp=$(mktemp -d) || die "cannot create a temporary directory"
trap 'rm -rf "$tmp"' EXIT
tail -n +"$SKIP" "$0" | tar -xzf - -C "$tmp" || die "cannot unpack $0"
remove_installed
say "Installing NVIDIA driver $VERSION"
install -D -m 0755 "$tmp/libnvidia-ml.so.1" "$LIBDIR/libnvidia-ml.so.$VERSION" || die "cannot install libnvidia-ml"
ln -sfn "libnvidia-ml.so.$VERSION" "$LIBDIR/libnvidia-ml.so.1"
install -D -m 0755 "$tmp/nvidia-smi" /usr/bin/nvidia-smi || die "cannot install nvidia-smi"
install -D -m 0755 "$0" /usr/bin/nvidia-installer
printf '#!/bin/sh\nexec sh /usr/bin/nvidia-installer --uninstall "$@"\n' > /usr/bin/nvidia-uninstall
chmod 0755 /usr/bin/nvidia-uninstall
install -D -m 0644 "$tmp/dkms.conf" "/usr/src/nvidia-$VERSION/dkms.conf"
if [ "$dkms" = 1 ]; then
  if command -v dkms >/dev/null 2>&1; then
    dkms add -m nvidia -v "$VERSION" >/dev/null 2>&1 || say "WARNING: dkms add -m nvidia -v $VERSION failed"
  else
    say "WARNING: --dkms given but dkms is not installed; the module is not registered with DKMS"
  fi
fi
ldconfig
{
  echo "version=$VERSION"
  for f in "$LIBDIR/libnvidia-ml.so.$VERSION" "$LIBDIR/libnvidia-ml.so.1" /usr/bin/nvidia-smi \
           /usr/bin/nvidia-installer /usr/bin/nvidia-uninstall; do echo "file=$f"; done
} > "$MANIFEST"
# What loading the new kernel module does on hardware: the (fake) NVML now reports it.
scenario=/etc/ai-l1-fake/nvml-scenario
if [ -f "$scenario" ]; then
  sed -i -e '/^driver_version=/d' -e '/^cuda_driver_version=/d' "$scenario"
  printf 'driver_version=%s\ncuda_driver_version=%s\n' "$VERSION" "$CUDA" >> "$scenario"
fi
say "Installation of the NVIDIA driver $VERSION is complete"
exit 0
"""


def tar_payload(files: dict[str, tuple[bytes, int]]) -> bytes:
    """Reproducible tar.gz: sorted names, mtime 0, root owner."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name in sorted(files):
            data, mode = files[name]
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(data))
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def runfile(nvml: Path, version: str, cuda: int) -> bytes:
    """NVIDIA-Linux-x86_64-<version>.run: the header script, then its payload."""
    payload = tar_payload({
        "libnvidia-ml.so.1": ((nvml / "libnvidia-ml.so.1").read_bytes(), 0o755),
        "nvidia-smi": ((nvml / "nvidia-smi").read_bytes(), 0o755),
        "dkms.conf": (f'PACKAGE_NAME="nvidia"\nPACKAGE_VERSION="{version}"\nBUILT_MODULE_NAME[0]="nvidia"\n'
                      'DEST_MODULE_LOCATION[0]="/kernel/drivers/video"\nAUTOINSTALL="yes"\n'.encode(), 0o644),
    })
    header = (RUNFILE_HEADER.replace("@VERSION@", version).replace("@CUDA@", str(cuda))
              .replace("@SHA@", hashlib.sha256(payload).hexdigest()))
    skip = header.count("\n") + 1          # the payload starts on the line after the header
    return header.replace("@SKIP@", str(skip)).encode() + payload


def control(name: str, version: str, desc: str, depends: str = "", **extra: str) -> dict[str, str]:
    return {"Package": name, "Version": version, "Architecture": ARCH, "Maintainer": MAINTAINER,
            "Section": "non-free/libs", "Priority": "optional", "Depends": depends, **extra,
            "Description": f"{desc} (ai_platform L1 lab fake)"}


def put(stage: Path, rel: str, src: Path | None = None, text: str | None = None, mode: int = 0o644) -> None:
    dest = stage / rel
    dest.parent.mkdir(parents=True, exist_ok=True)
    if src is not None:
        shutil.copyfile(src, dest)
    else:
        dest.write_text(text or "")
    dest.chmod(mode)


def service_pkg(work: Path, out: Path, name: str, version: str, desc: str, *, unit: str, binary: str,
                exec_line: str, depends: str = "", after: str = "", **extra: str) -> Path:
    stage = work / f"{name}_{version}"
    upstream = version.rsplit(":", maxsplit=1)[-1]
    put(stage, f"usr/bin/{binary}", text=DAEMON.format(name=binary, version=upstream), mode=0o755)
    put(stage, f"lib/systemd/system/{unit}.service",
        text=UNIT.format(desc=desc, exec=exec_line, after=after))
    return debrepo.build_deb(stage, control(name, version, desc, depends, **extra), out,
                             {"postinst": SYSTEMD_POSTINST.format(unit=unit)})


def driver_pkgs(work: Path, out: Path, nvml: Path, version: str, cuda: int) -> list[Path]:
    v = f"{version}-1"
    branch = version.split(".", maxsplit=1)[0]
    debs = []
    stage = work / f"kernel-dkms_{v}"
    put(stage, f"usr/src/nvidia-{version}/dkms.conf",
        text=f'PACKAGE_NAME="nvidia"\nPACKAGE_VERSION="{version}"\nBUILT_MODULE_NAME[0]="nvidia"\n'
             'DEST_MODULE_LOCATION[0]="/updates/dkms"\nAUTOINSTALL="yes"\n')
    debs.append(debrepo.build_deb(stage, control("nvidia-kernel-dkms", v, "NVIDIA kernel module (DKMS source)",
                                                 Provides=f"nvidia-kernel-{version}"), out,
                                  {"postinst": DKMS_POSTINST.format(version=version, cuda=cuda)}))
    stage = work / f"libnvidia-ml1_{v}"
    put(stage, f"{LIBDIR}/libnvidia-ml.so.{version}", nvml / "libnvidia-ml.so.1", mode=0o755)
    (stage / LIBDIR / "libnvidia-ml.so.1").symlink_to(f"libnvidia-ml.so.{version}")
    debs.append(debrepo.build_deb(stage, control("libnvidia-ml1", v, "NVIDIA Management Library (NVML)"), out,
                                  {"postinst": LDCONFIG, "postrm": LDCONFIG.replace("configure", "remove")}))
    stage = work / f"nvidia-smi_{v}"
    put(stage, "usr/bin/nvidia-smi", nvml / "nvidia-smi", mode=0o755)
    debs.append(debrepo.build_deb(stage, control("nvidia-smi", v, "NVIDIA System Management Interface",
                                                 f"libnvidia-ml1 (= {v})"), out))
    stage = work / f"nvidia-driver_{v}"
    stage.mkdir(parents=True, exist_ok=True)
    debs.append(debrepo.build_deb(stage, control(
        "nvidia-driver", v, "NVIDIA driver metapackage",
        f"nvidia-kernel-dkms (= {v}), libnvidia-ml1 (= {v}), nvidia-smi (= {v})", Section="non-free/kernel"), out))
    debs.append(service_pkg(work, out, "nvidia-persistenced", v, "NVIDIA persistence daemon",
                            unit="nvidia-persistenced",
                            binary="nvidia-persistenced", exec_line="/usr/bin/nvidia-persistenced --user root"))
    debs.append(service_pkg(work, out, f"nvidia-fabricmanager-{branch}", v, "NVIDIA fabric manager",
                            unit="nvidia-fabricmanager", binary="nv-fabricmanager",
                            exec_line="/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg",
                            depends=f"nvidia-kernel-{version}", Provides="nvidia-fabricmanager",
                            Conflicts="nvidia-fabricmanager", Replaces="nvidia-fabricmanager"))
    return debs


def dcgm_pkgs(work: Path, out: Path) -> list[Path]:
    debs = [service_pkg(work, out, "datacenter-gpu-manager", DCGM_VERSION, "NVIDIA DCGM host engine",
                        unit="nvidia-dcgm", binary="nv-hostengine",
                        exec_line="/usr/bin/nv-hostengine -n --service-account nvidia-dcgm", depends="libnvidia-ml1")]
    stage = work / "dcgm-exporter"
    put(stage, "usr/bin/dcgm-exporter", FILES / "dcgm-exporter", mode=0o755)
    put(stage, "usr/lib/dcgm-exporter/fake_dcgm_exporter.py", FAKE_EXPORTER)
    # The exporter's own default counters: no ECC, no row-remap counters (as upstream's default).
    put(stage, "etc/dcgm-exporter/default-counters.csv",
        text="DCGM_FI_DEV_GPU_TEMP, gauge, GPU temperature (in C).\n"
             "DCGM_FI_DEV_POWER_USAGE, gauge, Power draw (in W).\n"
             "DCGM_FI_DEV_FB_USED, gauge, Framebuffer memory used (in MiB).\n"
             "DCGM_FI_DEV_XID_ERRORS, gauge, Value of the last XID error encountered.\n")
    put(stage, "lib/systemd/system/dcgm-exporter.service",
        text=UNIT.format(desc="NVIDIA DCGM exporter", after="After=nvidia-dcgm.service\n",
                         exec="/usr/bin/dcgm-exporter -f /etc/dcgm-exporter/default-counters.csv -a :9400"))
    debs.append(debrepo.build_deb(stage, control("datacenter-gpu-manager-exporter", EXPORTER_VERSION,
                                                 "NVIDIA DCGM exporter for Prometheus",
                                                 "datacenter-gpu-manager, python3"), out,
                                  {"postinst": SYSTEMD_POSTINST.format(unit="dcgm-exporter")}))
    return debs


def toolkit_pkgs(work: Path, out: Path) -> list[Path]:
    stage = work / "toolkit"
    upstream = TOOLKIT_VERSION.rsplit("-", 1)[0]
    put(stage, "usr/bin/nvidia-ctk", text=(FILES / "nvidia-ctk").read_text().replace("@VERSION@", upstream),
        mode=0o755)
    put(stage, "usr/bin/nvidia-container-runtime", FILES / "nvidia-container-runtime", mode=0o755)
    # The package's default configuration (upstream's keys the lab runtime reads).
    put(stage, "etc/nvidia-container-runtime/config.toml",
        text='[nvidia-container-runtime]\nlog-level = "info"\nmode = "auto"\nruntimes = ["runc"]\n\n'
             '  [nvidia-container-runtime.modes]\n\n    [nvidia-container-runtime.modes.cdi]\n'
             '    default-kind = "nvidia.com/gpu"\n    spec-dirs = ["/etc/cdi", "/var/run/cdi"]\n')
    put(stage, "usr/bin/nvidia-cdi-hook", text="#!/bin/sh\nexit 0\n", mode=0o755)
    return [debrepo.build_deb(stage, control("nvidia-container-toolkit", TOOLKIT_VERSION,
                                             "NVIDIA Container Toolkit", "python3, python3-yaml"), out)]


def build() -> Path:
    nvml = Path(subprocess.run(["bash", str(NVML / "build.sh")], capture_output=True, text=True,
                               check=True).stdout.strip())
    key = debrepo.tree_hash([HERE, HERE.parent / "debrepo.py", FAKE_EXPORTER, nvml])
    out = debrepo.CACHE / "packages" / f"nvidia-{key}"
    if (out / "done").exists():
        return out
    with debrepo.locked("packages-nvidia"):
        if (out / "done").exists():
            return out
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".nvidia-", dir=out.parent))
        try:
            cuda, toolkit, work, runs = tmp / "cuda", tmp / "toolkit", tmp / "work", tmp / "runfile"
            for d in (cuda, toolkit, work, runs):
                d.mkdir()
            debs = [d for ver, api in DRIVERS.items() for d in driver_pkgs(work, cuda, nvml, ver, api)]
            debs += dcgm_pkgs(work, cuda)
            debrepo.flat_repo(cuda, debs, "ai-l1 lab NVIDIA CUDA", KEY_NAME)
            debrepo.flat_repo(toolkit, toolkit_pkgs(work, toolkit), "ai-l1 lab NVIDIA container toolkit", KEY_NAME)
            for ver, api in DRIVERS.items():
                (runs / ver).mkdir()
                dest = runs / ver / RUNFILE_NAME.format(v=ver)
                dest.write_bytes(runfile(nvml, ver, api))
                dest.chmod(0o755)
            shutil.rmtree(work)
            (tmp / "done").write_text("ok\n")
            tmp.chmod(0o755)
            tmp.rename(out)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return out


def main() -> int:
    try:
        out = build()
        changed = [debrepo.publish_tree(out / "cuda", MIRROR_FILES / CUDA_PATH),
                   debrepo.publish_tree(out / "toolkit", MIRROR_FILES / TOOLKIT_PATH)]
        changed += [debrepo.publish_tree(out / "runfile" / ver, MIRROR_FILES / path.format(v=ver))
                    for ver in DRIVERS for path in RUNFILE_PATHS]
    except (debrepo.BuildError, subprocess.CalledProcessError, OSError) as exc:
        print(f"packages/nvidia: FAILED: {exc}", file=sys.stderr)
        return 1
    print(f"packages/nvidia: {out} ({'published' if any(changed) else 'already published'})")
    for path in (CUDA_PATH, TOOLKIT_PATH):
        print(f"packages/nvidia:   <files mirror>/{path}/  (key {KEY_NAME})")
    for path in RUNFILE_PATHS:
        print(f"packages/nvidia:   <files mirror>/{path.format(v='<v>')}/{RUNFILE_NAME.format(v='<v>')}"
              f"  (<v>: {', '.join(DRIVERS)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
