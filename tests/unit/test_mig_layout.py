"""MIG layouts: the mig-parted config parser, nvidia-smi parsers, the diff, and the
ai_platform.l1.nvidia_mig module end to end against the fake nvidia-smi (tests/hardware/nvml,
stateful through its state file)."""

import shutil
import subprocess
from pathlib import Path

import pytest
from ansible_collections.ai_platform.l1.plugins.module_utils import mig_layout as ml
from ansible_collections.ai_platform.l1.plugins.modules import nvidia_mig

ROOT = Path(__file__).resolve().parents[2]
NVML_DIR = ROOT / "tests/hardware/nvml"
A100 = NVML_DIR / "scenarios/a100-8x-nvswitch-mig.conf"
H100 = NVML_DIR / "scenarios/h100-8x-nvswitch.conf"
L40S = NVML_DIR / "scenarios/l40s-8x-pcie.conf"


def cfg(**configs):
    return {"version": "v1", "mig-configs": configs}


ALL_1G = [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}]


# ------------------------------------------------------------------ config parser

@pytest.mark.parametrize("config, name, message", [
    ({"version": "v2", "mig-configs": {"a": ALL_1G}}, "a", "version must be v1"),
    ({"version": "v1"}, "a", "no mig-configs"),
    (cfg(a=ALL_1G), "b", "'b' is not in mig-configs (known: a)"),
    (cfg(a=[]), "a", "non-empty list"),
    (cfg(a=[{"devices": "some", "mig-enabled": True}]), "a", "devices must be 'all'"),
    (cfg(a=[{"devices": [0, -1], "mig-enabled": True}]), "a", "devices must be 'all'"),
    (cfg(a=[{"devices": "all", "mig-enabled": "yes"}]), "a", "mig-enabled must be true or false"),
    (cfg(a=[{"devices": "all", "mig-enabled": True, "mig-devices": {"big": 1}}]), "a", "'big' is not a MIG profile"),
    (cfg(a=[{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 8}}]), "a",
     "need 8 compute slices, a GPU has 7"),
    (cfg(a=[{"devices": "all", "mig-enabled": True, "mig-devices": {"3g.40gb": 2, "2g.20gb": 1}}]), "a",
     "need 8 compute slices"),
    (cfg(a=[{"devices": "all", "mig-enabled": False, "mig-devices": {"1g.10gb": 1}}]), "a",
     "mig-devices given with mig-enabled: false"),
    (cfg(a=[{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": -1}}]), "a", "non-negative"),
    (cfg(a=[{"devices": "all", "mig-enabled": True, "extra": 1}]), "a", "unknown keys extra"),
    (cfg(a=[{"devices": "all", "device-filter": "A100", "mig-enabled": True}]), "a", "not a PCI device ID"),
])
def test_select_config_refuses(config, name, message):
    with pytest.raises(ml.MigLayoutError) as exc:
        ml.select_config(config, name)
    assert message in str(exc.value)


def test_select_config_normalises_names_and_counts():
    entries = ml.select_config(cfg(mixed=[{"devices": [0, 1], "mig-enabled": True,
                                           "mig-devices": {"MIG 3g.40gb": 1, "2g.20gb": 2, "1g.10gb": 0}}]), "mixed")
    assert entries == [{"devices": [0, 1], "device_filter": None, "mig_enabled": True,
                        "mig_devices": {"3g.40gb": 1, "2g.20gb": 2}}]


GPUS = {0: {"device_id": "0x20B210DE"}, 1: {"device_id": "0x20B210DE"}, 2: {"device_id": "0x233010DE"}}


@pytest.mark.parametrize("entries, want", [
    (ALL_1G, {i: {"mig_enabled": True, "devices": {"1g.10gb": 7}} for i in GPUS}),
    ([{"devices": [1], "mig-enabled": False}], {1: {"mig_enabled": False, "devices": {}}}),
    # a later entry wins, as in mig-parted
    (ALL_1G + [{"devices": [2], "mig-enabled": False}],
     {0: {"mig_enabled": True, "devices": {"1g.10gb": 7}}, 1: {"mig_enabled": True, "devices": {"1g.10gb": 7}},
      2: {"mig_enabled": False, "devices": {}}}),
    ([{"devices": "all", "device-filter": ["0x20b210de"], "mig-enabled": True, "mig-devices": {"7g.80gb": 1}}],
     {0: {"mig_enabled": True, "devices": {"7g.80gb": 1}}, 1: {"mig_enabled": True, "devices": {"7g.80gb": 1}}}),
])
def test_desired_layout(entries, want):
    assert ml.desired_layout(ml.select_config(cfg(x=entries), "x"), GPUS) == want


def test_desired_layout_refuses_missing_gpu():
    with pytest.raises(ml.MigLayoutError, match="names GPU 5 but the host has GPUs 0, 1, 2"):
        ml.desired_layout(ml.select_config(cfg(x=[{"devices": [0, 5], "mig-enabled": False}]), "x"), GPUS)


# ------------------------------------------------------------------ nvidia-smi parsers (real layouts)

LGI = """\
+-------------------------------------------------------+
| GPU instances:                                        |
| GPU   Name             Profile  Instance   Placement  |
|                          ID       ID       Start:Size |
|=======================================================|
|   0  MIG 3g.40gb          9         2          4:4     |
|   0  MIG 2g.20gb         14         3          0:2     |
|   1  MIG 1g.10gb         19        13          6:1     |
+-------------------------------------------------------+
"""

LGIP = """\
+-----------------------------------------------------------------------------+
| GPU instance profiles:                                                      |
| GPU   Name             ID    Instances   Memory     P2P    SM    DEC   ENC  |
|                              Free/Total   GiB              CE    JPEG  OFA  |
|=============================================================================|
|   0  MIG 1g.10gb       19     7/7        9.50       No     14     0     0   |
|                                                             1     0     0   |
+-----------------------------------------------------------------------------+
|   0  MIG 1g.10gb+me    20     1/1        9.50       No     14     1     0   |
|                                                             1     1     1   |
+-----------------------------------------------------------------------------+
|   0  MIG 7g.80gb        0     1/1        79.25      No     98     5     0   |
|                                                             7     7     1   |
+-----------------------------------------------------------------------------+
"""


def test_parse_lgi():
    assert ml.parse_lgi(LGI) == {
        0: [{"profile": "3g.40gb", "profile_id": 9, "gi_id": 2, "start": 4, "size": 4},
            {"profile": "2g.20gb", "profile_id": 14, "gi_id": 3, "start": 0, "size": 2}],
        1: [{"profile": "1g.10gb", "profile_id": 19, "gi_id": 13, "start": 6, "size": 1}]}


@pytest.mark.parametrize("text", ["No GPU instances found: Not Found\n", "No MIG-enabled devices found.\n"])
def test_parse_lgi_empty(text):
    assert ml.parse_lgi(text) == {}


def test_parse_lgi_refuses_other_text():
    with pytest.raises(ml.MigLayoutError, match="unexpected nvidia-smi mig -lgi output"):
        ml.parse_lgi("Failed to initialize NVML: Driver/library version mismatch\n")


def test_parse_lgip():
    assert ml.parse_lgip(LGIP) == {0: {"1g.10gb": {"id": 19, "free": 7, "total": 7},
                                       "1g.10gb+me": {"id": 20, "free": 1, "total": 1},
                                       "7g.80gb": {"id": 0, "free": 1, "total": 1}}}


def test_parse_mig_modes():
    text = ("0, GPU-a, 0x20B210DE, Enabled, Enabled\n1, GPU-b, 0x20B210DE, Disabled, Enabled\n"
            "2, GPU-c, 0x26B510DE, [N/A], [N/A]\n")
    assert ml.parse_mig_modes(text) == {
        0: {"uuid": "GPU-a", "device_id": "0x20B210DE", "mig_capable": True, "mig_current": True, "mig_pending": True},
        1: {"uuid": "GPU-b", "device_id": "0x20B210DE", "mig_capable": True, "mig_current": False, "mig_pending": True},
        2: {"uuid": "GPU-c", "device_id": "0x26B510DE", "mig_capable": False, "mig_current": False,
            "mig_pending": False}}
    with pytest.raises(ml.MigLayoutError):
        ml.parse_mig_modes("garbage\n")


# ------------------------------------------------------------------ diff / plan

ON = {"mig_enabled": True, "devices": {"3g.40gb": 1, "2g.20gb": 2}}


@pytest.mark.parametrize("have, want, steps", [
    (ON, dict(ON), []),
    (ON, {"mig_enabled": True, "devices": {"1g.10gb": 7}}, [("destroy",), ("create", ["1g.10gb"] * 7)]),
    (ON, {"mig_enabled": False, "devices": {}}, [("destroy",), ("mode", False)]),
    ({"mig_enabled": False, "devices": {}}, {"mig_enabled": True, "devices": {"1g.10gb": 2, "3g.40gb": 1}},
     [("mode", True), ("create", ["3g.40gb", "1g.10gb", "1g.10gb"])]),
    ({"mig_enabled": False, "devices": {}}, {"mig_enabled": False, "devices": {}}, []),
    ({"mig_enabled": True, "devices": {}}, {"mig_enabled": True, "devices": {}}, []),
    (ON, {"mig_enabled": True, "devices": {}}, [("destroy",)]),
])
def test_plan(have, want, steps):
    assert ml.plan({0: have}, {0: want}) == ({0: steps} if steps else {})


def test_plan_leaves_unselected_gpus_alone():
    assert ml.plan({0: ON, 1: ON}, {1: {"mig_enabled": False, "devices": {}}}) == {1: [("destroy",), ("mode", False)]}


def test_check_supported():
    modes = {0: {"mig_capable": True}, 1: {"mig_capable": False}}
    profiles = {0: {"1g.10gb": {"id": 19, "free": 7, "total": 7}, "7g.80gb": {"id": 0, "free": 1, "total": 1}}}
    want = {0: {"mig_enabled": True, "devices": {"1g.5gb": 1, "7g.80gb": 1}},
            1: {"mig_enabled": True, "devices": {}}}
    assert ml.check_supported(want, modes, profiles) == [
        "GPU 0 has no MIG profile 1g.5gb (it has 1g.10gb, 7g.80gb)", "GPU 1 is not MIG capable"]


# ------------------------------------------------------------------ module against the fake nvidia-smi

@pytest.fixture(scope="module")
def smi_dir():
    if shutil.which("gcc") is None:
        pytest.fail("gcc is missing: it is needed to build the fake nvidia-smi (apt-get install gcc)")
    proc = subprocess.run(["bash", str(NVML_DIR / "build.sh")], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    return Path(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def fake(smi_dir, tmp_path, monkeypatch):
    state = tmp_path / "nvml-state"
    monkeypatch.setenv("LD_LIBRARY_PATH", str(smi_dir))
    monkeypatch.setenv("AI_L1_FAKE_NVML_SCENARIO", str(A100))
    monkeypatch.setenv("AI_L1_FAKE_NVML_STATE", str(state))

    def run(*args):
        return subprocess.run([str(smi_dir / "nvidia-smi"), *args], capture_output=True, text=True, check=False)
    run.state = state
    run.smi = str(smi_dir / "nvidia-smi")
    return run


def test_module_applies_only_what_differs(fake, run_module):
    config = cfg(seed=[{"devices": [0, 1], "mig-enabled": True, "mig-devices": {"3g.40gb": 1, "2g.20gb": 2}}],
                 small=[{"devices": [0, 1], "mig-enabled": True, "mig-devices": {"1g.10gb": 7}},
                        {"devices": [7], "mig-enabled": False}])
    # The scenario already has the seed layout on GPUs 0 and 1.
    res = run_module(nvidia_mig, config=config, config_name="seed", nvidia_smi=fake.smi)
    assert res["_rc"] == 0 and res["changed"] is False and res["steps"] == []
    # Check mode: the plan, nothing written.
    res = run_module(nvidia_mig, check_mode=True, config=config, config_name="small", nvidia_smi=fake.smi)
    assert res["changed"] is True
    assert res["steps"] == ["GPU 0: destroy compute and GPU instances", "GPU 0: create 1g.10gb x7",
                            "GPU 1: destroy compute and GPU instances", "GPU 1: create 1g.10gb x7",
                            "GPU 7: destroy compute and GPU instances", "GPU 7: disable MIG mode"]
    assert "GPU 7: MIG off" in res["diff"]["after"]
    assert not fake.state.exists()
    # Apply, then read back with nvidia-smi itself.
    res = run_module(nvidia_mig, config=config, config_name="small", nvidia_smi=fake.smi)
    assert res["_rc"] == 0 and res["changed"] is True, res
    assert res["after"]["0"] == {"mig_enabled": True, "devices": {"1g.10gb": 7}}
    lgi = ml.parse_lgi(fake("mig", "-lgi").stdout)
    assert [gi["profile"] for gi in lgi[1]] == ["1g.10gb"] * 7 and 7 not in lgi
    assert lgi[2] == ml.parse_lgi(fake("mig", "-lgi", "-i", "2").stdout)[2]   # untouched
    assert "Disabled" in fake("--query-gpu=mig.mode.current", "--format=csv,noheader", "-i", "7").stdout
    # Second run: nothing.
    res = run_module(nvidia_mig, config=config, config_name="small", nvidia_smi=fake.smi)
    assert res["changed"] is False


def test_module_refuses_with_gpu_process(fake, run_module):
    fake.state.write_text("gpu.1.process.0=4242,python3,2048\n")
    config = cfg(small=[{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.10gb": 7}}])
    res = run_module(nvidia_mig, config=config, config_name="small", nvidia_smi=fake.smi)
    assert res["_rc"] == 1 and res.get("failed")
    assert "refusing to change the MIG layout" in res["msg"] and "pid 4242, GPU 1" in res["msg"]
    assert fake.state.read_text() == "gpu.1.process.0=4242,python3,2048\n"   # nothing changed


def test_module_refuses_unknown_profile_and_non_mig_gpu(fake, run_module, monkeypatch):
    res = run_module(nvidia_mig, config=cfg(x=[{"devices": [0], "mig-enabled": True,
                                                "mig-devices": {"1g.5gb": 7}}]), config_name="x", nvidia_smi=fake.smi)
    assert res["_rc"] == 1 and "GPU 0 has no MIG profile 1g.5gb" in res["msg"]
    monkeypatch.setenv("AI_L1_FAKE_NVML_SCENARIO", str(L40S))
    res = run_module(nvidia_mig, config=cfg(x=ALL_1G), config_name="x", nvidia_smi=fake.smi)
    assert res["_rc"] == 1 and "GPU 0 is not MIG capable" in res["msg"]


def test_module_enables_mig_on_h100(fake, run_module, monkeypatch):
    monkeypatch.setenv("AI_L1_FAKE_NVML_SCENARIO", str(H100))
    names = ml.parse_lgip(fake("-i", "0", "-mig", "1") and fake("mig", "-lgip", "-i", "0").stdout)[0]
    fake.state.unlink()
    small = sorted(names, key=ml.profile_slices)[0]
    res = run_module(nvidia_mig, config=cfg(x=[{"devices": [3], "mig-enabled": True, "mig-devices": {small: 2}}]),
                     config_name="x", nvidia_smi=fake.smi)
    assert res["_rc"] == 0 and res["steps"] == ["GPU 3: enable MIG mode", "GPU 3: create %s x2" % small], res
    assert [gi["profile"] for gi in ml.parse_lgi(fake("mig", "-lgi").stdout)[3]] == [small, small]
