"""Container detection in one place (issue 16, item 9): the filter ai_platform.l1.container_type,
read by the common role (common_in_container) and the safe_reboot role. It answers as the common
role's own expression did, and says which container it is."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import jinja2
import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible.plugins.filter.mathstuff import intersect
from ansible_collections.ai_platform.l1.plugins.filter.container_type import (
    CONTAINER_TYPES,
    FilterModule,
    container_type,
)

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / 'collections/ansible_collections/ai_platform/l1/plugins/filter/container_type.yml'

# roles/common before the detection was shared: its expression and its list of container types.
OLD_COMMON = ("{{ (ansible_virtualization_role | default('') == 'guest'"
              " and ansible_virtualization_type | default('') in common_container_types)"
              " or (ansible_virtualization_tech_guest | default([]) | intersect(common_container_types)"
              " | length > 0) }}")
OLD_TYPES = ['container', 'containerd', 'docker', 'lxc', 'openvz', 'podman', 'systemd-nspawn']


@pytest.mark.parametrize(('facts', 'expected'), [
    ({'virtualization_type': 'podman', 'virtualization_role': 'guest',
      'virtualization_tech_guest': ['container', 'podman']}, 'podman'),
    ({'virtualization_type': 'docker', 'virtualization_role': 'guest'}, 'docker'),
    ({'virtualization_type': 'systemd-nspawn', 'virtualization_role': 'guest'}, 'systemd-nspawn'),
    # A VM, a machine, a hypervisor host.
    ({'virtualization_type': 'kvm', 'virtualization_role': 'guest', 'virtualization_tech_guest': ['kvm']}, ''),
    ({'virtualization_type': 'NA', 'virtualization_role': 'NA', 'virtualization_tech_guest': []}, ''),
    ({'virtualization_type': 'kvm', 'virtualization_role': 'host', 'virtualization_tech_host': ['kvm']}, ''),
    # openvz host (role host): not a container; lxc seen through tech_guest only, the specific name first.
    ({'virtualization_type': 'openvz', 'virtualization_role': 'host'}, ''),
    ({'virtualization_type': 'kvm', 'virtualization_role': 'guest',
      'virtualization_tech_guest': ['kvm', 'container', 'lxc']}, 'lxc'),
    ({'virtualization_type': 'kvm', 'virtualization_role': 'guest', 'virtualization_tech_guest': ['container']},
     'container'),
    # hostvars spelling; a single tech_guest string.
    ({'ansible_virtualization_type': 'lxc', 'ansible_virtualization_role': 'guest'}, 'lxc'),
    ({'virtualization_tech_guest': 'docker'}, 'docker'),
])
def test_container_type(facts, expected):
    assert container_type(facts) == expected


@pytest.mark.parametrize(('facts', 'message'), [
    ({}, 'no virtualization facts; gather them first'),
    ({'os_family': 'Debian'}, 'no virtualization facts'),
    ('podman', 'expects the host facts (ansible_facts), got str'),
])
def test_refused(facts, message):
    with pytest.raises(AnsibleFilterError, match=message.replace('(', r'\(').replace(')', r'\)')):
        container_type(facts)


def _old_common(facts):
    env = jinja2.Environment(undefined=jinja2.ChainableUndefined)
    env.filters['intersect'] = intersect
    return env.from_string(OLD_COMMON).render(
        {'ansible_' + k: v for k, v in facts.items()}, common_container_types=OLD_TYPES) == 'True'


def test_the_common_role_answers_as_before():
    types = [*CONTAINER_TYPES, 'kvm', 'VMware', 'NA', '']
    roles = ['guest', 'host', 'NA', None]
    guests = [None, [], ['kvm'], ['container', 'podman'], ['docker', 'container'], ['VMware'], ['lxc']]
    for vtype, role, guest in itertools.product(types, roles, guests):
        facts = {'virtualization_type': vtype}
        if role is not None:
            facts['virtualization_role'] = role
        if guest is not None:
            facts['virtualization_tech_guest'] = guest
        assert (container_type(facts) != '') == _old_common(facts), facts
    assert list(CONTAINER_TYPES) == OLD_TYPES
    preflight = yaml.safe_load((ROOT / 'roles/common/tasks/preflight.yml').read_text())
    [derive] = [t for t in preflight if t.get('name') == 'Derive the desired state']
    assert derive['ansible.builtin.set_fact']['common_in_container'] == (
        '{{ ansible_facts | ai_platform.l1.container_type | length > 0 }}')
    assert 'common_container_types' not in (ROOT / 'roles/common/vars/main.yml').read_text()


def test_the_documentation_names_the_filter():
    doc = yaml.safe_load(DOC.read_text())['DOCUMENTATION']
    assert doc['name'] == 'container_type' and set(doc['options']) == {'_input'}
    assert all(f'C({t})' in ' '.join(doc['description']) for t in CONTAINER_TYPES)
    assert FilterModule().filters() == {'container_type': container_type}
    proc = subprocess.run([str(Path(sys.executable).parent / 'ansible-doc'), '-t', 'filter', '--json',
                           'ai_platform.l1.container_type'], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, 'ANSIBLE_CONFIG': str(ROOT / 'ansible.cfg')}, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)['ai_platform.l1.container_type']['doc']['positional'] == '_input'
