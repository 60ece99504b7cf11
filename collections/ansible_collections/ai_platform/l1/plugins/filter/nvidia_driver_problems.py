# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ai_platform.l1.nvidia_driver_problems: why a driver version cannot go on these GPUs.

Docs in nvidia_driver_problems.yml. Pure: the version format, branch and GPU-generation table
are unit-tested without a node.
"""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

# compute capability major.minor -> (architecture, first branch that supports it, last branch or None).
# Sources: NVIDIA driver release notes (first branch listing the GPU; Kepler's last branch is R470,
# Maxwell/Pascal/Volta leave after R580).
ARCHITECTURES = {
    (3, 0): ('Kepler', 0, 470), (3, 5): ('Kepler', 0, 470), (3, 7): ('Kepler', 0, 470),
    (5, 0): ('Maxwell', 0, 580), (5, 2): ('Maxwell', 0, 580),
    (6, 0): ('Pascal', 375, 580), (6, 1): ('Pascal', 375, 580),
    (7, 0): ('Volta', 384, 580),
    (7, 5): ('Turing', 410, None),
    (8, 0): ('Ampere', 450, None), (8, 6): ('Ampere', 455, None),
    (8, 9): ('Ada Lovelace', 525, None),
    (9, 0): ('Hopper', 525, None),
    (10, 0): ('Blackwell', 570, None), (12, 0): ('Blackwell', 570, None),
}

_VERSION_RE = re.compile(r'^(\d{3})\.\d{2,3}(\.\d{2})?$')


def _capability(value):
    m = re.match(r'^\s*(\d+)\.(\d+)\s*$', str(value or ''))
    return (int(m.group(1)), int(m.group(2))) if m else None


def nvidia_driver_problems(gpus, version, branch=None):
    """Problems (sorted, one per GPU model) that stop `version` going on a node with `gpus`."""
    if not isinstance(gpus, list):
        raise AnsibleFilterError('nvidia_driver_problems: the input must be a list of GPUs (gpu_info.gpus)')
    version = str(version)
    m = _VERSION_RE.match(version)
    if not m:
        return ['driver version %r is not an NVIDIA driver version (BRANCH.MINOR[.PATCH], e.g. 550.54.15)'
                % version]
    have = int(m.group(1))
    problems = []
    if branch not in (None, '') and str(branch) != m.group(1):
        problems.append('driver version %s is not in branch %s (it is branch %s)' % (version, branch, have))
    seen = set()
    for entry in gpus:
        gpu = entry or {}
        name = gpu.get('name') or 'GPU %s' % gpu.get('index', '?')
        cap = _capability(gpu.get('compute_capability'))
        if cap is None or (name, cap) in seen:
            continue
        seen.add((name, cap))
        cc = '%d.%d' % cap
        known = ARCHITECTURES.get(cap)
        if known is None:
            problems.append('%s has compute capability %s, which the driver compatibility table does not know: '
                            'check NVIDIA\'s release notes and add it to ai_platform.l1.nvidia_driver_problems'
                            % (name, cc))
            continue
        arch, first, last = known
        if have < first:
            problems.append('%s (%s, compute capability %s) needs driver branch >= %d; %s is branch %d'
                            % (name, arch, cc, first, version, have))
        elif last is not None and have > last:
            problems.append('%s (%s, compute capability %s) is not supported after driver branch %d; '
                            '%s is branch %d' % (name, arch, cc, last, version, have))
    return sorted(problems)


class FilterModule(object):
    def filters(self):
        return {'nvidia_driver_problems': nvidia_driver_problems}
