# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Controller side of ai_platform.l1.files: renders each entry's ``src`` template into its content.

Rendering here rather than through ``lookup('ansible.builtin.template', ...)`` in the task's
arguments saves a deep copy of every variable of the host per file (the lookup makes one per
call; on a converged fleet run that copy was most of what a file cost the controller). The
rendering is the template lookup's: the same search path, the same template variables
(``template_path``, ``ansible_managed``...), the same Jinja options.
"""

from __future__ import annotations

import os

from ansible._internal._templating import _template_vars
from ansible._internal._templating._engine import TemplateOptions, TemplateOverrides
from ansible.errors import AnsibleActionFail, AnsibleError
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase
from ansible.template import trust_as_template


class ActionModule(ActionBase):

    TRANSFERS_FILES = False
    _requires_connection = True

    def _searchpath(self, task_vars, source):
        """The template lookup's Jinja search path: each search path and its templates/ folder."""
        searchpath = []
        for path in task_vars.get('ansible_search_path', []):
            searchpath.extend([os.path.join(path, 'templates'), path])
        return [os.path.dirname(source)] + searchpath

    def _render(self, entry, task_vars):
        try:
            source = self._find_needle('templates', entry['src'])
        except AnsibleError as exc:
            raise AnsibleActionFail('%s: template %s not found: %s'
                                    % (entry.get('path'), entry['src'], to_text(exc))) from exc
        template_data = trust_as_template(self._loader.get_text_file_contents(source))
        # A shallow copy: the template only reads the variables, and this worker ends with the task.
        variables = dict(task_vars)
        variables.update(_template_vars.generate_ansible_template_vars(
            path=entry['src'], fullpath=source, include_ansible_managed='ansible_managed' not in variables))
        variables.update(entry.get('template_vars') or {})
        templar = self._templar.copy_with_new_env(available_variables=variables,
                                                  searchpath=self._searchpath(task_vars, source))
        rendered = templar._engine.template(template_data, options=TemplateOptions(
            escape_backslashes=False, overrides=TemplateOverrides.from_kwargs({})))
        if not isinstance(rendered, str):
            raise AnsibleActionFail('%s: template %s rendered a %s, not text'
                                    % (entry.get('path'), entry['src'], type(rendered).__name__))
        return rendered

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        args = dict(self._task.args)
        files = args.get('files')
        if not isinstance(files, list):
            raise AnsibleActionFail('files must be a list of entries, not %s' % type(files).__name__)
        entries = []
        for given in files:
            if not isinstance(given, dict):
                raise AnsibleActionFail('each entry of files must be a mapping, not %s' % type(given).__name__)
            entry = dict(given)
            src = entry.pop('src', None)
            template_vars = entry.pop('template_vars', None)
            if src is not None:
                if entry.get('content') is not None:
                    raise AnsibleActionFail('%s: give src or content, not both' % entry.get('path'))
                if template_vars is not None and not isinstance(template_vars, dict):
                    raise AnsibleActionFail('%s: template_vars must be a mapping' % entry.get('path'))
                if entry.get('state', 'present') == 'present':
                    entry['content'] = self._render(dict(entry, src=src, template_vars=template_vars), task_vars)
            elif template_vars is not None:
                raise AnsibleActionFail('%s: template_vars without src' % entry.get('path'))
            entries.append(entry)
        args['files'] = entries
        result.update(self._execute_module(module_name='ai_platform.l1.files', module_args=args, task_vars=task_vars))
        return result
