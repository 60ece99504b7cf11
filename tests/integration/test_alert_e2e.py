"""Alert path end to end with the real Debian Prometheus and Alertmanager binaries, on the
controller: the simulated dcgm-exporter (tests/hardware/dcgm, driven by a fake NVML scenario
and a kernel log) is scraped; an XID appended to the kernel log for one GPU makes
GPUXidError fire (the shipped rule file), Alertmanager (the shipped config) delivers it to a
webhook sink and through the Feishu relay (signed) to a second sink. The time from injection
to delivery is printed (pytest -s) and written to .cache/alert-e2e-timings.json.

Not yet run on a lab node: this uses the same binaries and files on the controller.
Needs the prometheus and prometheus-alertmanager Debian packages and gcc (fake NVML).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
MON = REPO / "monitoring"
NVML_DIR = REPO / "tests" / "hardware" / "nvml"
EXPORTER = REPO / "tests" / "hardware" / "dcgm" / "fake_dcgm_exporter.py"
RELAY = MON / "relay" / "feishu_relay.py"
TIMINGS = REPO / ".cache" / "alert-e2e-timings.json"
SECRET = "e2e-secret"
DEADLINE_S = 300


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Sink:
    def __init__(self):
        self.posts = []
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                sink.posts.append((time.monotonic(), json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
                body = b'{"code":0,"msg":"success"}'
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def need(binary, package):
    path = shutil.which(binary)
    if path is None:
        pytest.fail(f"{binary} is missing: apt-get install {package}")
    return path


def wait_http(url, timeout=60):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    pytest.fail(f"{url} did not answer within {timeout}s")


def test_xid_injection_reaches_webhook_and_feishu(tmp_path):  # noqa: PLR0915 (one scenario, in order)
    prometheus = need("prometheus", "prometheus")
    alertmanager = need("prometheus-alertmanager", "prometheus-alertmanager")
    build = subprocess.run(["bash", str(NVML_DIR / "build.sh")], capture_output=True, text=True, check=False)
    assert build.returncode == 0, build.stderr
    nvml = Path(build.stdout.strip().splitlines()[-1]) / "libnvidia-ml.so.1"

    ports = {name: free_port() for name in ("exporter", "prometheus", "alertmanager", "relay")}
    kern_log = tmp_path / "kern.log"
    kern_log.write_text("kernel: [    1.0] nvidia: module loaded\n")
    raw_sink, feishu_sink = Sink(), Sink()

    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    shutil.copy(MON / "rules" / "gpu-alerts.rules.yml", rules_dir)
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": "5s", "evaluation_interval": "5s"},
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{ports['alertmanager']}"]}]}]},
        "rule_files": [str(rules_dir / "*.yml")],
        "scrape_configs": [{"job_name": "dcgm-exporter", "scrape_interval": "5s",
                            "static_configs": [{"targets": [f"127.0.0.1:{ports['exporter']}"]}]}],
    }))
    am_cfg = yaml.safe_load((MON / "alertmanager" / "alertmanager.yml").read_text())
    for receiver in am_cfg["receivers"]:
        if "webhook_configs" not in receiver:  # the `null` receiver
            continue
        for hook in receiver["webhook_configs"]:
            hook["url"] = hook["url"].replace("127.0.0.1:9099", f"127.0.0.1:{ports['relay']}")
        receiver["webhook_configs"].append({"url": f"http://127.0.0.1:{raw_sink.port}/hook", "send_resolved": True})
    (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump(am_cfg))
    (tmp_path / "relay.json").write_text(json.dumps({"channels": {
        name: {"url": f"http://127.0.0.1:{feishu_sink.port}/open-apis/bot/v2/hook/{name}", "secret": SECRET}
        for name in ("critical", "warning", "info")}}))

    scenario = NVML_DIR / "scenarios" / "a100-pcie-4x-bridged.conf"
    env = {"PATH": "/usr/bin:/bin", "AI_L1_FAKE_NVML_SCENARIO": str(scenario)}
    procs = []
    logs = tmp_path / "logs"
    logs.mkdir()

    def start(name, cmd, extra_env=None):
        out = (logs / f"{name}.log").open("w")
        procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**env, **(extra_env or {})}))

    try:
        start("exporter", [sys.executable, str(EXPORTER), "--listen", f"127.0.0.1:{ports['exporter']}",
                           "--kernel-log", str(kern_log), "--hostname", "gpu1", "--nvml", str(nvml)])
        start("relay", [sys.executable, str(RELAY), "--config", str(tmp_path / "relay.json"),
                        "--listen", f"127.0.0.1:{ports['relay']}", "--backoff", "0.2"])
        start("alertmanager", [alertmanager, f"--config.file={tmp_path / 'alertmanager.yml'}",
                               f"--storage.path={tmp_path / 'am'}",
                               f"--web.listen-address=127.0.0.1:{ports['alertmanager']}",
                               "--cluster.listen-address="])
        start("prometheus", [prometheus, f"--config.file={tmp_path / 'prometheus.yml'}",
                             f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{ports['prometheus']}"])
        for port, path in ((ports["exporter"], "/metrics"), (ports["relay"], "/healthz"),
                           (ports["alertmanager"], "/-/ready"), (ports["prometheus"], "/-/ready")):
            wait_http(f"http://127.0.0.1:{port}{path}")
        # Let Prometheus see the XID gauge at 0 first, as a healthy node would be.
        query = f"http://127.0.0.1:{ports['prometheus']}/api/v1/query?query=DCGM_FI_DEV_XID_ERRORS"
        end = time.monotonic() + 60
        while time.monotonic() < end:
            with urllib.request.urlopen(query, timeout=5) as resp:
                if len(json.load(resp)["data"]["result"]) == 4:
                    break
            time.sleep(1)
        else:
            pytest.fail("Prometheus never scraped the simulated exporter")

        injected = time.monotonic()
        with kern_log.open("a") as handle:  # XID 79 on GPU 2 only
            handle.write(f"kernel: [  99.0] NVRM: Xid (PCI:{gpu_bus(env, nvml, 2)}): 79, pid='<unknown>', "
                         "name=<unknown>, GPU has fallen off the bus.\n")

        def firing(posts):
            return [(t, p) for t, p in posts if any(a["labels"].get("alertname") == "GPUXidError" for a in
                                                    (p.get("alerts") or []))]

        end = injected + DEADLINE_S
        while time.monotonic() < end and not (firing(raw_sink.posts) and feishu_sink.posts):
            time.sleep(1)
        hits = firing(raw_sink.posts)
        assert hits, f"no GPUXidError at the webhook sink within {DEADLINE_S}s; logs in {logs}"
        assert feishu_sink.posts, "the relay delivered nothing to the Feishu sink"
        t_raw, payload = hits[0]
        t_feishu, message = feishu_sink.posts[0]
        (alert,) = [a for a in payload["alerts"] if a["labels"]["alertname"] == "GPUXidError"]
        assert alert["labels"]["Hostname"] == "gpu1" and alert["labels"]["gpu"] == "2"
        assert alert["labels"]["severity"] == "critical"
        assert alert["labels"]["xid"] == "79"  # what the remediation policy keys on
        assert alert["annotations"]["summary"] == "GPU XID 79 on gpu1 GPU 2"
        key = f"{message['timestamp']}\n{SECRET}".encode()
        assert message["sign"] == base64.b64encode(hmac.new(key, b"", hashlib.sha256).digest()).decode()
        assert "Hostname=gpu1" in message["content"]["text"] and "gpu=2" in message["content"]["text"]
        timings = {"injection_to_webhook_s": round(t_raw - injected, 1),
                   "injection_to_feishu_sink_s": round(t_feishu - injected, 1)}
        print("alert e2e timings:", timings)
        TIMINGS.parent.mkdir(exist_ok=True)
        TIMINGS.write_text(json.dumps(timings, indent=2) + "\n")
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        raw_sink.server.shutdown()
        feishu_sink.server.shutdown()


def gpu_bus(env, nvml, index):
    """The kernel's PCI name (0000:41:00) of GPU `index`, asked of the simulated exporter."""
    proc = subprocess.run([sys.executable, "-c", (
        "import ctypes,sys;sys.path.insert(0,sys.argv[1]);import fake_dcgm_exporter as f;"
        "g=f.read_gpus(ctypes.CDLL(sys.argv[2]));print(g[int(sys.argv[3])]['bus'][:10])"),
        str(EXPORTER.parent), str(nvml), str(index)], capture_output=True, text=True, env=env, check=True)
    return proc.stdout.strip()
