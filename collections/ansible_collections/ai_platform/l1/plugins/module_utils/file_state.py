# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a file on the host is now: its bytes, its owner, group and mode (the modules that write files
compare these with what they want and show them in diffs), and the one way they replace a file."""

from __future__ import annotations

import grp
import os
import pwd
import stat
import tempfile

from ansible.module_utils.common.text.converters import to_native


def read(path):
    """The file's bytes, or None when it does not exist."""
    try:
        with open(path, 'rb') as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def describe(path):
    """`owner:group mode` (names where the host knows them, else ids), or `absent`."""
    try:
        st = os.stat(path)
    except OSError:
        return 'absent'
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = str(st.st_uid)
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = str(st.st_gid)
    return '%s:%s %04o' % (owner, group, stat.S_IMODE(st.st_mode))


def replace(module, path, data, mode=None):
    """Atomic replace of path with `data` (bytes): a reader never sees half a file. `mode` is set on
    the new file before it takes the path's place; a failure leaves the old file and no temporary."""
    fd, tmp = tempfile.mkstemp(prefix='.%s.' % os.path.basename(path), dir=os.path.dirname(path) or '.')
    try:
        with os.fdopen(fd, 'wb') as handle:
            handle.write(data)
        if mode is not None:
            os.chmod(tmp, mode)
        module.atomic_move(tmp, path, unsafe_writes=False)
        if mode is not None:
            # atomic_move gives a file that did not exist 0666 minus the umask: on a host with
            # umask 027 a new file came out 0640 and the next run "changed" it to `mode`.
            os.chmod(path, mode)
    except Exception as exc:  # pylint: disable=broad-except
        if os.path.exists(tmp):
            os.unlink(tmp)
        module.fail_json(msg='cannot write %s: %s' % (path, to_native(exc)))
