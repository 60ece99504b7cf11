#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: switch_roce
short_description: Make leaf switches lossless for RoCEv2 (NVIDIA Onyx, Cumulus Linux NVUE) over SSH with netmiko
version_added: "0.1.0"
description:
  - For every switch in O(switches), reads the running configuration, compares the RoCE lines
    it manages with the wanted ones, pushes only the difference, saves, and reads back.
  - NVIDIA Onyx (C(mellanox_mlnxos)) from release 3.8.2000 gets C(roce lossless) (or C(roce lossy))
    and C(dcb priority-flow-control) lines per priority.
  - Onyx releases without the C(roce) command (found from C(show version), or O(onyx_roce_command=false))
    get the explicit equivalent instead, on every port in O(switches[].interfaces)
    - C(dcb priority-flow-control enable force), C(dcb priority-flow-control priority N enable),
    per port C(dcb priority-flow-control mode on force), C(qos trust L3) (DSCP) and
    C(traffic-class N congestion-control ecn minimum-absolute MIN maximum-absolute MAX) on the
    traffic class of each PFC priority. Onyx prints per-port lines folded into port ranges; they
    are compared one port at a time.
  - Cumulus Linux NVUE (C(cumulus_linux)) gets C(nv set qos roce enable on),
    C(nv set qos roce mode lossless) and C(nv set qos pfc default-global switch-priority N),
    then C(nv config apply -y) and, with O(save), C(nv config save).
  - Managed lines that are not wanted (for example PFC on another priority) are removed.
  - Every switch's SSH host key is checked before the login, so its password goes to that switch only.
    The key it offers must have one of the fingerprints in O(switches[].ssh_host_key_fingerprints) or be
    held for it by a known_hosts entry in O(switches[].ssh_known_hosts), O(switches[].ssh_known_hosts_file)
    or O(ssh_known_hosts_file). Any other key is refused with both fingerprints in the message, and
    nothing, not even the user name, is sent to that switch.
  - All input is validated before any switch is contacted, including that every switch has a key to be
    checked against. A switch that cannot be reached, offers another host key, refuses the login, times
    out or rejects a command is reported in RV(switches) with its own message; the other switches are
    still configured, and the task fails at the end.
options:
  switches:
    description: The switches to configure.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: Name used in results and messages; defaults to O(switches[].host).
        type: str
      host:
        description: Address of the switch's management interface.
        type: str
        required: true
      port:
        description: SSH port.
        type: int
        default: 22
      device_type:
        description: netmiko device type.
        type: str
        required: true
        choices: [mellanox_mlnxos, cumulus_linux]
      username:
        description: Login user.
        type: str
        required: true
      password:
        description: Login password. Sent only after the switch's host key was found trusted.
        type: str
        required: true
      ssh_host_key_fingerprints:
        description:
          - SHA256 fingerprints of the switch's SSH host keys as C(ssh-keygen -lf) prints them, for example
            C(SHA256:rNqF6CB0ipGjEN61oLKxI1+fOmQhMLPtJ5r8RrGXtM8). The key the switch offers must have one of them.
          - List the fingerprints of all the switch's host key types (RSA, ECDSA, Ed25519); which one is
            offered depends on the key exchange. Read them from the switch itself (for example over its console;
            on Cumulus Linux C(ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub)), not over the network you
            do not trust yet.
        type: list
        elements: str
        default: []
      ssh_known_hosts:
        description:
          - OpenSSH known_hosts lines for the switch, as C(ssh-keyscan -p PORT HOST) prints them (hashed names
            from C(ssh-keyscan -H), wildcards and C(!) negation match as in OpenSSH, C(@revoked) keys are refused,
            C(@cert-authority) lines are not used).
          - Only lines naming O(switches[].host) count; on a port other than 22 OpenSSH names it C([HOST]:PORT).
            When only known_hosts entries are given, the key types they hold are the only ones negotiated.
        type: str
      ssh_known_hosts_file:
        description: A known_hosts file on the host that runs the module, read as O(switches[].ssh_known_hosts).
        type: path
      interfaces:
        description:
          - Onyx ethernet ports facing the RoCE hosts, as C(1/1), C(1/1-1/16) or C(1/1-1/4,1/9), for the
            explicit per-port lines on Onyx releases without the C(roce) command. Required there; ignored otherwise.
          - Settings of ports not listed are left alone.
        type: list
        elements: str
        default: []
  roce_mode:
    description: RoCE mode of the switches.
    type: str
    choices: [lossless, lossy]
    default: lossless
  pfc_priorities:
    description: Priorities with PFC on (0..7); the seed's RoCEv2 traffic is on priority 3.
    type: list
    elements: int
    default: [3]
  onyx_roce_command:
    description:
      - Whether the Onyx switches have the C(roce) command. When not set, each Onyx switch's
        C(show version) decides (C(Product release) 3.8.2000 and later have it).
    type: bool
  ecn_min_kb:
    description: Onyx explicit lines only; queue depth in KB from which ECN marking starts on the RoCE traffic class.
    type: int
    default: 150
  ecn_max_kb:
    description: Onyx explicit lines only; queue depth in KB from which every packet is ECN-marked.
    type: int
    default: 1500
  save:
    description: Save the configuration (Onyx C(configuration write), NVUE C(nv config save)) after a change.
    type: bool
    default: true
  timeout:
    description: Seconds to wait for the SSH connection and for each command.
    type: int
    default: 30
  ssh_known_hosts_file:
    description:
      - A known_hosts file for all the switches, read in addition to each one's own keys
        (O(switches[].ssh_known_hosts), O(switches[].ssh_known_hosts_file), O(switches[].ssh_host_key_fingerprints)).
      - To trust the keys the controller's own C(ssh) trusts, name C(~/.ssh/known_hosts) here.
    type: path
  host_key_checking:
    description:
      - Check every switch's SSH host key before the login (see O(switches[].ssh_host_key_fingerprints)).
      - V(false) accepts any host key and sends the password to whatever answers at the address; for a lab of
        simulated switches only, never on a network someone else can reach. The module then warns, and returns
        the fingerprint each switch offered in RV(switches[].host_key_fingerprint).
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    description: Reads every switch's configuration and reports the commands it would send.
  diff_mode:
    support: full
    description: Managed lines of every switch before and after.
requirements:
  - netmiko >= 4 on the host that runs the module (usually the controller, with C(delegate_to=localhost))
notes:
  - With the C(roce) command, ECN thresholds and buffer pools are left to C(roce lossless), which sets the
    platform's RoCE defaults. The explicit lines do not manage buffer pools.
  - The controller's C(~/.ssh/known_hosts) is not read unless O(ssh_known_hosts_file) names it, and Ansible's
    own C(host_key_checking) setting does not apply; this module, not an Ansible connection, reaches the switches.
author:
  - ai_platform L1 contributors (@ai-platform-l1)
'''

EXAMPLES = r'''
- name: Leaf switches lossless on priority 3
  ai_platform.l1.switch_roce:
    switches:
      - name: leaf1
        host: 10.0.0.1
        device_type: mellanox_mlnxos
        username: admin
        password: "{{ vault_switch_password }}"
        ssh_host_key_fingerprints:
          - SHA256:rNqF6CB0ipGjEN61oLKxI1+fOmQhMLPtJ5r8RrGXtM8   # RSA
          - SHA256:fX2/fSu+5g3rbDw8/n2IZO2EAsmWgM6X2oXKLyqtpao   # ECDSA
      - name: leaf2
        host: 10.0.0.2
        device_type: cumulus_linux
        username: cumulus
        password: "{{ vault_switch_password }}"
        ssh_known_hosts: "10.0.0.2 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFERGFuoRZT0wI49YxnZbnOvm159cJszOIfAbetCuVJr"
      - name: leaf3-onyx-3.6
        host: 10.0.0.3
        device_type: mellanox_mlnxos
        username: admin
        password: "{{ vault_switch_password }}"
        interfaces: [1/1-1/16]
    # leaf3's key: in the fabric's known_hosts file, kept next to the inventory
    ssh_known_hosts_file: "{{ inventory_dir }}/files/switches_known_hosts"
    pfc_priorities: [3]
  delegate_to: localhost
  run_once: true
'''

RETURN = r'''
switches:
  description: One result per switch, in the order given.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: The switch's name.
      type: str
    changed:
      description: Whether commands were (or in check mode would be) sent.
      type: bool
    failed:
      description: Whether this switch failed.
      type: bool
    roce_command:
      description: Onyx only (null otherwise, or when not reached); whether the C(roce) command was used.
      type: bool
    host_key_fingerprint:
      description: SHA256 fingerprint of the host key the switch offered; null when no key was received.
      type: str
    msg:
      description: What went wrong on this switch; empty when it did not fail.
      type: str
    commands:
      description: Configuration commands sent (or that would be sent), without the apply/save commands.
      type: list
      elements: str
    changes:
      description:
        - One note per change; PFC changes name their priority, for example C(PFC priority 3 on), and per-port
          Onyx changes their port, for example C(PFC port 1/2 off) or C(ECN traffic-class 3 port 1/2 off).
      type: list
      elements: str
    before:
      description: Managed lines before.
      type: list
      elements: str
    after:
      description: Managed lines after (read back; in check mode, what they would be).
      type: list
      elements: str
'''

import traceback

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.ai_platform.l1.plugins.module_utils import switch_roce as sr

try:
    import paramiko
    from netmiko import ConnectHandler
    HAS_NETMIKO = True
    NETMIKO_ERR = None
    _PolicyBase = paramiko.MissingHostKeyPolicy
except ImportError:
    HAS_NETMIKO = False
    NETMIKO_ERR = traceback.format_exc()
    _PolicyBase = object

# Host key algorithms paramiko can negotiate, for disabling those of key types not known for a switch.
_ALL_KEY_ALGORITHMS = ('ssh-ed25519', 'ecdsa-sha2-nistp256', 'ecdsa-sha2-nistp384', 'ecdsa-sha2-nistp521',
                       'rsa-sha2-512', 'rsa-sha2-256', 'ssh-rsa', 'ssh-dss')

_ERROR_MARKERS = ('% Unrecognized command', '% Invalid', 'Error:', '% Incomplete command')


def _check_output(cmd, output):
    for marker in _ERROR_MARKERS:
        if marker in output:
            raise RuntimeError('the switch rejected %r: %s' % (cmd, output.strip()))


class _HostKeyPolicy(_PolicyBase):
    """paramiko's host-key step: runs after key exchange and before authentication, so a refused
    switch never gets the user name or password. No host keys are loaded into the SSH client, so
    paramiko hands every key to this policy."""

    def __init__(self, trust):
        self.trust = trust
        self.seen = None      # fingerprint of the key the switch offered
        self.refused = None   # the HostKeyError, when refused

    def missing_host_key(self, client, hostname, key):
        blob = key.asbytes()
        self.seen = sr.fingerprint(blob)
        if not self.trust['check']:
            return
        try:
            sr.check_host_key(self.trust['name'], key.get_name(), blob, self.trust['fingerprints'],
                              self.trust['entries'])
        except sr.HostKeyError as exc:
            self.refused = exc
            raise paramiko.SSHException(str(exc)) from exc


class _Switch:
    def __init__(self, spec, params, trust):
        self.spec = spec
        self.params = params
        self.dtype = spec['device_type']
        self.trust = trust
        self.policy = _HostKeyPolicy(trust)
        self.conn = None

    def connect(self):
        extra = {}
        algorithms = self.trust['algorithms']
        if algorithms:
            # only known_hosts entries trust this switch: negotiate one of their key types
            extra['disabled_algorithms'] = {'keys': [a for a in _ALL_KEY_ALGORITHMS if a not in algorithms]}
        # ssh_strict: paramiko's RejectPolicy, were the policy below not installed; no host keys loaded.
        self.conn = ConnectHandler(
            device_type=self.dtype, host=self.spec['host'], port=self.spec['port'],
            username=self.spec['username'], password=self.spec['password'],
            conn_timeout=self.params['timeout'], auth_timeout=self.params['timeout'],
            banner_timeout=self.params['timeout'], read_timeout_override=self.params['timeout'],
            ssh_strict=True, system_host_keys=False, alt_host_keys=False, auto_connect=False, **extra)
        if not isinstance(getattr(self.conn, 'key_policy', None), paramiko.RejectPolicy):
            raise sr.HostKeyError('this netmiko has no key_policy to check the host key with; nothing was sent')
        self.conn.key_policy = self.policy
        try:
            self.conn._open()  # pylint: disable=protected-access
        except Exception as exc:
            if self.policy.refused is not None:
                raise self.policy.refused from None
            if algorithms and 'no acceptable host key' in str(exc):
                raise sr.HostKeyError('the switch offers none of the host key types known for %s (%s); refused '
                                      'before the login' % (self.trust['name'], ', '.join(algorithms))) from None
            raise
        if self.policy.seen is None:
            raise sr.HostKeyError('the host key was not checked')  # fail closed; cannot happen with paramiko
        if self.dtype == 'mellanox_mlnxos':
            self.conn.enable()

    def roce_command(self):
        """Onyx: whether to use `roce` (the option, else the release in `show version`); None elsewhere."""
        if self.dtype != 'mellanox_mlnxos':
            return None
        if self.params['onyx_roce_command'] is not None:
            return self.params['onyx_roce_command']
        out = self.conn.send_command('show version')
        _check_output('show version', out)
        has = sr.onyx_has_roce_command(out)
        if has is None:
            raise RuntimeError('show version names no Onyx "Product release"; set onyx_roce_command')
        return has

    def read(self, roce_command, ports):
        cmd = 'show running-config' if self.dtype == 'mellanox_mlnxos' else 'nv config show -o commands'
        out = self.conn.send_command(cmd)
        _check_output(cmd, out)
        return sr.current_lines(self.dtype, out, roce_command, ports)

    def push(self, commands):
        if self.dtype == 'mellanox_mlnxos':
            out = self.conn.send_config_set(commands)
            _check_output('; '.join(commands), out)
            if self.params['save']:
                _check_output('configuration write', self.conn.save_config())
            return
        for cmd in commands + ['nv config apply -y'] + (['nv config save'] if self.params['save'] else []):
            _check_output(cmd, self.conn.send_command(cmd))

    def close(self):
        if self.conn is not None:
            try:
                self.conn.disconnect()
            except Exception:  # pylint: disable=broad-except
                pass  # the result is already known; a failing logout must not hide it


def _one(spec, params, prios, check_mode, trust):
    name = spec.get('name') or spec['host']
    res = dict(name=name, changed=False, failed=False, msg='', roce_command=None, host_key_fingerprint=None,
               commands=[], changes=[], before=[], after=[])
    ports = [port for item in spec['interfaces'] for port in sr.expand_ports(item)]
    sw = _Switch(spec, params, trust)
    try:
        try:
            sw.connect()
        finally:
            res['host_key_fingerprint'] = sw.policy.seen
        roce_command = res['roce_command'] = sw.roce_command()
        if roce_command is False and not ports:
            raise RuntimeError('this Onyx has no roce command and no interfaces are listed for the explicit '
                               'PFC/ECN/trust lines; nothing was sent')
        wanted = sr.wanted_lines(spec['device_type'], params['roce_mode'], prios, roce_command, ports,
                                 ecn_min_kb=params['ecn_min_kb'], ecn_max_kb=params['ecn_max_kb'])
        before = sw.read(roce_command, ports)
        commands, removed, added = sr.plan(spec['device_type'], before, wanted)
        res.update(before=before, commands=commands, changes=sr.describe(spec['device_type'], removed, added),
                   changed=bool(commands), after=before)
        if commands and check_mode:
            res['after'] = [line for line in before if line not in removed] + added
        elif commands:
            sw.push(commands)
            res['after'] = sw.read(roce_command, ports)
            left = sr.plan(spec['device_type'], res['after'], wanted)[0]
            if left:
                raise RuntimeError('configuration did not take; still to do: %s' % '; '.join(left))
    except Exception as exc:  # pylint: disable=broad-except
        # One switch's failure (unreachable, timeout, login, rejected command) must not stop the others.
        first = (str(exc).strip().splitlines() or [''])[0]
        res.update(failed=True,
                   msg='%s (%s:%s): %s: %s' % (name, spec['host'], spec['port'], type(exc).__name__, first))
    finally:
        sw.close()
    return res


def _read_known_hosts(path, cache):
    if path not in cache:
        try:
            with open(path, encoding='utf-8') as f:
                cache[path] = sr.parse_known_hosts(f.read(), path)
        except (OSError, UnicodeDecodeError) as exc:
            raise sr.SwitchRoceError('cannot read the known_hosts file %s: %s' % (path, exc)) from None
    return cache[path]


def _trust(spec, params, cache):
    """What the switch's host key is checked against; SwitchRoceError if nothing could trust it."""
    name = sr.known_host_name(spec['host'], spec['port'])
    fingerprints = [sr.parse_fingerprint(f) for f in spec['ssh_host_key_fingerprints']]
    entries = []
    if spec['ssh_known_hosts']:
        entries += sr.parse_known_hosts(spec['ssh_known_hosts'], 'ssh_known_hosts')
    for path in (spec['ssh_known_hosts_file'], params['ssh_known_hosts_file']):
        if path:
            entries += _read_known_hosts(path, cache)
    algorithms = sr.host_key_algorithms(entries, name)
    if params['host_key_checking'] and not fingerprints and not algorithms:
        raise sr.SwitchRoceError(
            'no trusted SSH host key for %s: none in ssh_host_key_fingerprints, and no known_hosts entry '
            '(ssh_known_hosts, ssh_known_hosts_file) names %s; pin the switch\'s key (nothing was sent to any '
            'switch)' % (spec['host'], name))
    check = params['host_key_checking']
    return dict(check=check, name=name, fingerprints=fingerprints, entries=entries,
                algorithms=algorithms if check and not fingerprints else None)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            switches=dict(type='list', elements='dict', required=True, options=dict(
                name=dict(type='str'),
                host=dict(type='str', required=True),
                port=dict(type='int', default=22),
                device_type=dict(type='str', required=True, choices=list(sr.DEVICE_TYPES)),
                username=dict(type='str', required=True),
                password=dict(type='str', required=True, no_log=True),
                interfaces=dict(type='list', elements='str', default=[]),
                ssh_host_key_fingerprints=dict(type='list', elements='str', default=[], no_log=False),
                ssh_known_hosts=dict(type='str'),
                ssh_known_hosts_file=dict(type='path'),
            )),
            roce_mode=dict(type='str', choices=list(sr.ROCE_MODES), default='lossless'),
            pfc_priorities=dict(type='list', elements='int', default=[3]),
            onyx_roce_command=dict(type='bool'),
            ecn_min_kb=dict(type='int', default=sr.ECN_MIN_KB),
            ecn_max_kb=dict(type='int', default=sr.ECN_MAX_KB),
            save=dict(type='bool', default=True),
            timeout=dict(type='int', default=30),
            ssh_known_hosts_file=dict(type='path'),
            host_key_checking=dict(type='bool', default=True),
        ),
        supports_check_mode=True,
    )
    p = module.params
    checked, cache = [], {}
    try:
        prios = sr.validate('mellanox_mlnxos', p['roce_mode'], p['pfc_priorities'],
                            ecn_min_kb=p['ecn_min_kb'], ecn_max_kb=p['ecn_max_kb'])
        for spec in p['switches']:
            name = spec.get('name') or spec['host']
            try:
                sr.validate(spec['device_type'], p['roce_mode'], prios, spec['interfaces'])
                checked.append((spec, _trust(spec, p, cache)))
            except sr.SwitchRoceError as exc:
                raise sr.SwitchRoceError('switch %s: %s' % (name, exc)) from exc
            if spec['device_type'] == 'mellanox_mlnxos' and p['onyx_roce_command'] is False \
                    and not spec['interfaces']:
                raise sr.SwitchRoceError('switch %s: onyx_roce_command is false, so its interfaces must be listed '
                                         'for the explicit PFC/ECN/trust lines' % name)
    except sr.SwitchRoceError as exc:
        module.fail_json(msg='invalid switch RoCE settings: %s' % exc, switches=[])
    if not HAS_NETMIKO:
        module.fail_json(msg=missing_required_lib('netmiko'), exception=NETMIKO_ERR, switches=[])

    if not p['host_key_checking']:
        module.warn('host_key_checking is false: the switches\' SSH host keys are not checked and their passwords '
                    'go to whatever answers at their addresses; for a lab of simulated switches only')
    results = [_one(spec, p, prios, module.check_mode, trust) for spec, trust in checked]

    result = dict(changed=any(r['changed'] for r in results), switches=results)
    if module._diff:
        result['diff'] = dict(
            before=''.join('# %s\n%s' % (r['name'], ''.join(line + '\n' for line in r['before'])) for r in results),
            after=''.join('# %s\n%s' % (r['name'], ''.join(line + '\n' for line in r['after'])) for r in results))
    failed = [r for r in results if r['failed']]
    if failed:
        msgs = '; '.join(r['msg'] for r in failed)
        module.fail_json(msg='%d of %d switches failed: %s' % (len(failed), len(results), msgs), **result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
