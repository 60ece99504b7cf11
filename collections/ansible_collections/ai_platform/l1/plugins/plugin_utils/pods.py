# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side (filters only): the Pod list the Pod filters (drain_blockers,
accelerator_pods) take, checked one way."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError


def pod_list(pods, filter_name):
    """pods: a list of Pod objects or a registered k8s_info result; AnsibleFilterError naming the filter otherwise."""
    if isinstance(pods, dict) and 'resources' in pods:
        pods = pods['resources']
    if not isinstance(pods, list):
        raise AnsibleFilterError('%s expects a list of Pods, got %s' % (filter_name, type(pods).__name__))
    for pod in pods:
        if not isinstance(pod, dict):
            raise AnsibleFilterError('%s: a Pod must be a dict, got %s' % (filter_name, type(pod).__name__))
    return pods


def pod_names(pods):
    """namespace/name of each Pod, sorted."""
    return sorted('%s/%s' % ((p.get('metadata') or {}).get('namespace', ''), (p.get('metadata') or {}).get('name', ''))
                  for p in pods)
