# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ai_platform.l1.node_taint_plan: what brings a Node to the inventory's labels and taints.

Docs in node_taint_plan.yml. Pure, so the ownership rules are unit-tested without a cluster;
the role only sends what this returns (kubernetes.core.k8s_taint, kubernetes.core.k8s).
"""

from __future__ import annotations

import json

from ansible.errors import AnsibleFilterError

DEFAULT_ANNOTATION = 'ai-platform.io/inventory-taints'
EFFECTS = ('NoSchedule', 'PreferNoSchedule', 'NoExecute')


def _taint(item, where):
    if not isinstance(item, dict) or not isinstance(item.get('key'), str) or not item['key']:
        raise AnsibleFilterError('node_taint_plan: %s must be a mapping with a key, got %r' % (where, item))
    effect = item.get('effect')
    if effect not in EFFECTS:
        raise AnsibleFilterError('node_taint_plan: %s %s: effect must be one of %s, got %r'
                                 % (where, item['key'], ', '.join(EFFECTS), effect))
    value = item.get('value')
    out = {'key': item['key'], 'effect': effect}
    # The API omits an empty value; kubernetes.core.k8s_taint compares values as given,
    # so an empty one is left out to match what the Node returns.
    if value not in (None, ''):
        out['value'] = str(value)
    return out


def _ident(taint):
    return '%s:%s' % (taint['key'], taint['effect'])


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
    desired = [_taint(t, 'taints[%d]' % i) for i, t in enumerate(taints)]
    idents = [_ident(t) for t in desired]
    dupes = sorted({i for i in idents if idents.count(i) > 1})
    if dupes:
        raise AnsibleFilterError('node_taint_plan: taints listed twice (key:effect): %s' % ', '.join(dupes))

    metadata = node['metadata']
    node_labels = metadata.get('labels') or {}
    annotations = metadata.get('annotations') or {}
    existing = [_taint(t, 'the Node\'s taint') for t in ((node.get('spec') or {}).get('taints') or [])]
    try:
        previously = set(json.loads(annotations.get(annotation) or '[]'))
    except (TypeError, ValueError):
        previously = set()  # an annotation somebody broke: manage nothing we cannot prove is ours

    present = desired if any(t not in existing for t in desired) else []
    # Only a taint this role recorded as its own is removed; others' taints stay.
    absent = [t for t in existing if _ident(t) in previously and _ident(t) not in idents]

    managed = sorted(set(idents))
    meta = {}
    set_labels = {k: str(v) for k, v in labels.items() if node_labels.get(k) != str(v)}
    if set_labels:
        meta['labels'] = set_labels
    recorded = annotations.get(annotation)
    wanted = json.dumps(managed) if managed else None
    if recorded != wanted:
        meta['annotations'] = {annotation: wanted}
    return {
        'taints_present': present,
        'taints_absent': absent,
        'metadata': meta,
        'managed': managed,
        'changed': bool(present or absent or meta),
    }


class FilterModule(object):
    def filters(self):
        return {'node_taint_plan': node_taint_plan}
