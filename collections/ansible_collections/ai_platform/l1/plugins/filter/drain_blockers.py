# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ai_platform.l1.drain_blockers: the Pods that still keep a Node from being drained.

Docs in drain_blockers.yml. The rules are those of kubectl drain (and kubernetes.core.k8s_drain):
mirror (static) Pods and DaemonSet Pods stay, finished Pods do not count.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

MIRROR_ANNOTATION = 'kubernetes.io/config.mirror'


def _blocks(pod):
    meta = pod.get('metadata') or {}
    if MIRROR_ANNOTATION in (meta.get('annotations') or {}):
        return False
    if (pod.get('status') or {}).get('phase') in ('Succeeded', 'Failed'):
        return False
    return not any(ref.get('kind') == 'DaemonSet' for ref in meta.get('ownerReferences') or [])


def drain_blockers(pods):
    """pods: a list of Pod objects (k8s_info resources) or a registered k8s_info result."""
    if isinstance(pods, dict) and 'resources' in pods:
        pods = pods['resources']
    if not isinstance(pods, list):
        raise AnsibleFilterError('drain_blockers expects a list of Pods, got %s' % type(pods).__name__)
    names = []
    for pod in pods:
        if not isinstance(pod, dict):
            raise AnsibleFilterError('drain_blockers: a Pod must be a dict, got %s' % type(pod).__name__)
        if _blocks(pod):
            meta = pod.get('metadata') or {}
            names.append('%s/%s' % (meta.get('namespace', ''), meta.get('name', '')))
    return sorted(names)


class FilterModule(object):
    def filters(self):
        return {'drain_blockers': drain_blockers}
