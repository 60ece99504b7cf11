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
  - C(NCCL_IB_GID_INDEX) applies to every HCA NCCL uses, so the discovered C(NCCL_IB_HCA) holds
    ports of one link layer only. Where any active port is Ethernet (RoCE), those are taken; the
    first one with an IPv4 RoCE v2 GID gives the GID index, and only Ethernet ports with a RoCE v2
    IPv4 GID at that same index are used. Otherwise the active InfiniBand ports are used, with no
    GID index. The active ports left out are named in a warning.
  - Writes C(NCCL_IB_HCA), C(NCCL_IB_GID_INDEX) (Ethernet link layer only), C(NCCL_SOCKET_IFNAME)
    and the tuned values of O(settings) to O(path), one C(KEY=VALUE) per line, sorted.
  - Debug variables (C(NCCL_DEBUG), C(NCCL_DEBUG_SUBSYS), C(NCCL_DEBUG_FILE)) are refused, as they
    belong to a job's environment, never to the host configuration.
  - With the GPU-NIC topology (O(nvidia_smi) or O(topology)), the discovered C(NCCL_IB_HCA) leaves out
    the HCAs whose nearest GPU is across the CPU sockets (C(SYS)), unless every HCA is; a warning names
    them. Given O(hca) are kept as they are, with a warning for those that are that far.
  - C(NCCL_NET_GDR_LEVEL) is then checked against the HCAs kept; a warning names those for which the
    level disables GPUDirect RDMA (their nearest GPU is farther than the level) and the GPUs left with no
    HCA within it. nvidia-smi's C(NODE) counts as C(PHB), as NCCL ranks it. The level itself is not changed.
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
    description:
      - RDMA devices for C(NCCL_IB_HCA); discovered (active ports of one link layer, see above) when not given.
      - Without O(gid_index), the devices given must share a link layer and, for Ethernet, have their
        IPv4 RoCE v2 GID at the index of the first one.
    type: list
    elements: str
  gid_index:
    description: C(NCCL_IB_GID_INDEX); discovered from the first Ethernet HCA's RoCE v2 GIDs when not given.
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
  nvidia_smi:
    description:
      - The nvidia-smi executable (a name looked up in PATH, or a path). The module runs C(nvidia-smi topo -m)
        and uses the GPU-NIC topology as described above.
      - Where it is missing or fails (no NVIDIA driver yet), or its output cannot be parsed, a warning
        says so and the file is written without the topology.
    type: str
  topology:
    description: The output of C(nvidia-smi topo -m), used as O(nvidia_smi) would be (a capture, or for tests).
    type: str
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
gpu_nic_affinity:
  description:
    - Per NIC of the topology, its nearest connection to a GPU as nvidia-smi prints it (C(connection)),
      the NCCL_NET_GDR_LEVEL name of that distance (C(level)) and the GPUs at it (C(gpus)).
    - V(null) without a topology.
  returned: success
  type: dict
  sample: {mlx5_0: {connection: PXB, level: PXB, rank: 2, gpus: [GPU0, GPU1]}}
'''

import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ai_platform.l1.plugins.module_utils import device_io, gpu_topology, rdma_sysfs
from ansible_collections.ai_platform.l1.plugins.module_utils.file_state import replace

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
        for n in sorted(int(x) for x in device_io.list_dir(gids) if x.isdigit()):
            kind = rdma_sysfs.read_value(os.path.join(port, 'gid_attrs', 'types', str(n)))
            if kind == 'RoCE v2' and _IPV4_MAPPED.match(rdma_sysfs.read_value(os.path.join(gids, str(n))) or ''):
                gid_index = n
                break
        out.append(dict(ib=ib, netdev=netdevs[0] if netdevs else None, active='ACTIVE' in state,
                        link_layer=rdma_sysfs.read_value(os.path.join(port, 'link_layer')) or '', gid_index=gid_index))
    return out


def _no_ipv4_gid(device):
    return ValueError('%s has no RoCE v2 GID with an IPv4 address (is %s configured?); set gid_index'
                      % (device['ib'], device['netdev']))


def discovered_hca(devices, gid_index, warnings):
    """Active ports of one link layer, as NCCL_IB_GID_INDEX applies to all of them.

    Ethernet (RoCE) ports first: without a given gid_index, those whose IPv4 RoCE v2 GID sits
    at the index of the first one that has one. Else the InfiniBand ports. Ports left out are
    added to warnings.
    """
    active = [d for d in devices if d['active']]
    ethernet = [d for d in active if d['link_layer'] == 'Ethernet']
    chosen = ethernet or active
    if ethernet and gid_index is None:
        with_gid = [d for d in ethernet if d['gid_index'] is not None]
        if not with_gid:
            raise _no_ipv4_gid(ethernet[0])
        chosen = [d for d in ethernet if d['gid_index'] == with_gid[0]['gid_index']]
    for d in active:
        if d in chosen:
            continue
        if d['link_layer'] != chosen[0]['link_layer']:
            why = 'its link layer is %s, not %s' % (d['link_layer'] or 'unknown', chosen[0]['link_layer'])
        elif d['gid_index'] is None:
            why = 'it has no RoCE v2 GID with an IPv4 address'
        else:
            why = 'its IPv4 RoCE v2 GID is at index %d, not %d' % (d['gid_index'], chosen[0]['gid_index'])
        warnings.append('NCCL_IB_HCA leaves out the active port of %s: %s' % (d['ib'], why))
    return [d['ib'] for d in chosen]


def _check_given_hca(hca, by):
    """Given HCAs without a given gid_index: one link layer, and for RoCE one GID index."""
    layers = sorted(set(by[h]['link_layer'] for h in hca))
    if len(layers) > 1:
        raise ValueError('hca %s mixes link layers (%s) but NCCL_IB_GID_INDEX applies to all of them; '
                         'choose ports of one link layer or set gid_index' % (hca, ', '.join(layers)))
    first = by[hca[0]]
    if first['link_layer'] != 'Ethernet':
        return
    if first['gid_index'] is None:
        raise _no_ipv4_gid(first)
    other = [h for h in hca if by[h]['gid_index'] != first['gid_index']]
    if other:
        raise ValueError('hca %s: no IPv4 RoCE v2 GID at index %d, the one of %s; set gid_index or choose other hca'
                         % (other, first['gid_index'], first['ib']))


def _prefer_near(hca, topology, given, warnings):
    """hca without those whose nearest GPU is across the sockets (SYS), unless that is all of them.

    Given HCAs are the operator's choice: kept, with a warning.
    """
    near = gpu_topology.nic_affinity(topology)
    unknown = [h for h in hca if h not in near]
    if unknown:
        warnings.append('%s not in nvidia-smi topo -m; their distance to the GPUs is unknown' % ', '.join(unknown))
    far = [h for h in hca if h in near and near[h]['rank'] >= gpu_topology.GDR_LEVELS.index('SYS')]
    if not far:
        return hca
    if given or len(far) == len(hca):
        warnings.append('NCCL_IB_HCA holds %s although %s across the CPU sockets from every GPU (SYS)'
                        % (', '.join(far), 'it is' if len(far) == 1 else 'they are'))
        return hca
    warnings.append('NCCL_IB_HCA leaves out %s: across the CPU sockets from every GPU (SYS)' % ', '.join(far))
    return [h for h in hca if h not in far]


def check_gdr_level(config, hca, topology, warnings):
    """Warn where NCCL_NET_GDR_LEVEL disables GPUDirect RDMA for the HCAs of NCCL_IB_HCA."""
    value = config.get('NCCL_NET_GDR_LEVEL')
    if value is None:
        return
    level = gpu_topology.gdr_level_rank(value)
    if level == 0:     # LOC: GPUDirect RDMA off on purpose
        return
    name = gpu_topology.GDR_LEVELS[level]
    shown = value if str(value).upper() == name else '%s (%s)' % (value, name)
    near = gpu_topology.nic_affinity(topology)
    known = [h for h in hca if h in near]
    if not known:
        return
    beyond = [h for h in known if near[h]['rank'] > level]
    if beyond:
        needed = gpu_topology.GDR_LEVELS[max(near[h]['rank'] for h in beyond)]
        warnings.append('NCCL_NET_GDR_LEVEL=%s disables GPUDirect RDMA on %s%s (nearest GPU at that distance); '
                        'NCCL_NET_GDR_LEVEL=%s would enable it'
                        % (shown, 'every HCA: ' if len(beyond) == len(known) else '',
                           ', '.join('%s (%s)' % (h, near[h]['connection']) for h in beyond), needed))
    nearest = gpu_topology.gpu_nearest(topology, known)
    far_gpus = [g for g in topology['gpus'] if nearest[g][0] > level]
    if far_gpus and len(beyond) < len(known):
        warnings.append('%s: no HCA of NCCL_IB_HCA within NCCL_NET_GDR_LEVEL=%s; their network traffic '
                        'goes through host memory' % (', '.join(far_gpus), shown))


def _hca(p, devices, by, warnings, topology=None):
    """The HCAs for NCCL_IB_HCA: the given ones (checked) or those discovered."""
    hca = p['hca']
    if not hca and any(d['active'] for d in devices):
        hca = discovered_hca(devices, p['gid_index'], warnings)
    if not hca:
        raise ValueError('no RDMA device with an active port under %s/class/infiniband; set hca to choose'
                         % p['sysfs_root'])
    unknown = [h for h in hca if h not in by]
    if unknown:
        raise ValueError('hca %s not found under %s/class/infiniband (have: %s)'
                         % (unknown, p['sysfs_root'], ', '.join(sorted(by)) or 'none'))
    if p['hca'] and p['gid_index'] is None:
        _check_given_hca(hca, by)
    if topology:
        hca = _prefer_near(hca, topology, bool(p['hca']), warnings)
    return hca


def build(p, devices, warnings=None, topology=None):
    """The NCCL values to write; topology is gpu_topology.parse()'s result or None."""
    warnings = [] if warnings is None else warnings
    by = dict((d['ib'], d) for d in devices)
    hca = _hca(p, devices, by, warnings, topology)
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
    if 'NCCL_NET_GDR_LEVEL' in config:
        gpu_topology.gdr_level_rank(config['NCCL_NET_GDR_LEVEL'])  # refuse a value NCCL would not take
    config['NCCL_IB_HCA'] = ','.join(hca)
    ifname = p['socket_ifname'] or first['netdev']
    if ifname:
        config['NCCL_SOCKET_IFNAME'] = ifname
    if p['gid_index'] is not None:
        config['NCCL_IB_GID_INDEX'] = str(p['gid_index'])
    elif first['link_layer'] == 'Ethernet':
        if first['gid_index'] is None:
            raise _no_ipv4_gid(first)
        config['NCCL_IB_GID_INDEX'] = str(first['gid_index'])
    if topology:
        check_gdr_level(config, hca, topology, warnings)
    return config


def read_topology(module, warnings):
    """The parsed topology of O(topology) or of `nvidia-smi topo -m`, or None (with a warning why)."""
    p = module.params
    text = p['topology']
    if text is None and p['nvidia_smi']:
        exe = p['nvidia_smi'] if '/' in p['nvidia_smi'] else module.get_bin_path(p['nvidia_smi'])
        if not exe:
            warnings.append('%s not found (is the NVIDIA driver installed?): NCCL_IB_HCA and NCCL_NET_GDR_LEVEL '
                            'are not checked against the GPU-NIC topology' % p['nvidia_smi'])
            return None
        rc, text, err = module.run_command([exe, 'topo', '-m'])
        if rc != 0:
            warnings.append('%s topo -m failed (rc %d: %s): NCCL_IB_HCA and NCCL_NET_GDR_LEVEL are not checked '
                            'against the GPU-NIC topology' % (exe, rc, (err or text).strip()[:200]))
            return None
    if text is None:
        return None
    try:
        return gpu_topology.parse(text)
    except ValueError as exc:
        warnings.append('cannot read the nvidia-smi topo -m output (%s): NCCL_IB_HCA and NCCL_NET_GDR_LEVEL are '
                        'not checked against the GPU-NIC topology' % exc)
        return None


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
            nvidia_smi=dict(type='str'),
            topology=dict(type='str'),
        ),
        mutually_exclusive=[('nvidia_smi', 'topology')],
        supports_check_mode=True,
    )
    p = module.params
    warnings = []
    topology = read_topology(module, warnings)
    try:
        config = build(p, discover(p['sysfs_root']), warnings, topology)
    except ValueError as exc:
        module.fail_json(msg=str(exc))
    for warning in warnings:
        module.warn(warning)
    content = HEADER + ''.join('%s=%s\n' % kv for kv in sorted(config.items()))
    try:
        with open(p['path']) as handle:
            old = handle.read()
    except (IOError, OSError):
        old = ''
    changed = old != content
    if changed and not module.check_mode:
        replace(module, p['path'], content.encode('utf-8'))
    file_args = module.load_file_common_arguments(dict(path=p['path'], mode=p['mode']))
    if os.path.exists(p['path']):
        changed = module.set_fs_attributes_if_different(file_args, changed)
    result = dict(changed=changed, config=config,
                  gpu_nic_affinity=gpu_topology.nic_affinity(topology) if topology else None)
    if module._diff:
        result['diff'] = dict(before=old, after=content, before_header=p['path'], after_header=p['path'])
    module.exit_json(**result)


if __name__ == '__main__':
    main()
