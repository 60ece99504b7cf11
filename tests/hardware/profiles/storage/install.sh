#!/usr/bin/env bash
# A storage node's disks: sparse files on the node's disk volume (labctl mounts it at
# /var/lib/ai-l1-lab/disks for hosts with lab_disks: true). The lab kernel has no RBD and a
# loop device is a host-wide resource a failed run would leak, so the ceph role's OSDs use
# these files as BlueStore block devices, exactly as they would use /dev/disk/by-id/... on a
# server (BlueStore sizes a regular file by its length). Existing files are kept: they hold OSDs.
set -euo pipefail
container=${1:?usage: install.sh CONTAINER}
size=${AI_L1_LAB_DISK_SIZE:-8G}
podman exec "$container" sh -euc "
  mkdir -p /etc/ai-l1-lab
  echo storage > /etc/ai-l1-lab/profile
  test -d /var/lib/ai-l1-lab/disks || { echo 'no disk volume at /var/lib/ai-l1-lab/disks (inventory: lab_disks: true)' >&2; exit 1; }
  for disk in ssd0 ssd1 hdd0; do
    test -e /var/lib/ai-l1-lab/disks/\$disk || truncate -s $size /var/lib/ai-l1-lab/disks/\$disk
  done
"
