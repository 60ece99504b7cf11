#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: ceph_layout
short_description: OSD device classes, one CRUSH rule per class, replicated pools and cephx clients
version_added: "0.1.0"
description:
  - Reads the cluster once (C(ceph osd tree), C(ceph osd crush rule dump), C(ceph osd pool ls detail),
    C(ceph auth ls)), compares it with what is asked and runs only the commands that close the
    difference, so a converged cluster costs four reads and no write.
  - O(osd_classes) sets each OSD's CRUSH device class (C(ceph osd crush rm-device-class) then
    C(set-device-class) where it differs).
  - Each class a pool names gets the replicated rule C(replicated-<class>) (root C(default), failure
    domain O(failure_domain)). A rule of that name with another class or failure domain is an error,
    not something to rewrite under data.
  - Pools are created with O(pools[].pg_num) and their class's rule; an existing pool gets its rule,
    C(size), C(min_size) and application set where they differ (never its C(pg_num), which the
    autoscaler owns once the pool exists). A pool is never deleted.
  - Clients are created with their caps (C(ceph auth get-or-create)) or get them set
    (C(ceph auth caps)) where they differ. Their keys are not returned (so this module's output can be
    shown); read them with C(ceph auth get-key) under C(no_log).
  - Runs where the C(client.admin) keyring is, on a monitor host.
options:
  osd_classes:
    description: OSD id (as a string or number) to device class.
    type: dict
    default: {}
  failure_domain:
    description: CRUSH bucket type replicas are spread over (C(host) in production; C(osd) on a single host).
    type: str
    required: true
  pools:
    description: Replicated pools.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Pool name.
        type: str
        required: true
      device_class:
        description: Device class whose rule places the pool.
        type: str
        required: true
      pg_num:
        description: Placement groups when the pool is created.
        type: int
        required: true
      size:
        description: Replicas.
        type: int
        required: true
      min_size:
        description: Replicas needed to serve I/O.
        type: int
        required: true
      application:
        description: Application the pool is enabled for (C(rbd) also runs C(rbd pool init) on creation).
        type: str
        required: true
  clients:
    description: cephx clients.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: Entity name, C(client.<id>).
        type: str
        required: true
      caps:
        description: Capabilities by daemon type (C(mon), C(osd), C(mgr), C(mds)).
        type: dict
        required: true
  cluster:
    description: Cluster name.
    type: str
    default: ceph
attributes:
  check_mode:
    support: full
    description: Reads the cluster and reports the commands it would run in RV(commands); runs none of them.
  diff_mode:
    support: none
    description: No diff; RV(commands) says what changed.
author:
  - ai_platform L1 contributors (@ai-platform-l1)
'''

EXAMPLES = r'''
- name: Device classes, rules, pools and clients
  ai_platform.l1.ceph_layout:
    failure_domain: host
    osd_classes: {"0": ssd, "1": hdd}
    pools:
      - {name: ssd-pool, device_class: ssd, pg_num: 128, size: 3, min_size: 2, application: rbd}
    clients:
      - name: client.csi-rbd
        caps: {mon: profile rbd, osd: "profile rbd pool=ssd-pool", mgr: "profile rbd pool=ssd-pool"}
'''

RETURN = r'''
commands:
  description: The commands run (or that would be, in check mode), each as an argument list.
  returned: always
  type: list
  elements: list
'''

import json

from ansible.module_utils.basic import AnsibleModule

CAP_ORDER = ('mon', 'mgr', 'osd', 'mds')


class Ceph:
    def __init__(self, module):
        self.module = module
        self.base = ['ceph', '--cluster', module.params['cluster']]
        self.commands = []

    def read(self, *args):
        rc, out, err = self.module.run_command([*self.base, *args, '-f', 'json'])
        if rc != 0:
            self.module.fail_json(msg='ceph %s failed (rc %d): %s' % (' '.join(args), rc, err.strip()),
                                  commands=self.commands)
        return json.loads(out or 'null')

    def run(self, *args, tool=None):
        argv = [*(tool or self.base), *args]
        self.commands.append(argv)
        if self.module.check_mode:
            return ''
        rc, out, err = self.module.run_command(argv)
        if rc != 0:
            self.module.fail_json(msg='%s failed (rc %d): %s' % (' '.join(argv), rc, err.strip()),
                                  commands=self.commands)
        return out


def device_classes(ceph, wanted):
    tree = ceph.read('osd', 'tree')
    # An OSD that has not booted yet is a stray, outside any host bucket.
    current = {str(n['id']): n.get('device_class') for n in tree['nodes'] + tree.get('stray', []) if n['type'] == 'osd'}
    for key, device_class in sorted(wanted.items()):
        osd_id = str(key)
        if osd_id not in current:
            ceph.module.fail_json(msg='osd.%s is not in the CRUSH map' % osd_id, commands=ceph.commands)
        if current[osd_id] != device_class:
            if current[osd_id]:
                ceph.run('osd', 'crush', 'rm-device-class', 'osd.' + osd_id)
            ceph.run('osd', 'crush', 'set-device-class', device_class, 'osd.' + osd_id)


def rule_target(rule):
    """(class, failure domain) of a replicated rule from `ceph osd crush rule dump`."""
    device_class, domain = None, None
    for step in rule.get('steps', []):
        if step.get('op') == 'take':
            name = step.get('item_name', '')
            device_class = name.split('~', 1)[1] if '~' in name else None
        elif step.get('op', '').startswith(('chooseleaf', 'choose')):
            domain = step.get('type')
    return device_class, domain


def rules(ceph, classes, failure_domain):
    by_name = {r['rule_name']: r for r in ceph.read('osd', 'crush', 'rule', 'dump')}
    for device_class in sorted(classes):
        name = 'replicated-' + device_class
        if name not in by_name:
            ceph.run('osd', 'crush', 'rule', 'create-replicated', name, 'default', failure_domain, device_class)
            continue
        target = rule_target(by_name[name])
        if target != (device_class, failure_domain):
            ceph.module.fail_json(msg='CRUSH rule %s places on class %s over %s, not %s over %s; change it by hand '
                                      '(it moves data)' % (name, target[0], target[1], device_class, failure_domain),
                                  commands=ceph.commands)
    return {r['rule_name']: r['rule_id'] for r in by_name.values()}


def pools(ceph, wanted, rule_ids):
    current = {p['pool_name']: p for p in ceph.read('osd', 'pool', 'ls', 'detail')}
    for pool in wanted:
        name, rule = pool['name'], 'replicated-' + pool['device_class']
        have = current.get(name)
        if have is None:
            ceph.run('osd', 'pool', 'create', name, str(pool['pg_num']), str(pool['pg_num']), 'replicated', rule)
            ceph.run('osd', 'pool', 'set', name, 'size', str(pool['size']), '--yes-i-really-mean-it')
            ceph.run('osd', 'pool', 'set', name, 'min_size', str(pool['min_size']))
            if pool['application'] == 'rbd':
                ceph.run('pool', 'init', name, tool=['rbd', '--cluster', ceph.module.params['cluster']])
            else:
                ceph.run('osd', 'pool', 'application', 'enable', name, pool['application'])
            continue
        if rule_ids.get(rule) != have.get('crush_rule'):
            ceph.run('osd', 'pool', 'set', name, 'crush_rule', rule)
        if have.get('size') != pool['size']:
            ceph.run('osd', 'pool', 'set', name, 'size', str(pool['size']), '--yes-i-really-mean-it')
        if have.get('min_size') != pool['min_size']:
            ceph.run('osd', 'pool', 'set', name, 'min_size', str(pool['min_size']))
        if pool['application'] not in (have.get('application_metadata') or {}):
            ceph.run('osd', 'pool', 'application', 'enable', name, pool['application'])


def caps_argv(caps):
    return [word for kind in CAP_ORDER if caps.get(kind) for word in (kind, caps[kind])]


def clients(ceph, wanted):
    current = {e['entity']: e for e in ceph.read('auth', 'ls')['auth_dump']}
    for client in wanted:
        name, caps = client['name'], {k: str(v) for k, v in client['caps'].items() if v}
        have = current.get(name)
        if have is None:
            # The key is printed on stdout; discarded here (the caller reads it under no_log).
            ceph.run('auth', 'get-or-create', name, *caps_argv(caps), '-o', '/dev/null')
        elif (have.get('caps') or {}) != caps:
            ceph.run('auth', 'caps', name, *caps_argv(caps))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            osd_classes=dict(type='dict', default={}),
            failure_domain=dict(type='str', required=True),
            pools=dict(type='list', elements='dict', default=[], options=dict(
                name=dict(type='str', required=True),
                device_class=dict(type='str', required=True),
                pg_num=dict(type='int', required=True),
                size=dict(type='int', required=True),
                min_size=dict(type='int', required=True),
                application=dict(type='str', required=True),
            )),
            clients=dict(type='list', elements='dict', default=[], no_log=False, options=dict(
                name=dict(type='str', required=True),
                caps=dict(type='dict', required=True),
            )),
            cluster=dict(type='str', default='ceph'),
        ),
        supports_check_mode=True,
    )
    p = module.params
    bad = [c['name'] for c in p['clients'] if not c['name'].startswith('client.') or c['name'] == 'client.admin']
    if bad:
        module.fail_json(msg='clients must be client.<id> and not client.admin: %s' % ', '.join(bad))
    ceph = Ceph(module)
    device_classes(ceph, p['osd_classes'])
    rule_ids = rules(ceph, {pool['device_class'] for pool in p['pools']}, p['failure_domain'])
    if ceph.commands and not module.check_mode:
        rule_ids = {r['rule_name']: r['rule_id'] for r in ceph.read('osd', 'crush', 'rule', 'dump')}
    pools(ceph, p['pools'], rule_ids)
    clients(ceph, p['clients'])
    module.exit_json(changed=bool(ceph.commands), commands=ceph.commands)


if __name__ == '__main__':
    main()
