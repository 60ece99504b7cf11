#!/usr/bin/env python3
"""Add the RoCE parts of a ConnectX NIC to a fake sysfs tree built by tests/hardware/sysfs/build_sysfs.py.

  build_roce_sysfs.py ROOT [--ports mlx5_0=ens1f0:up:10.89.100.21,mlx5_1=ens1f1:down:]

For every RDMA device it writes what the RDMA modules read:
  ROOT/class/infiniband/<ib>/ports/1/{state,link_layer}
  ROOT/class/infiniband/<ib>/ports/1/gids/<N> and gid_attrs/types/<N>  (the mlx5 GID table:
      0 link-local RoCE v1, 1 link-local RoCE v2, 2 IPv4 RoCE v1, 3 IPv4 RoCE v2 -- so the
      seed's NCCL_IB_GID_INDEX=3 is what a reader must find; unused entries are zero)
  ROOT/class/infiniband/<ib>/tc/1/traffic_class              (RoCE traffic class, 0 = unset)
  ROOT/class/net/<netdev>/ecn/roce_np/enable/0..7, roce_rp/enable/0..7  (all 0: ECN off)
  ROOT/class/net/<netdev>/ecn/redp/red_min_threshold, red_max_threshold, red_probability
      (all 0; the seed's 4.4.2 writes these: the lab has them so the role's writes are checked,
      although upstream mlx5 has no ecn/redp, see roles/rdma_network/README.md)
  ROOT/kernel/config/rdma_cm/                                 (configfs; cma_roce_tos mkdirs the device)
Standard library only: it also runs inside lab nodes.
"""

import argparse
import ipaddress
import os

DEFAULT = 'mlx5_0=ens1f0:up:10.89.100.21,mlx5_1=ens1f1:down:'
ZERO = '0000:0000:0000:0000:0000:0000:0000:0000'


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'w') as handle:
        handle.write(text + '\n')


def gid(ip):
    words = ipaddress.IPv6Address('::ffff:' + ip).exploded.split(':')
    return ':'.join(words)


def build(root, ports):
    for spec in ports.split(','):
        ib, rest = spec.split('=')
        netdev, state, ip = rest.split(':')
        port = os.path.join(root, 'class/infiniband', ib, 'ports/1')
        write(os.path.join(port, 'state'), '4: ACTIVE' if state == 'up' else '1: DOWN')
        write(os.path.join(port, 'link_layer'), 'Ethernet')
        mac_ll = 'fe80:0000:0000:0000:0a00:27ff:fe00:00%02x' % int(ib[-1])
        table = [(mac_ll, 'IB/RoCE v1'), (mac_ll, 'RoCE v2')]
        if ip and state == 'up':
            table += [(gid(ip), 'IB/RoCE v1'), (gid(ip), 'RoCE v2')]
        for n in range(16):
            value, kind = table[n] if n < len(table) else (ZERO, '')
            write(os.path.join(port, 'gids', str(n)), value)
            # the kernel refuses to read the type of an empty entry; an empty file stands in
            write(os.path.join(port, 'gid_attrs/types', str(n)), kind)
        write(os.path.join(root, 'class/infiniband', ib, 'tc/1/traffic_class'), '0')
        for side in ('roce_np', 'roce_rp'):
            for prio in range(8):
                write(os.path.join(root, 'class/net', netdev, 'ecn', side, 'enable', str(prio)), '0')
        for name in ('red_min_threshold', 'red_max_threshold', 'red_probability'):
            write(os.path.join(root, 'class/net', netdev, 'ecn', 'redp', name), '0')
    os.makedirs(os.path.join(root, 'kernel/config/rdma_cm'), exist_ok=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('root')
    parser.add_argument('--ports', default=DEFAULT, help='IB=NETDEV:up|down:IPv4,... (default %(default)s)')
    args = parser.parse_args()
    build(args.root, args.ports)


if __name__ == '__main__':
    main()
