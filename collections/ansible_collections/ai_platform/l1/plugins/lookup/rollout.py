# -*- coding: utf-8 -*-
# Copyright: ai_platform L1 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
name: rollout
author: ai_platform L1 contributors (@ai-platform-l1)
short_description: The host layers' batch settings, from the inventory's group_vars/all/rollout.yml
version_added: "0.1.0"
description:
  - Returns rollout settings (C(rollout_batch_size), C(rollout_max_fail_percentage)) for the
    C(serial) and C(max_fail_percentage) keywords of the host layers' plays, and for the
    validation play that checks them.
  - Play keywords are evaluated before any host's variables exist, so the settings cannot come
    from the inventory's variables. This lookup reads the defaults file C(vars/rollout.yml) from
    the play's search path, then overlays the keys of C(group_vars/all/rollout.yml) next to the
    first inventory source (the source itself when it is a directory), when that file exists.
  - It is evaluated once per play. A C(vars_files) entry with a templated path did the same but
    was re-templated and re-read for every host on every task.
options:
  _terms:
    description: Names of the settings to return; each must be a key of the defaults file.
    required: true
    type: list
    elements: str
'''

EXAMPLES = r'''
- name: OS baseline
  hosts: k8s_control_plane:k8s_worker
  serial: "{{ lookup('ai_platform.l1.rollout', 'rollout_batch_size') }}"
  max_fail_percentage: "{{ lookup('ai_platform.l1.rollout', 'rollout_max_fail_percentage') }}"
  roles:
    - role: common
'''

RETURN = r'''
_raw:
  description: The value of each setting asked for, in order.
  type: list
  elements: raw
'''

import os

from ansible.errors import AnsibleError
from ansible.plugins.lookup import LookupBase

DEFAULTS_FILE = 'rollout.yml'
INVENTORY_FILE = os.path.join('group_vars', 'all', 'rollout.yml')


class LookupModule(LookupBase):

    def _load_mapping(self, path):
        data = self._loader.load_from_file(path)
        if data is None:
            return {}
        if not isinstance(data, dict):
            raise AnsibleError(f"{path} must hold a mapping of rollout settings, not {type(data).__name__}")
        return data

    def run(self, terms, variables=None, **kwargs):
        variables = variables or {}
        defaults_path = self.find_file_in_search_path(variables, 'vars', DEFAULTS_FILE)
        if defaults_path is None:
            raise AnsibleError(f"the rollout defaults (vars/{DEFAULTS_FILE}) are not in the play's search path")
        settings = dict(self._load_mapping(defaults_path))

        sources = variables.get('ansible_inventory_sources') or []
        if sources:
            first = str(sources[0])
            inventory_dir = first if os.path.isdir(first) else os.path.dirname(first)
            inventory_file = os.path.join(inventory_dir, INVENTORY_FILE)
            if os.path.isfile(inventory_file):
                settings.update(self._load_mapping(inventory_file))

        values = []
        for term in terms:
            if term not in settings:
                raise AnsibleError(f"unknown rollout setting {term!r}: the defaults file {defaults_path} "
                                   f"has {', '.join(sorted(settings))}")
            values.append(settings[term])
        return values
