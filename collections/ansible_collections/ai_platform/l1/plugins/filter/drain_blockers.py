# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ai_platform.l1.drain_blockers: the Pods that still keep a Node from being drained.

Docs in drain_blockers.yml. The rules are those of kubectl drain (and kubernetes.core.k8s_drain):
mirror (static) Pods and DaemonSet Pods stay, finished Pods do not count.
"""

from __future__ import annotations

from ansible_collections.ai_platform.l1.plugins.plugin_utils.pods import pod_list, pod_names

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
    return pod_names(p for p in pod_list(pods, 'drain_blockers') if _blocks(p))


class FilterModule(object):
    def filters(self):
        return {'drain_blockers': drain_blockers}
