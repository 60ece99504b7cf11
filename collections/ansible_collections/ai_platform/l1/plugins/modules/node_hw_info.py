#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: node_hw_info
short_description: Report the RDMA NIC, NIC speeds and local NVMe capacity of a node from sysfs
version_added: "0.1.0"
description:
  - Reads the node's network and disk facts the accelerator labels need, straight from sysfs.
  - RDMA NICs come from C(<sysfs_root>/class/infiniband/*/device/net/*), their speed from
    C(<sysfs_root>/class/net/<netdev>/speed) (Mb/s).
  - The primary network is the fastest RDMA NIC with its link up; without any RDMA NIC, the
    fastest physical NIC (one with a C(device) entry, so no bridges, veths or loopback).
  - Local NVMe capacity is the sum of C(<sysfs_root>/block/nvme<X>n<Y>/size) (512-byte sectors).
    Partitions and native-multipath controller paths (C(nvme0c0n1)) are not counted.
  - Never changes anything.
options:
  sysfs_root:
    description:
      - Where sysfs is mounted. Tests point it at a fake tree.
    type: path
    default: /sys
extends_documentation_fragment:
  - ai_platform.l1.attributes.info_module
author:
  - ai_platform L1 contributors (@ai-platform-l1)
'''

EXAMPLES = r'''
- name: Read NIC and NVMe facts for the node labels
  ai_platform.l1.node_hw_info:
  register: hw

- name: Show the primary network
  ansible.builtin.debug:
    msg: "{{ hw.hw_info.network.interface }} at {{ hw.hw_info.network.speed_mbps }} Mb/s"
'''

RETURN = r'''
hw_info:
  description: Network and local-disk facts of the node.
  returned: always
  type: dict
  contains:
    rdma:
      description: RDMA devices with the netdev they are bound to, sorted by device name.
      type: list
      elements: dict
      sample: [{"ib_device": "mlx5_0", "netdev": "ens1f0", "speed_mbps": 100000, "operstate": "up"}]
    nics:
      description: Physical NICs (with a device entry) and their speed; -1 when unknown or down.
      type: list
      elements: dict
      sample: [{"name": "ens1f0", "speed_mbps": 100000, "operstate": "up"}]
    network:
      description:
        - The primary network. C(interface) is the RDMA device name, or null on a node without
          one; C(netdev) its network interface; C(speed_mbps) 0 when no NIC reports a speed.
      type: dict
      sample: {"interface": "mlx5_0", "netdev": "ens1f0", "speed_mbps": 100000}
    nvme:
      description: Local NVMe namespaces and their total size in bytes.
      type: dict
      sample: {"devices": [{"name": "nvme0n1", "size_bytes": 1920383410176}], "total_bytes": 1920383410176}
'''

import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ai_platform.l1.plugins.module_utils.device_io import list_dir, read_attr

_NVME_RE = re.compile(r'^nvme\d+n\d+$')


def _read(path):
    # A down link makes the kernel fail the speed read with EINVAL, and a value that is not
    # text says nothing either: both are unknown (None).
    return read_attr(path, strict=False)


def _speed(sysfs_root, netdev):
    value = _read(os.path.join(sysfs_root, 'class', 'net', netdev, 'speed'))
    try:
        return int(value)
    except (TypeError, ValueError):
        return -1


def collect(sysfs_root):
    """Read the facts; pure apart from reading files under sysfs_root."""
    rdma = []
    for ibdev in list_dir(os.path.join(sysfs_root, 'class', 'infiniband')):
        for netdev in list_dir(os.path.join(sysfs_root, 'class', 'infiniband', ibdev, 'device', 'net')):
            rdma.append({
                'ib_device': ibdev,
                'netdev': netdev,
                'speed_mbps': _speed(sysfs_root, netdev),
                'operstate': _read(os.path.join(sysfs_root, 'class', 'net', netdev, 'operstate')) or 'unknown',
            })

    nics = []
    for netdev in list_dir(os.path.join(sysfs_root, 'class', 'net')):
        if not os.path.exists(os.path.join(sysfs_root, 'class', 'net', netdev, 'device')):
            continue  # bridges, veths, loopback: no hardware behind them
        nics.append({
            'name': netdev,
            'speed_mbps': _speed(sysfs_root, netdev),
            'operstate': _read(os.path.join(sysfs_root, 'class', 'net', netdev, 'operstate')) or 'unknown',
        })

    # Fastest first; names break ties so the choice is stable across runs.
    def rank(item):
        return (-item['speed_mbps'], item.get('ib_device', item.get('name')))

    network = {'interface': None, 'netdev': None, 'speed_mbps': 0}
    usable_rdma = sorted((r for r in rdma if r['speed_mbps'] > 0), key=rank)
    usable_nics = sorted((n for n in nics if n['speed_mbps'] > 0), key=rank)
    if usable_rdma:
        best = usable_rdma[0]
        network = {'interface': best['ib_device'], 'netdev': best['netdev'], 'speed_mbps': best['speed_mbps']}
    elif usable_nics:
        best = usable_nics[0]
        network = {'interface': None, 'netdev': best['name'], 'speed_mbps': best['speed_mbps']}

    devices = []
    for name in list_dir(os.path.join(sysfs_root, 'block')):
        if not _NVME_RE.match(name):
            continue
        if _read(os.path.join(sysfs_root, 'block', name, 'hidden')) == '1':
            continue
        sectors = _read(os.path.join(sysfs_root, 'block', name, 'size'))
        try:
            size = int(sectors) * 512
        except (TypeError, ValueError):
            continue
        devices.append({'name': name, 'size_bytes': size})

    return {
        'rdma': rdma,
        'nics': nics,
        'network': network,
        'nvme': {'devices': devices, 'total_bytes': sum(d['size_bytes'] for d in devices)},
    }


def main():
    module = AnsibleModule(
        argument_spec=dict(sysfs_root=dict(type='path', default='/sys')),
        supports_check_mode=True,
    )
    sysfs_root = module.params['sysfs_root']
    if not os.path.isdir(os.path.join(sysfs_root, 'class')) and not os.path.isdir(os.path.join(sysfs_root, 'block')):
        module.fail_json(msg='%s does not look like sysfs: it has neither class/ nor block/' % sysfs_root)
    module.exit_json(changed=False, hw_info=collect(sysfs_root))


if __name__ == '__main__':
    main()
