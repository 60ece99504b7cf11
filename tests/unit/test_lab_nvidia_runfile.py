"""The lab's NVIDIA .run installer (lab/packages/nvidia/build.py runfile()): the options the
nvidia_driver role and an operator use, payload integrity, extraction. Installing writes to
/usr and /etc, so that path is tested in molecule/nvidia_driver_runfile, not here."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

BUILD = Path(__file__).resolve().parents[2] / "lab" / "packages" / "nvidia" / "build.py"


@pytest.fixture(name="build", scope="module")
def fixture_build():
    spec = importlib.util.spec_from_file_location("lab_nvidia_build", BUILD)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(BUILD.parent.parent))
    spec.loader.exec_module(module)
    return module


@pytest.fixture(name="run_file")
def fixture_run_file(build, tmp_path):
    nvml = tmp_path / "nvml"
    nvml.mkdir()
    (nvml / "libnvidia-ml.so.1").write_bytes(b"\x7fELF fake library\n")
    (nvml / "nvidia-smi").write_bytes(b"#!/bin/sh\necho fake\n")
    path = tmp_path / "NVIDIA-Linux-x86_64-550.127.05.run"
    path.write_bytes(build.runfile(nvml, "550.127.05", 12040))
    return path


def sh(path, *args, cwd=None):
    return subprocess.run(["sh", str(path), *args], capture_output=True, text=True, cwd=cwd, check=False)


def test_version_and_integrity(run_file):
    assert sh(run_file, "--version").stdout.strip().endswith("version 550.127.05")
    result = sh(run_file, "--check")
    assert result.returncode == 0, result.stderr
    assert "integrity check OK" in result.stdout


def test_unknown_option_fails_with_usage(run_file):
    result = sh(run_file, "--silent", "--frobnicate")
    assert result.returncode == 1
    assert "unrecognized option: '--frobnicate'" in result.stderr
    assert "--uninstall" in result.stderr


def test_damaged_payload_is_refused_before_anything_runs(run_file):
    run_file.write_bytes(run_file.read_bytes() + b"x")
    result = sh(run_file, "--check")
    assert result.returncode == 1
    assert "payload checksum mismatch" in result.stderr


def test_extract_only_unpacks_the_payload(run_file, tmp_path):
    result = sh(run_file, "-x", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    out = tmp_path / "NVIDIA-Linux-x86_64-550.127.05"
    assert (out / "libnvidia-ml.so.1").read_bytes() == b"\x7fELF fake library\n"
    assert (out / "nvidia-smi").stat().st_mode & 0o111
    assert 'PACKAGE_VERSION="550.127.05"' in (out / "dkms.conf").read_text()


def test_reproducible(build, run_file):
    nvml = run_file.parent / "nvml"
    assert build.runfile(nvml, "550.127.05", 12040) == build.runfile(nvml, "550.127.05", 12040)
