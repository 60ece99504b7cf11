#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: roce_sysfs
short_description: Enable RoCE ECN per priority and set the RoCE ToS / traffic class of an mlx5 port through sysfs
version_added: "0.1.0"
description:
  - Enables ECN for the given priorities as notification point and reaction point
    (C(<sysfs_root>/class/net/IF/ecn/roce_np/enable/N) and C(.../roce_rp/enable/N)).
  - Sets the default RoCE ToS of RDMA-CM connections, what C(cma_roce_tos -d IB -t TOS) does, in
    configfs (C(<sysfs_root>/kernel/config/rdma_cm/IB/ports/1/default_roce_tos); the device
    directory is created when missing).
  - Sets the port's RoCE traffic class (C(<sysfs_root>/class/infiniband/IB/tc/1/traffic_class)).
  - Sets the ECN marking thresholds of O(ecn_red) (C(<sysfs_root>/class/net/IF/ecn/redp/red_min_threshold),
    C(red_max_threshold), C(red_probability)), as the seed's 4.4.2 writes them. A driver without the
    C(ecn/redp) directory has no such controls; a warning says so and they are left out (upstream mlx5
    has none; the switch then marks ECN, see the role ai_platform.l1.rdma_network).
  - The RDMA device IB is the one whose C(device/net) holds the interface.
  - Writes only values that differ; reports each with before and after.
  - Fails before writing anything when a file it compares does not hold text (a broken driver).
options:
  interface:
    description: Network interface of the RoCE port.
    type: str
    required: true
  ecn_priorities:
    description: Priorities 0..7 to enable ECN on (both roce_np and roce_rp). Other priorities are left as they are.
    type: list
    elements: int
    default: []
  roce_tos:
    description: Default ToS byte (0..255) of RDMA-CM RoCE connections; DSCP 26 is ToS 104 (106 with ECT).
    type: int
  traffic_class:
    description: RoCE traffic class byte (0..255) of port 1.
    type: int
  ecn_red:
    description: ECN RED marking thresholds of the port; left as they are when not given.
    type: dict
    suboptions:
      min_threshold:
        description: C(ecn/redp/red_min_threshold), 0 or more; not above O(ecn_red.max_threshold).
        type: int
        required: true
      max_threshold:
        description: C(ecn/redp/red_max_threshold), 0 or more.
        type: int
        required: true
      probability:
        description: C(ecn/redp/red_probability), the marking probability in percent (0..100).
        type: int
        required: true
  sysfs_root:
    description: Where sysfs is mounted (configfs is expected at C(kernel/config) below it).
    type: path
    default: /sys
attributes:
  check_mode:
    support: full
    description: Reports what would be written, writes nothing.
  diff_mode:
    support: full
    description: One line per sysfs file with its value.
notes:
  - These settings do not survive a reboot or driver reload. The rdma_network role installs
    C(ai-platform-roce.service), which re-applies them at boot.
  - mlx5 reads C(tc/1/traffic_class) back as C(Global tclass=N); that is compared as N.
author:
  - ai_platform L1 contributors (@ai-platform-l1)
'''

EXAMPLES = r'''
- name: ECN on priority 3 and DSCP 26 for RDMA-CM traffic
  ai_platform.l1.roce_sysfs:
    interface: ens1f0
    ecn_priorities: [3]
    roce_tos: 106
    traffic_class: 106

- name: The seed's ECN marking thresholds
  ai_platform.l1.roce_sysfs:
    interface: ens1f0
    ecn_red: {min_threshold: 24, max_threshold: 24, probability: 100}
'''

RETURN = r'''
ecn_red:
  description:
    - V(present) when the port has the ECN RED controls (C(ecn/redp)), V(absent) when it has not,
      V(unset) when O(ecn_red) was not given.
  returned: success
  type: str
  sample: present
ib_device:
  description: The RDMA device of the interface.
  returned: success
  type: str
  sample: mlx5_0
changes:
  description: "One line per file written (or that would be written): C(PATH: OLD -> NEW)."
  returned: always
  type: list
  elements: str
'''

import errno
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ai_platform.l1.plugins.module_utils import rdma_sysfs


def wanted_files(p, ib):
    root = p['sysfs_root']
    files = {}
    for prio in p['ecn_priorities']:
        for side in ('roce_np', 'roce_rp'):
            files[os.path.join(root, 'class', 'net', p['interface'], 'ecn', side, 'enable', str(prio))] = '1'
    if p['roce_tos'] is not None:
        tos = os.path.join(root, 'kernel', 'config', 'rdma_cm', ib, 'ports', '1', 'default_roce_tos')
        files[tos] = str(p['roce_tos'])
    if p['traffic_class'] is not None:
        files[os.path.join(root, 'class', 'infiniband', ib, 'tc', '1', 'traffic_class')] = str(p['traffic_class'])
    red = p['ecn_red']
    if red and os.path.isdir(red_dir(p)):
        for key in ('min_threshold', 'max_threshold', 'probability'):
            files[os.path.join(red_dir(p), 'red_' + key)] = str(red[key])
    return files


def red_dir(p):
    return os.path.join(p['sysfs_root'], 'class', 'net', p['interface'], 'ecn', 'redp')


def read_setting(module, path, context, changes):
    """rdma_sysfs.read_setting; a file that does not hold text fails the module."""
    try:
        return rdma_sysfs.read_setting(path)
    except ValueError as exc:
        module.fail_json(msg='%s%s' % (context, exc), changes=changes)


def check_params(module, p):
    bad = [x for x in p['ecn_priorities'] if not 0 <= x <= 7]
    if bad:
        module.fail_json(msg='ecn_priorities: %s out of 0..7' % bad, changes=[])
    for key in ('roce_tos', 'traffic_class'):
        if p[key] is not None and not 0 <= p[key] <= 255:
            module.fail_json(msg='%s must be 0..255, got %d' % (key, p[key]), changes=[])
    red = p['ecn_red']
    if red and not (0 <= red['min_threshold'] <= red['max_threshold'] and 0 <= red['probability'] <= 100):
        module.fail_json(msg='ecn_red: need 0 <= min_threshold <= max_threshold and probability 0..100, got %s'
                         % dict(sorted(red.items())), changes=[])


def main():
    module = AnsibleModule(
        argument_spec=dict(
            interface=dict(type='str', required=True),
            ecn_priorities=dict(type='list', elements='int', default=[]),
            roce_tos=dict(type='int'),
            traffic_class=dict(type='int'),
            ecn_red=dict(type='dict', options=dict(
                min_threshold=dict(type='int', required=True),
                max_threshold=dict(type='int', required=True),
                probability=dict(type='int', required=True),
            )),
            sysfs_root=dict(type='path', default='/sys'),
        ),
        supports_check_mode=True,
    )
    p = module.params
    check_params(module, p)

    ib = rdma_sysfs.ib_device_of(p['sysfs_root'], p['interface'])
    if ib is None:
        module.fail_json(msg='%s is not the interface of any RDMA device under %s/class/infiniband'
                         % (p['interface'], p['sysfs_root']), changes=[])
    ecn_dir = os.path.join(p['sysfs_root'], 'class', 'net', p['interface'], 'ecn')
    if p['ecn_priorities'] and not os.path.isdir(ecn_dir):
        module.fail_json(msg='%s has no ECN controls (%s); is it an mlx5 port?' % (p['interface'], ecn_dir),
                         changes=[])

    red_state = 'unset'
    if p['ecn_red']:
        red_state = 'present' if os.path.isdir(red_dir(p)) else 'absent'
    if red_state == 'absent':
        module.warn('%s has no ECN RED controls (%s): the marking thresholds are left to the switch'
                    % (p['interface'], red_dir(p)))
    wanted = sorted(wanted_files(p, ib).items())
    # Every current value is read before anything is written: an unreadable one refuses the whole change.
    current = dict((path, read_setting(module, path, 'cannot read the current settings of %s: '
                                       % p['interface'], [])) for path, _value in wanted)
    before, after, changes = {}, {}, []
    for path, value in wanted:
        old = current[path]
        before[path], after[path] = old, value
        if old == value:
            continue
        changes.append('%s: %s -> %s' % (path, old, value))
        if module.check_mode:
            continue
        try:
            if path.endswith('default_roce_tos') and not os.path.isdir(os.path.dirname(path)):
                # configfs shows the device's ports once its directory is made (as cma_roce_tos does)
                os.makedirs(os.path.join(p['sysfs_root'], 'kernel', 'config', 'rdma_cm', ib))
                os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, 'w') as handle:
                handle.write(value + '\n')
        except (IOError, OSError) as exc:
            hint = ' (is configfs mounted and rdma_cm loaded?)' if exc.errno == errno.ENOENT else ''
            module.fail_json(msg='cannot write %s to %s: %s%s' % (value, path, exc, hint), changes=changes)
        got = read_setting(module, path, 'after writing %s: ' % value, changes)
        if got != value:
            module.fail_json(msg='%s reads %s after writing %s' % (path, got, value), changes=changes)
    result = dict(changed=bool(changes), ib_device=ib, changes=changes, ecn_red=red_state)
    if module._diff:
        result['diff'] = dict(before=''.join('%s = %s\n' % kv for kv in sorted(before.items())),
                              after=''.join('%s = %s\n' % kv for kv in sorted(after.items())))
    module.exit_json(**result)


if __name__ == '__main__':
    main()
