# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ai_platform L1 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ai_platform.l1.release_manifest: an upstream release manifest with the site's images.

Docs in release_manifest.yml; the shared code in module_utils/release_manifest.py.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible_collections.ai_platform.l1.plugins.module_utils.release_manifest import (
    ReleaseManifestError,
    plain,
    set_images,
)


def release_manifest(documents, images):
    """The documents (plain copies) with every container image replaced by images[repository]."""
    if not isinstance(images, Mapping) or not images:
        raise AnsibleFilterError('release_manifest: images must map repositories to image references')
    try:
        return set_images(plain(documents), dict(images))
    except ReleaseManifestError as exc:
        raise AnsibleFilterError('release_manifest: %s' % exc) from exc


class FilterModule(object):
    def filters(self):
        return {'release_manifest': release_manifest}
