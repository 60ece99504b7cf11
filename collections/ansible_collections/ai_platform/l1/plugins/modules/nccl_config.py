#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: nccl_config
short_description: Write /etc/nccl.conf from the host's RDMA devices and tuned NCCL values
version_added: "0.1.0"
description:
  - Discovers the RDMA devices under C(<sysfs_root>/class/infiniband) whose port 1 is active,
    their interfaces, and the RoCE v2 GID index (the first RoCE v2 entry with an IPv4-mapped
    address, which is what NCCL needs on routed RoCE fabrics).
  - Writes C(NCCL_IB_HCA), C(NCCL_IB_GID_INDEX) (Ethernet link layer only), C(NCCL_SOCKET_IFNAME)
    and the tuned values of O(settings) to O(path), one C(KEY=VALUE) per line, sorted.
  - Debug variables (C(NCCL_DEBUG), C(NCCL_DEBUG_SUBSYS), C(NCCL_DEBUG_FILE)) are refused, as they
    belong to a job's environment, never to the host configuration.
options:
  path:
    description: The configuration file NCCL reads.
    type: path
    default: /etc/nccl.conf
  sysfs_root:
    description: Where sysfs is mounted.
    type: path
    default: /sys
  hca:
    description: RDMA devices for C(NCCL_IB_HCA); discovered (active ports) when not given.
    type: list
    elements: str
  gid_index:
    description: C(NCCL_IB_GID_INDEX); discovered from the first HCA's RoCE v2 GIDs when not given.
    type: int
  socket_ifname:
    description: C(NCCL_SOCKET_IFNAME); the first HCA's interface when not given.
    type: str
  settings:
    description:
      - Further C(NCCL_*) values, merged over the seed's tuned ones (C(NCCL_IB_DISABLE=0),
        C(NCCL_IB_TIMEOUT=22), C(NCCL_IB_RETRY_CNT=7), C(NCCL_IB_SL=3), C(NCCL_IB_QPS_PER_CONNECTION=8),
        C(NCCL_NET_GDR_LEVEL=3), C(NCCL_NET_GDR_READ=1), C(NCCL_P2P_DISABLE=0)). A null value drops a key.
    type: dict
    default: {}
  mode:
    description: File mode.
    type: str
    default: '0644'
attributes:
  check_mode:
    support: full
    description: Reports the file it would write.
  diff_mode:
    support: full
    description: The file before and after.
author:
  - ai_platform L1 contributors (@ai-platform-l1)
'''

EXAMPLES = r'''
- name: NCCL configuration from the host's RDMA NICs
  ai_platform.l1.nccl_config:
    settings:
      NCCL_IB_TC: 106
'''

RETURN = r'''
config:
  description: The values written (or that would be written).
  returned: success
  type: dict
  sample: {NCCL_IB_HCA: mlx5_0, NCCL_IB_GID_INDEX: "3"}
'''

import os
import re
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ai_platform.l1.plugins.module_utils import rdma_sysfs

TUNED = {
    'NCCL_IB_DISABLE': '0',
    'NCCL_IB_TIMEOUT': '22',
    'NCCL_IB_RETRY_CNT': '7',
    'NCCL_IB_SL': '3',
    'NCCL_IB_QPS_PER_CONNECTION': '8',
    'NCCL_NET_GDR_LEVEL': '3',
    'NCCL_NET_GDR_READ': '1',
    'NCCL_P2P_DISABLE': '0',
}
HEADER = '# Managed by Ansible (ai_platform.l1.nccl_config); NCCL_DEBUG belongs in a job environment, not here.\n'
_IPV4_MAPPED = re.compile(r'^0000:0000:0000:0000:0000:ffff:[0-9a-f]{4}:[0-9a-f]{4}$')


def discover(sysfs_root):
    """[(ib, netdev, active, link_layer, roce_v2_ipv4_gid_index or None)] for every RDMA device."""
    out = []
    for ib, netdevs in rdma_sysfs.ib_netdevs(sysfs_root):
        port = os.path.join(sysfs_root, 'class', 'infiniband', ib, 'ports', '1')
        state = rdma_sysfs.read_value(os.path.join(port, 'state')) or ''
        gid_index = None
        gids = os.path.join(port, 'gids')
        for n in sorted((int(x) for x in os.listdir(gids) if x.isdigit()) if os.path.isdir(gids) else []):
            kind = rdma_sysfs.read_value(os.path.join(port, 'gid_attrs', 'types', str(n)))
            if kind == 'RoCE v2' and _IPV4_MAPPED.match(rdma_sysfs.read_value(os.path.join(gids, str(n))) or ''):
                gid_index = n
                break
        out.append(dict(ib=ib, netdev=netdevs[0] if netdevs else None, active='ACTIVE' in state,
                        link_layer=rdma_sysfs.read_value(os.path.join(port, 'link_layer')) or '', gid_index=gid_index))
    return out


def build(p, devices):
    by = dict((d['ib'], d) for d in devices)
    hca = p['hca'] or [d['ib'] for d in devices if d['active']]
    if not hca:
        raise ValueError('no RDMA device with an active port under %s/class/infiniband; set hca to choose'
                         % p['sysfs_root'])
    unknown = [h for h in hca if h not in by]
    if unknown:
        raise ValueError('hca %s not found under %s/class/infiniband (have: %s)'
                         % (unknown, p['sysfs_root'], ', '.join(sorted(by)) or 'none'))
    first = by[hca[0]]
    config = dict(TUNED)
    for key, value in (p['settings'] or {}).items():
        if not re.match(r'^NCCL_[A-Z0-9_]+$', key):
            raise ValueError('settings: %r is not an NCCL_* variable' % key)
        if key.startswith('NCCL_DEBUG'):
            raise ValueError('settings: %s is a debug variable; set it in the job environment, not in %s'
                             % (key, p['path']))
        if value is None:
            config.pop(key, None)
        else:
            config[key] = str(value).lower() if isinstance(value, bool) else str(value)
    config['NCCL_IB_HCA'] = ','.join(hca)
    ifname = p['socket_ifname'] or first['netdev']
    if ifname:
        config['NCCL_SOCKET_IFNAME'] = ifname
    if p['gid_index'] is not None:
        config['NCCL_IB_GID_INDEX'] = str(p['gid_index'])
    elif first['link_layer'] == 'Ethernet':
        if first['gid_index'] is None:
            raise ValueError('%s has no RoCE v2 GID with an IPv4 address (is %s configured?); set gid_index'
                             % (first['ib'], first['netdev']))
        config['NCCL_IB_GID_INDEX'] = str(first['gid_index'])
    return config


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type='path', default='/etc/nccl.conf'),
            sysfs_root=dict(type='path', default='/sys'),
            hca=dict(type='list', elements='str'),
            gid_index=dict(type='int'),
            socket_ifname=dict(type='str'),
            settings=dict(type='dict', default={}),
            mode=dict(type='str', default='0644'),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        config = build(p, discover(p['sysfs_root']))
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    content = HEADER + ''.join('%s=%s\n' % kv for kv in sorted(config.items()))
    try:
        with open(p['path']) as handle:
            old = handle.read()
    except (IOError, OSError):
        old = ''
    changed = old != content
    if changed and not module.check_mode:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(p['path']) or '.', prefix='.nccl.conf.')
        with os.fdopen(fd, 'w') as handle:
            handle.write(content)
        module.atomic_move(tmp, p['path'])
    file_args = module.load_file_common_arguments(dict(path=p['path'], mode=p['mode']))
    if os.path.exists(p['path']):
        changed = module.set_fs_attributes_if_different(file_args, changed)
    result = dict(changed=changed, config=config)
    if module._diff:
        result['diff'] = dict(before=old, after=content, before_header=p['path'], after_header=p['path'])
    module.exit_json(**result)


if __name__ == '__main__':
    main()
