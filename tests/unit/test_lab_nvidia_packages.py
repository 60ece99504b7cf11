"""Lab fakes shipped in the NVIDIA packages (lab/packages/nvidia/files): nvidia-ctk's containerd
drop-in and CDI spec, dcgm-exporter's counters file handling."""

import importlib.machinery
import importlib.util
import json
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


@pytest.mark.parametrize(("strategies", "names"), [
    ([], ["0", "1", "all"]),
    (["--device-name-strategy=index", "--device-name-strategy=uuid"], ["0", "GPU-a", "1", "GPU-b", "all"]),
])
def test_cdi_generate_lists_gpus_by_the_strategies_and_all(ctk, monkeypatch, capsys, strategies, names):
    rows = [["0", "GPU-a", "00000000:07:00.0", "550.54.15"], ["1", "GPU-b", "00000000:0F:00.0", "550.54.15"]]
    monkeypatch.setattr(ctk, "smi", lambda *q: rows)
    assert ctk.main(["cdi", "generate", *strategies]) == 0
    yaml = pytest.importorskip("yaml")
    spec = yaml.safe_load(capsys.readouterr().out)
    assert spec["kind"] == "nvidia.com/gpu"
    assert [d["name"] for d in spec["devices"]] == names
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


RUNTIME_DEFAULTS = """\
[nvidia-container-runtime]
mode = "auto"
[nvidia-container-runtime.modes.cdi]
default-kind = "nvidia.com/gpu"
"""


def test_config_sets_a_key_and_keeps_the_rest(ctk, tmp_path, capsys):
    config = tmp_path / "config.toml"
    config.write_text(RUNTIME_DEFAULTS)
    assert ctk.main(["config", f"--config-file={config}", "--set", "nvidia-container-runtime.mode=cdi"]) == 0
    got = tomllib.loads(capsys.readouterr().out)["nvidia-container-runtime"]
    assert got["mode"] == "cdi" and got["modes"]["cdi"]["default-kind"] == "nvidia.com/gpu"
    assert config.read_text() == RUNTIME_DEFAULTS  # printed, not written
    assert ctk.main(["config", f"--config-file={config}", "--set", "nvidia-container-runtime.mode=cdi",
                     "--in-place"]) == 0
    assert tomllib.loads(config.read_text())["nvidia-container-runtime"]["mode"] == "cdi"


# ------------------------------------------------------------ the runtime's CDI mode (stand-in)
@pytest.fixture(name="runtime")
def fixture_runtime(tmp_path, monkeypatch):
    yaml = pytest.importorskip("yaml")
    module = load("nvidia-container-runtime")
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    (cdi / "nvidia.yaml").write_text(yaml.safe_dump({
        "cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
        "devices": [{"name": n, "containerEdits": {"deviceNodes": [{"path": "/dev/null"}]}} for n in ("0", "GPU-a")]
                   + [{"name": "1", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia-missing"}]}}],
        "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=void"],
                           "mounts": [{"hostPath": "/etc/nccl.conf", "containerPath": "/etc/nccl.conf",
                                       "options": ["ro", "nosuid", "nodev", "bind"]}]}}))
    config = tmp_path / "config.toml"
    config.write_text(RUNTIME_DEFAULTS.replace('"auto"', '"cdi"')
                      + f'spec-dirs = ["{cdi}"]\n')
    monkeypatch.setattr(module, "CONFIG", str(config))
    return module, config


def bundle(tmp_path, env):
    path = tmp_path / "bundle"
    path.mkdir(exist_ok=True)
    (path / "config.json").write_text(json.dumps({"process": {"env": ["PATH=/bin", *env]}, "mounts": []}))
    return path


def test_cdi_mode_applies_the_common_and_the_devices_edits(runtime, tmp_path):
    module, _ = runtime
    path = bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=GPU-a,1"])
    module.inject(str(path))
    spec = json.loads((path / "config.json").read_text())
    assert spec["process"]["env"] == ["PATH=/bin", "NVIDIA_VISIBLE_DEVICES=void"]
    assert spec["mounts"] == [{"destination": "/etc/nccl.conf", "source": "/etc/nccl.conf", "type": "bind",
                               "options": ["ro", "nosuid", "nodev", "bind"]}]
    # GPU-a's node exists (/dev/null here); device 1's does not on this host and is left out.
    assert [d["path"] for d in spec["linux"]["devices"]] == ["/dev/null"]
    assert spec["linux"]["resources"]["devices"][0]["allow"] is True


def test_cdi_mode_refuses_a_device_no_spec_names(runtime, tmp_path):
    module, _ = runtime
    path = bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=GPU-zz"])
    with pytest.raises(SystemExit):
        module.inject(str(path))


@pytest.mark.parametrize("env", [[], ["NVIDIA_VISIBLE_DEVICES=void"], ["NVIDIA_VISIBLE_DEVICES=GPU-a"]])
def test_containers_without_devices_or_other_modes_are_left_alone(runtime, tmp_path, env):
    module, config = runtime
    if env and env[0].endswith("GPU-a"):
        config.write_text(config.read_text().replace('mode = "cdi"', 'mode = "legacy"'))
    path = bundle(tmp_path, env)
    before = (path / "config.json").read_text()
    module.inject(str(path))
    assert (path / "config.json").read_text() == before
