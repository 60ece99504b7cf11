"""Node Problem Detector GPU plugin (monitoring/npd/) against the fake NVML scenarios
(tests/hardware/nvml, loaded through LD_LIBRARY_PATH as tests/unit/test_gpu_info.py does)
and the captured kernel log: exit codes 0 OK, 1 problem, 2 unknown."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
NPD = ROOT / "monitoring" / "npd"
CONFIGMAP = ROOT / "monitoring" / "kubernetes" / "npd-gpu-configmap.yaml"
WRAPPER = NPD / "check_gpu.sh"
NVML_DIR = ROOT / "tests" / "hardware" / "nvml"
SCENARIOS = NVML_DIR / "scenarios"
KERN_LOG = SCENARIOS / "a100-pcie-2x-xid79.kern.log"
# The check_gpu.py NPD runs: the generated ConfigMap's (the collection's accelerator_health.py
# followed by monitoring/npd/check_gpu.py).
SHIPPED = yaml.safe_load(CONFIGMAP.read_text())["data"]["check_gpu.py"]


@pytest.fixture
def shipped_check(tmp_path):
    script = tmp_path / "shipped_check_gpu.py"
    script.write_text(SHIPPED)
    return script


@pytest.fixture(scope="module")
def fake_nvml_dir():
    if shutil.which("gcc") is None:
        pytest.fail("gcc is missing: it is needed to build the fake libnvidia-ml.so.1 (apt-get install gcc)")
    proc = subprocess.run(["bash", str(NVML_DIR / "build.sh")], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, "building the fake NVML failed:\n" + proc.stderr
    return Path(proc.stdout.strip().splitlines()[-1])


def check(lib_dir, scenario, *args, path=None):
    """Runs the shipped script as check_gpu.sh does: on python3's stdin."""
    env = {"PATH": path or os.environ["PATH"], "LD_LIBRARY_PATH": str(lib_dir),
           "AI_L1_FAKE_NVML_SCENARIO": str(SCENARIOS / scenario)}
    proc = subprocess.run([sys.executable, "-", *args], input=SHIPPED, capture_output=True, text=True, env=env,
                          check=False, timeout=300)
    return proc.returncode, proc.stdout.strip()


@pytest.mark.parametrize(("scenario", "rc", "message"), [
    ("a100-pcie-2x-xid79.conf", 1, "GPU 0 DBE ECC 2"),
    ("a100-8x-nvswitch-mig.conf", 0, "no XID or double-bit ECC"),
    ("h200-1x-vm.conf", 0, "no XID or double-bit ECC"),
    ("l40s-8x-pcie.conf", 0, "no XID or double-bit ECC"),
    ("garbled-2x.conf", 1, "GPU 1 lost"),           # ECC NOT_SUPPORTED is no problem; a lost GPU is
    ("no-driver.conf", 2, "NVML init failed"),
])
def test_ecc(fake_nvml_dir, scenario, rc, message):
    got_rc, out = check(fake_nvml_dir, scenario, "--check", "ecc")
    assert (got_rc, message in out) == (rc, True), out


def test_xid_from_kernel_log(fake_nvml_dir):
    rc, out = check(fake_nvml_dir, "a100-8x-nvswitch-mig.conf", "--check", "xid", "--kernel-log", str(KERN_LOG))
    assert rc == 1
    # 48 and 79 need service; XID 13 on 0a:00 is an application fault and is ignored.
    assert out == "XID 48,79 on PCI 0000:07:00; XID 79 on PCI 0000:99:00"


def test_xid_list_is_configurable(fake_nvml_dir):
    rc, out = check(fake_nvml_dir, "a100-8x-nvswitch-mig.conf", "--check", "xid", "--xid", "13",
                    "--kernel-log", str(KERN_LOG))
    assert (rc, out) == (1, "XID 13 on PCI 0000:0a:00")


def test_clean_kernel_log_is_ok(fake_nvml_dir, tmp_path):
    log = tmp_path / "kern.log"
    log.write_text(KERN_LOG.read_text().splitlines()[0] + "\n")
    assert check(fake_nvml_dir, "a100-8x-nvswitch-mig.conf", "--kernel-log", str(log))[0] == 0


def test_unreadable_kernel_log_is_unknown(fake_nvml_dir, tmp_path):
    rc, out = check(fake_nvml_dir, "a100-8x-nvswitch-mig.conf", "--check", "xid", "--kernel-log",
                    str(tmp_path / "missing"))
    assert rc == 2 and "cannot read" in out


def test_no_kernel_log_tool_is_unknown(fake_nvml_dir, tmp_path):
    rc, out = check(fake_nvml_dir, "a100-8x-nvswitch-mig.conf", "--check", "xid", path=str(tmp_path))
    assert rc == 2 and "no kernel log" in out


def test_dmesg_fallback(fake_nvml_dir, tmp_path):
    dmesg = tmp_path / "dmesg"
    dmesg.write_text(f"#!/bin/sh\ncat {KERN_LOG}\n")
    dmesg.chmod(0o755)
    (tmp_path / "cat").symlink_to(shutil.which("cat"))
    rc, out = check(fake_nvml_dir, "a100-8x-nvswitch-mig.conf", "--check", "xid", path=str(tmp_path))
    assert rc == 1 and "XID 48,79 on PCI 0000:07:00" in out


def test_problem_wins_over_unknown(fake_nvml_dir, tmp_path):
    rc, out = check(fake_nvml_dir, "a100-pcie-2x-xid79.conf", "--kernel-log", str(tmp_path / "missing"))
    assert (rc, out) == (1, "GPU 0 DBE ECC 2")


def test_plugin_config_and_configmap():
    cfg = json.loads((NPD / "gpu-problem.json").read_text())
    assert cfg["plugin"] == "custom"
    (cond,) = cfg["conditions"]
    assert cond["type"] == "GPUError"  # the condition the GPUNodeDraining alert watches
    (rule,) = cfg["rules"]
    assert rule["type"] == "permanent" and rule["condition"] == "GPUError"
    # NPD runs the wrapper, which runs check_gpu.py with the node's python3 (chroot /host).
    assert Path(rule["path"]).name == WRAPPER.name
    assert int(cfg["pluginConfig"]["max_output_length"]) >= 80
    cm = yaml.safe_load(CONFIGMAP.read_text())
    assert (cm["kind"], cm["metadata"]["namespace"]) == ("ConfigMap", "kube-system")
    assert json.loads(cm["data"]["gpu-problem.json"]) == cfg
    health = (ROOT / "collections/ansible_collections/ai_platform/l1/plugins/module_utils/accelerator_health.py")
    script = cm["data"]["check_gpu.py"]
    assert script.startswith(health.read_text()), "the plugin must carry the collection's accelerator_health.py"
    assert script.endswith((NPD / "check_gpu.py").read_text())
    assert cm["data"]["check_gpu.sh"] == WRAPPER.read_text()


@pytest.mark.parametrize("kernel_log", ["", "/var/log/kern.log"])
def test_wrapper_runs_the_check_in_the_node_root(tmp_path, fake_nvml_dir, shipped_check, kernel_log):
    """check_gpu.sh with a stand-in chroot (records its arguments, then runs the command here):
    the node's python3 gets check_gpu.py on stdin, NPD's arguments and the kernel log option."""
    plugin = tmp_path / "plugin"
    plugin.mkdir()
    shutil.copy(shipped_check, plugin / "check_gpu.py")
    wrapper = plugin / "check_gpu.sh"
    wrapper.write_text(WRAPPER.read_text().replace("/config/plugin/", f"{plugin}/"))
    wrapper.chmod(0o755)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "chroot").write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/chroot.args\nshift\nshift\n'
                                    f'exec {sys.executable} "$@"\n')
    (bin_dir / "chroot").chmod(0o755)
    log = tmp_path / "kern.log"
    log.write_text(KERN_LOG.read_text())
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "LD_LIBRARY_PATH": str(fake_nvml_dir),
           "AI_L1_FAKE_NVML_SCENARIO": str(SCENARIOS / "a100-pcie-4x-bridged.conf"),
           "GPU_CHECK_KERNEL_LOG": str(log) if kernel_log else ""}
    proc = subprocess.run([str(wrapper), "--check", "xid"], capture_output=True, text=True, env=env,
                          check=False, timeout=300)
    args = (tmp_path / "chroot.args").read_text().split()
    assert args[:3] == ["/host", "/usr/bin/python3", "-"], args
    if kernel_log:
        assert args[3:] == ["--check", "xid", "--kernel-log", str(log)], args
        assert proc.returncode == 1 and "79" in proc.stdout, (proc.returncode, proc.stdout, proc.stderr)
    else:
        assert args[3:] == ["--check", "xid"], args


# ------------------------------------------------------------- the GPUHealthy Node condition
class FakeNodeAPI:
    """The two calls the check makes for --node-condition: GET the Node (from the API server's
    cache) and a strategic merge PATCH of its status; the patch is applied to the stored Node."""

    def __init__(self, conditions=()):
        import http.server  # noqa: PLC0415
        import threading  # noqa: PLC0415

        self.node = {"metadata": {"name": "gpu1"}, "status": {"conditions": list(conditions)}}
        self.calls = []
        api = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def reply(self, body):
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):  # noqa: N802
                api.calls.append(("GET", self.path, self.headers.get("Authorization"), None))
                self.reply(api.node)

            def do_PATCH(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                api.calls.append(("PATCH", self.path, self.headers.get("Content-Type"), body))
                by_type = {c["type"]: c for c in api.node["status"]["conditions"]}
                for cond in body["status"]["conditions"]:
                    by_type[cond["type"]] = cond
                api.node["status"]["conditions"] = list(by_type.values())
                self.reply(api.node)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def condition(self, kind="GPUHealthy"):
        return next((c for c in self.node["status"]["conditions"] if c["type"] == kind), None)

    def close(self):
        self.server.shutdown()


@pytest.fixture
def node_api():
    api = FakeNodeAPI(conditions=[{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}])
    yield api
    api.close()


def check_with_condition(lib_dir, scenario, api_url, *args):
    env = {"PATH": os.environ["PATH"], "LD_LIBRARY_PATH": str(lib_dir),
           "AI_L1_FAKE_NVML_SCENARIO": str(SCENARIOS / scenario), "NODE_NAME": "gpu1",
           "GPU_CHECK_API_URL": api_url, "GPU_CHECK_API_TOKEN": "npd-token"}
    proc = subprocess.run([sys.executable, "-", "--node-condition", "GPUHealthy", *args], input=SHIPPED,
                          capture_output=True, text=True, env=env, check=False, timeout=300)
    return proc.returncode, proc.stdout.strip(), proc.stderr


def test_a_healthy_node_gets_gpuhealthy_true_once(fake_nvml_dir, node_api, tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("")
    rc, out, _ = check_with_condition(fake_nvml_dir, "a100-8x-nvswitch-mig.conf", node_api.url,
                                      "--kernel-log", str(log))
    assert rc == 0
    cond = node_api.condition()
    assert (cond["status"], cond["reason"], cond["message"]) == ("True", "GPUIsHealthy", out)
    assert node_api.condition("Ready")["reason"] == "KubeletReady"  # the other conditions stay
    get, patch = node_api.calls
    assert get[:3] == ("GET", "/api/v1/nodes/gpu1?resourceVersion=0", "Bearer npd-token")
    assert patch[:3] == ("PATCH", "/api/v1/nodes/gpu1/status", "application/strategic-merge-patch+json")
    # The next invocation finds it unchanged: a read, no write.
    check_with_condition(fake_nvml_dir, "a100-8x-nvswitch-mig.conf", node_api.url, "--kernel-log", str(log))
    assert [c[0] for c in node_api.calls] == ["GET", "PATCH", "GET"]


def test_an_xid_turns_gpuhealthy_false_with_the_reason(fake_nvml_dir, node_api, tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("")
    check_with_condition(fake_nvml_dir, "a100-8x-nvswitch-mig.conf", node_api.url, "--kernel-log", str(log))
    healthy_since = node_api.condition()["lastTransitionTime"]
    rc, out, _ = check_with_condition(fake_nvml_dir, "a100-8x-nvswitch-mig.conf", node_api.url,
                                      "--kernel-log", str(KERN_LOG))
    assert rc == 1 and "XID 48,79" in out
    cond = node_api.condition()
    assert (cond["status"], cond["reason"], cond["message"]) == ("False", "GPUCardFailure", out)
    assert cond["lastTransitionTime"] >= healthy_since


def test_an_unknown_check_writes_no_condition(fake_nvml_dir, node_api):
    rc, _, _ = check_with_condition(fake_nvml_dir, "no-driver.conf", node_api.url, "--check", "ecc")
    assert rc == 2 and node_api.calls == []


def test_an_unreachable_api_leaves_the_verdict_alone(fake_nvml_dir, tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("")
    rc, out, err = check_with_condition(fake_nvml_dir, "a100-8x-nvswitch-mig.conf", "http://127.0.0.1:9",
                                        "--kernel-log", str(KERN_LOG))
    assert rc == 1 and "XID 48,79" in out
    assert "setting GPUHealthy failed" in err
