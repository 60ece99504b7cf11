"""The lab's Ascend .run installers (lab/packages/ascend/build.py): built into a temporary cache,
then run with --install-path under tmp (firmware, CANN toolkit and Docker runtime write only
there; the driver installer also writes /usr/local/sbin and /etc, so molecule/ascend_driver runs
it in a lab node)."""

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "lab/packages/ascend/build.py"


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    env = dict(os.environ, AI_L1_CACHE=str(cache))
    first = subprocess.run([sys.executable, str(BUILD), "--no-publish"], capture_output=True, text=True,
                           env=env, check=False)
    assert first.returncode == 0, first.stderr
    out = Path(first.stdout.strip())
    again = subprocess.run([sys.executable, str(BUILD), "--no-publish"], capture_output=True, text=True,
                           env=env, check=False)
    assert Path(again.stdout.strip()) == out      # cached by source hash
    return out


def run(pkg, *args):
    return subprocess.run([str(pkg), *args], capture_output=True, text=True, check=False)


def find(packages, prefix):
    [hit] = [p for p in packages.iterdir() if p.name.startswith(prefix)]
    return hit


def test_sha256sums_match_and_builds_are_reproducible(packages, tmp_path):
    sums = dict(reversed(line.split()) for line in (packages / "SHA256SUMS").read_text().splitlines())
    assert len(sums) == 6
    for name, digest in sums.items():
        assert hashlib.sha256((packages / name).read_bytes()).hexdigest() == digest
    env = dict(os.environ, AI_L1_CACHE=str(tmp_path))
    other = subprocess.run([sys.executable, str(BUILD), "--no-publish"], capture_output=True, text=True,
                           env=env, check=True)
    assert (Path(other.stdout.strip()) / "SHA256SUMS").read_text() == (packages / "SHA256SUMS").read_text()


def test_check_version_and_damaged_package(packages, tmp_path):
    fw = find(packages, "Ascend-hdk-910b-npu-firmware_7.0.0.5.242")
    assert run(fw, "--check").returncode == 0
    assert run(fw, "--version").stdout.strip() == "7.0.0.5.242"
    bad = tmp_path / fw.name
    shutil.copy(fw, bad)
    with open(bad, "ab") as handle:
        handle.write(b"x")
    res = run(bad, "--check")
    assert res.returncode == 1 and "damaged" in res.stderr
    assert run(fw).returncode == 1                              # no mode: usage, failure


def test_firmware_exit_codes(packages, tmp_path):
    old = find(packages, "Ascend-hdk-910b-npu-firmware_7.0.0.5.242")
    new = find(packages, "Ascend-hdk-910b-npu-firmware_7.1.0.3.220")
    root = f"--install-path={tmp_path}"
    res = run(old, "--upgrade", "--quiet", root)
    assert res.returncode == 1 and "use --full" in res.stderr           # nothing to upgrade
    res = run(old, "--full", "--quiet", root)
    assert res.returncode == 2 and "reboot" in res.stdout               # installed, pending reboot
    assert "Version=7.0.0.5.242\n" in (tmp_path / "firmware/version.info").read_text()
    assert run(old, "--full", "--quiet", root).returncode == 0          # same version: nothing
    res = run(new, "--full", "--quiet", root)
    assert res.returncode == 1 and "use --upgrade" in res.stderr        # installed at another version
    assert run(new, "--upgrade", "--quiet", root).returncode == 2
    assert "Version=7.1.0.3.220\n" in (tmp_path / "firmware/version.info").read_text()


def test_toolkit_and_docker_runtime(packages, tmp_path):
    arch = os.uname().machine
    toolkit = find(packages, "Ascend-cann-toolkit_7.0.0")
    assert run(toolkit, "--full", "--quiet", f"--install-path={tmp_path}").returncode == 0
    info = tmp_path / f"ascend-toolkit/latest/{arch}-linux/ascend_toolkit_install.info"
    assert "version=7.0.0\n" in info.read_text()
    assert os.readlink(tmp_path / "ascend-toolkit/latest") == "7.0.0"
    docker = find(packages, "Ascend-docker-runtime_5.0.RC3")
    assert run(docker, "--full", f"--install-path={tmp_path}").returncode == 0
    assert os.access(tmp_path / "Ascend-Docker-Runtime/ascend-docker-runtime", os.X_OK)
    assert run(docker, "--upgrade", "--quiet", f"--install-path={tmp_path}").returncode == 0   # same version
