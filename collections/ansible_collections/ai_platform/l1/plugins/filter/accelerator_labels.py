# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ai_platform.l1.accelerator_labels: the standard node labels (docs in accelerator_labels.yml)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.ai_platform.l1.plugins.module_utils.node_labels import compute_labels


def accelerator_labels(facts, node_type='gpu-compute', gfd_labels=False):
    """facts: a dict with any of gpu_info, npu_info, hw_info (inner dicts or registered results)."""
    if not isinstance(facts, dict):
        raise AnsibleFilterError('accelerator_labels expects a dict with gpu_info/npu_info/hw_info, got %s'
                                 % type(facts).__name__)
    unknown = sorted(set(facts) - {'gpu_info', 'npu_info', 'hw_info'})
    if unknown:
        raise AnsibleFilterError('accelerator_labels: unknown keys %s (expected gpu_info, npu_info, hw_info)'
                                 % ', '.join(unknown))
    try:
        return compute_labels(gpu_info=facts.get('gpu_info'), npu_info=facts.get('npu_info'),
                              hw_info=facts.get('hw_info'), node_type=node_type, gfd_labels=bool(gfd_labels))
    except ValueError as exc:
        raise AnsibleFilterError('accelerator_labels: %s' % exc) from exc


class FilterModule(object):
    def filters(self):
        return {'accelerator_labels': accelerator_labels}
