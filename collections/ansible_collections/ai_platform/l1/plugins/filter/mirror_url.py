# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ai_platform.l1.mirror_url: a URL or image reference through the site's mirror.

Docs in mirror_url.yml. The rule is artifacts/README.md's, implemented once in
module_utils/mirror.py, which artifacts/artifacts.py uses as well.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.ai_platform.l1.plugins.module_utils.mirror import KINDS, MirrorError
from ansible_collections.ai_platform.l1.plugins.module_utils.mirror import mirror_url as _mirror_url


def mirror_url(value, mirror, kind='files', bases=None):
    """value through ``mirror`` (files: M/<URL without scheme>; images: the base becomes R)."""
    if kind not in KINDS:
        raise AnsibleFilterError('mirror_url: kind must be one of %s, got %r' % (', '.join(KINDS), kind))
    if isinstance(bases, str):
        bases = [bases]
    if bases is not None and not (isinstance(bases, (list, tuple)) and all(isinstance(b, str) for b in bases)):
        raise AnsibleFilterError('mirror_url: bases must be a list of strings, got %r' % (bases,))
    try:
        return _mirror_url(value, mirror, kind, bases)
    except MirrorError as exc:
        raise AnsibleFilterError('mirror_url: %s' % exc) from exc


class FilterModule(object):
    def filters(self):
        return {'mirror_url': mirror_url}
