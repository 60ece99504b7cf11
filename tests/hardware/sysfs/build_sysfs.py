#!/usr/bin/env python3
"""Build a fake sysfs tree (RDMA NIC, Ethernet NICs, NVMe disks) for a hardware profile.

  build_sysfs.py ROOT --profile a100|ascend_910b|control_plane

The tree has the entries node_hw_info reads, in the shape of the real /sys:
  ROOT/class/infiniband/<ibdev>/device/net/<netdev>/      RDMA device -> its netdev
  ROOT/class/net/<netdev>/{speed,operstate,device/}       link speed in Mb/s
  ROOT/block/<disk>/{size,device/}                        size in 512-byte sectors
Real sysfs uses symlinks into /sys/devices; plain directories are enough for readers that
only follow the paths. Each profile also has the distractors a real host has (a partition,
a SATA boot disk, a virtual NIC with no device, a down port) so a reader that counts them is caught.
Standard library only: it also runs inside lab nodes.
"""

import argparse
import os
import shutil

SECTOR = 512
# Marketed capacities in bytes (what `blockdev --getsize64` reports for such drives).
NVME_1_92TB = 1920383410176   # 1.92 TB
NVME_2TB = 2000398934016      # 2 TB
SATA_480GB = 480103981056

PROFILES = {
    # 8xA100 node of the seed: ConnectX RDMA NIC mlx5_0 on ens1f0 at 100 Gb/s (a second
    # port down), 2 x 1.92 TB NVMe = 3.49 TiB -> "3.5Ti".
    'a100': {
        'infiniband': {'mlx5_0': 'ens1f0', 'mlx5_1': 'ens1f1'},
        'net': {'ens1f0': (100000, 'up'), 'ens1f1': (-1, 'down'), 'eno1': (1000, 'up'), 'cni0': (None, 'up')},
        'nvme': {'nvme0n1': NVME_1_92TB, 'nvme1n1': NVME_1_92TB},
        'sata': {'sda': SATA_480GB},
    },
    # 910B node of the seed: a 100 Gb/s Ethernet NIC, no /class/infiniband (the NPUs' own
    # RoCE ports live on the NPU, not in host sysfs), one 2 TB NVMe = 1.82 TiB -> "1.8Ti".
    'ascend_910b': {
        'infiniband': {},
        'net': {'enp189s0f0': (100000, 'up'), 'enp125s0f0': (25000, 'up'), 'docker0': (None, 'up')},
        'nvme': {'nvme0n1': NVME_2TB},
        'sata': {'sda': SATA_480GB},
    },
    'control_plane': {
        'infiniband': {},
        'net': {'eno1': (25000, 'up')},
        'nvme': {},
        'sata': {'sda': SATA_480GB},
    },
}


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as handle:
        handle.write(text)


def build(root, profile):
    spec = PROFILES[profile]
    for sub in ('class/infiniband', 'class/net', 'block'):
        shutil.rmtree(os.path.join(root, sub), ignore_errors=True)
        os.makedirs(os.path.join(root, sub))
    for ibdev, netdev in spec['infiniband'].items():
        os.makedirs(os.path.join(root, 'class/infiniband', ibdev, 'device/net', netdev))
        write(os.path.join(root, 'class/infiniband', ibdev, 'ports/1/rate'), '100 Gb/sec (4X EDR)\n')
    for netdev, (speed, state) in spec['net'].items():
        base = os.path.join(root, 'class/net', netdev)
        write(os.path.join(base, 'operstate'), state + '\n')
        if speed is None:
            continue  # virtual bridge: no device, and reading speed fails with EINVAL
        os.makedirs(os.path.join(base, 'device'))
        write(os.path.join(base, 'speed'), '%d\n' % speed)
    write(os.path.join(root, 'class/net/lo/operstate'), 'unknown\n')
    for disk, size in list(spec['nvme'].items()) + list(spec['sata'].items()):
        base = os.path.join(root, 'block', disk)
        write(os.path.join(base, 'size'), '%d\n' % (size // SECTOR))
        os.makedirs(os.path.join(base, 'device'))
        part = disk + ('p1' if disk.startswith('nvme') else '1')
        write(os.path.join(base, part, 'size'), '%d\n' % (1048576 // SECTOR))
    write(os.path.join(root, 'block/loop0/size'), '0\n')


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('root')
    parser.add_argument('--profile', required=True, choices=sorted(PROFILES))
    args = parser.parse_args()
    build(args.root, args.profile)


if __name__ == '__main__':
    main()
