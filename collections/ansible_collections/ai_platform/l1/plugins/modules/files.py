#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: files
short_description: Several files' content, owner, group and mode, in one task
version_added: "0.1.0"
description:
  - Writes each file of O(files) whose content differs (atomically, through a temporary file in the
    same directory), sets its owner, group and mode where they differ, and removes the entries with
    O(files[].state=absent).
  - The content is given (O(files[].content)) or rendered on the controller from a template
    (O(files[].src), as M(ansible.builtin.template) finds and renders it), so a role's
    configuration files are one module run per host instead of one M(ansible.builtin.template)
    task (a stat and a file module run) per file, which is what a converged run of a large fleet
    pays for.
  - Each entry may carry a O(files[].tag); RV(changed_tags) lists the tags of the entries that
    changed, so handlers notified by the task can tell which of their files changed.
  - Fails, before changing anything, when a path is not absolute, is given twice, exists and is
    not a regular file, or its directory does not exist (in check mode a missing directory is not an
    error, an earlier task of the run would have made it).
options:
  files:
    description: The files.
    type: list
    elements: dict
    required: true
    suboptions:
      path:
        description: Absolute path of the file.
        type: path
        required: true
      content:
        description: The whole content of the file (UTF-8). This or O(files[].src) is required unless
          O(files[].state=absent).
        type: str
      src:
        description:
          - A Jinja template, found as M(ansible.builtin.template) finds its O(ansible.builtin.template#module:src)
            (the role's C(templates/) first), rendered on the controller with the host's variables
            into the content. Not with O(files[].content).
          - Rendered by the action plugin; not rendered for O(files[].state=absent).
        type: str
      template_vars:
        description: Variables added for the rendering of O(files[].src) only (as the template lookup's
          C(template_vars)).
        type: dict
      owner:
        description: Owner (name or uid); left as it is, or the module user's for a new file, when not given.
        type: str
      group:
        description: Group (name or gid); left as it is, or the module user's for a new file, when not given.
        type: str
      mode:
        description: Mode, as M(ansible.builtin.file) takes it (C("0644"), C(u=rw,g=r,o=r)). Required unless
          O(files[].state=absent), so a new file never gets the umask's mode.
        type: raw
      state:
        description: V(present) writes the file, V(absent) removes it.
        type: str
        choices: [present, absent]
        default: present
      tag:
        description: A name for the entry (for example the handler its change calls for), returned in
          RV(changed_tags) when the entry changed.
        type: str
attributes:
  action:
    support: full
    description: The action plugin renders O(files[].src) on the controller.
  check_mode:
    support: full
    description: Reports which files would be written, changed or removed; changes nothing.
  diff_mode:
    support: full
    description: One diff per changed file, its content or its owner, group and mode, before and after.
seealso:
  - module: ansible.builtin.template
  - module: ai_platform.l1.directories
author:
  - ai_platform L1 contributors (@ai-platform-l1)
'''

EXAMPLES = r'''
- name: Write chrony's and journald's configuration
  ai_platform.l1.files:
    files:
      - path: /etc/chrony/chrony.conf
        src: chrony.conf.j2
        owner: root
        group: root
        mode: "0644"
        tag: chrony
      - path: /etc/systemd/journald.conf.d/90-site.conf
        content: "[Journal]\nStorage=persistent\n"
        owner: root
        group: root
        mode: "0644"
        tag: journald
  register: baseline_files
  notify: [restart chrony, restart journald]
'''

RETURN = r'''
changed_paths:
  description: The files written, changed in owner, group or mode, or removed (or that would be, in check mode).
  returned: always
  type: list
  elements: str
  sample: [/etc/chrony/chrony.conf]
changed_tags:
  description: The tags of the entries in RV(changed_paths), each once, in the order of O(files).
  returned: always
  type: list
  elements: str
  sample: [chrony]
'''

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_native
from ansible_collections.ai_platform.l1.plugins.module_utils.file_state import describe, read, replace


def checked_entries(module):
    """The entries, normalised; fails before any change on a bad one."""
    entries, seen, problems = [], set(), []
    for entry in module.params['files']:
        path = os.path.normpath(entry['path'])
        if not os.path.isabs(path):
            problems.append('%s: not an absolute path' % path)
        elif path in seen:
            problems.append('%s: given twice' % path)
        elif os.path.lexists(path) and not os.path.isfile(path):
            problems.append('%s: exists and is not a regular file' % path)
        elif entry['src'] is not None:
            problems.append('%s: src is rendered by the action plugin of the same name, which did not run' % path)
        elif entry['state'] == 'present':
            if entry['content'] is None or entry['mode'] is None:
                problems.append('%s: content (or src) and mode are required unless state=absent' % path)
            # In check mode an earlier task of the run may not have made the directory yet.
            elif not os.path.isdir(os.path.dirname(path)) and not module.check_mode:
                problems.append('%s: directory %s does not exist' % (path, os.path.dirname(path)))
        seen.add(path)
        entries.append(dict(entry, path=path))
    if problems:
        module.fail_json(msg='; '.join(problems), changed_paths=[], changed_tags=[])
    return entries


def converge_entry(module, entry):
    """One file to its wanted state; returns its diff when it changed, else None."""
    path = entry['path']
    before_attrs = describe(path)
    if entry['state'] == 'absent':
        if before_attrs == 'absent':
            return None
        before = read(path)
        if not module.check_mode:
            os.unlink(path)
        return dict(before_header=path, after_header=path, before=to_native(before, errors='replace'), after='')
    data = to_bytes(entry['content'], errors='surrogate_or_strict')
    before = read(path)
    content_changed = before != data
    if content_changed and not module.check_mode:
        replace(module, path, data)
    attrs = module.load_file_common_arguments(
        dict(owner=entry['owner'], group=entry['group'], mode=entry['mode']), path=path)
    # A new file in check mode does not exist to compare attributes with: it counts as changed.
    attrs_changed = False
    if not (module.check_mode and before is None):
        attrs_changed = module.set_fs_attributes_if_different(attrs, False)
    if not content_changed and not attrs_changed:
        return None
    if content_changed:
        return dict(before_header=path, after_header=path,
                    before='' if before is None else to_native(before, errors='replace'),
                    after=entry['content'])
    after_attrs = describe(path) if not module.check_mode else '%s:%s %s' % (
        entry['owner'] or '-', entry['group'] or '-', entry['mode'])
    return dict(before_header=path, after_header=path,
                before='%s %s\n' % (path, before_attrs), after='%s %s\n' % (path, after_attrs))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            files=dict(type='list', elements='dict', required=True, options=dict(
                path=dict(type='path', required=True),
                content=dict(type='str'),
                src=dict(type='str'),
                template_vars=dict(type='dict'),
                owner=dict(type='str'),
                group=dict(type='str'),
                mode=dict(type='raw'),
                state=dict(type='str', choices=['present', 'absent'], default='present'),
                tag=dict(type='str'),
            )),
        ),
        supports_check_mode=True,
    )
    changed_paths, changed_tags, diffs = [], [], []
    for entry in checked_entries(module):
        entry_diff = converge_entry(module, entry)
        if entry_diff is None:
            continue
        changed_paths.append(entry['path'])
        diffs.append(entry_diff)
        if entry['tag'] is not None and entry['tag'] not in changed_tags:
            changed_tags.append(entry['tag'])
    result = dict(changed=bool(changed_paths), changed_paths=changed_paths, changed_tags=changed_tags)
    if module._diff:
        result['diff'] = diffs
    module.exit_json(**result)


if __name__ == '__main__':
    main()
