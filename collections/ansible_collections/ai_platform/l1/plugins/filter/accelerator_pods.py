# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ai_platform.l1.accelerator_pods: the Pods that hold accelerators (GPUs, NPUs) on a Node.

Docs in accelerator_pods.yml. A Pod counts while it has not finished and one of its containers
(init containers included) requests or limits a resource whose name starts with a given prefix.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.ai_platform.l1.plugins.plugin_utils.pods import pod_list, pod_names

DEFAULT_PREFIXES = ('nvidia.com/',)


def _containers(spec):
    return list(spec.get('initContainers') or []) + list(spec.get('containers') or [])


def _holds(pod, prefixes):
    if (pod.get('status') or {}).get('phase') in ('Succeeded', 'Failed'):
        return False
    for container in _containers(pod.get('spec') or {}):
        resources = container.get('resources') or {}
        for kind in ('limits', 'requests'):
            if any(str(name).startswith(prefixes) for name in resources.get(kind) or {}):
                return True
    return False


def accelerator_pods(pods, prefixes=DEFAULT_PREFIXES):
    """pods: a list of Pod objects or a registered k8s_info result; prefixes: resource name prefixes."""
    pods = pod_list(pods, 'accelerator_pods')
    if isinstance(prefixes, str):
        prefixes = [prefixes]
    if not prefixes or not all(isinstance(p, str) and p for p in prefixes):
        raise AnsibleFilterError('accelerator_pods: prefixes must be non-empty strings, got %r' % (prefixes,))
    prefixes = tuple(prefixes)
    return pod_names(p for p in pods if _holds(p, prefixes))


class FilterModule(object):
    def filters(self):
        return {'accelerator_pods': accelerator_pods}
