"""ai_platform.l1.kernel_state: the live sysctls, swap and modules a baseline compares with, in one read."""

from __future__ import annotations

import os

import pytest
from ansible_collections.ai_platform.l1.plugins.modules import kernel_state


@pytest.fixture
def kernel(tmp_path, monkeypatch):
    sys_root, modules = tmp_path / "proc/sys", tmp_path / "sys/module"
    for key, value, writable in [("net/ipv4/ip_forward", "1\n", True), ("vm/swappiness", "60\n", False),
                                 ("net/ipv4/tcp_rmem", "4096\t131072  6291456\n", True)]:
        path = sys_root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value)
        os.chmod(path, 0o644 if writable else 0o444)
    (modules / "overlay").mkdir(parents=True)
    swaps = tmp_path / "proc/swaps"
    swaps.write_text("Filename\tType\tSize\tUsed\tPriority\n"
                     "/dev/sda2  partition\t1000\t0\t-2\n/swapfile file 10 0 -3\n")
    monkeypatch.setattr(kernel_state, "PROC_SYS", str(sys_root))
    monkeypatch.setattr(kernel_state, "PROC_SWAPS", str(swaps))
    monkeypatch.setattr(kernel_state, "SYS_MODULE", str(modules))
    return tmp_path


def test_reads_sysctls_swap_and_modules(run_module, kernel):
    out = run_module(kernel_state, sysctls=["net.ipv4.ip_forward", "vm.swappiness", "net.ipv4.tcp_rmem",
                                            "net.bridge.bridge-nf-call-iptables"],
                     modules=["br_netfilter", "overlay"])
    assert out["_rc"] == 0 and not out["changed"], out
    assert out["sysctls"]["net.ipv4.ip_forward"] == {"state": "writable", "value": "1"}
    assert out["sysctls"]["net.ipv4.tcp_rmem"]["value"] == "4096 131072 6291456"
    assert out["sysctls"]["net.bridge.bridge-nf-call-iptables"] == {"state": "absent", "value": ""}
    assert out["swaps"] == ["/dev/sda2", "/swapfile"]
    assert out["modules_present"] == ["overlay"]


def test_a_read_only_key_is_reported_so(run_module, kernel, monkeypatch):
    # Root passes access(W_OK) on a 0444 file; /proc/sys mounted read-only (a container) fails it.
    monkeypatch.setattr(kernel_state.os, "access", lambda path, mode: not path.endswith("swappiness"))
    out = run_module(kernel_state, sysctls=["vm.swappiness", "net.ipv4.ip_forward"])
    assert out["sysctls"]["vm.swappiness"] == {"state": "read-only", "value": "60"}
    assert out["sysctls"]["net.ipv4.ip_forward"]["state"] == "writable"


def test_no_swap_file_and_nothing_asked(run_module, kernel, monkeypatch):
    monkeypatch.setattr(kernel_state, "PROC_SWAPS", str(kernel / "missing"))
    out = run_module(kernel_state, check_mode=True)
    assert out["_rc"] == 0 and out == {**out, "sysctls": {}, "swaps": [], "modules_present": []}
