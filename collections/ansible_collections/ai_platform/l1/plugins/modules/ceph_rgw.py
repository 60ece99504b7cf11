#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: ceph_rgw
short_description: RADOS Gateway users, their buckets and the buckets' quotas
version_added: "0.1.0"
description:
  - Creates each user of O(users) that is missing (C(radosgw-admin user create)) and returns every
    user's S3 keys (use C(no_log) on the task).
  - Creates each bucket of a user through the S3 API as that user (so the user owns it and no other
    user's key reaches it without a bucket policy), at O(endpoint) with boto3. A bucket owned by
    another user is an error.
  - Sets and enables each bucket's quota (C(radosgw-admin quota set/enable --quota-scope=bucket)) where
    it differs; RGW then refuses a write past it with the S3 error C(QuotaExceeded).
  - Reads all buckets at once (C(radosgw-admin bucket stats)); a converged gateway costs one read per
    user and that one.
  - Runs where C(radosgw-admin) has an admin key (a monitor host).
options:
  endpoint:
    description: The gateway's S3 URL, for example C(http://10.0.0.41:7480).
    type: str
    required: true
  users:
    description: Users and the buckets each owns.
    type: list
    elements: dict
    required: true
    suboptions:
      uid:
        description: User id.
        type: str
        required: true
      display_name:
        description: Display name.
        type: str
        required: true
      access_key:
        description: The user's S3 access key, when the inventory gives the pair (for a consumer on other hosts,
          such as the etcd backups); RGW generates one otherwise. Needs O(users[].secret_key).
        type: str
      secret_key:
        description: The secret key of O(users[].access_key) (never logged).
        type: str
      buckets:
        description: Buckets the user owns.
        type: list
        elements: dict
        default: []
        suboptions:
          name:
            description: Bucket name.
            type: str
            required: true
          quota:
            description: Maximum size, in bytes or with a suffix (C(100Ti), C(500T), C(10Gi)); binary
              multiples either way, as RGW counts them.
            type: str
            required: true
  cluster:
    description: Cluster name.
    type: str
    default: ceph
requirements:
  - boto3 (Debian python3-boto3) on the host the module runs on
attributes:
  check_mode:
    support: full
    description: Reads users and buckets and reports in RV(actions) what it would do.
  diff_mode:
    support: none
    description: No diff; RV(actions) says what changed.
author:
  - ai_platform L1 contributors (@ai-platform-l1)
'''

EXAMPLES = r'''
- name: Users, buckets and quotas
  ai_platform.l1.ceph_rgw:
    endpoint: http://10.0.0.41:7480
    users:
      - uid: model-serving
        display_name: Model serving
        buckets:
          - {name: model-weights, quota: 100Ti}
  no_log: true
'''

RETURN = r'''
actions:
  description: What was done (or would be, in check mode), one line each.
  returned: always
  type: list
  elements: str
keys:
  description: uid to C({access_key, secret_key}) (C(null) in check mode for a user not created yet).
  returned: always
  type: dict
'''

import json
import re

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

try:
    import boto3
    HAS_BOTO3 = True
except ImportError:
    HAS_BOTO3 = False

SUFFIXES = {'': 0, 'K': 1, 'M': 2, 'G': 3, 'T': 4, 'P': 5, 'E': 6}


def size_bytes(text):
    """'100Ti' / '100T' / '1024' -> bytes (binary multiples, as RGW's max-size)."""
    m = re.match(r'^\s*(\d+)\s*([KMGTPE]?)(i?B?)\s*$', str(text), re.IGNORECASE)
    if not m:
        raise ValueError(text)
    return int(m.group(1)) * 1024 ** SUFFIXES[m.group(2).upper()]


class Gateway:
    def __init__(self, module):
        self.module = module
        self.base = ['radosgw-admin', '--cluster', module.params['cluster']]
        self.actions = []

    def fail(self, msg):
        """Fail, saying what was already done (a user created before a bucket failed is a change)."""
        self.module.fail_json(msg=msg, actions=self.actions, changed=bool(self.actions) and not self.module.check_mode)

    def admin(self, *args, ok_rc=(0,), write=False):
        if write and self.module.check_mode:
            return 0, ''
        rc, out, err = self.module.run_command([*self.base, *args])
        if rc not in ok_rc:
            self.fail('radosgw-admin %s failed (rc %d): %s' % (' '.join(args), rc, err.strip()))
        return rc, out


def ensure_user(gw, user):
    given = ['--access-key', user['access_key'], '--secret-key', user['secret_key']] if user.get('access_key') else []
    rc, out = gw.admin('user', 'info', '--uid', user['uid'], ok_rc=(0, 22))
    if rc == 22:  # ENOENT
        gw.actions.append('create user %s' % user['uid'])
        _rc, out = gw.admin('user', 'create', '--uid', user['uid'], '--display-name', user['display_name'], *given,
                            write=True)
        if not out:
            return None
    keys = json.loads(out)['keys']
    if user.get('access_key'):
        mine = [k for k in keys if k['access_key'] == user['access_key']]
        if not mine or mine[0]['secret_key'] != user['secret_key']:
            # The inventory's key pair (a consumer elsewhere holds it): added, or its secret replaced.
            gw.actions.append('set the S3 key %s of user %s' % (user['access_key'], user['uid']))
            _rc, out = gw.admin('key', 'create', '--uid', user['uid'], '--key-type', 's3', *given, write=True)
        return {'access_key': user['access_key'], 'secret_key': user['secret_key']}
    if not keys:
        gw.fail('user %s has no S3 key' % user['uid'])
    return {'access_key': keys[0]['access_key'], 'secret_key': keys[0]['secret_key']}


def create_bucket(gw, name, key):
    s3 = boto3.client('s3', endpoint_url=gw.module.params['endpoint'], aws_access_key_id=key['access_key'],
                      aws_secret_access_key=key['secret_key'], region_name='us-east-1')
    try:
        s3.create_bucket(Bucket=name)
    except Exception as exc:  # botocore's errors carry the S3 code in their text
        gw.fail('creating bucket %s failed: %s' % (name, exc))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            endpoint=dict(type='str', required=True),
            users=dict(type='list', elements='dict', required=True, options=dict(
                uid=dict(type='str', required=True),
                display_name=dict(type='str', required=True),
                access_key=dict(type='str', no_log=False),
                secret_key=dict(type='str', no_log=True),
                buckets=dict(type='list', elements='dict', default=[], options=dict(
                    name=dict(type='str', required=True),
                    quota=dict(type='str', required=True),
                )),
            ), required_together=[('access_key', 'secret_key')]),
            cluster=dict(type='str', default='ceph'),
        ),
        supports_check_mode=True,
    )
    if not HAS_BOTO3:
        module.fail_json(msg=missing_required_lib('boto3'))
    wanted = {}
    for user in module.params['users']:
        for bucket in user['buckets']:
            try:
                wanted[bucket['name']] = (user['uid'], size_bytes(bucket['quota']))
            except ValueError:
                module.fail_json(msg='bucket %s: quota %r is not a size (bytes, or 100Ti, 500T)'
                                 % (bucket['name'], bucket['quota']))
    gw = Gateway(module)
    keys = {user['uid']: ensure_user(gw, user) for user in module.params['users']}
    _rc, out = gw.admin('bucket', 'stats')
    stats = {b['bucket']: b for b in json.loads(out or '[]')}
    for name, (owner, max_size) in sorted(wanted.items()):
        have = stats.get(name)
        if have is not None and have.get('owner') != owner:
            gw.fail('bucket %s belongs to %s, not %s' % (name, have.get('owner'), owner))
        if have is None:
            gw.actions.append('create bucket %s as %s' % (name, owner))
            if not module.check_mode:
                create_bucket(gw, name, keys[owner])
        quota = (have or {}).get('bucket_quota') or {}
        if quota.get('max_size') != max_size:
            gw.actions.append('set the quota of %s to %d bytes' % (name, max_size))
            gw.admin('quota', 'set', '--quota-scope=bucket', '--bucket', name, '--max-size', str(max_size), write=True)
        if not quota.get('enabled'):
            gw.actions.append('enable the quota of %s' % name)
            gw.admin('quota', 'enable', '--quota-scope=bucket', '--bucket', name, write=True)
    module.exit_json(changed=bool(gw.actions), actions=gw.actions, keys=keys)


if __name__ == '__main__':
    main()
