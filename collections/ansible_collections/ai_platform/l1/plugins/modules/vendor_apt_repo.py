#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: vendor_apt_repo
short_description: A vendor APT repository, exact version pins and a check that its index has them, in one task
version_added: "0.1.0"
description:
  - The work of the internal role C(vendor_apt_repo) (used by nvidia_driver, nvidia_container_toolkit and dcgm)
    in one module run (on a converged GPU node that role used to cost about twelve task runs per use, three uses per
    node, at about 40 ms of controller CPU each).
  - With O(manage_source), installs the signing key at O(keyring) (an existing file is kept, as
    M(ansible.builtin.get_url) without C(force) does) and writes the source entry O(source_path)
    (C(deb [signed-by=<keyring>] <url> <suite> <components>)). Otherwise another role adds O(source_path) and
    this module only reads it.
  - Reads the versions the index has of each package (C(apt-cache madison)). Refreshes only this source list's
    index (C(apt-get update) limited to it), and only when the key or the source changed or the index lacks a
    pinned version; reading or refreshing an index is not reported as a change.
  - Fails on a version the index does not have, naming the repository, the package, the version (and the
    caller's variable) and the versions the index has; nothing is pinned then. Otherwise writes the pins to
    O(pin_path) (priority 1001, so a pin also downgrades).
  - In check mode on a host where the source is new (or the index lacks a pin), the repository's packages
    cannot be read; the module warns, returns RV(pending) and leaves the pins alone.
options:
  owner:
    description: The calling role's name; every message starts with it and the managed files name it.
    type: str
    required: true
  name:
    description: The repository's name (letters, digits, C(.) and C(-)), as in its file names.
    type: str
    required: true
  manage_source:
    description: Install the signing key and write the source entry here (C(false) - another role adds them; an
      absent O(source_path) is then refused with O(hint)).
    type: bool
    default: true
  url:
    description: The repository URL as fetched (through a files mirror where there is one); required with
      O(manage_source).
    type: str
  upstream_url:
    description: The repository URL as upstream publishes it, named in the source entry's comment; defaults to
      O(url).
    type: str
  key_url:
    description: The repository's ASCII-armored signing key, as fetched; required with O(manage_source).
    type: str
  suite:
    description: The suite, C(/) for a flat repository.
    type: str
    default: /
  components:
    description: The components of a non-flat suite.
    type: list
    elements: str
    default: []
  keyring:
    description: Where the signing key goes.
    type: path
    required: true
  source_path:
    description: The source list, a file under a C(sources.list.d) directory (its index alone is refreshed).
    type: path
    required: true
  pin_path:
    description: The APT preferences file the pins go to; its name is letters, digits, C(.), C(_) and C(-).
    type: path
    required: true
  packages:
    description: The packages whose versions are checked in the index and pinned.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: The package looked up in the index.
        type: str
        required: true
      version:
        description: The version to pin.
        type: str
        required: true
      match:
        description: C(exact) - the index must have this Debian version; C(upstream) - the first version the
          index lists as C(<version>-<revision>) is pinned.
        type: str
        choices: [exact, upstream]
        default: exact
      pin:
        description: The packages pinned to the version found (default C([name])); C([]) checks without pinning.
        type: list
        elements: str
      variable:
        description: The caller's variable holding the version, named in the refusal and the pin file.
        type: str
  hint:
    description: Added to the refusal and the check-mode report.
    type: str
    default: ""
attributes:
  check_mode:
    support: full
    description: Reports the key, source and pin changes it would make; on a host whose index cannot answer
      yet it returns RV(pending) instead of failing.
  diff_mode:
    support: full
    description: The source entry and the pins, before and after; the key as a new file.
seealso:
  - module: ansible.builtin.apt
author:
  - ai_platform L1 contributors (@ai-platform-l1)
'''

EXAMPLES = r'''
- name: NVIDIA CUDA repository and the driver pin
  ai_platform.l1.vendor_apt_repo:
    owner: nvidia_driver
    name: nvidia-cuda
    url: https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/
    key_url: https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/3bf863cc.pub
    keyring: /etc/apt/keyrings/nvidia-cuda.asc
    source_path: /etc/apt/sources.list.d/nvidia-cuda.list
    pin_path: /etc/apt/preferences.d/nvidia-driver
    packages:
      - name: nvidia-driver
        version: 550.54.15
        match: upstream
        variable: nvidia_driver_version
  register: vendor_apt_repo_result
'''

RETURN = r'''
pending:
  description: Check mode could not read the repository's packages (a new source, or a pin the index lacks until a
    real run refreshes it); the caller should not predict further.
  returned: always
  type: bool
versions:
  description: Package name to the Debian version found for its pin (C('') when none was).
  returned: always
  type: dict
  sample: {nvidia-driver: 550.54.15-1}
changes:
  description: The files written (or that would be) - the keyring directory, the key, the source list, the pins.
  returned: always
  type: list
  elements: str
refreshed:
  description: Whether this source's index was refreshed.
  returned: always
  type: bool
'''

import os
import re

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import fetch_url
from ansible_collections.ai_platform.l1.plugins.module_utils.file_state import read, replace

NAME_RE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9.-]*$')
PIN_FILE_RE = re.compile(r'^[A-Za-z0-9][A-Za-z0-9._-]*$')
URL_RE = re.compile(r'^(https?|file)://')
MADISON_RE = re.compile(r'^\s*(\S+)\s*[|]\s*(\S+)\s*[|]')
FILE_MODE = 0o644


class Repo:
    """One use: the files it manages, what changed, what the index has."""

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.changes = []
        self.diffs = []

    def fail(self, msg):
        self.module.fail_json(msg=f"{self.params['owner']}: {msg}", changes=self.changes)

    def write(self, path, data):
        """`data` (bytes) at path with mode 0644; records the change (and the diff)."""
        before = read(path)
        if before == data:
            if os.stat(path).st_mode & 0o7777 != FILE_MODE:
                if not self.module.check_mode:
                    os.chmod(path, FILE_MODE)
                self.changes.append(path)
            return False
        self.diffs.append({'before_header': path, 'after_header': path,
                           'before': (before or b'').decode('utf-8', 'replace'),
                           'after': data.decode('utf-8', 'replace')})
        self.changes.append(path)
        if not self.module.check_mode:
            replace(self.module, path, data, FILE_MODE)
        return True

    def source(self):
        """Key and source entry; True when either is new or changed (the index knows nothing of it yet)."""
        p = self.params
        keyring_dir = os.path.dirname(p['keyring'])
        new = False
        if not os.path.isdir(keyring_dir):
            new = True
            self.changes.append(keyring_dir)
            if not self.module.check_mode:
                os.makedirs(keyring_dir, mode=0o755)
        if read(p['keyring']) is None:
            new = True
            if self.module.check_mode:
                self.changes.append(p['keyring'])
            else:
                response, info = fetch_url(self.module, p['key_url'])
                if response is None or info.get('status') not in (200, None):
                    self.fail(f"cannot download the signing key {p['key_url']}: {info.get('msg')}")
                self.write(p['keyring'], response.read())
        upstream = p['upstream_url'] or p['url']
        mirrored = ' through the files mirror' if upstream != p['url'] else ''
        entry = (f"# Managed by ai_platform {p['owner']} (role vendor_apt_repo): {upstream}{mirrored}.\n"
                 f"deb [signed-by={p['keyring']}] {p['url']} {' '.join([p['suite'], *p['components']])}\n")
        return self.write(p['source_path'], entry.encode()) or new

    def lookup(self):
        """One entry per package: the versions the index has (newest first) and the one found for the pin."""
        names = [package['name'] for package in self.params['packages']]
        rc, out, err = self.module.run_command(['apt-cache', 'madison', *names])
        if rc != 0:
            self.fail(f'apt-cache madison failed ({rc}): {err.strip()}')
        index = [match.groups() for match in map(MADISON_RE.match, out.splitlines()) if match]
        found = []
        for package in self.params['packages']:
            version = str(package['version'])
            versions = []
            for name, listed in index:
                if name == package['name'] and listed not in versions:
                    versions.append(listed)
            if package['match'] == 'upstream':
                pinned = next((v for v in versions if v.startswith(version + '-')), '')
            else:
                pinned = version if version in versions else ''
            label = package['name'] + ' ' + version + ('-<revision>' if package['match'] == 'upstream' else '')
            if package['variable']:
                label += f" ({package['variable']})"
            found.append({'name': package['name'], 'found': pinned, 'label': label,
                          'pin': [package['name']] if package['pin'] is None else package['pin'],
                          'variable': package['variable'] or '',
                          'refusal': label + ': the index has ' + (', '.join(versions) or 'none of it')})
        return found

    def refresh(self):
        p = self.params
        source_list = os.path.join(os.path.basename(os.path.dirname(p['source_path'])),
                                   os.path.basename(p['source_path']))
        rc, _out, err = self.module.run_command(['apt-get', 'update', '-o', f'Dir::Etc::sourcelist={source_list}',
                                                 '-o', 'Dir::Etc::sourceparts=-', '-o', 'APT::Get::List-Cleanup=0'])
        if rc != 0:
            self.fail(f"apt-get update of {p['source_path']} failed ({rc}): {err.strip()}")

    def pins(self, pinned):
        p = self.params
        variables = ', '.join(entry['variable'] for entry in pinned if entry['variable']) or 'the pin'
        # The first line is what the role's template wrote (ansible_managed): converged hosts keep their file.
        text = ('# Ansible managed\n'
                f"# Managed by ai_platform {p['owner']} (role vendor_apt_repo): each package at exactly this\n"
                f"# version from {p['source_path']}; apt never picks another one (1001 also allows a\n"
                f'# downgrade when the pin goes back). Change {variables} to upgrade.\n')
        text += '\n'.join(f"Package: {' '.join(entry['pin'])}\nPin: version {entry['found']}\nPin-Priority: 1001\n"
                          for entry in pinned)
        self.write(p['pin_path'], text.encode())


def check_inputs(module):
    p = module.params
    urls_ok = not p['manage_source'] or (URL_RE.match(p['url'] or '') and URL_RE.match(p['key_url'] or ''))
    pin_file = os.path.basename(p['pin_path'])
    if not (NAME_RE.match(p['name']) and PIN_FILE_RE.match(pin_file) and p['packages'] and urls_ok):
        module.fail_json(msg=f"{p['owner']}: the repository name ({p['name']}) and pin file ({pin_file}) must be "
                             'file names, at least one package must be given, and the repository and key URLs must '
                             f"be http(s) or file URLs ({p['url'] or 'none'}, {p['key_url'] or 'none'})")


def main():
    module = AnsibleModule(
        argument_spec={
            'owner': {'type': 'str', 'required': True},
            'name': {'type': 'str', 'required': True},
            'manage_source': {'type': 'bool', 'default': True},
            'url': {'type': 'str'},
            'upstream_url': {'type': 'str'},
            'key_url': {'type': 'str', 'no_log': False},
            'suite': {'type': 'str', 'default': '/'},
            'components': {'type': 'list', 'elements': 'str', 'default': []},
            'keyring': {'type': 'path', 'required': True, 'no_log': False},
            'source_path': {'type': 'path', 'required': True},
            'pin_path': {'type': 'path', 'required': True},
            'packages': {'type': 'list', 'elements': 'dict', 'required': True, 'options': {
                'name': {'type': 'str', 'required': True},
                'version': {'type': 'str', 'required': True},
                'match': {'type': 'str', 'choices': ['exact', 'upstream'], 'default': 'exact'},
                'pin': {'type': 'list', 'elements': 'str'},
                'variable': {'type': 'str'}}},
            'hint': {'type': 'str', 'default': ''},
        },
        supports_check_mode=True,
    )
    check_inputs(module)
    p = module.params
    repo = Repo(module)
    if p['manage_source']:
        source_new, has_source = repo.source(), True
    else:
        source_new, has_source = False, os.path.exists(p['source_path'])
    found = repo.lookup()
    missing = [entry for entry in found if not entry['found']]
    refreshed = False
    if not module.check_mode and has_source and (source_new or missing):
        repo.refresh()
        refreshed = True
        found = repo.lookup()
        missing = [entry for entry in found if not entry['found']]
    if p['manage_source']:
        where = f"the repository {p['url']} ({p['source_path']})"
    elif has_source:
        where = f"the repository of {p['source_path']}"
    else:
        where = f"the package index (there is no {p['source_path']})"
    hint = ('. ' + p['hint']) if p['hint'] else ''
    result = {'changes': repo.changes, 'refreshed': refreshed, 'versions': {e['name']: e['found'] for e in found}}
    if module._diff:
        result['diff'] = repo.diffs
    if module.check_mode and (source_new or missing):
        if source_new:
            unpredictable = (f"{p['url']} would be added as {p['source_path']}; "
                             f"{', '.join(e['label'] for e in found)} cannot be checked against it before it is")
        else:
            unpredictable = (f"{where} has no {', '.join(e['label'] for e in missing)} yet; a real run refreshes "
                             'its index first (and refuses a version still missing)')
        msg = f"Check mode: {unpredictable}; the rest of {p['owner']} is not predicted on this host{hint}"
        module.warn(msg)
        module.exit_json(changed=bool(repo.changes), pending=True, msg=msg, **result)
    if missing:
        module.fail_json(msg=f"{p['owner']}: {where} has no " + '; no '.join(e['refusal'] for e in missing) + hint,
                         pending=False, **result)
    pinned = [entry for entry in found if entry['pin']]
    if pinned:
        repo.pins(pinned)
    module.exit_json(changed=bool(repo.changes), pending=False, **result)


if __name__ == '__main__':
    main()
