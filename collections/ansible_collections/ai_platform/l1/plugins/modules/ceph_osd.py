#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: ceph_osd
short_description: One BlueStore OSD on a device, created once and never again
version_added: "0.1.0"
description:
  - Makes O(path) a BlueStore OSD of the cluster O(fsid), without ceph-volume or containers
    (the layout of C(ceph-volume raw)). The OSD is registered with C(ceph osd new) under the
    C(client.bootstrap-osd) key (with its CRUSH device class), its directory
    C(/var/lib/ceph/osd/<cluster>-<id>) gets a C(block) link to O(path) and the OSD's keyring, and
    C(ceph-osd --mkfs) writes BlueStore to the device as the C(ceph) user.
  - The device's BlueStore label decides, so a re-run never recreates an OSD. A label of O(fsid)
    means the OSD exists; its id is returned and nothing is written (a missing OSD directory fails
    the run, saying how to restore it). A label of another cluster, or any other signature C(blkid)
    finds (a file system, a partition table), fails before anything is changed; wiping a disk is
    never this module's decision.
  - If C(ceph-osd --mkfs) fails, the id just registered is removed again (C(ceph osd purge-new)),
    so a failed run leaves no OSD without data in the map.
  - The device may be a block device or a regular file (BlueStore sizes a file by its length).
  - Starting the daemon (C(ceph-osd@<id>)) is left to the caller.
options:
  path:
    description: The device (a stable name such as C(/dev/disk/by-id/...)) or file.
    type: path
    required: true
  fsid:
    description: The cluster's fsid.
    type: str
    required: true
  device_class:
    description: CRUSH device class the OSD is registered with (C(ssd), C(hdd), C(nvme)); only
      used when the OSD is created; changing the class of an existing OSD is the monitors' work.
    type: str
    required: true
  cluster:
    description: Cluster name (the C(/etc/ceph/<cluster>.conf) and directory prefix).
    type: str
    default: ceph
  bootstrap_keyring:
    description: Keyring of C(client.bootstrap-osd).
    type: path
    default: /var/lib/ceph/bootstrap-osd/ceph.keyring
attributes:
  check_mode:
    support: full
    description: Reports whether the OSD would be created; runs no command that writes.
  diff_mode:
    support: none
    description: No diff; RV(created) says whether the OSD was made.
author:
  - ai_platform L1 contributors (@ai-platform-l1)
'''

EXAMPLES = r'''
- name: OSDs on this host's devices
  ai_platform.l1.ceph_osd:
    path: "{{ item.path }}"
    device_class: "{{ item.device_class }}"
    fsid: "{{ ceph_fsid }}"
  loop: "{{ ceph_osd_devices }}"
  register: ceph__osds
'''

RETURN = r'''
osd_id:
  description: The OSD's id (C(null) in check mode for an OSD that would be created).
  returned: always
  type: int
  sample: 3
osd_uuid:
  description: The OSD's uuid (from the label, or the one it was created with).
  returned: always
  type: str
created:
  description: Whether this run created the OSD (or would, in check mode).
  returned: always
  type: bool
'''

import json
import os
import uuid

from ansible.module_utils.basic import AnsibleModule


def read_label(module, path):
    """The BlueStore label of path, or None when it has none."""
    rc, out, _err = module.run_command(['ceph-bluestore-tool', 'show-label', '--dev', path])
    if rc != 0:
        return None
    try:
        return json.loads(out).get(path)
    except ValueError:
        return None


def foreign_signature(module, path):
    """What blkid finds on path (a file system, a partition table), or '' when nothing."""
    rc, out, err = module.run_command(['blkid', '-p', '-o', 'export', path])
    if rc == 2:  # nothing found
        return ''
    if rc != 0:
        module.fail_json(msg='blkid -p %s failed (rc %d): %s' % (path, rc, err.strip()))
    return ' '.join(line for line in out.splitlines() if line.startswith(('TYPE=', 'PTTYPE=')))


def existing_osd(module, label, osd_dir_of):
    osd_id = int(label['whoami'])
    osd_dir = osd_dir_of(osd_id)
    if not os.path.isdir(osd_dir):
        module.fail_json(msg='%s holds osd.%d of this cluster but %s is missing; restore it (keyring from '
                             '`ceph auth get osd.%d`) or remove the OSD deliberately'
                             % (module.params['path'], osd_id, osd_dir, osd_id), osd_id=osd_id)
    return dict(changed=False, created=False, osd_id=osd_id, osd_uuid=label.get('osd_uuid'))


def create_osd(module, osd_dir_of):
    p = module.params
    auth = ['--cluster', p['cluster'], '-n', 'client.bootstrap-osd', '-k', p['bootstrap_keyring']]
    osd_uuid = str(uuid.uuid4())
    rc, key, err = module.run_command(['ceph-authtool', '--gen-print-key'])
    if rc != 0:
        module.fail_json(msg='ceph-authtool --gen-print-key failed: %s' % err.strip())
    key = key.strip()
    request = json.dumps({'cephx_secret': key, 'crush_device_class': p['device_class']})
    rc, out, err = module.run_command(['ceph', *auth, 'osd', 'new', osd_uuid, '-i', '-'], data=request)
    if rc != 0:
        module.fail_json(msg='ceph osd new failed (rc %d): %s' % (rc, err.strip()))
    osd_id = int(out.strip())

    def undo(msg):
        module.run_command(['ceph', *auth, 'osd', 'purge-new', 'osd.%d' % osd_id, '--yes-i-really-mean-it'])
        module.fail_json(msg='%s; osd.%d was removed from the map again' % (msg, osd_id))

    osd_dir = osd_dir_of(osd_id)
    try:
        os.makedirs(osd_dir, mode=0o750, exist_ok=True)
        block = os.path.join(osd_dir, 'block')
        if os.path.lexists(block):
            os.unlink(block)
        os.symlink(p['path'], block)
    except OSError as exc:
        undo('cannot prepare %s: %s' % (osd_dir, exc))
    rc, _out, err = module.run_command(['ceph-authtool', '--create-keyring', os.path.join(osd_dir, 'keyring'),
                                        '--name', 'osd.%d' % osd_id, '--add-key', key])
    if rc != 0:
        undo('writing the keyring of osd.%d failed: %s' % (osd_id, err.strip()))
    # ceph-osd runs as ceph: it must own its directory and its device (the unit drop-in keeps the
    # device's owner across reboots).
    rc, _out, err = module.run_command(['chown', '-R', 'ceph:ceph', osd_dir, os.path.realpath(p['path'])])
    if rc != 0:
        undo('chown for osd.%d failed: %s' % (osd_id, err.strip()))
    rc, _out, err = module.run_command(['ceph-osd', '--cluster', p['cluster'], '-i', str(osd_id), '--mkfs',
                                        '--osd-uuid', osd_uuid, '--osd-objectstore', 'bluestore',
                                        '--setuser', 'ceph', '--setgroup', 'ceph'])
    if rc != 0:
        undo('ceph-osd --mkfs for osd.%d on %s failed: %s' % (osd_id, p['path'], err.strip()[-2000:]))
    return dict(changed=True, created=True, osd_id=osd_id, osd_uuid=osd_uuid)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type='path', required=True),
            fsid=dict(type='str', required=True),
            device_class=dict(type='str', required=True),
            cluster=dict(type='str', default='ceph'),
            bootstrap_keyring=dict(type='path', default='/var/lib/ceph/bootstrap-osd/ceph.keyring'),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if not os.path.exists(p['path']):
        module.fail_json(msg='%s does not exist' % p['path'])

    def osd_dir_of(osd_id):
        return '/var/lib/ceph/osd/%s-%d' % (p['cluster'], osd_id)

    label = read_label(module, p['path'])
    if label:
        if label.get('ceph_fsid') != p['fsid']:
            module.fail_json(msg='%s holds BlueStore of another cluster (fsid %s, osd.%s), not %s; '
                                 'wipe it deliberately (ceph-volume lvm zap) if it is free'
                                 % (p['path'], label.get('ceph_fsid'), label.get('whoami'), p['fsid']))
        if label.get('mkfs_done') != 'yes':
            module.fail_json(msg='%s has a BlueStore label of this cluster (osd.%s) without mkfs_done: an '
                                 'interrupted creation; purge osd.%s and zap the device'
                                 % (p['path'], label.get('whoami'), label.get('whoami')))
        module.exit_json(**existing_osd(module, label, osd_dir_of))

    signature = foreign_signature(module, p['path'])
    if signature:
        module.fail_json(msg='%s is not empty (%s); an OSD is created only on a device without a signature'
                             % (p['path'], signature))
    if module.check_mode:
        module.exit_json(changed=True, created=True, osd_id=None, osd_uuid=None)
    module.exit_json(**create_osd(module, osd_dir_of))


if __name__ == '__main__':
    main()
