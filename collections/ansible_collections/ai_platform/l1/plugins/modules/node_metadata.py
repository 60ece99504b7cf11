#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: node_metadata
short_description: Reconcile the labels and taints of many Kubernetes Nodes in one task
version_added: "0.1.0"
description:
  - Brings every Node named in O(nodes) to its labels and taints with one list call for all
    Nodes and one PATCH for each Node that differs; a converged Node gets no write. Meant to
    run once (C(run_once), delegated to a control plane) for all hosts of a play, instead of
    reading and patching each Node from a task per host.
  - Labels are added or corrected. With O(labels_annotation) the keys of the labels are also
    recorded in that Node annotation (comma-separated, sorted), and a label recorded there that
    is no longer wanted is removed; labels set by anybody else are never removed. Without it
    labels are never removed.
  - Taints are managed for a Node whose entry has C(taints) (an empty list included). Its taints
    are added or corrected, their C(key:effect) recorded in O(taints_annotation) (a JSON list), and
    a recorded taint the entry no longer has is removed. Taints set by anybody else (fault isolation,
    the node lifecycle controller) are never touched. The new C(spec.taints) is the Node's list with
    those changes; it is sent with the C(resourceVersion) read, so a Node changed meanwhile is read
    again and its patch recomputed (409 Conflict, up to 5 attempts). A patch that removes labels is
    sent the same way; one that only sets values is right whatever the Node has, and goes without.
  - The rules are those of the filters C(ai_platform.l1.node_label_patch) (owned labels) and
    C(ai_platform.l1.node_taint_plan) (merged labels, taints); the same code computes them.
  - All input is checked before the API is called. A Node whose patch fails is reported in
    RV(nodes) with the API's message; the other Nodes are still patched, and the task fails at
    the end naming every failed Node.
options:
  kubeconfig:
    description:
      - Kubeconfig allowed to list and patch Nodes (on a kubeadm control plane
        C(/etc/kubernetes/admin.conf)).
      - When not set, the client's default (C(KUBECONFIG), else C(~/.kube/config)).
    type: path
  nodes:
    description:
      - Node name to what it should have, C({labels, taints}).
      - C(labels) (dict) are label key to value; values are converted to strings and must be valid
        label values.
      - C(taints) (list) are C({key, value, effect}) (C(value) optional, C(effect) one of
        C(NoSchedule), C(PreferNoSchedule), C(NoExecute)). Leave it out (or null) to leave the
        Node's taints and O(taints_annotation) alone.
      - A Node that differs from its entry is patched; Nodes not named here are not touched.
    type: dict
    required: true
  labels_annotation:
    description:
      - Node annotation that records the label keys set from O(nodes) (the node_labels role uses
        C(ai-platform.io/managed-labels)). Labels it records and the entry no longer has are removed.
      - When not set, labels are added or corrected, never removed.
    type: str
  taints_annotation:
    description: Node annotation that records the taints set from O(nodes), for Nodes whose entry has C(taints).
    type: str
    default: ai-platform.io/inventory-taints
  missing:
    description:
      - What a name in O(nodes) without a Node (not registered) does.
      - C(fail) fails the task naming every missing Node, after the others are reconciled.
      - C(skip) lists it in RV(missing) and goes on.
    type: str
    choices: [fail, skip]
    default: fail
  wait_timeout:
    description:
      - Seconds to wait for Nodes that are not registered yet (a kubelet that has just joined
        registers its Node within seconds). Each missing Node is read again every 2 seconds.
      - C(0) does not wait.
    type: int
    default: 0
  parallel:
    description:
      - How many PATCH requests are in flight at once (1 to 16). Each Node's reads and patches stay
        in order; different Nodes are independent.
    type: int
    default: 4
  timeout:
    description: Seconds one API request (the list of all Nodes included) may take.
    type: int
    default: 60
attributes:
  check_mode:
    support: full
    description: Lists the Nodes and reports what it would change; sends no patch.
  diff_mode:
    support: full
    description: Labels, the ownership annotations and (when managed) taints of each Node it changes, before and after.
requirements:
  - kubernetes (the Python client) on the host that runs the module.
notes:
  - Patches are strategic merge patches (the client's default for a dict), which for labels,
    annotations and C(spec.taints) act as JSON merge patches (C(spec.taints) is replaced whole).
author:
  - ai_platform L1 contributors (@ai-platform-l1)
'''

EXAMPLES = r'''
- name: Accelerator labels of every host of the play, owned by the role (one task for all Nodes)
  ai_platform.l1.node_metadata:
    kubeconfig: /etc/kubernetes/admin.conf
    labels_annotation: ai-platform.io/managed-labels
    nodes:
      gpu001: {labels: {accelerator: nvidia, accelerator-count: "8"}}
      gpu002: {labels: {accelerator: nvidia, accelerator-count: "8"}}
  run_once: true
  delegate_to: "{{ groups['k8s_control_plane'] | first }}"

- name: Inventory labels (never removed) and taints (own ones removed), waiting for new Nodes
  ai_platform.l1.node_metadata:
    kubeconfig: /etc/kubernetes/admin.conf
    nodes:
      gpu001:
        labels: {pool: training}
        taints:
          - {key: dedicated, value: training, effect: NoSchedule}
    wait_timeout: 30
  run_once: true
  delegate_to: "{{ groups['k8s_control_plane'] | first }}"
'''

RETURN = r'''
nodes:
  description: One entry per name of O(nodes) that is not in RV(missing), by name.
  returned: always
  type: dict
  contains:
    changed:
      description: Whether the Node was (in check mode, would be) patched.
      type: bool
    error:
      description: Why the Node could not be read or patched (the API's status and message); null when reconciled.
      type: str
    labels_added:
      description: Labels the Node did not have, key to value.
      type: dict
    labels_changed:
      description: Labels the Node had with another value, key to the new value.
      type: dict
    labels_removed:
      description: Keys of labels removed (recorded in O(labels_annotation) and no longer wanted).
      type: list
      elements: str
    taints_added:
      description: Taints the Node did not have (no taint with their C(key:effect)).
      type: list
      elements: dict
    taints_changed:
      description: Taints the Node had with another value, as they are now.
      type: list
      elements: dict
    taints_removed:
      description: Taints removed (recorded in O(taints_annotation) and no longer wanted).
      type: list
      elements: dict
  sample:
    gpu001:
      changed: true
      error: null
      labels_added: {accelerator: nvidia}
      labels_changed: {}
      labels_removed: []
      taints_added: [{key: dedicated, value: training, effect: NoSchedule}]
      taints_changed: []
      taints_removed: []
missing:
  description: Names in O(nodes) without a Node, sorted.
  returned: always
  type: list
  elements: str
  sample: [gpu007]
failed_nodes:
  description: Names of the Nodes whose read or patch failed (their C(error) in RV(nodes) says why), sorted.
  returned: always
  type: list
  elements: str
  sample: []
'''

import copy
import json
import time
import traceback
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.ai_platform.l1.plugins.module_utils import node_metadata as nm

try:
    from kubernetes import client as k8s_client
    from kubernetes import config as k8s_config
    HAS_KUBERNETES = True
    KUBERNETES_ERR = None
except ImportError:
    HAS_KUBERNETES = False
    KUBERNETES_ERR = traceback.format_exc()

CONFLICT_ATTEMPTS = 5
POLL_INTERVAL = 2.0
MAX_PARALLEL = 16


class ApiCallFailed(Exception):
    """A call every Node depends on (the list) failed."""


class NodeFailed(Exception):
    """One Node could not be reconciled; the message says why."""


def _body(resp):
    """The JSON of a response read with _preload_content=False (a dict from a fake is taken as is).

    Parsing the raw JSON is much faster than the client's model objects for 1,000 Nodes, and
    gives the API's field names (timeAdded), which taints are sent back with.
    """
    data = getattr(resp, 'data', resp)
    if isinstance(data, (bytes, bytearray)):
        data = data.decode('utf-8')
    if isinstance(data, str):
        return json.loads(data)
    return data


def api_error(exc):
    """An ApiException as "<status> <reason>: <the API's message>"; anything else by type and text."""
    status = getattr(exc, 'status', None)
    if status is None:
        text = (str(exc).strip().splitlines() or [''])[0]
        return '%s: %s' % (type(exc).__name__, text)
    body = getattr(exc, 'body', None)
    message = None
    try:
        message = json.loads(body).get('message')
    except (TypeError, ValueError, AttributeError):
        pass
    return '%s %s: %s' % (status, getattr(exc, 'reason', '') or '', message or body or '')


def _entry():
    return dict(changed=False, error=None, labels_added={}, labels_changed={}, labels_removed=[],
                taints_added=[], taints_changed=[], taints_removed=[])


def _reconcile_one(api, name, node, spec, opts):
    """One Node: plan, patch if needed, on 409 read it again and replan. Returns (entry, before, after)."""
    entry = _entry()
    before = after = node
    try:
        for attempt in range(1, CONFLICT_ATTEMPTS + 1):
            plan = nm.plan_node(node, spec['labels'], spec['taints'], opts['labels_annotation'],
                                opts['taints_annotation'])
            before, after = node, nm.merge_patch(node, plan['patch'])
            entry.update({k: plan[k] for k in entry if k in plan})
            if not plan['changed'] or opts['check_mode']:
                break
            body = copy.deepcopy(plan['patch'])
            version = (node.get('metadata') or {}).get('resourceVersion')
            if plan['read_dependent'] and version:
                # Computed from this version of the Node: the API refuses it (409) if the Node changed.
                body.setdefault('metadata', {})['resourceVersion'] = version
            try:
                # Read to the end, also so the connection goes back to the pool for the next Node.
                returned = _body(api.patch_node(name, body, _preload_content=False, _request_timeout=opts['timeout']))
                if isinstance(returned, dict) and 'metadata' in returned:
                    after = returned
                break
            except Exception as exc:  # pylint: disable=broad-except
                if getattr(exc, 'status', None) != 409:
                    raise
                if attempt == CONFLICT_ATTEMPTS:
                    raise NodeFailed('%s (still conflicting after %d attempts)'
                                     % (api_error(exc), CONFLICT_ATTEMPTS)) from exc
                node = _body(api.read_node(name, _preload_content=False, _request_timeout=opts['timeout']))
        entry['changed'] = plan['changed']
    except Exception as exc:  # pylint: disable=broad-except
        # One Node's failure must not stop the others; it is reported and fails the task at the end.
        entry.update(_entry(), error=str(exc) if isinstance(exc, NodeFailed) else api_error(exc))
        after = before
    return entry, before, after


def _read_missing(api, absent, timeout):
    """Read each missing Node once: ({name: node}, {name: error}, still missing)."""
    found, errors, still = {}, {}, []
    for name in absent:
        try:
            found[name] = _body(api.read_node(name, _preload_content=False, _request_timeout=timeout))
        except Exception as exc:  # pylint: disable=broad-except
            if getattr(exc, 'status', None) == 404:
                still.append(name)
            else:
                errors[name] = 'reading the Node: %s' % api_error(exc)
    return found, errors, still


def reconcile(api, nodes, *, labels_annotation=None, taints_annotation=nm.TAINTS_ANNOTATION, missing='fail',
              wait_timeout=0, parallel=4, timeout=60, check_mode=False, diff=False,
              sleep=time.sleep, clock=time.monotonic):
    """Reconcile the Nodes of `nodes` (the module's option) through `api` (a CoreV1Api).

    Returns (result, problems): the module's result and the messages that fail it (empty when
    it succeeds). Raises nm.NodeMetadataError for bad input (before any call) and ApiCallFailed
    when the Nodes cannot be listed.
    """
    specs = nm.normalize_nodes(nodes, labels_annotation, taints_annotation)
    try:
        listed = _body(api.list_node(_preload_content=False, _request_timeout=timeout))
    except Exception as exc:  # pylint: disable=broad-except
        raise ApiCallFailed('listing the Nodes failed: %s' % api_error(exc)) from exc
    by_name = {}
    for item in listed.get('items') or []:
        by_name[(item.get('metadata') or {}).get('name')] = item
    found = {name: by_name[name] for name in specs if name in by_name}
    absent = [name for name in specs if name not in by_name]
    read_errors = {}
    deadline = clock() + max(wait_timeout, 0)
    while absent and clock() < deadline:
        sleep(min(POLL_INTERVAL, max(deadline - clock(), 0)))
        more, errors, absent = _read_missing(api, absent, timeout)
        found.update(more)
        read_errors.update(errors)

    opts = dict(labels_annotation=labels_annotation, taints_annotation=taints_annotation, timeout=timeout,
                check_mode=check_mode)

    def one(name):
        return (name,) + _reconcile_one(api, name, found[name], specs[name], opts)

    names = sorted(found)
    if parallel > 1 and len(names) > 1 and not check_mode:
        with ThreadPoolExecutor(max_workers=parallel) as pool:
            outcomes = list(pool.map(one, names))
    else:
        outcomes = [one(name) for name in names]

    result_nodes = {}
    before_diff, after_diff = {}, {}
    annotation_keys = [k for k in (labels_annotation, taints_annotation) if k]
    for name, entry, before, after in outcomes:
        result_nodes[name] = entry
        if diff and entry['changed']:
            with_taints = specs[name]['taints'] is not None
            before_diff[name] = nm.node_view(before, annotation_keys, with_taints)
            after_diff[name] = nm.node_view(after, annotation_keys, with_taints)
    for name, error in read_errors.items():
        result_nodes[name] = dict(_entry(), error=error)
    result_nodes = dict(sorted(result_nodes.items()))
    failed = sorted(name for name, entry in result_nodes.items() if entry['error'])
    result = dict(changed=any(e['changed'] for e in result_nodes.values()), nodes=result_nodes,
                  missing=sorted(absent), failed_nodes=failed)
    if diff:
        result['diff'] = dict(before=before_diff, after=after_diff)
    problems = []
    if failed:
        problems.append('%d of %d Nodes could not be reconciled: %s' % (
            len(failed), len(result_nodes), '; '.join('%s: %s' % (n, result_nodes[n]['error']) for n in failed)))
    if absent and missing == 'fail':
        problems.append('%d Nodes are not registered with the API server (have they joined? are these their '
                        'Node names?): %s' % (len(absent), ', '.join(sorted(absent))))
    return result, problems


def main():
    module = AnsibleModule(
        argument_spec=dict(
            kubeconfig=dict(type='path'),
            nodes=dict(type='dict', required=True),
            labels_annotation=dict(type='str'),
            taints_annotation=dict(type='str', default=nm.TAINTS_ANNOTATION),
            missing=dict(type='str', choices=['fail', 'skip'], default='fail'),
            wait_timeout=dict(type='int', default=0),
            parallel=dict(type='int', default=4),
            timeout=dict(type='int', default=60),
        ),
        supports_check_mode=True,
    )
    p = module.params
    empty = dict(changed=False, nodes={}, missing=[], failed_nodes=[])
    if not 1 <= p['parallel'] <= MAX_PARALLEL:
        module.fail_json(msg='parallel must be 1 to %d, got %d' % (MAX_PARALLEL, p['parallel']), **empty)
    if p['wait_timeout'] < 0 or p['timeout'] < 1:
        module.fail_json(msg='wait_timeout must be 0 or more and timeout 1 or more, got %d and %d'
                         % (p['wait_timeout'], p['timeout']), **empty)
    try:
        nm.normalize_nodes(p['nodes'], p['labels_annotation'], p['taints_annotation'])
    except nm.NodeMetadataError as exc:
        module.fail_json(msg='invalid nodes: %s' % exc, **empty)
    if not HAS_KUBERNETES:
        module.fail_json(msg=missing_required_lib('kubernetes'), exception=KUBERNETES_ERR, **empty)
    try:
        api = k8s_client.CoreV1Api(k8s_config.new_client_from_config(config_file=p['kubeconfig']))
    except Exception as exc:  # pylint: disable=broad-except
        module.fail_json(msg='cannot load the kubeconfig %s: %s' % (p['kubeconfig'] or '(default)', exc), **empty)
    try:
        result, problems = reconcile(
            api, p['nodes'], labels_annotation=p['labels_annotation'], taints_annotation=p['taints_annotation'],
            missing=p['missing'], wait_timeout=p['wait_timeout'], parallel=p['parallel'], timeout=p['timeout'],
            check_mode=module.check_mode, diff=module._diff)
    except ApiCallFailed as exc:
        module.fail_json(msg=str(exc), **empty)
    if problems:
        module.fail_json(msg='; '.join(problems), **result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
