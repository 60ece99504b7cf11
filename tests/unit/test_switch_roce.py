"""ai_platform.l1.switch_roce against simulated Onyx and Cumulus NVUE switches over SSH (netmiko).

tests/hardware/switch/fake_switch.py serves a real SSH session with switch state, so changed /
unchanged, drift repair, save and per-switch failures are checked on what the server holds.
Onyx releases before 3.8.2000 have no `roce` command: there the module pushes the explicit
PFC / DSCP-trust / ECN lines per port, which the fake holds per port and prints folded into ranges.
Every switch's SSH host key is checked before the login: `switch_spec` pins the fake's key, and the
host-key tests check that a refused switch saw a TCP connection but no login (`state.logins`).
"""

import base64
import hashlib
import hmac
import os
import shutil
import socket
import struct
import subprocess

import paramiko
import pytest
from ansible_collections.ai_platform.l1.plugins.module_utils import switch_roce as sr
from ansible_collections.ai_platform.l1.plugins.modules import switch_roce

PASSWORD = "s3cret-pw"
OLD_ONYX = "3.6.8190"     # before the roce command
PFC3 = "dcb priority-flow-control priority 3 enable"
ECN = "traffic-class 3 congestion-control ecn minimum-absolute 150 maximum-absolute 1500"


@pytest.fixture
def run(run_module):
    def _run(specs, **args):
        return run_module(switch_roce, **dict({"switches": specs, "timeout": 10}, **args))
    return _run


def diff_lines(result):
    before = set(result["diff"]["before"].splitlines())
    after = set(result["diff"]["after"].splitlines())
    return sorted(before - after), sorted(after - before)


def test_seed_settings_then_idempotent_then_drift(run, switch_pair, switch_spec):
    onyx, nvue = switch_pair
    specs = [switch_spec(onyx), switch_spec(nvue)]

    check = run(specs, check_mode=True)
    assert check["changed"] and check["_rc"] == 0, check
    assert "roce lossless" not in onyx.state.running  # check mode sent nothing
    assert "nv set qos roce mode lossless" not in nvue.state.running

    first = run(specs)
    assert first["_rc"] == 0, first
    assert first["changed"] is True
    by = {r["name"]: r for r in first["switches"]}
    assert by["leaf1"]["roce_command"] is True and by["leaf2"]["roce_command"] is None  # from show version
    assert "roce lossless" in onyx.state.running
    assert PFC3 in onyx.state.running
    assert onyx.state.saved == onyx.state.snapshot()  # configuration write
    assert "nv set qos roce mode lossless" in nvue.state.running
    assert "nv set qos pfc default-global switch-priority 3" in nvue.state.running
    assert nvue.state.saved == nvue.state.snapshot()  # nv config apply + save
    assert "PFC priority 3: on" in by["leaf1"]["changes"]
    assert PFC3 not in first["diff"]["before"]
    assert PFC3 in first["diff"]["after"]
    assert PASSWORD not in first["_out"]  # no_log

    second = run(specs)
    assert second["changed"] is False, second
    assert second["diff"]["before"] == second["diff"]["after"]
    assert all(r["commands"] == [] for r in second["switches"])

    # Drift by hand: PFC on priority 3 turned off on both switches.
    onyx.state.running.remove(PFC3)
    nvue.state.running.remove("nv set qos pfc default-global switch-priority 3")
    nvue.state.pending = list(nvue.state.running)
    third = run(specs)
    assert third["changed"] is True
    for r in third["switches"]:
        assert r["changes"] == ["PFC priority 3: on"], r
    assert [r["commands"] for r in third["switches"]] == [
        [PFC3], ["nv set qos pfc default-global switch-priority 3"]]
    assert diff_lines(third) == ([], [PFC3, "nv set qos pfc default-global switch-priority 3"])
    assert PFC3 in onyx.state.running
    assert not run(specs)["changed"]


def test_moving_pfc_removes_the_old_priority(run, switch_pair, switch_spec):
    onyx, nvue = switch_pair
    specs = [switch_spec(onyx), switch_spec(nvue)]
    assert run(specs)["changed"]  # the seed's priority 3
    result = run(specs, pfc_priorities=[4])
    assert result["_rc"] == 0, result
    for r in result["switches"]:
        assert sorted(r["changes"]) == ["PFC priority 3: off", "PFC priority 4: on"], r
    assert PFC3 not in onyx.state.running
    assert "nv set qos pfc default-global switch-priority 3" not in nvue.state.running
    assert "nv set qos pfc default-global switch-priority 4" in nvue.state.running


def test_onyx_without_roce_command_gets_explicit_lines(run, fake_switch, switch_spec):
    old = fake_switch("onyx", host="leaf3", release=OLD_ONYX)
    old.state.onyx_config("interface ethernet 1/5 qos trust L2")  # a port the module must leave alone
    spec = switch_spec(old, interfaces=["1/1-1/2"])

    check = run([spec], check_mode=True)
    assert check["_rc"] == 0 and check["changed"], check
    assert set(old.state.ports) == {"1/5"}  # nothing sent in check mode

    first = run([spec])
    assert first["_rc"] == 0, first
    res = first["switches"][0]
    assert res["roce_command"] is False
    assert not any(c.startswith(("roce", "no roce")) for c in res["commands"])
    assert res["commands"][:2] == ["dcb priority-flow-control enable force", PFC3]
    for port in ("1/1", "1/2"):
        assert old.state.ports[port] == {"trust": "L3", "pfc": True,
                                         "ecn": {3: "ecn minimum-absolute 150 maximum-absolute 1500"}}
    assert old.state.ports["1/5"]["trust"] == "L2"
    assert old.state.saved == old.state.snapshot()
    shown = old.state.onyx_show_running()
    assert "   interface ethernet 1/1-1/2 qos trust L3" in shown  # Onyx folds ports into a range
    assert "interface ethernet 1/1-1/2 " + ECN in shown
    assert "PFC priority 3: on" in res["changes"] and "PFC port 1/2: on" in res["changes"]

    second = run([spec])
    assert second["changed"] is False and second["switches"][0]["commands"] == [], second
    assert second["diff"]["before"] == second["diff"]["after"]

    # Drift by hand: PFC of priority 3 off, PFC mode off on port 1/2, other ECN thresholds on 1/1.
    old.state.onyx_config("no " + PFC3)
    third = run([spec])
    assert third["switches"][0]["changes"] == ["PFC priority 3: on"], third
    assert third["switches"][0]["commands"] == [PFC3]
    assert diff_lines(third) == ([], [PFC3])

    old.state.onyx_config("interface ethernet 1/2 no dcb priority-flow-control mode force")
    old.state.onyx_config("interface ethernet 1/1 traffic-class 3 congestion-control ecn "
                          "minimum-absolute 3000 maximum-absolute 3000")
    fourth = run([spec])
    res = fourth["switches"][0]
    assert sorted(res["changes"]) == ["ECN traffic-class 3 port 1/1: ecn minimum-absolute 150 maximum-absolute 1500",
                                      "PFC port 1/2: on"], res
    # a changed threshold is set again, not removed first
    assert sorted(res["commands"]) == ["interface ethernet 1/1 " + ECN,
                                       "interface ethernet 1/2 dcb priority-flow-control mode on force"]
    assert diff_lines(fourth) == (
        ["interface ethernet 1/1 traffic-class 3 congestion-control ecn minimum-absolute 3000 maximum-absolute 3000"],
        ["interface ethernet 1/1 " + ECN, "interface ethernet 1/2 dcb priority-flow-control mode on force"])
    assert not run([spec])["changed"]


def test_onyx_explicit_lines_follow_the_priority(run, fake_switch, switch_spec):
    old = fake_switch("onyx", host="leaf3", release=OLD_ONYX)
    spec = switch_spec(old, interfaces=["1/1"])
    assert run([spec])["changed"]
    result = run([spec], pfc_priorities=[4])
    res = result["switches"][0]
    assert result["_rc"] == 0, result
    assert "interface ethernet 1/1 no traffic-class 3 congestion-control" in res["commands"]
    assert "no " + PFC3 in res["commands"]
    assert "PFC priority 3: off" in res["changes"] and "PFC priority 4: on" in res["changes"]
    assert "ECN traffic-class 3 port 1/1: off" in res["changes"]
    assert list(old.state.ports["1/1"]["ecn"]) == [4]


def test_old_onyx_without_interfaces_is_a_switch_failure_before_any_config(run, fake_switch, switch_spec):
    old = fake_switch("onyx", host="leaf3", release=OLD_ONYX)
    result = run([switch_spec(old)])
    assert result["failed"] and "no roce command and no interfaces" in result["msg"], result
    assert not [c for c in old.state.log if c.startswith(("roce", "dcb", "interface", "configure"))]


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_unreachable_and_silent_switches_do_not_stop_the_others(run, switch_pair, switch_spec):
    onyx, nvue = switch_pair
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)  # accepts TCP, never speaks SSH: a hung switch
    try:
        specs = [dict(switch_spec(onyx), name="down", port=free_port()),
                 dict(switch_spec(onyx), name="hung", port=silent.getsockname()[1]),
                 switch_spec(nvue)]
        # 10 s, not less: under a loaded CI machine the answering switch needs more than 3 s to read.
        result = run(specs, timeout=10)
    finally:
        silent.close()
    assert result["_rc"] == 1 and result["failed"]
    assert result["msg"].startswith("2 of 3 switches failed")
    by = {r["name"]: r for r in result["switches"]}
    assert by["down"]["failed"] and "down (127.0.0.1:" in by["down"]["msg"]
    assert by["hung"]["failed"] and by["hung"]["msg"]
    assert not by["leaf2"]["failed"] and by["leaf2"]["changed"]
    assert "nv set qos roce mode lossless" in nvue.state.running


def test_wrong_password_is_a_per_switch_failure(run, switch_pair, switch_spec):
    onyx, _ = switch_pair
    result = run([dict(switch_spec(onyx), password="wrong")])
    assert result["failed"]
    assert "Authentication" in result["switches"][0]["msg"]
    assert "wrong" not in result["_out"]


@pytest.mark.parametrize("case", [
    (dict(pfc_priorities=[8]), {}, "priority 8 is out of 0..7"),
    (dict(pfc_priorities=[-1]), {}, "priority -1 is out of 0..7"),
    (dict(pfc_priorities=[]), {}, "needs at least one PFC priority"),
    (dict(ecn_min_kb=2000, ecn_max_kb=1500), {}, "ecn_min_kb <= ecn_max_kb"),
    (dict(onyx_roce_command=False), {}, "switch leaf1: onyx_roce_command is false, so its interfaces"),
    ({}, dict(interfaces=["eth1"]), "switch leaf1: interface 'eth1' is not an Onyx ethernet port"),
    ({}, dict(interfaces=["1/4-1/2"]), "interface '1/4-1/2' is not an Onyx"),
    ({}, dict(device_type="cisco_ios"), "device_type"),
    ({}, dict(ssh_host_key_fingerprints=[]), "switch leaf1: no trusted SSH host key for 127.0.0.1"),
    ({}, dict(ssh_host_key_fingerprints=["MD5:16:27:ac:a5:76:28:2d:36"]), "is not a SHA256 host key fingerprint"),
    ({}, dict(ssh_host_key_fingerprints=["SHA256:tooshort"]), "is not a SHA256 host key fingerprint"),
    ({}, dict(ssh_host_key_fingerprints=[], ssh_known_hosts="leaf1 ssh-rsa"),
     "switch leaf1: ssh_known_hosts line 1 is not a known_hosts entry"),
    ({}, dict(ssh_known_hosts="leaf1 ssh-ed25519 AAAAB3NzaC1yc2EAAAADAQABAAABAQ=="),
     "ssh_known_hosts line 1: the key is not a ssh-ed25519 key"),
    ({}, dict(ssh_known_hosts="@trusted leaf1 ssh-rsa AAAA"), "ssh_known_hosts line 1: unknown marker @trusted"),
    (dict(ssh_known_hosts_file="/nonexistent/known_hosts"), {},
     "cannot read the known_hosts file /nonexistent/known_hosts"),
])
def test_bad_input_refused_before_contacting_switches(run, switch_pair, switch_spec, case):
    args, spec_args, match = case
    onyx, nvue = switch_pair
    seen = (len(onyx.state.log), len(nvue.state.log))
    result = run([switch_spec(onyx, **spec_args), switch_spec(nvue)], **args)
    assert result["failed"] and match in result["msg"], result
    assert (len(onyx.state.log), len(nvue.state.log)) == seen  # no switch was contacted
    assert onyx.state.connections == nvue.state.connections == 0
    assert result.get("switches", []) == []


def test_validate_refuses_unknown_device_type():
    with pytest.raises(sr.SwitchRoceError, match="not supported"):
        sr.validate("arista_eos", "lossless", [3])


def test_plan_onyx_without_roce_command():
    wanted = sr.wanted_lines("mellanox_mlnxos", "lossless", [3], onyx_roce_command=False, ports=["1/1"])
    assert wanted == ["dcb priority-flow-control enable force", PFC3,
                      "interface ethernet 1/1 dcb priority-flow-control mode on force",
                      "interface ethernet 1/1 qos trust L3", "interface ethernet 1/1 " + ECN]
    text = ("roce lossy\ndcb priority-flow-control priority 5 enable\n"
            "   interface ethernet 1/1-1/3 qos trust L3\n   interface port-channel 1 qos trust L3\n")
    current = sr.current_lines("mellanox_mlnxos", text, False, ["1/1", "1/2"])
    # the range is split per port; 1/3 and the port-channel are not ours; roce is unmanaged here
    assert current == ["dcb priority-flow-control priority 5 enable",
                       "interface ethernet 1/1 qos trust L3", "interface ethernet 1/2 qos trust L3"]
    commands, _, _ = sr.plan("mellanox_mlnxos", current, wanted)
    assert commands[0] == "no dcb priority-flow-control priority 5 enable"
    assert "interface ethernet 1/2 no qos trust" in commands  # 1/2 is not wanted here


@pytest.mark.parametrize("text, has", [
    ("Product name:      Onyx\nProduct release:   3.10.4206\n", True),
    ("Product name:      Onyx\nProduct release:   3.8.2008\n", True),
    ("Product name:      Onyx\nProduct release:   3.7.1134\n", False),
    ("Product name:      MLNX-OS\nProduct release:   3.6.8190\n", False),
    ("no release here", None),
])
def test_onyx_release_decides_the_roce_command(text, has):
    assert sr.onyx_has_roce_command(text) is has


@pytest.mark.parametrize("text, ports", [
    ("1/1", ["1/1"]),
    ("1/1-1/3", ["1/1", "1/2", "1/3"]),
    ("1/1-1/2,1/9", ["1/1", "1/2", "1/9"]),
])
def test_expand_ports(text, ports):
    assert sr.expand_ports(text) == ports


# --- SSH host keys ----------------------------------------------------------------------------

def ssh_string(data):
    return struct.pack(">I", len(data)) + data


def other_key_line(name, key_type="ssh-rsa"):
    """A known_hosts line for `name` with a key no switch has."""
    if key_type == "ssh-rsa":
        blob = paramiko.RSAKey.generate(1024).asbytes()
    else:  # ssh-ed25519: any 32 bytes are a public key as far as known_hosts goes
        blob = ssh_string(key_type.encode()) + ssh_string(os.urandom(32))
    return "%s %s %s\n" % (name, key_type, base64.b64encode(blob).decode())


def test_impostor_with_another_key_is_refused_before_the_login(run, fake_switch, switch_spec, switch_pair):
    """Someone else answers at leaf1's address: the pinned fingerprint does not match, so neither the
    user name nor the password is sent; the other switch is still configured."""
    real, nvue = switch_pair
    impostor = fake_switch("onyx", host="leaf1", host_keys=[paramiko.ECDSAKey.generate()])
    pinned = real.fingerprints[0]
    result = run([switch_spec(impostor, ssh_host_key_fingerprints=[pinned]), switch_spec(nvue)])
    assert result["_rc"] == 1 and result["msg"].startswith("1 of 2 switches failed"), result
    res = result["switches"][0]
    offered = impostor.fingerprints[0]
    assert res["failed"] and res["host_key_fingerprint"] == offered
    msg = res["msg"]
    assert msg.startswith("leaf1 (127.0.0.1:%d): HostKeyError: the switch offered ecdsa-sha2-nistp256 key %s"
                          % (impostor.port, offered)), msg
    assert "trusted for [127.0.0.1]:%d: %s (ssh_host_key_fingerprints)" % (impostor.port, pinned) in msg
    assert msg in result["msg"]
    assert impostor.state.connections == 1       # it was reached ...
    assert impostor.state.logins == []           # ... and got no login attempt, so no password
    assert impostor.state.log == [] and real.state.connections == 0
    assert PASSWORD not in result["_out"]
    assert not result["switches"][1]["failed"] and "nv set qos roce mode lossless" in nvue.state.running


def test_key_missing_from_known_hosts_is_refused_before_the_login(run, fake_switch, switch_spec):
    sw = fake_switch("cumulus", host="leaf2", username="cumulus")
    name = "[127.0.0.1]:%d" % sw.port
    stale = other_key_line(name)   # the switch's key was changed, or someone else answers
    result = run([switch_spec(sw, ssh_host_key_fingerprints=[], ssh_known_hosts=stale)])
    res = result["switches"][0]
    assert res["failed"], result
    assert "HostKeyError: the switch offered ssh-rsa key %s, trusted for %s: ssh-rsa key SHA256:" % (
        sw.fingerprints[0], name) in res["msg"]
    assert "(ssh_known_hosts line 1)" in res["msg"]
    assert sw.state.connections == 1 and sw.state.logins == [] and sw.state.log == []


def test_revoked_key_is_refused_even_when_pinned(run, fake_switch, switch_spec):
    sw = fake_switch("onyx", host="leaf1")
    revoked = "@revoked * " + sw.known_hosts().split(" ", 1)[1]
    result = run([switch_spec(sw, ssh_known_hosts=revoked)])
    assert result["failed"] and "which ssh_known_hosts line 1 marks @revoked" in result["msg"], result
    assert sw.state.logins == []


def test_known_hosts_entries_pin_the_switch(run, fake_switch, switch_spec, tmp_path):
    """known_hosts lines (plain, hashed, in the entry, in a per-switch file and in the module-wide
    file) trust the switch; entries for other hosts are not used."""
    onyx = fake_switch("onyx", host="leaf1")
    nvue = fake_switch("cumulus", host="leaf2", username="cumulus")
    shared = tmp_path / "known_hosts"
    shared.write_text(other_key_line("[127.0.0.1]:%d" % onyx.port).replace("[127.0.0.1]", "[10.0.0.1]")
                      + "# the fabric's switches\n" + nvue.known_hosts())
    own = tmp_path / "leaf1_known_hosts"
    own.write_text(other_key_line("leaf9") + onyx.known_hosts())
    specs = [switch_spec(onyx, ssh_host_key_fingerprints=[], ssh_known_hosts_file=str(own)),
             switch_spec(nvue, ssh_host_key_fingerprints=[])]
    first = run(specs, ssh_known_hosts_file=str(shared))
    assert first["_rc"] == 0 and first["changed"], first
    assert [r["host_key_fingerprint"] for r in first["switches"]] == [onyx.fingerprints[0], nvue.fingerprints[0]]

    # hashed names, as ssh-keyscan -H writes them, in the entry itself
    line = onyx.known_hosts()
    name, rest = line.split(" ", 1)
    salt = os.urandom(20)
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    hashed = "|1|%s|%s %s" % (base64.b64encode(salt).decode(), base64.b64encode(digest).decode(), rest)
    second = run([switch_spec(onyx, ssh_host_key_fingerprints=[], ssh_known_hosts=hashed)])
    assert second["_rc"] == 0 and second["changed"] is False, second


def test_known_hosts_negotiates_a_key_type_it_knows(run, fake_switch, switch_spec):
    """A switch with an ECDSA and an RSA key, known by its RSA key only: the RSA key is negotiated
    (paramiko would pick ECDSA first) and accepted; known by a key type it does not have: refused."""
    sw = fake_switch("onyx", host="leaf1", host_keys=[paramiko.ECDSAKey.generate(), paramiko.RSAKey.generate(1024)])
    rsa_only = sw.known_hosts().splitlines()[1] + "\n"
    result = run([switch_spec(sw, ssh_host_key_fingerprints=[], ssh_known_hosts=rsa_only)])
    assert result["_rc"] == 0, result
    assert result["switches"][0]["host_key_fingerprint"] == sw.fingerprints[1]

    logins = len(sw.state.logins)
    ed = other_key_line("[127.0.0.1]:%d" % sw.port, "ssh-ed25519")
    result = run([switch_spec(sw, ssh_host_key_fingerprints=[], ssh_known_hosts=ed)])
    assert result["failed"], result
    assert "the switch offers none of the host key types known for [127.0.0.1]:%d (ssh-ed25519)" % sw.port \
        in result["msg"]
    assert len(sw.state.logins) == logins


def test_fingerprints_as_ssh_keygen_prints_them(fake_switch, tmp_path):
    """The fake's (and switch_roce's) fingerprints are OpenSSH's, and OpenSSH's hashed names match."""
    # OpenSSH's client is installed by lab/bootstrap.sh (openssh-client): without it this must fail.
    assert shutil.which("ssh-keygen"), "ssh-keygen is missing: install openssh-client (lab/bootstrap.sh does)"
    sw = fake_switch("onyx", host="leaf1", host_keys=[paramiko.ECDSAKey.generate(), paramiko.RSAKey.generate(1024)])
    path = tmp_path / "known_hosts"
    path.write_text(sw.known_hosts())
    out = subprocess.run(["ssh-keygen", "-lf", str(path)], capture_output=True, text=True, check=True).stdout
    assert [line.split()[1] for line in out.splitlines()] == sw.fingerprints
    subprocess.run(["ssh-keygen", "-H", "-f", str(path)], capture_output=True, check=True)
    entries = sr.parse_known_hosts(path.read_text(), str(path))
    name = sr.known_host_name("127.0.0.1", sw.port)
    assert [e.patterns[0][:3] for e in entries] == ["|1|", "|1|"]
    for key, fp in zip(sw.host_keys, sw.fingerprints, strict=True):
        assert sr.check_host_key(name, key.get_name(), key.asbytes(), entries=entries) == fp
    assert sr.host_key_algorithms(entries, name) == ["ecdsa-sha2-nistp256", "rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"]


def test_host_key_checking_off_is_a_lab_opt_out(run, fake_switch, switch_spec, monkeypatch):
    warned = []   # recorded here: in-process warnings go to the controller's display once it is imported
    monkeypatch.setattr(switch_roce.AnsibleModule, "warn", lambda self, warning, **kw: warned.append(warning))
    sw = fake_switch("cumulus", host="leaf2", username="cumulus")
    result = run([switch_spec(sw, ssh_host_key_fingerprints=[])], host_key_checking=False)
    assert result["_rc"] == 0 and result["changed"], result
    assert any("host_key_checking is false" in w for w in warned), warned
    assert result["switches"][0]["host_key_fingerprint"] == sw.fingerprints[0]


@pytest.mark.parametrize("patterns, name, hit", [
    (("leaf1",), "leaf1", True),
    (("LEAF1",), "leaf1", True),
    (("leaf1",), "leaf10", False),
    (("leaf*",), "leaf10", True),
    (("leaf?",), "leaf10", False),
    (("[10.0.0.1]:2222",), "[10.0.0.1]:2222", True),   # brackets are literal, not a character class
    (("[10.0.0.1]:2222",), "1", False),
    (("10.0.0.1",), "[10.0.0.1]:2222", False),          # another port is another name, as in OpenSSH
    (("*", "!leaf9"), "leaf9", False),
    (("*", "!leaf9"), "leaf1", True),
])
def test_known_hosts_host_patterns(patterns, name, hit):
    assert sr.host_matches(patterns, name) is hit


def test_fingerprint_and_host_name_forms():
    fp = "SHA256:rNqF6CB0ipGjEN61oLKxI1+fOmQhMLPtJ5r8RrGXtM8"
    assert sr.parse_fingerprint(" %s= " % fp) == fp
    with pytest.raises(sr.SwitchRoceError, match="43 base64 characters"):
        sr.parse_fingerprint("256 %s root@leaf1 (ED25519)" % fp)
    assert sr.known_host_name("Leaf1", 22) == "leaf1"
    assert sr.known_host_name("10.0.0.1", 2222) == "[10.0.0.1]:2222"
    with pytest.raises(sr.HostKeyError, match=r"offered ssh-rsa key SHA256:\S+, trusted for leaf1: none"):
        sr.check_host_key("leaf1", "ssh-rsa", b"\0\0\0\7ssh-rsa")
