# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters for role gpu_queues: the team model's errors, the accelerator flavors on the Nodes, and
the objects of either backend. Docs in gpu_queue_*.yml; the logic is module_utils/gpu_queues.py."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.ai_platform.l1.plugins.module_utils import gpu_queues as model


def gpu_queue_model_errors(teams):
    return model.validate_teams(teams)


def gpu_queue_flavors(nodes):
    if isinstance(nodes, dict) and 'resources' in nodes:
        nodes = nodes['resources']
    if not isinstance(nodes, list):
        raise AnsibleFilterError('gpu_queue_flavors expects a list of Nodes, got %s' % type(nodes).__name__)
    return model.accelerator_flavors(nodes)


def gpu_queue_objects(teams, backend, flavors=None, cohort='gpu-pool'):
    try:
        return model.queue_objects(backend, teams, flavors or [], cohort)
    except model.ModelError as exc:
        raise AnsibleFilterError('gpu_queue_objects: %s' % exc) from exc


class FilterModule(object):
    def filters(self):
        return {'gpu_queue_model_errors': gpu_queue_model_errors, 'gpu_queue_flavors': gpu_queue_flavors,
                'gpu_queue_objects': gpu_queue_objects}
