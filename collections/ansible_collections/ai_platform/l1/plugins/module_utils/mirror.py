# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The artifact mirror rule of artifacts/README.md, in one place.

files mirror M
    a URL B (a files base, or any upstream URL a role downloads) becomes ``M/<B without its
    scheme>``: the ``<upstream host>/<upstream path>`` layout of the offline bundle (Kubespray's
    ``files_repo`` convention), so one web root serves every upstream. The rest of the URL (port,
    path, a trailing slash, a query) is kept as written.
images mirror R
    the images base an image reference starts with becomes ``R``; the repository path and tag
    after the base are kept (``registry.k8s.io/pause:3.10`` -> ``R/pause:3.10``).

No mirror (empty or None) leaves every value as it is. A value the mirror cannot redirect is
refused (MirrorError), never passed through: on an air-gapped site it would be fetched from
upstream and time out on the node instead of failing here with its name. That is a value under
none of the bases it was given, or, for the files mirror, one without ``scheme://host`` (its
layout is by upstream host).

Standard library only, no Ansible: the filter ai_platform.l1.mirror_url and the controller tool
artifacts/artifacts.py (which loads this file by its path) share it.
"""

from __future__ import annotations

import re

# The scheme of an absolute URL (RFC 3986: a letter, then letters, digits, + . -), with its //.
SCHEME_RE = re.compile(r'^[A-Za-z][A-Za-z0-9+.-]*://')
KINDS = ('files', 'images')


class MirrorError(ValueError):
    """A value the mirror cannot redirect; the message names it."""


def _is_under(value, base):
    """value is base itself or below it: the next character is a '/' (dl.k8s.io.example.com is not)."""
    return value == base or value.startswith(base + '/')


def base_of(value, bases, kind='files'):
    """The longest of ``bases`` that ``value`` is under (trailing slashes of a base ignored)."""
    trimmed = [str(base).rstrip('/') for base in bases]
    under = [base for base in trimmed if base and _is_under(value, base)]
    if not under:
        raise MirrorError('%r is under none of the %s bases (%s): the mirror cannot redirect it'
                          % (value, kind, ', '.join(trimmed) or 'none given'))
    return max(under, key=len)


def files_url(url, mirror, bases=None):
    """``mirror/<url without its scheme>``; ``url`` unchanged without a mirror.

    ``bases``: when given, the URL must be under one of them (a files base is a URL prefix).
    """
    if not mirror:
        return url
    if not isinstance(url, str):
        raise MirrorError('a files URL must be a string, got %s' % type(url).__name__)
    if bases is not None:
        base_of(url, bases, 'files')
    rest = SCHEME_RE.sub('', url, count=1)
    if rest == url or not rest or rest.startswith('/'):
        raise MirrorError('%r is not an absolute URL with a host (scheme://host/path): '
                          'the files mirror lays files out by upstream host' % url)
    return str(mirror).rstrip('/') + '/' + rest


def image_ref(ref, mirror, bases):
    """The images base ``ref`` starts with (the longest of ``bases``) replaced by ``mirror``."""
    if not mirror:
        return ref
    if not isinstance(ref, str):
        raise MirrorError('an image reference must be a string, got %s' % type(ref).__name__)
    if not bases:
        raise MirrorError('%r: an images mirror replaces an images base, and no bases were given' % ref)
    base = base_of(ref, bases, 'images')
    return str(mirror).rstrip('/') + ref[len(base):]


def mirror_url(value, mirror, kind='files', bases=None):
    """files_url or image_ref by ``kind`` ('files' or 'images')."""
    if kind == 'files':
        return files_url(value, mirror, bases)
    if kind == 'images':
        return image_ref(value, mirror, bases)
    raise MirrorError('kind must be one of %s, got %r' % (', '.join(KINDS), kind))
