"""RFC 7396 JSON merge patch, as the API server applies application/merge-patch+json: the tests'
own oracle for what a Node looks like after a patch, kept apart from the code under test
(plugins/module_utils/node_metadata.py has its own for diffs)."""

from __future__ import annotations

import copy


def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result
