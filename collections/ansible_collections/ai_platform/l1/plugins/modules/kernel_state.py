#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: kernel_state
short_description: Read the running kernel's sysctls, active swap and loaded modules in one call
version_added: "0.1.0"
description:
  - Reads, without changing anything, what a baseline role compares with its desired state, in one
    module run instead of a probe per kind (a converged fleet run pays per task and host).
  - For each key of O(sysctls), whether C(/proc/sys) has it and whether it is writable (a container's
    host-global keys are read-only), and its live value with runs of blanks folded to one space (as
    C(sysctl -n) values are compared).
  - The active swap areas from C(/proc/swaps), and which of O(modules) are present in the running
    kernel (C(/sys/module/<name>), built in or loaded).
options:
  sysctls:
    description: Sysctl keys, dotted (C(net.ipv4.ip_forward)).
    type: list
    elements: str
    default: []
  modules:
    description: Kernel module names, as C(/sys/module) spells them (underscores).
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: full
    description: Reads only; the same in check mode.
  diff_mode:
    support: none
    description: Reads only; there is nothing to show a difference of.
notes:
  - A key whose dotted name holds a dot of its own (an interface name such as C(eth0.100)) is read at the
    wrong path; use the slash form in O(sysctls) for those.
seealso:
  - module: ansible.posix.sysctl
author:
  - ai_platform L1 contributors (@ai-platform-l1)
'''

EXAMPLES = r'''
- name: Read the kernel's live state
  ai_platform.l1.kernel_state:
    sysctls: [net.ipv4.ip_forward, vm.swappiness]
    modules: [br_netfilter, overlay]
  register: live
'''

RETURN = r'''
sysctls:
  description: Per key of O(sysctls), C(state) (V(writable), V(read-only) or V(absent)) and C(value)
    (empty when absent).
  returned: always
  type: dict
  sample: {net.ipv4.ip_forward: {state: writable, value: "1"}, vm.swappiness: {state: read-only, value: "60"}}
swaps:
  description: The active swap areas (devices or files), in the kernel's order.
  returned: always
  type: list
  elements: str
  sample: [/dev/sda2]
modules_present:
  description: The names of O(modules) present in the running kernel, in the order of O(modules).
  returned: always
  type: list
  elements: str
  sample: [overlay]
'''

import os

from ansible.module_utils.basic import AnsibleModule

# Where the kernel shows them (module-level so tests can point them at a fake tree).
PROC_SYS = '/proc/sys'
PROC_SWAPS = '/proc/swaps'
SYS_MODULE = '/sys/module'


def sysctl_path(key):
    return os.path.join(PROC_SYS, key.replace('.', '/') if '/' not in key else key)


def read_sysctl(key):
    path = sysctl_path(key)
    if not os.path.isfile(path):
        return dict(state='absent', value='')
    try:
        with open(path) as handle:
            value = ' '.join(handle.read().split())
    except OSError:
        value = ''
    return dict(state='writable' if os.access(path, os.W_OK) else 'read-only', value=value)


def active_swaps():
    try:
        with open(PROC_SWAPS) as handle:
            lines = handle.read().splitlines()[1:]
    except OSError:
        return []
    return [line.split()[0] for line in lines if line.split()]


def main():
    module = AnsibleModule(
        argument_spec=dict(
            sysctls=dict(type='list', elements='str', default=[]),
            modules=dict(type='list', elements='str', default=[]),
        ),
        supports_check_mode=True,
    )
    module.exit_json(
        changed=False,
        sysctls=dict((key, read_sysctl(key)) for key in module.params['sysctls']),
        swaps=active_swaps(),
        modules_present=[name for name in module.params['modules'] if os.path.isdir(os.path.join(SYS_MODULE, name))],
    )


if __name__ == '__main__':
    main()
