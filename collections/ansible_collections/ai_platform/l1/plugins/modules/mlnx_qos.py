#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: mlnx_qos
short_description: Set trust mode, PFC, DSCP map and ETS of an NVIDIA/Mellanox NIC port with mlnx_qos
version_added: "0.1.0"
description:
  - Reads the port's QoS state by parsing C(mlnx_qos -i IF) (trust state, PFC per priority,
    DSCP-to-priority map, priority-to-traffic-class map, TSA and ETS bandwidth of each traffic class).
  - Compares only the options given and runs C(mlnx_qos) with only the settings that differ,
    then reads the state back and fails when it is not what was asked.
  - Every option is validated before any command runs (a PFC vector that is not 8 values of 0/1,
    a priority outside 0-7, ETS bandwidths that do not add up to 100).
  - The diff and RV(changes) name each priority or traffic class that changes.
options:
  interface:
    description: Network interface (netdev) of the port, for example C(ens1f0).
    type: str
    required: true
  trust:
    description: Priority trust state. C(dscp) is the RoCEv2 choice.
    type: str
    choices: [pcp, dscp]
  pfc:
    description:
      - PFC per priority 0..7, 8 values of 0 or 1. C([0,0,0,1,0,0,0,0]) makes priority 3 lossless.
    type: list
    elements: int
  dscp2prio:
    description:
      - DSCP values to map to a priority; DSCP values not listed are left as they are.
      - Needs O(trust=dscp).
    type: list
    elements: dict
    suboptions:
      dscp:
        description: DSCP value 0..63.
        type: int
        required: true
      priority:
        description: Priority 0..7.
        type: int
        required: true
  prio_tc:
    description: Traffic class of each priority 0..7 (8 values 0..7).
    type: list
    elements: int
  tsa:
    description: Transmission selection algorithm of each traffic class 0..7.
    type: list
    elements: str
  tcbw:
    description:
      - ETS bandwidth percentage of each traffic class 0..7; the ETS classes must add up to 100.
    type: list
    elements: int
  mlnx_qos_path:
    description: The mlnx_qos executable, a name looked up in E(PATH) and the sbin directories, or a path.
    type: str
    default: mlnx_qos
  timeout:
    description: Seconds one mlnx_qos command may take.
    type: int
    default: 30
attributes:
  check_mode:
    support: full
    description: Reads the state and reports what would change without running any setter.
  diff_mode:
    support: full
    description: Before and after of the managed settings, one key per priority or traffic class.
notes:
  - C(mlnx_qos) comes with MLNX_OFED / DOCA-OFED (package C(mlnx-tools)).
  - Settings made with C(mlnx_qos) do not survive a reboot or driver reload. The rdma_network role
    installs C(ai-platform-roce.service), which re-applies them at boot.
author:
  - ai_platform L1 contributors (@ai-platform-l1)
'''

EXAMPLES = r'''
- name: RoCEv2 lossless on priority 3, DSCP trust (seed 4.4.2)
  ai_platform.l1.mlnx_qos:
    interface: ens1f0
    trust: dscp
    pfc: [0, 0, 0, 1, 0, 0, 0, 0]
    dscp2prio:
      - {dscp: 26, priority: 3}
'''

RETURN = r'''
state:
  description: The port's QoS state after the run (in check mode, what it would be).
  returned: success
  type: dict
  contains:
    trust:
      description: Trust state, C(pcp) or C(dscp); null when the tool does not print it.
      type: str
    pfc:
      description: PFC of priorities 0..7 (0 or 1).
      type: list
      elements: int
    dscp2prio:
      description: DSCP value to priority, as printed by the tool (empty when it prints no map).
      type: dict
    prio_tc:
      description: Traffic class of priorities 0..7.
      type: list
      elements: int
    tsa:
      description: TSA of traffic classes 0..7.
      type: list
      elements: str
    tcbw:
      description: ETS bandwidth of traffic classes 0..7 (0 for non-ETS classes).
      type: list
      elements: int
    dcbx:
      description: DCBX mode line of the tool.
      type: str
changes:
  description: One line per priority, DSCP value or traffic class that changed (or would change).
  returned: always
  type: list
  elements: str
  sample: ["pfc priority 3: off -> on"]
commands:
  description: The mlnx_qos command lines run (in check mode, that would run).
  returned: always
  type: list
  elements: str
'''

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ai_platform.l1.plugins.module_utils import device_io
from ansible_collections.ai_platform.l1.plugins.module_utils import mlnx_qos as qos


def _run(module, runner, args):
    try:
        return runner.run(args)
    except device_io.CliError as exc:
        if exc.rc is None or exc.timed_out:
            module.fail_json(msg=str(exc), changes=[], commands=[])
        module.fail_json(msg='%s failed (rc %d): %s' % (
            exc.command, exc.rc, exc.detail
            or 'no output; is %s an NVIDIA/Mellanox port?' % module.params['interface']),
            changes=[], commands=[])


def _read(module, runner):
    iface = module.params['interface']
    out = _run(module, runner, qos.qos_args('interface', interface=iface))
    try:
        return qos.parse(out)
    except qos.MlnxQosError as exc:
        module.fail_json(msg='cannot parse the output of mlnx_qos -i %s: %s' % (iface, exc),
                         output=out, changes=[], commands=[])


def main():
    module = AnsibleModule(
        argument_spec=dict(
            interface=dict(type='str', required=True),
            trust=dict(type='str', choices=list(qos.TRUST_CHOICES)),
            pfc=dict(type='list', elements='int'),
            dscp2prio=dict(type='list', elements='dict', options=dict(
                dscp=dict(type='int', required=True),
                priority=dict(type='int', required=True),
            )),
            prio_tc=dict(type='list', elements='int'),
            tsa=dict(type='list', elements='str'),
            tcbw=dict(type='list', elements='int'),
            mlnx_qos_path=dict(type='str', default='mlnx_qos'),
            timeout=dict(type='int', default=30),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        wanted = qos.validate(p)
    except qos.MlnxQosError as exc:
        module.fail_json(msg='invalid QoS settings for %s: %s' % (p['interface'], exc), changes=[], commands=[])

    tool = p['mlnx_qos_path']
    if '/' not in tool:
        tool = device_io.which(module, tool, ['/usr/sbin', '/sbin', '/usr/local/sbin'])
        if not tool:
            module.fail_json(msg='mlnx_qos not found in PATH or the sbin directories; install mlnx-tools '
                                 '(MLNX_OFED/DOCA-OFED) or set mlnx_qos_path', changes=[], commands=[])

    # The tool's path in messages and RV(commands), as it runs; the module's timeout per command.
    runner = device_io.CliRunner(module, tool, name=tool, timeout=p['timeout'])
    on_port = qos.qos_args('interface', interface=p['interface'])
    before = _read(module, runner)
    notes, commands = qos.changes(before, wanted)
    lines = [runner.command_line(on_port + args) for args in commands]
    after = qos.apply_to(before, commands)
    if commands and not module.check_mode:
        for args in commands:
            _run(module, runner, on_port + args)
        after = _read(module, runner)
        left = qos.changes(after, wanted)[0]
        if left:
            module.fail_json(msg='mlnx_qos on %s did not take: %s' % (p['interface'], '; '.join(left)),
                             changes=notes, commands=lines, state=after)
    result = dict(changed=bool(commands), state=after, changes=notes, commands=lines)
    if module._diff:
        result['diff'] = dict(before=qos.view(before, wanted), after=qos.view(after, wanted),
                              before_header='%s (mlnx_qos)' % p['interface'],
                              after_header='%s (mlnx_qos)' % p['interface'])
    module.exit_json(**result)


if __name__ == '__main__':
    main()
