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
  - All input is validated before any switch is contacted. A switch that cannot be reached,
    refuses the login, times out or rejects a command is reported in RV(switches) with its own
    message; the other switches are still configured, and the task fails at the end.
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
        description: Login password.
        type: str
        required: true
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
      - name: leaf2
        host: 10.0.0.2
        device_type: cumulus_linux
        username: cumulus
        password: "{{ vault_switch_password }}"
      - name: leaf3-onyx-3.6
        host: 10.0.0.3
        device_type: mellanox_mlnxos
        username: admin
        password: "{{ vault_switch_password }}"
        interfaces: [1/1-1/16]
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
    from netmiko import ConnectHandler
    HAS_NETMIKO = True
    NETMIKO_ERR = None
except ImportError:
    HAS_NETMIKO = False
    NETMIKO_ERR = traceback.format_exc()

_ERROR_MARKERS = ('% Unrecognized command', '% Invalid', 'Error:', '% Incomplete command')


def _check_output(cmd, output):
    for marker in _ERROR_MARKERS:
        if marker in output:
            raise RuntimeError('the switch rejected %r: %s' % (cmd, output.strip()))


class _Switch:
    def __init__(self, spec, params):
        self.spec = spec
        self.params = params
        self.dtype = spec['device_type']
        self.conn = None

    def connect(self):
        self.conn = ConnectHandler(
            device_type=self.dtype, host=self.spec['host'], port=self.spec['port'],
            username=self.spec['username'], password=self.spec['password'],
            conn_timeout=self.params['timeout'], auth_timeout=self.params['timeout'],
            banner_timeout=self.params['timeout'], read_timeout_override=self.params['timeout'])
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


def _one(spec, params, prios, check_mode):
    name = spec.get('name') or spec['host']
    res = dict(name=name, changed=False, failed=False, msg='', roce_command=None, commands=[], changes=[],
               before=[], after=[])
    ports = [port for item in spec['interfaces'] for port in sr.expand_ports(item)]
    sw = _Switch(spec, params)
    try:
        sw.connect()
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
            )),
            roce_mode=dict(type='str', choices=list(sr.ROCE_MODES), default='lossless'),
            pfc_priorities=dict(type='list', elements='int', default=[3]),
            onyx_roce_command=dict(type='bool'),
            ecn_min_kb=dict(type='int', default=sr.ECN_MIN_KB),
            ecn_max_kb=dict(type='int', default=sr.ECN_MAX_KB),
            save=dict(type='bool', default=True),
            timeout=dict(type='int', default=30),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        prios = sr.validate('mellanox_mlnxos', p['roce_mode'], p['pfc_priorities'],
                            ecn_min_kb=p['ecn_min_kb'], ecn_max_kb=p['ecn_max_kb'])
        for spec in p['switches']:
            name = spec.get('name') or spec['host']
            try:
                sr.validate(spec['device_type'], p['roce_mode'], prios, spec['interfaces'])
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

    results = [_one(spec, p, prios, module.check_mode) for spec in p['switches']]

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
