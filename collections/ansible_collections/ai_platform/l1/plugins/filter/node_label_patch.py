# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ai_platform.l1.node_label_patch: the merge patch that brings a Node to its labels.

Docs in node_label_patch.yml. Pure: everything up to the API call is decided here, so the
ownership rules are unit-tested without a cluster.
"""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

DEFAULT_ANNOTATION = 'ai-platform.io/managed-labels'

_NAME_RE = re.compile(r'^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$')
_VALUE_RE = re.compile(r'^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$')
_DNS_LABEL_RE = re.compile(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')


def _key_problem(key):
    """Why key is not a valid Kubernetes label key, or None."""
    if not isinstance(key, str) or not key:
        return 'empty or not a string'
    prefix, name = key.rpartition('/')[::2]
    if '/' in key and (not prefix or len(prefix) > 253
                       or not all(_DNS_LABEL_RE.match(p) for p in prefix.split('.'))):
        return 'prefix %r is not a DNS subdomain' % prefix
    if len(name) > 63 or not _NAME_RE.match(name):
        return 'name %r must be 1-63 characters [-_.A-Za-z0-9], alphanumeric at both ends' % name
    return None


def _owned(annotations, annotation):
    """Keys recorded in the ownership annotation (comma list; blanks ignored)."""
    raw = (annotations or {}).get(annotation) or ''
    return {k.strip() for k in str(raw).split(',') if k.strip()}


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
    problems = []
    for key, value in sorted(desired.items(), key=lambda kv: str(kv[0])):
        why = _key_problem(key)
        if why:
            problems.append('label key %r: %s' % (key, why))
        elif not isinstance(value, str) or len(value) > 63 or not _VALUE_RE.match(value):
            problems.append('label %s: value %r is not a valid label value' % (key, value))
    if _key_problem(annotation):
        problems.append('annotation key %r: %s' % (annotation, _key_problem(annotation)))
    if problems:
        raise AnsibleFilterError('node_label_patch: ' + '; '.join(problems))

    metadata = node['metadata']
    labels = metadata.get('labels') or {}
    annotations = metadata.get('annotations') or {}
    previously_owned = _owned(annotations, annotation)

    to_set = {k: v for k, v in desired.items() if labels.get(k) != v}
    # Only labels this role recorded as its own are removed; a label somebody else set
    # stays even when it has one of our keys, until this role has set it once.
    to_remove = sorted(k for k in previously_owned if k not in desired and k in labels)
    owned = sorted(desired)
    owned_value = ','.join(owned)
    annotation_now = annotations.get(annotation)

    patch_labels = dict(to_set)
    patch_labels.update({k: None for k in to_remove})
    patch_annotations = {}
    if owned_value and annotation_now != owned_value:
        patch_annotations[annotation] = owned_value
    elif not owned_value and annotation in annotations:
        patch_annotations[annotation] = None

    metadata_patch = {}
    if patch_labels:
        metadata_patch['labels'] = patch_labels
    if patch_annotations:
        metadata_patch['annotations'] = patch_annotations
    return {
        'set': to_set,
        'remove': to_remove,
        'owned': owned,
        'changed': bool(metadata_patch),
        'patch': {'metadata': metadata_patch} if metadata_patch else {},
    }


class FilterModule(object):
    def filters(self):
        return {'node_label_patch': node_label_patch}
