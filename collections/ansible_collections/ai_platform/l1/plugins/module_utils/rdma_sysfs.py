# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Reading the RDMA parts of sysfs: attribute values and which netdev belongs to which RDMA device.

Shared by roce_sysfs and nccl_config, which both look under <sysfs_root>/class/infiniband.
"""

from __future__ import annotations

import os
import re

from ansible_collections.ai_platform.l1.plugins.module_utils.device_io import list_dir, read_attr

# mlx5 prints the port's RoCE traffic class as `Global tclass=106` (writes take the plain number).
_TCLASS = re.compile(r'^Global tclass=(-?\d+)$')


def read_value(path):
    """The stripped content of a sysfs attribute, or None when it cannot be read.

    Content that is not UTF-8 text (a broken driver, a corrupt file) raises ValueError
    naming the file: guessing a value there would compare or configure the wrong thing.
    """
    return read_attr(path, strict=True)


def read_setting(path):
    """read_value, with mlx5's `Global tclass=N` (tc/1/traffic_class) read as N, as it is written.

    Raises ValueError as read_value does.
    """
    value = read_value(path)
    m = _TCLASS.match(value or '')
    return m.group(1) if m else value


def ib_netdevs(sysfs_root):
    """[(rdma device, sorted netdevs of that device)] for every device under class/infiniband, sorted."""
    base = os.path.join(sysfs_root, 'class', 'infiniband')
    out = []
    for ib in list_dir(base):
        out.append((ib, list_dir(os.path.join(base, ib, 'device', 'net'))))
    return out


def ib_device_of(sysfs_root, interface):
    """The RDMA device whose device/net holds the interface, or None."""
    for ib, netdevs in ib_netdevs(sysfs_root):
        if interface in netdevs:
            return ib
    return None
