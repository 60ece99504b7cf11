#!/usr/bin/env bash
# Builds the lab node root filesystem as a tarball: build.sh OUT.tar
# Debian bookworm minbase from Debian's own archive (no container registry is reachable),
# with systemd as PID 1, sshd and python3 so Ansible reaches the node as it reaches bare
# metal. lab/labctl.py calls this only when the recipe (every file in lab/image/) changed,
# and imports the tarball with `podman import`.
set -euo pipefail
out=${1:?usage: build.sh OUT.tar}
here=$(cd "$(dirname "$0")" && pwd)
# The mirror is not part of the recipe hash: any Debian mirror yields the same packages.
mirror=${AI_L1_DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=bookworm
packages=(systemd systemd-sysv dbus openssh-server python3 python3-apt sudo iproute2
          iputils-ping ca-certificates kmod procps gnupg curl less)

work=$(mktemp -d /var/tmp/ai-l1-image.XXXXXX)
cleanup() {
  # debootstrap may leave /proc and /sys mounted inside the target on failure.
  for m in proc sys dev/pts dev; do umount -l "$work/rootfs/$m" 2>/dev/null || true; done
  rm -rf --one-file-system "$work"
}
trap cleanup EXIT

echo "image: debootstrap $suite minbase from $mirror"
debootstrap --variant=minbase --include="$(IFS=,; echo "${packages[*]}")" \
  "$suite" "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 || {
  tail -n 30 "$work/debootstrap.log" >&2
  # debootstrap's own log says which package failed.
  tail -n 30 "$work/rootfs/debootstrap/debootstrap.log" >&2 2>/dev/null || true
  exit 1
}

install -m 0755 "$here/customize.sh" "$work/rootfs/tmp/customize.sh"
chroot "$work/rootfs" /bin/bash /tmp/customize.sh
rm -f "$work/rootfs/tmp/customize.sh"

tar --numeric-owner --xattrs --acls -C "$work/rootfs" -cf "$out.partial" .
mv "$out.partial" "$out"
echo "image: rootfs tarball $out ($(du -h "$out" | cut -f1))"
