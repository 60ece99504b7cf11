# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ai_platform.l1.node_label_patch: the merge patch that brings a Node to its labels.

Docs in node_label_patch.yml. The rules live in module_utils/node_metadata.py (shared with the
module ai_platform.l1.node_metadata); this is their per-Node filter form.
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.ai_platform.l1.plugins.module_utils.node_metadata import (
    LABELS_ANNOTATION,
    label_key_problem,
    label_problems,
    plan_owned_labels,
)

DEFAULT_ANNOTATION = LABELS_ANNOTATION


def node_label_patch(node, desired, annotation=DEFAULT_ANNOTATION):
    """Compare a Node with the labels this role wants on it.

    node: the Node object (a kubernetes.core.k8s_info resource) or its metadata owner dict.
    desired: {key: value} the role owns now.
    Returns {'set', 'remove', 'owned', 'changed', 'patch'}; see node_label_patch.yml.
    """
    if not isinstance(node, dict) or not isinstance(node.get('metadata'), dict):
        raise AnsibleFilterError('node_label_patch expects a Node object with metadata, got %s'
                                 % type(node).__name__)
    if not isinstance(desired, dict):
        raise AnsibleFilterError('node_label_patch expects the desired labels as a dict, got %s'
                                 % type(desired).__name__)
    problems = label_problems(desired)
    if label_key_problem(annotation):
        problems.append('annotation key %r: %s' % (annotation, label_key_problem(annotation)))
    if problems:
        raise AnsibleFilterError('node_label_patch: ' + '; '.join(problems))

    metadata = node['metadata']
    plan = plan_owned_labels(metadata.get('labels'), metadata.get('annotations'), desired, annotation)
    metadata_patch = {}
    if plan['labels']:
        metadata_patch['labels'] = plan['labels']
    if plan['annotations']:
        metadata_patch['annotations'] = plan['annotations']
    return {
        'set': plan['set'],
        'remove': plan['remove'],
        'owned': plan['owned'],
        'changed': bool(metadata_patch),
        'patch': {'metadata': metadata_patch} if metadata_patch else {},
    }


class FilterModule(object):
    def filters(self):
        return {'node_label_patch': node_label_patch}
