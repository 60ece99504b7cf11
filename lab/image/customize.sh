#!/bin/bash
# Runs inside the freshly bootstrapped root (chroot) to make it a lab node image.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

# sshd: root with keys only, as on the fleet; no DNS lookups that stall logins.
cat > /etc/ssh/sshd_config.d/ai-l1-lab.conf <<'CONF'
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
CONF
# Every node must get its own host keys: drop the ones generated at build time and
# create them when sshd first starts (sshd -t fails without them, so before that).
rm -f /etc/ssh/ssh_host_*
mkdir -p /etc/systemd/system/ssh.service.d
cat > /etc/systemd/system/ssh.service.d/ai-l1-hostkeys.conf <<'CONF'
[Service]
ExecStartPre=
ExecStartPre=/usr/bin/ssh-keygen -A
ExecStartPre=/usr/sbin/sshd -t
CONF
systemctl enable ssh.service 2>/dev/null
install -d -m 0700 /root/.ssh
# Ansible connects as `ops` and becomes root with sudo, as the sample inventory does on real
# servers, so a play without `become` fails in the lab instead of on a customer's first run.
# labctl keeps root's key too: tests inspect nodes as root, Ansible never does.
useradd --create-home --shell /bin/bash ops
install -d -m 0700 -o ops -g ops /home/ops/.ssh
echo 'ops ALL=(ALL:ALL) NOPASSWD: ALL' > /etc/sudoers.d/ops
chmod 0440 /etc/sudoers.d/ops

# Units that make no sense in a container (no consoles, no udev: /sys and /dev belong
# to the host and a udev trigger here would act on the host's devices).
systemctl mask \
  getty.target console-getty.service getty@tty1.service serial-getty@.service \
  systemd-udevd.service systemd-udevd-control.socket systemd-udevd-kernel.socket \
  systemd-udev-trigger.service systemd-udev-settle.service \
  systemd-firstboot.service systemd-hwdb-update.service \
  sys-kernel-config.mount sys-kernel-debug.mount sys-kernel-tracing.mount \
  systemd-networkd-wait-online.service apt-daily.timer apt-daily-upgrade.timer 2>/dev/null

# Mounts shared, as on a machine booted by systemd: podman gives the node a private /sys, and a Pod
# volume with mountPropagation Bidirectional under it (calico-node's /sys/fs) needs a shared one.
cat > /etc/systemd/system/ai-l1-rshared.service <<'UNIT'
[Unit]
Description=Make every mount shared (as systemd does for / on a machine)
DefaultDependencies=no
Before=containerd.service kubelet.service
[Service]
Type=oneshot
ExecStart=/bin/mount --make-rshared /
RemainAfterExit=yes
[Install]
WantedBy=sysinit.target
UNIT
systemctl enable ai-l1-rshared.service 2>/dev/null

# A unique machine-id per container: systemd creates it at first boot when empty.
: > /etc/machine-id
rm -f /var/lib/dbus/machine-id /etc/hostname
echo 'LANG=C.UTF-8' > /etc/default/locale

# Small image: no apt caches, docs or man pages.
apt-get clean
rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/debconf/*-old \
       /usr/share/doc/* /usr/share/man/* /usr/share/info/* /var/log/*.log \
       /var/log/apt/* /tmp/* /root/.bash_history /var/lib/apt/periodic/*
# The package index is gone, so it must not look fresh: apt's cache_valid_time (Ansible's
# apt module) reads the lists directory's mtime when there is no update stamp.
touch -d @0 /var/lib/apt/lists
