# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What brings a Kubernetes Node to the labels and taints a role wants: the one implementation
behind the filters ai_platform.l1.node_label_patch and node_taint_plan and the module
ai_platform.l1.node_metadata.

Pure and standard library only: it takes a Node as the API returns it (a dict) and what is
wanted, and says what to send. Two ownership rules, each recorded in a Node annotation:

  owned labels   (node_labels role) the annotation lists the label keys the role set, comma-
                 separated; a listed label the role no longer wants is removed. Labels set by
                 anybody else are never removed.
  merged labels  (k8s_worker role) labels are added or corrected, never removed.
  taints         (k8s_worker role) the wanted taints are added or corrected; the annotation (a
                 JSON list of key:effect) records them, and a recorded taint no longer wanted
                 is removed. Others' taints (fault isolation, the node lifecycle controller)
                 are never touched.
"""

from __future__ import annotations

import copy
import json
import re

LABELS_ANNOTATION = 'ai-platform.io/managed-labels'
TAINTS_ANNOTATION = 'ai-platform.io/inventory-taints'
EFFECTS = ('NoSchedule', 'PreferNoSchedule', 'NoExecute')

_NAME_RE = re.compile(r'^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$')
_VALUE_RE = re.compile(r'^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$')
_DNS_LABEL_RE = re.compile(r'^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')


class NodeMetadataError(ValueError):
    """Input that cannot be turned into a valid Node patch."""


def label_key_problem(key):
    """Why key is not a valid Kubernetes label (or annotation) key, or None."""
    if not isinstance(key, str) or not key:
        return 'empty or not a string'
    prefix, name = key.rpartition('/')[::2]
    if '/' in key and (not prefix or len(prefix) > 253
                       or not all(_DNS_LABEL_RE.match(p) for p in prefix.split('.'))):
        return 'prefix %r is not a DNS subdomain' % prefix
    if len(name) > 63 or not _NAME_RE.match(name):
        return 'name %r must be 1-63 characters [-_.A-Za-z0-9], alphanumeric at both ends' % name
    return None


def is_label_value(value):
    return isinstance(value, str) and len(value) <= 63 and bool(_VALUE_RE.match(value))


def label_problems(labels):
    """Every invalid key or value of labels, sorted by key (an empty list when all are valid)."""
    problems = []
    for key, value in sorted(labels.items(), key=lambda kv: str(kv[0])):
        why = label_key_problem(key)
        if why:
            problems.append('label key %r: %s' % (key, why))
        elif not is_label_value(value):
            problems.append('label %s: value %r is not a valid label value' % (key, value))
    return problems


def normalize_taint(item, where):
    """{key, value, effect} as the API returns it: an empty value left out, timeAdded dropped."""
    if not isinstance(item, dict) or not isinstance(item.get('key'), str) or not item['key']:
        raise NodeMetadataError('%s must be a mapping with a key, got %r' % (where, item))
    effect = item.get('effect')
    if effect not in EFFECTS:
        raise NodeMetadataError('%s %s: effect must be one of %s, got %r'
                                % (where, item['key'], ', '.join(EFFECTS), effect))
    value = item.get('value')
    out = {'key': item['key'], 'effect': effect}
    # The API omits an empty value; keeping "" would read as a difference on every run.
    if value not in (None, ''):
        out['value'] = str(value)
    return out


def taint_ident(taint):
    return '%s:%s' % (taint['key'], taint['effect'])


def normalize_taints(taints):
    """The wanted taints, normalized; refuses one listed twice (key:effect identifies a taint)."""
    desired = [normalize_taint(t, 'taints[%d]' % i) for i, t in enumerate(taints)]
    idents = [taint_ident(t) for t in desired]
    dupes = sorted({i for i in idents if idents.count(i) > 1})
    if dupes:
        raise NodeMetadataError('taints listed twice (key:effect): %s' % ', '.join(dupes))
    return desired


def owned_labels(annotations, annotation):
    """Keys recorded in the labels ownership annotation (comma list; blanks ignored)."""
    raw = (annotations or {}).get(annotation) or ''
    return {k.strip() for k in str(raw).split(',') if k.strip()}


def recorded_taints(annotations, annotation):
    """key:effect recorded in the taints ownership annotation (a JSON list)."""
    try:
        return set(json.loads((annotations or {}).get(annotation) or '[]'))
    except (TypeError, ValueError):
        return set()  # an annotation somebody broke: manage nothing we cannot prove is ours


def plan_owned_labels(labels, annotations, desired, annotation):
    """Owned labels: set what differs, remove own labels no longer wanted, record the owned keys.

    Returns {'set', 'remove', 'owned', 'labels', 'annotations'}: the last two are the merge
    patch of metadata.labels and metadata.annotations (None removes), empty when nothing changes.
    """
    labels = labels or {}
    annotations = annotations or {}
    to_set = {k: v for k, v in desired.items() if labels.get(k) != v}
    # Only labels this role recorded as its own are removed; a label somebody else set
    # stays even when it has one of our keys, until this role has set it once.
    to_remove = sorted(k for k in owned_labels(annotations, annotation) if k not in desired and k in labels)
    owned = sorted(desired)
    owned_value = ','.join(owned)
    patch_labels = dict(to_set)
    patch_labels.update({k: None for k in to_remove})
    patch_annotations = {}
    if owned_value and annotations.get(annotation) != owned_value:
        patch_annotations[annotation] = owned_value
    elif not owned_value and annotation in annotations:
        patch_annotations[annotation] = None
    return {'set': to_set, 'remove': to_remove, 'owned': owned,
            'labels': patch_labels, 'annotations': patch_annotations}


def plan_merged_labels(labels, desired):
    """Merged labels: the ones to add or correct ({key: value}); nothing is ever removed."""
    labels = labels or {}
    return {k: v for k, v in desired.items() if labels.get(k) != v}


def plan_taints(current, annotations, desired, annotation):
    """Taints: the wanted ones added or corrected, recorded ones no longer wanted removed.

    current: spec.taints as the Node has it (timeAdded and all); desired: normalize_taints().
    Returns {'present', 'absent', 'managed', 'added', 'changed', 'removed', 'annotations', 'taints'}:
    present is all of desired when any differs (the node_taint_plan contract), absent the
    recorded taints to remove; added/changed/removed say what happens per taint; annotations
    is the metadata.annotations merge patch; taints the complete new spec.taints, or None
    when the taints stay as they are (taints nobody asked about keep their place and fields).
    """
    annotations = annotations or {}
    read = [(raw, normalize_taint(raw, "the Node's taint")) for raw in current or []]
    existing = [norm for _raw, norm in read]
    previously = recorded_taints(annotations, annotation)
    wanted = {taint_ident(t): t for t in desired}
    have = {taint_ident(t): t for t in existing}

    present = desired if any(t not in existing for t in desired) else []
    absent = [t for t in existing if taint_ident(t) in previously and taint_ident(t) not in wanted]
    added = [t for t in desired if taint_ident(t) not in have]
    changed = [t for t in desired if taint_ident(t) in have and have[taint_ident(t)] != t]

    new = None
    if added or changed or absent:
        gone = {taint_ident(t) for t in absent}
        new = []
        for raw, norm in read:
            ident = taint_ident(norm)
            if ident in gone:
                continue
            # A corrected taint takes the place of the old one; an equal one is kept as read.
            new.append(dict(wanted[ident]) if ident in wanted and norm != wanted[ident] else raw)
        new.extend(dict(t) for t in added)

    managed = sorted(wanted)
    recorded = json.dumps(managed) if managed else None
    return {
        'present': present,
        'absent': absent,
        'managed': managed,
        'added': added,
        'changed': changed,
        'removed': absent,
        'annotations': {annotation: recorded} if annotations.get(annotation) != recorded else {},
        'taints': new,
    }


def merge_patch(target, patch):
    """RFC 7396 merge patch, as the API server applies it to labels, annotations and taints."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def node_view(node, annotation_keys, with_taints):
    """The part of a Node this code manages, for a diff: labels, the ownership annotations, taints."""
    metadata = node.get('metadata') or {}
    annotations = metadata.get('annotations') or {}
    view = {'labels': dict(metadata.get('labels') or {}),
            'annotations': {k: annotations[k] for k in annotation_keys if k in annotations}}
    if with_taints:
        view['taints'] = [normalize_taint(t, "the Node's taint") for t in (node.get('spec') or {}).get('taints') or []]
    return view


def plan_node(node, labels, taints=None, labels_annotation=None, taints_annotation=TAINTS_ANNOTATION):
    """Everything one Node needs, as one patch.

    node: the Node as the API returns it. labels: {key: str value} wanted (validated).
    taints: normalize_taints() output, or None when the taints are not managed.
    labels_annotation: the owned-labels annotation, or None for merged labels.
    Returns {'changed', 'patch', 'read_dependent', 'labels_added', 'labels_changed',
    'labels_removed', 'taints_added', 'taints_changed', 'taints_removed'}. read_dependent says
    the patch was computed from what the Node had (label removals, a new taint list), so it must
    only apply to that version of the Node (resourceVersion); a patch that only sets values is
    right whatever the Node has meanwhile.
    """
    metadata = node.get('metadata') or {}
    current = metadata.get('labels') or {}
    annotations = metadata.get('annotations') or {}
    patch_labels, patch_annotations = {}, {}
    removed = []
    if labels_annotation:
        owned = plan_owned_labels(current, annotations, labels, labels_annotation)
        patch_labels, patch_annotations = owned['labels'], dict(owned['annotations'])
        removed = owned['remove']
    else:
        patch_labels = plan_merged_labels(current, labels)
    patch = {}
    taint_plan = None
    if taints is not None:
        taint_plan = plan_taints((node.get('spec') or {}).get('taints'), annotations, taints, taints_annotation)
        patch_annotations.update(taint_plan['annotations'])
        if taint_plan['taints'] is not None:
            patch['spec'] = {'taints': taint_plan['taints']}
    meta = {}
    if patch_labels:
        meta['labels'] = patch_labels
    if patch_annotations:
        meta['annotations'] = patch_annotations
    if meta:
        patch['metadata'] = meta
    return {
        'changed': bool(patch),
        'patch': patch,
        'read_dependent': bool(removed) or 'spec' in patch,
        'labels_added': {k: v for k, v in patch_labels.items() if v is not None and k not in current},
        'labels_changed': {k: v for k, v in patch_labels.items() if v is not None and k in current},
        'labels_removed': removed,
        'taints_added': taint_plan['added'] if taint_plan else [],
        'taints_changed': taint_plan['changed'] if taint_plan else [],
        'taints_removed': taint_plan['removed'] if taint_plan else [],
    }


def _normalize_entry(name, spec, problems):
    """One entry of the module's nodes option, its problems appended to problems."""
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        problems.append('%s: expected {labels, taints}, got %s' % (name, type(spec).__name__))
        return None
    unknown = sorted(set(spec) - {'labels', 'taints'}, key=str)
    if unknown:
        problems.append('%s: unknown keys %s (allowed: labels, taints)' % (name, ', '.join(map(str, unknown))))
    labels = spec.get('labels') or {}
    if not isinstance(labels, dict):
        problems.append('%s: labels must be a dict, got %s' % (name, type(labels).__name__))
        labels = {}
    labels = {k: str(v) if isinstance(v, (str, int, float)) else v for k, v in labels.items()}
    problems.extend('%s: %s' % (name, p) for p in label_problems(labels))
    taints = spec.get('taints')
    if taints is not None:
        try:
            if not isinstance(taints, list):
                raise NodeMetadataError('taints must be a list, got %s' % type(taints).__name__)
            taints = normalize_taints(taints)
        except NodeMetadataError as exc:
            problems.append('%s: %s' % (name, exc))
    return {'labels': labels, 'taints': taints}


def normalize_nodes(nodes, labels_annotation=None, taints_annotation=TAINTS_ANNOTATION):
    """The module's nodes option checked and normalized: {name: {'labels', 'taints'}}.

    Each entry is {labels: {key: value}, taints: [{key, value, effect}]}; a missing or null
    taints means the taints are not managed. Scalar label values become strings (an inventory's
    rack: 12). Every problem of every entry is collected, so one run names them all.
    """
    if not isinstance(nodes, dict):
        raise NodeMetadataError('nodes must be a dict of Node name to {labels, taints}, got %s'
                                % type(nodes).__name__)
    problems = []
    for option, annotation in (('labels_annotation', labels_annotation), ('taints_annotation', taints_annotation)):
        if annotation is not None and label_key_problem(annotation):
            problems.append('%s %r: %s' % (option, annotation, label_key_problem(annotation)))
    if labels_annotation and labels_annotation == taints_annotation:
        problems.append('labels_annotation and taints_annotation must differ (%s)' % labels_annotation)
    out = {}
    for name in sorted(nodes, key=str):
        if not isinstance(name, str) or not name:
            problems.append('Node name %r is not a non-empty string' % (name,))
            continue
        out[name] = _normalize_entry(name, nodes[name], problems)
    if problems:
        raise NodeMetadataError('; '.join(problems))
    return out
