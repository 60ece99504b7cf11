"""ai_platform.l1.npu_info through Ansible's module interface, against the fake npu-smi.

The module runs in-process (AnsibleModule reads its arguments the way a task passes them)
and calls tests/hardware/npu/npu_smi_fake.py as its npu-smi, driven by a scenario file.
The npu-smi parsers are also table-tested on the captured real outputs.
"""

import copy
import json
import sys
import time
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.testing import patch_module_args

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "collections"))
NPU = ROOT / "tests/hardware/npu"
FAKE = NPU / "npu_smi_fake.py"
CAPTURED = NPU / "captured"
SCENARIOS = NPU / "scenarios"
# Reconstructed outputs of layouts no public capture shows (see its README.md).
UNIT_CAPTURED = Path(__file__).resolve().parent / "captured" / "npu"
sys.path.insert(0, str(NPU))
sys.path.insert(0, str(ROOT / "tests/hardware/sysfs"))

import ascend_tree  # noqa: E402
import build_sysfs  # noqa: E402
from ansible_collections.ai_platform.l1.plugins.module_utils import npu_smi  # noqa: E402
from ansible_collections.ai_platform.l1.plugins.module_utils.node_labels import compute_labels  # noqa: E402
from ansible_collections.ai_platform.l1.plugins.modules import npu_info  # noqa: E402
from ansible_collections.ai_platform.l1.plugins.modules.node_hw_info import collect  # noqa: E402


def load(name):
    return json.loads((SCENARIOS / f"{name}.json").read_text())


def run(args, capsys, monkeypatch, scenario_path, check_mode=False):
    monkeypatch.setenv("AI_L1_FAKE_NPU_SCENARIO", str(scenario_path))
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        npu_info.main()
    result = json.loads(capsys.readouterr().out)
    result["_rc"] = exc.value.code
    return result


_CACHE = {}


@pytest.fixture
def node(tmp_path, monkeypatch, capsys):
    """Run the module against a scenario (name or dict) with its version files installed.

    Results of plain runs of the named scenarios are reused across tests: each run starts
    some 30 npu-smi processes, and the facts of one scenario do not change.
    """

    def _run(scenario, check_mode=False, versions=True, **args):
        key = (scenario, check_mode) if isinstance(scenario, str) and versions and not args else None
        if key in _CACHE:
            return copy.deepcopy(_CACHE[key])
        result = _run_uncached(scenario, check_mode, versions, **args)
        if key:
            _CACHE[key] = copy.deepcopy(result)
        return result

    def _run_uncached(scenario, check_mode=False, versions=True, **args):
        sc = load(scenario) if isinstance(scenario, str) else scenario
        path = tmp_path / "scenario.json"
        path.write_text(json.dumps(sc))
        root = tmp_path / "Ascend"
        if versions:
            ascend_tree.build(str(root), sc.get("versions", {}), npu_info.platform.machine())
        module_args = {"npu_smi_path": str(FAKE), "ascend_root": str(root)}
        module_args.update(args)
        return run(module_args, capsys, monkeypatch, path, check_mode)

    return _run


def expected_facts(sc):
    """The facts a scenario must produce, derived from the scenario, not from the parser."""
    per_npu = sc["chips_per_npu"]
    chip = sc["chip"]
    faults = {(f["npu"], f["chip"]): f for f in sc.get("faults", [])}
    a3 = sc["table_style"] == "a3"
    chips = []
    problems = []
    for logic in range(sc["npu_count"] * per_npu):
        npu, chip_id = divmod(logic, per_npu)
        fault = faults.get((npu, chip_id), {})
        ecc_names = ["hbm_sbe", "hbm_dbe", "hbm_sbe_aggregate", "hbm_dbe_aggregate",
                     "hbm_sbe_isolated_pages", "hbm_dbe_isolated_pages"]
        if not a3:
            ecc_names += ["ddr_sbe", "ddr_dbe", "ddr_sbe_aggregate", "ddr_dbe_aggregate"]
        ecc = {name: fault.get("ecc", {}).get(name, 0) for name in ecc_names}
        health = fault.get("health", "OK")
        chips.append({
            "npu_id": npu, "chip_id": chip_id, "logic_id": logic, "phy_id": logic if a3 else None,
            "name": chip["name"], "bus_id": sc["bus_ids"][logic], "health": health,
            "error_codes": fault.get("error_codes", []), "error_information": fault.get("error_info", ""),
            "hbm_total_mb": chip["hbm_mb"], "hbm_used_mb": chip["hbm_used_mb"],
            "temperature_c": float(chip["temp_c"]),
            "power_w": float(chip["power_w"]) if chip_id == 0 else None,
            "cpu_affinity": sc["cpu_affinity"][logic], "ecc": ecc,
        })
        if health != "OK":
            problems.append(f"NPU {npu} chip {chip_id}: health {health}, error {' '.join(fault['error_codes'])}"
                            f" ({fault['error_info']})")
        if ecc["hbm_dbe"]:
            problems.append(f"NPU {npu} chip {chip_id}: {ecc['hbm_dbe']} HBM double-bit ECC errors")
    versions = sc["versions"]
    return {
        "present": True, "reason": "", "npu_smi_version": sc["npu_smi_version"],
        "driver_version": versions["driver"], "firmware_version": versions["firmware"],
        "cann_version": versions["cann"], "chip_name": chip["map_name"],
        "npu_count": sc["npu_count"], "chip_count": sc["npu_count"] * per_npu, "chips_per_npu": per_npu,
        "hbm_total_mb": chip["hbm_mb"], "chips": chips,
        "npus": [{"npu_id": n, "software_version": versions["driver"], "firmware_version": versions["firmware"],
                  "compatibility": "OK", "pci_device_id": chip["pci_device_id"].lower(),
                  "bus_id": sc["bus_ids"][n * per_npu], "chip_count": per_npu} for n in range(sc["npu_count"])],
        "health": {"ok": not problems, "problems": problems},
        "installed": expected_installed(sc),
    }


def expected_installed(sc):
    """RV(npu_info.installed) for a scenario's version files (ascend_tree writes no Docker runtime)."""
    versions = sc.get("versions", {})
    return {"arch": npu_info.platform.machine(), "firmware": versions.get("firmware", ""),
            "driver": versions.get("driver", ""), "cann": versions.get("cann", ""), "docker_runtime": ""}


SCENARIO_FACTS = [
    # scenario, chip_model, topology, topology_links
    ("910b", "910B", "hccs-fullmesh", {"HCCS": 28}),
    ("910a", "910A", "hccs-partial", {"HCCS": 12, "SYS": 16}),
    ("a3", "910C", "hccs-switch", {"SIO": 8, "HCCS_SW": 112}),
    ("910b_alarm", "910B", "hccs-fullmesh", {"HCCS": 28}),
]


@pytest.mark.parametrize("scenario,model,topology,links", SCENARIO_FACTS, ids=[s[0] for s in SCENARIO_FACTS])
def test_scenario_full_facts(node, scenario, model, topology, links):
    result = node(scenario)
    assert result["_rc"] == 0, result
    assert result["changed"] is False
    expected = expected_facts(load(scenario))
    expected.update({"chip_model": model, "topology": topology, "topology_links": links})
    assert result["npu_info"] == expected


def test_alarm_scenario_reports_the_faults(node):
    info = node("910b_alarm")["npu_info"]
    assert info["health"] == {"ok": False, "problems": [
        "NPU 3 chip 0: health Alarm, error 80E18005 (node type=HBMC, sensor type=Memory, "
        "event state=uncorrectable ECC error)",
        "NPU 3 chip 0: 2 HBM double-bit ECC errors",
        "NPU 5 chip 0: health Warning, error 80E01801 (node type=SOC, sensor type=Temperature)",
    ]}
    assert info["chips"][3]["ecc"]["hbm_dbe_isolated_pages"] == 2


def test_910b_scenario_labels_equal_the_seed(node, tmp_path):
    """npu_info on the lab's 910B scenario plus node_hw_info on its sysfs tree: the seed's labels."""
    build_sysfs.build(str(tmp_path / "sys"), "ascend_910b")
    labels = compute_labels(npu_info=node("910b"), hw_info=collect(str(tmp_path / "sys")))
    assert labels == {
        "accelerator": "huawei-ascend", "accelerator-model": "Ascend-910B", "accelerator-memory": "64Gi",
        "accelerator-count": "8", "accelerator-topology": "hccs-ring", "accelerator-driver-version": "23.0.rc1",
        "accelerator-cann-version": "7.0.0", "node-type": "gpu-compute", "network.bandwidth": "100Gbps",
        "storage.local-nvme": "1.8Ti",
    }


@pytest.mark.parametrize("scenario,expected", [
    ("910a", {"accelerator-model": "Ascend-910A", "accelerator-memory": "32Gi", "accelerator-count": "8",
              "accelerator-topology": "hccs-partial", "accelerator-cann-version": "5.0.4"}),
    ("a3", {"accelerator-model": "Ascend-910C", "accelerator-memory": "64Gi", "accelerator-count": "16",
            "accelerator-topology": "hccs-switch", "accelerator-cann-version": "8.0.0"}),
])
def test_other_scenarios_label(node, scenario, expected):
    labels = compute_labels(npu_info=node(scenario))
    assert {k: labels[k] for k in expected} == expected


def test_check_mode_reads_the_same(node):
    assert node("910b", check_mode=True)["npu_info"] == node("910b")["npu_info"]


def test_npu_smi_missing_is_a_documented_absent_result(node, tmp_path):
    result = node("910b", npu_smi_path=str(tmp_path / "no-such-npu-smi"))
    assert result["_rc"] == 0 and result["changed"] is False
    assert result["npu_info"] == npu_info.empty_result(f"npu-smi not found: {tmp_path / 'no-such-npu-smi'}",
                                                       expected_installed(load("910b")))


def test_npu_smi_not_on_path_is_absent(node, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(npu_info, "SEARCH_DIRS", [str(tmp_path / "sbin")])
    result = node("910b", npu_smi_path="npu-smi")
    assert result["npu_info"]["present"] is False
    assert result["npu_info"]["reason"].startswith("npu-smi not found: npu-smi in PATH or ")


def test_npu_smi_found_on_path(node, monkeypatch, tmp_path):
    """The default npu_smi_path is looked up in PATH (garbled first command: a quick, telling failure)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "npu-smi").symlink_to(FAKE)
    monkeypatch.setenv("PATH", f"{bindir}:/usr/bin:/bin")
    sc = dict(load("910b"), garble={"info": "npu-smi from PATH\n"})
    result = node(sc, npu_smi_path="npu-smi")
    assert result["msg"] == ('could not parse the output of `npu-smi info`: '
                             'no "npu-smi <version> Version: <version>" header line')


def test_hanging_npu_smi_times_out(node, tmp_path):
    hang = tmp_path / "npu-smi"
    hang.write_text("#!/bin/sh\nexec sleep 30\n")
    hang.chmod(0o755)
    result = node("910b", npu_smi_path=str(hang), timeout=1)
    assert result["failed"] is True
    assert result["msg"] == "`npu-smi info` did not finish within 1 seconds"


def test_driver_not_loaded_fails_naming_the_command(node, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("AI_L1_FAKE_NPU_SCENARIO", str(tmp_path / "absent.json"))
    with patch_module_args({"npu_smi_path": str(FAKE), "ascend_root": str(tmp_path)}), pytest.raises(SystemExit):
        npu_info.main()
    result = json.loads(capsys.readouterr().out)
    assert result["failed"] is True
    assert result["msg"].startswith("`npu-smi info` failed with exit code 255: ")
    assert "dcmi model initialized failed" in result["msg"]


GARBLED = [
    ("info", "910b", "+----\n| garbage\n", 'no "npu-smi <version> Version: <version>" header line'),
    ("info -m", "910b", "NPU ID  Chip ID  Chip Logic ID  Chip Name\n0 0\n", "expected 4 columns in '0 0'"),
    ("info -t topo", "910b", "\tNPU0 NPU1\nNPU0 X HCCS\n\n",
     "matrix is not square: rows ['NPU0'], columns ['NPU0', 'NPU1']"),
    ("info -t ecc -i 0", "910b", "NPU ID : 0\nChip Count : 1\n\nsomething odd\n",
     "expected \"key : value\", got 'something odd'"),
    ("info -t health -i 3 -c 0", "910b_alarm", "Health Status : Degraded\n", "unknown health state 'Degraded'"),
]


@pytest.mark.parametrize("command,scenario,text,reason", GARBLED, ids=[g[0] for g in GARBLED])
def test_garbled_output_fails_naming_the_command(node, command, scenario, text, reason):
    sc = copy.deepcopy(load(scenario))
    sc["garble"] = {command: text}
    result = node(sc)
    assert result.get("failed") is True, result
    assert result["msg"] == f"could not parse the output of `npu-smi {command}`: {reason}"
    assert "Traceback" not in json.dumps(result)


def test_version_files_missing_fall_back_to_npu_smi(node):
    info = node("910b", versions=False)["npu_info"]
    assert info["driver_version"] == "23.0.rc1"  # the npu-smi header's Version
    assert info["firmware_version"] == "7.0.0.5.242"  # the board's Firmware Version
    assert info["cann_version"] == ""
    # installed says what the files say, never what npu-smi says: nothing here.
    assert info["installed"] == {"arch": npu_info.platform.machine(), "firmware": "", "driver": "", "cann": "",
                                 "docker_runtime": ""}


def test_versions_only_reads_the_files_and_runs_no_npu_smi(node, tmp_path):
    """The installer's preflight: the version files alone, even where npu-smi would fail."""
    root = tmp_path / "Ascend"
    (root / "Ascend-Docker-Runtime").mkdir(parents=True)
    (root / "Ascend-Docker-Runtime" / "version.info").write_text("Version=5.0.RC3\n")
    # An npu-smi that fails loudly: versions_only must not start it.
    broken = tmp_path / "npu-smi"
    broken.write_text("#!/bin/sh\necho 'dcmi model initialized failed' >&2\nexit 255\n")
    broken.chmod(0o755)
    result = node("910b", npu_smi_path=str(broken), versions_only=True)
    assert result["_rc"] == 0 and result["changed"] is False
    expected = dict(expected_installed(load("910b")), docker_runtime="5.0.RC3")
    assert result["npu_info"] == npu_info.empty_result("npu-smi not run (versions_only)", expected)
    assert result["npu_info"]["present"] is False


def test_versions_only_on_a_fresh_node_is_all_empty(node, tmp_path):
    result = node("910b", versions=False, versions_only=True, check_mode=True)
    assert result["_rc"] == 0 and result["changed"] is False
    assert result["npu_info"]["installed"] == {"arch": npu_info.platform.machine(), "firmware": "", "driver": "",
                                               "cann": "", "docker_runtime": ""}


def test_installed_toolkit_under_the_cann_8_5_layout(tmp_path):
    """A CANN 8.5 install (<root>/cann/<arch>-linux) counts as installed, so preflight upgrades it."""
    root = tmp_path / "Ascend"
    info = root / "cann" / f"{npu_info.platform.machine()}-linux" / "ascend_toolkit_install.info"
    info.parent.mkdir(parents=True)
    info.write_text("package_name=Ascend-cann-toolkit\nversion=8.5.0\n")
    assert npu_info.installed_versions(str(root))["cann"] == "8.5.0"


def test_documented_options_match_the_argument_spec():
    """DOCUMENTATION's options and RV(npu_info.installed) keys match the code."""
    doc = yaml.safe_load(npu_info.DOCUMENTATION)
    assert set(doc["options"]) == {"npu_smi_path", "ascend_root", "timeout", "versions_only"}
    assert doc["options"]["versions_only"] == {**doc["options"]["versions_only"], "type": "bool", "default": False}
    ret = yaml.safe_load(npu_info.RETURN)["npu_info"]["contains"]
    assert set(ret) == set(npu_info.empty_result(""))
    assert set(ret["installed"]["contains"]) == set(npu_info.empty_result("")["installed"])


def test_cann_under_new_layout_and_other_arch(tmp_path):
    root = tmp_path / "Ascend"
    info = root / "cann" / "aarch64-linux" / "ascend_toolkit_install.info"
    info.parent.mkdir(parents=True)
    info.write_text((CAPTURED / "version_files.txt").read_text().split("ascend_toolkit_install.info <==\n")[1])
    assert npu_info.cann_version(str(root)) == "8.5.0"
    assert npu_info.cann_version(str(tmp_path / "nowhere")) == ""


# ---- parsers on the captured real outputs -------------------------------------------------


def captured(name):
    return (CAPTURED / name).read_text()


def test_parser_on_captured_910b3_table():
    table = npu_smi.parse_info_table(captured("910b3_info.txt"))
    assert table["npu_smi_version"] == "24.1.rc1.b030" and table["version"] == "24.1.rc1.b030"
    assert len(table["chips"]) == 8
    assert table["chips"][0] == {
        "npu_id": 0, "chip_id": 0, "phy_id": None, "name": "910B3", "health": "OK", "power_w": 101.8,
        "temperature_c": 43.0, "hugepages": "0 / 0", "bus_id": "0000:C1:00.0", "aicore_percent": 0.0,
        "memory_used_mb": 0, "memory_total_mb": 0, "hbm_used_mb": 3318, "hbm_total_mb": 65536,
    }
    assert [c["bus_id"] for c in table["chips"]][-1] == "0000:42:00.0"


def test_parser_on_captured_910a_table():
    chips = npu_smi.parse_info_table(captured("910a_info.txt"))["chips"]
    assert [(c["name"], c["memory_total_mb"], c["hbm_total_mb"]) for c in chips] == [
        ("910A", 15170, 32768), ("910A", 15171, 32768)]


def test_parser_on_captured_a3_table():
    chips = npu_smi.parse_info_table(captured("a3_info.txt"))["chips"]
    assert [(c["npu_id"], c["chip_id"], c["phy_id"], c["power_w"]) for c in chips] == [
        (0, 0, 0, 178.5), (0, 1, 1, None), (1, 0, 2, 186.3), (1, 1, 3, None)]


def test_parser_on_captured_topo():
    topo = npu_smi.parse_topo(captured("910b3_info_topo.txt"))
    assert topo["labels"] == [f"NPU{i}" for i in range(8)]
    assert topo["cpu_affinity"]["NPU0"] == "144-167" and topo["cpu_affinity"]["NPU7"] == "48-71"
    assert npu_smi.classify_topology(topo) == "hccs-fullmesh"
    assert npu_smi.link_counts(topo) == {"HCCS": 28}


def test_parser_on_captured_map_and_list():
    chips = npu_smi.parse_map(captured("910b4_info_m.txt"))
    assert len(chips) == 16
    assert chips[0] == {"npu_id": 0, "chip_id": 0, "logic_id": 0, "phy_id": None, "chip_name": "Ascend 910B4"}
    assert chips[1] == {"npu_id": 0, "chip_id": 1, "logic_id": None, "phy_id": None, "chip_name": "Mcu"}
    listing = npu_smi.parse_list(captured("910b4_info_l.txt"))
    assert listing == {"total": 8, "npus": [{"npu_id": n, "chip_count": 1} for n in range(8)]}


def test_parser_on_captured_key_value_listings():
    assert npu_smi.parse_board(captured("910_board.txt")) == {
        "npu_id": 0, "software_version": "23.0.5", "firmware_version": "7.1.0.7.220", "compatibility": "OK",
        "pci_device_id": "0xd801", "bus_id": "0000:61:00.0", "chip_count": 1}
    assert npu_smi.parse_ecc(captured("910_ecc.txt")) == {0: {
        "hbm_sbe": 0, "hbm_dbe": 0, "hbm_sbe_aggregate": 0, "hbm_dbe_aggregate": 0, "hbm_sbe_isolated_pages": 0,
        "hbm_dbe_isolated_pages": 0, "ddr_sbe": 0, "ddr_dbe": 0, "ddr_sbe_aggregate": 0, "ddr_dbe_aggregate": 0}}
    assert npu_smi.parse_usages(captured("910_usages.txt")) == {0: {
        "hbm_capacity_mb": 32768, "hbm_usage_percent": 0.0, "aicore_usage_percent": 0.0, "ddr_capacity_mb": 13553.0}}
    ok = {"health": "OK", "error_codes": [], "error_information": ""}
    assert npu_smi.parse_health(captured("910_health_chip.txt")) == ok
    assert npu_smi.parse_health(captured("910_health_npu.txt")) == ok
    assert npu_smi.parse_blocks(captured("910_board_chip.txt"))["header"]["Chip Name"] == "xxx"


@pytest.mark.parametrize("text,expected", [
    ("Health Status : Alarm\nError Code : 80E18005 80C98008\nError Information : HBM\n",
     {"health": "Alarm", "error_codes": ["80E18005", "80C98008"], "error_information": "HBM"}),
    ("Health : Critical\nError Code : 80E18005,80C98008\nError Information : NA\n",
     {"health": "Critical", "error_codes": ["80E18005", "80C98008"], "error_information": ""}),
])
def test_parse_health_error_codes(text, expected):
    assert npu_smi.parse_health(text) == expected


@pytest.mark.parametrize("parser,text,message", [
    (npu_smi.parse_info_table, "", 'no "npu-smi <version> Version: <version>" header line'),
    (npu_smi.parse_info_table, "| npu-smi 1 Version: 1 |\n| NPU Name | Health | x |\n", "the device table has no rows"),
    (npu_smi.parse_list, "\tTotal Count : 2\n\n\tNPU ID : 0\n\tChip Count : 1\n", "says 2 NPUs, 1 are listed"),
    (npu_smi.parse_map, "garbage", "no \"NPU ID  Chip ID"),
    (npu_smi.parse_topo, "nothing here", 'no "NPU0 NPU1 ..." column header'),
    (npu_smi.parse_topo, "\tNPU0 NPU1\nNPU0 HCCS HCCS\nNPU1 HCCS X\n", "diagonal is 'HCCS'"),
    (npu_smi.parse_usages, "NPU ID : 0\nChip Count : 1\n\nChip ID : 0\n", 'no "HBM Capacity(MB)" line'),
    (npu_smi.parse_board, "Software Version : 1\n", 'no "NPU ID" line'),
    (npu_smi.parse_kv, "no colon here\n", 'expected "key : value"'),
])
def test_parsers_reject_what_they_do_not_understand(parser, text, message):
    with pytest.raises(npu_smi.NpuSmiParseError, match=None) as exc:
        parser(text)
    assert message in str(exc.value)


@pytest.mark.parametrize("name,per_npu,family", [
    ("910B3", 1, "910B"), ("Ascend 910B4", 1, "910B"), ("910B4-1", 1, "910B"), ("910A", 1, "910A"),
    ("Ascend910", 2, "910C"), ("Ascend 910_9392", 2, "910C"), ("Ascend910", 1, "910"), ("310P3", 1, "310P"),
    ("Ascend 950PR", 1, "950PR"),
])
def test_chip_family(name, per_npu, family):
    assert npu_smi.chip_family(name, per_npu) == family


def test_classify_topology_edge_cases():
    one = {"labels": ["NPU0"], "links": {}}
    na = {"labels": ["NPU0", "NPU1"], "links": {("NPU0", "NPU1"): "NA", ("NPU1", "NPU0"): "NA"}}
    pcie = {"labels": ["NPU0", "NPU1"], "links": {("NPU0", "NPU1"): "PIX", ("NPU1", "NPU0"): "PIX"}}
    assert [npu_smi.classify_topology(t) for t in (one, na, pcie)] == ["single", "unknown", "pcie"]


# ---- regressions: 310P, first-generation 910, multi-line health, Chip-ID-first blocks ----


def unit_captured(name):
    return (UNIT_CAPTURED / name).read_text()


def test_parse_usages_accepts_ddr_only_310p():
    """Atlas 300I Duo (310P) reports DDR and no HBM: HBM values are None, the DDR is kept."""
    assert npu_smi.parse_usages(unit_captured("310p_duo_usages.txt")) == {
        0: {"hbm_capacity_mb": None, "hbm_usage_percent": None, "aicore_usage_percent": 0.0,
            "ddr_capacity_mb": 44280.0},
        1: {"hbm_capacity_mb": None, "hbm_usage_percent": None, "aicore_usage_percent": 0.0,
            "ddr_capacity_mb": 43693.0},
    }


def duo_310p_scenario():
    """One Atlas 300I Duo: the fake's 2-chip node with the 310P outputs it cannot print itself."""
    sc = copy.deepcopy(load("910a"))
    sc.update({"npu_count": 1, "chips_per_npu": 2, "topology": "pcie", "bus_ids": ["0000:82:00.0", "0000:83:00.0"],
               "cpu_affinity": ["0-23", "0-23"]})
    sc["chip"].update({"name": "310P3", "map_name": "Ascend 310P3", "pci_device_id": "0xD500"})
    sc["garble"] = {"info": unit_captured("310p_duo_info.txt"),
                    "info -t usages -i 0": unit_captured("310p_duo_usages.txt"),
                    "info -t ecc -i 0": unit_captured("310p_duo_ecc.txt")}
    return sc


def test_310p_duo_node_is_discovered(node):
    result = node(duo_310p_scenario())
    assert result["_rc"] == 0, result
    info = result["npu_info"]
    assert (info["chip_model"], info["npu_count"], info["chip_count"], info["chips_per_npu"]) == ("310P", 1, 2, 2)
    assert info["hbm_total_mb"] == 0  # no HBM on a 310P
    assert [(c["bus_id"], c["hbm_total_mb"], c["hbm_used_mb"], c["temperature_c"]) for c in info["chips"]] == [
        ("0000:82:00.0", 0, None, 53.0), ("0000:83:00.0", 0, None, 52.0)]
    assert info["chips"][0]["ecc"]["ddr_dbe"] == 0 and "hbm_dbe" not in info["chips"][0]["ecc"]
    assert info["health"] == {"ok": True, "problems": []}


def first_gen_910_named_910b():
    """Atlas 800 (9000) whose driver names its first-generation 910 parts "910B" (32 GB HBM, d801)."""
    sc = copy.deepcopy(load("910a"))
    sc["chip"].update({"name": "910B", "map_name": "Ascend 910B"})
    return sc


def test_first_generation_910_named_910b_is_not_a_910b(node):
    info = node(first_gen_910_named_910b())["npu_info"]
    assert info["chip_name"] == "Ascend 910B" and info["npus"][0]["pci_device_id"] == "0xd801"
    assert info["chip_model"] == "910"
    assert compute_labels(npu_info={"npu_info": info})["accelerator-model"] == "Ascend-910"


@pytest.mark.parametrize("name,device,hbm,family", [
    ("910B", "0xD801", 32768, "910"),     # first generation, told by the PCI device id
    ("Ascend 910B", "d801", None, "910"),
    ("910B", "0xd802", 65536, "910B"),    # Atlas A2
    ("910B", "", 32768, "910"),           # no device id: 32 GB HBM is the first generation
    ("910B", None, 65536, "910B"),
    ("910B", None, None, "910B"),         # nothing to tell by: as before
    ("910B4", None, 32768, "910B"),       # the 32 GB A2 part has a suffixed name
    ("910B3", "0xD802", 65536, "910B"),
    ("910A", "0xD801", 32768, "910A"),
])
def test_chip_family_tells_first_generation_910_from_910b(name, device, hbm, family):
    assert npu_smi.chip_family(name, 1, device, hbm) == family


def test_parse_health_keeps_every_error_line():
    """The second error's information comes on its own line with an empty key: it is kept."""
    assert npu_smi.parse_health(unit_captured("910b_health_two_errors.txt")) == {
        "health": "Alarm", "error_codes": ["80E18005", "80C98008"],
        "error_information": "node type=HBMC, sensor type=Memory, event state=uncorrectable ECC error; "
                             "node type=AICORE, sensor type=Software, event state=task timeout",
    }


def test_parse_health_continuation_without_colon_and_failed_lookup():
    text = ("Health Status : Critical\nError Code : 80E18005 80C98008\n"
            "Error Information : node type=HBMC\n    node type=AICORE\n"
            "Failed to get error information for error code : 0x8008\n")
    assert npu_smi.parse_health(text)["error_information"] == (
        "node type=HBMC; node type=AICORE; Failed to get error information for error code : 0x8008")


def test_parse_blocks_with_chip_id_first():
    """`-t common` opens each chip's block with "Chip ID"; the MCU block after it is the trailer."""
    blocks = npu_smi.parse_blocks(unit_captured("310p_duo_common.txt"))
    assert blocks["header"] == {"NPU ID": "0", "Chip Count": "2"}
    assert [(c["Chip ID"], c["Temperature(C)"], c["Aicore curFreq(MHZ)"]) for c in blocks["chips"]] == [
        (0, "53", "1080"), (1, "52", "960")]
    assert blocks["trailer"] == {"Chip Name": "mcu", "Temperature(C)": "41", "NPU Real-time Power(W)": "13.4"}
    # the trailing-"Chip ID" layout is read as before
    ecc = npu_smi.parse_blocks(unit_captured("310p_duo_ecc.txt"))
    assert [c["Chip ID"] for c in ecc["chips"]] == [0, 1] and ecc["trailer"] == {}


@pytest.mark.parametrize("line", [" " * 5000 + "x", "a" + " " * 5000 + "x", "\t" + " " * 5000 + "\x00"])
def test_parse_kv_is_linear_on_long_blank_runs(line):
    """A long run of blanks without a colon is refused at once, not after catastrophic backtracking."""
    start = time.monotonic()
    with pytest.raises(npu_smi.NpuSmiParseError, match='expected "key : value"'):
        npu_smi.parse_kv(line)
    assert time.monotonic() - start < 2


def test_read_key_refuses_a_value_that_is_not_text(tmp_path):
    """Non-UTF-8 bytes give no traceback: a garbled value counts as missing, other lines do not matter."""
    info = tmp_path / "version.info"
    info.write_bytes(b"Version=23.0.\xff\xfe\n")
    assert npu_info.read_key(str(info), "Version") == ""
    info.write_bytes(b"# \xb0\xe6\xb1\xbe (GBK comment)\nVersion=23.0.rc1\n")
    assert npu_info.read_key(str(info), "Version") == "23.0.rc1"
