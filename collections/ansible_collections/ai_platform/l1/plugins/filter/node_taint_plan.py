# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ai_platform.l1.node_taint_plan: what brings a Node to the inventory's labels and taints.

Docs in node_taint_plan.yml. The rules live in module_utils/node_metadata.py (shared with the
module ai_platform.l1.node_metadata); this is their per-Node filter form, for
kubernetes.core.k8s_taint and kubernetes.core.k8s.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.ai_platform.l1.plugins.module_utils.node_metadata import (
    TAINTS_ANNOTATION,
    NodeMetadataError,
    normalize_taints,
    plan_merged_labels,
    plan_taints,
)

DEFAULT_ANNOTATION = TAINTS_ANNOTATION


def node_taint_plan(node, labels, taints, annotation=DEFAULT_ANNOTATION):
    """Compare a Node with the inventory's labels and taints.

    Returns {'taints_present', 'taints_absent', 'metadata', 'managed', 'changed'}; see
    node_taint_plan.yml.
    """
    if not isinstance(node, dict) or not isinstance(node.get('metadata'), dict):
        raise AnsibleFilterError('node_taint_plan expects a Node object with metadata, got %s'
                                 % type(node).__name__)
    if not isinstance(labels, dict):
        raise AnsibleFilterError('node_taint_plan expects the labels as a dict, got %s' % type(labels).__name__)
    if not isinstance(taints, list):
        raise AnsibleFilterError('node_taint_plan expects the taints as a list, got %s' % type(taints).__name__)
    metadata = node['metadata']
    try:
        plan = plan_taints((node.get('spec') or {}).get('taints'), metadata.get('annotations'),
                           normalize_taints(taints), annotation)
    except NodeMetadataError as exc:
        raise AnsibleFilterError('node_taint_plan: %s' % exc) from exc

    meta = {}
    set_labels = plan_merged_labels(metadata.get('labels'), {k: str(v) for k, v in labels.items()})
    if set_labels:
        meta['labels'] = set_labels
    if plan['annotations']:
        meta['annotations'] = plan['annotations']
    return {
        'taints_present': plan['present'],
        'taints_absent': plan['absent'],
        'metadata': meta,
        'managed': plan['managed'],
        'changed': bool(plan['present'] or plan['absent'] or meta),
    }


class FilterModule(object):
    def filters(self):
        return {'node_taint_plan': node_taint_plan}
