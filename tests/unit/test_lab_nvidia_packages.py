"""Lab fakes shipped in the NVIDIA packages (lab/packages/nvidia/files): nvidia-ctk's containerd
drop-in and CDI spec, dcgm-exporter's counters file handling."""

import importlib.machinery
import importlib.util
import sys
import tomllib
from pathlib import Path

import pytest

FILES = Path(__file__).resolve().parents[2] / "lab" / "packages" / "nvidia" / "files"
CONFIG = """\
version = 2
imports = ["/etc/containerd/conf.d/*.toml"]
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "10.89.100.1:5000/pause:3.10"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = true
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "/etc/containerd/certs.d"
"""
CRI = "io.containerd.grpc.v1.cri"


def load(name):
    loader = importlib.machinery.SourceFileLoader(name.replace("-", "_"), str(FILES / name))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.fixture(name="ctk")
def fixture_ctk():
    return load("nvidia-ctk")


@pytest.mark.parametrize("default", [False, True])
def test_drop_in_copies_the_cri_table_and_leaves_config_alone(ctk, tmp_path, default):
    config = tmp_path / "config.toml"
    config.write_text(CONFIG)
    dropin = tmp_path / "conf.d" / "99-nvidia.toml"
    argv = ["runtime", "configure", "--runtime=containerd", f"--config={config}", f"--drop-in-config={dropin}",
            "--cdi.enabled"] + (["--set-as-default"] if default else [])
    assert ctk.main(argv) == 0
    assert config.read_text() == CONFIG
    cri = tomllib.loads(dropin.read_text())["plugins"][CRI]
    assert cri["sandbox_image"] == "10.89.100.1:5000/pause:3.10"
    assert cri["registry"]["config_path"] == "/etc/containerd/certs.d"
    assert cri["enable_cdi"] is True
    nvidia = cri["containerd"]["runtimes"]["nvidia"]
    assert nvidia["options"] == {"BinaryName": "/usr/bin/nvidia-container-runtime", "SystemdCgroup": True}
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is True
    assert cri["containerd"]["default_runtime_name"] == ("nvidia" if default else "runc")


def test_dry_run_prints_and_writes_nothing(ctk, tmp_path, capsys):
    config = tmp_path / "config.toml"
    config.write_text(CONFIG)
    dropin = tmp_path / "99-nvidia.toml"
    assert ctk.main(["runtime", "configure", "--runtime=containerd", f"--config={config}",
                     f"--drop-in-config={dropin}", "--dry-run"]) == 0
    assert not dropin.exists()
    out = capsys.readouterr().out
    assert tomllib.loads(out)["plugins"][CRI]["containerd"]["runtimes"]["nvidia"]["runtime_type"] == \
        "io.containerd.runc.v2"
    # Same input, same output: the role's copy task is idempotent.
    ctk.main(["runtime", "configure", "--runtime=containerd", f"--config={config}",
              f"--drop-in-config={dropin}", "--dry-run"])
    assert capsys.readouterr().out == out


def test_other_runtime_is_refused(ctk, tmp_path):
    assert ctk.main(["runtime", "configure", "--runtime=crio", f"--config={tmp_path / 'x.toml'}"]) == 1


def test_cdi_generate_lists_gpus_by_index_uuid_and_all(ctk, monkeypatch, capsys):
    rows = [["0", "GPU-a", "00000000:07:00.0", "550.54.15"], ["1", "GPU-b", "00000000:0F:00.0", "550.54.15"]]
    monkeypatch.setattr(ctk, "smi", lambda *q: rows)
    assert ctk.main(["cdi", "generate"]) == 0
    yaml = pytest.importorskip("yaml")
    spec = yaml.safe_load(capsys.readouterr().out)
    assert spec["kind"] == "nvidia.com/gpu"
    assert [d["name"] for d in spec["devices"]] == ["0", "GPU-a", "1", "GPU-b", "all"]
    assert spec["devices"][-1]["containerEdits"]["deviceNodes"] == [{"path": "/dev/nvidia0"}, {"path": "/dev/nvidia1"}]


def test_cdi_generate_fails_without_nvml(ctk, monkeypatch, capsys):
    def broken(*q):
        raise RuntimeError("NVIDIA-SMI has failed")
    monkeypatch.setattr(ctk, "smi", broken)
    assert ctk.main(["cdi", "generate"]) == 1
    assert "failed to initialize NVML" in capsys.readouterr().err


def test_exporter_reads_only_metric_fields(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "fake_dcgm_exporter", object())
    exporter = load("dcgm-exporter")
    csv = tmp_path / "c.csv"
    csv.write_text("# comment\nDCGM_FI_DEV_XID_ERRORS, gauge, Last XID.\n\n"
                   "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, counter, DBE.\nDCGM_FI_DRIVER_VERSION, label, Driver Version.\n")
    assert [f[0] for f in exporter.read_counters(csv)] == ["DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"]
