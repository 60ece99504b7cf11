"""The safe reboot in one place (issue 16, item 9): roles/safe_reboot decides whether a host may be
rebooted (never the Ansible controller, never a container, never with the caller's skip switch),
reboots it or reports the skip with the reason, and sets safe_reboot_result. The roles and the
firmware day-2 playbook that reboot use it, and nothing else reboots or detects containers itself.

The decision is checked in a real ansible-playbook run, in check mode (the reboot action then
reports what it would do and does nothing), on hosts reached through a connection that is not
`local` (a copy of it under another name), with virtualization facts and machine ids set by a
stand-in action, so every case runs here without a reboot.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from ansible_tree import task_files, walk_tasks

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / 'roles/safe_reboot'

# Where a reboot is decided, and with which of its own variables.
CALLERS = {
    'roles/ascend_driver/tasks/main.yml': {'safe_reboot_reason', 'safe_reboot_timeout', 'safe_reboot_skip',
                                           'safe_reboot_skip_reason'},
    'roles/nvidia_driver/tasks/activate.yml': {'safe_reboot_reason', 'safe_reboot_timeout', 'safe_reboot_skip',
                                               'safe_reboot_skip_reason'},
    'playbooks/day2/firmware_update.yml': {'safe_reboot_reason', 'safe_reboot_timeout'},
}


def test_only_safe_reboot_reboots():
    rebooting = sorted(str(path.relative_to(ROOT)) for path in task_files()
                       for task in walk_tasks(yaml.safe_load(path.read_text()))
                       if {'ansible.builtin.reboot', 'reboot', 'ansible.legacy.reboot'} & set(task))
    assert rebooting == ['roles/safe_reboot/tasks/main.yml']


def test_no_role_or_playbook_detects_containers_or_the_controller_itself():
    # The detection lives in the filter ai_platform.l1.container_type and in roles/safe_reboot.
    copies = sorted(str(path.relative_to(ROOT)) for path in task_files()
                    if path.parts[-3] != 'safe_reboot'
                    and any(word in path.read_text() for word in (
                        'systemd-detect-virt', 'virtualization_role', 'virtualization_tech_guest', "'systemd-nspawn'",
                        "== 'local'", "'127.0.0.1']", '/etc/machine-id')))
    assert copies == []


@pytest.mark.parametrize('path', sorted(CALLERS))
def test_callers_use_safe_reboot_with_their_own_variables(path):
    includes = [task for task in walk_tasks(yaml.safe_load((ROOT / path).read_text()))
                if (task.get('ansible.builtin.include_role') or {}).get('name') == 'safe_reboot']
    assert len(includes) == 1, path
    assert set(includes[0]['vars']) == CALLERS[path]
    assert includes[0].get('when'), 'a reboot only when the caller found one needed'


def test_the_reboot_task_and_report():
    tasks = {task['name']: task for task in yaml.safe_load((ROLE / 'tasks/main.yml').read_text())}
    reboot = tasks['Reboot for {{ safe_reboot_reason }}']['ansible.builtin.reboot']
    assert reboot['reboot_timeout'] == '{{ safe_reboot_timeout }}'
    assert 'safe_reboot_reason' in reboot['msg']
    # tests/integration/test_day2.py reads this task's message from the firmware update's events.
    report = tasks['Report the reboot the host cannot do']
    assert 'ansible.builtin.debug' in report and 'SKIPPED: {{ ' in report['ansible.builtin.debug']['msg']
    spec = yaml.safe_load((ROLE / 'meta/argument_specs.yml').read_text())['argument_specs']['main']
    defaults = yaml.safe_load((ROLE / 'defaults/main.yml').read_text())
    assert spec['short_description'].startswith('Internal.')
    assert {k: v.get('default') for k, v in spec['options'].items() if 'default' in v} == defaults
    assert set(spec['options']) == {'safe_reboot_reason', 'safe_reboot_timeout', 'safe_reboot_skip',
                                    'safe_reboot_skip_reason'}


FAKE_FACTS = '''\
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    """Sets the facts given as arguments, as the setup module would have gathered them."""

    def run(self, tmp=None, task_vars=None):
        return {'changed': False, 'ansible_facts': dict(self._task.args)}
'''
# The local connection under another name: a host that is reached as a remote host is.
FAKE_CONNECTION = '''\
from ansible.plugins.connection.local import Connection as _Local

DOCUMENTATION = """
name: elsewhere
short_description: the local connection, named otherwise (tests)
description: [Runs on this machine like ansible.builtin.local.]
author: ai_platform L1 contributors
"""


class Connection(_Local):
    transport = 'elsewhere'
'''
MACHINE = {'virtualization_type': 'kvm', 'virtualization_role': 'guest', 'virtualization_tech_guest': ['kvm'],
           'machine_id': '0123456789abcdef0123456789abcdef'}
CASES = {
    # host: (facts it has, host vars) -> expected (rebooted, reasons in order)
    'machine': ({**MACHINE}, {}),
    'podman': ({**MACHINE, 'virtualization_type': 'podman', 'virtualization_tech_guest': ['container', 'podman']}, {}),
    'lxc-tech': ({**MACHINE, 'virtualization_type': 'kvm', 'virtualization_tech_guest': ['kvm', 'container', 'lxc']},
                 {}),
    'staged': ({**MACHINE}, {'safe_reboot_skip': True,
                             'safe_reboot_skip_reason': 'x_skip_reboot is set (staged rollout)'}),
    'staged-docker': ({**MACHINE, 'virtualization_type': 'docker'},
                      {'safe_reboot_skip': True, 'safe_reboot_skip_reason': 'x_skip_reboot is set (staged rollout)'}),
    'same-machine': ({**MACHINE, 'machine_id': '@controller@'}, {}),
    'local': ({**MACHINE}, {'ansible_connection': 'ansible.builtin.local'}),
    '127.0.0.1': ({**MACHINE}, {}),
}
CONTAINER = "the host is a container ({}): it shares its host's kernel, a reboot would restart the container, " \
            "not the machine"
CONTROLLER = 'it is the Ansible controller, which is never rebooted'
EXPECTED = {
    'machine': (True, []),
    'podman': (False, [CONTAINER.format('podman')]),
    'lxc-tech': (False, [CONTAINER.format('lxc')]),
    'staged': (False, ['x_skip_reboot is set (staged rollout)']),
    'staged-docker': (False, ['x_skip_reboot is set (staged rollout)', CONTAINER.format('docker')]),
    'same-machine': (False, [CONTROLLER]),
    'local': (False, [CONTROLLER]),
    '127.0.0.1': (False, [CONTROLLER]),
}


@pytest.fixture(scope='module')
def decisions(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('safe_reboot')
    (tmp / 'action_plugins').mkdir()
    (tmp / 'action_plugins/fake_facts.py').write_text(FAKE_FACTS)
    (tmp / 'connection_plugins').mkdir()
    (tmp / 'connection_plugins/elsewhere.py').write_text(FAKE_CONNECTION)
    controller_id = Path('/etc/machine-id').read_text().strip() if Path('/etc/machine-id').is_file() else ''
    hosts = {}
    for host, (facts, hostvars) in CASES.items():
        hosts[host] = {'ansible_connection': 'elsewhere', 'ansible_python_interpreter': sys.executable,
                       'test_facts': {k: (controller_id if v == '@controller@' else v) for k, v in facts.items()},
                       **hostvars}
    (tmp / 'hosts.yml').write_text(yaml.safe_dump({'all': {'hosts': hosts}}))
    (tmp / 'play.yml').write_text(textwrap.dedent('''\
        - name: Decide
          hosts: all
          gather_facts: false
          check_mode: true  # the reboot action then only says what it would do
          tasks:
            - name: Facts as gathered
              fake_facts: "{{ test_facts }}"
            - name: Safe reboot
              ansible.builtin.include_role:
                name: safe_reboot
              vars:
                safe_reboot_reason: the test firmware
                safe_reboot_timeout: 5
            - name: Show the result
              ansible.builtin.debug:
                var: safe_reboot_result
        '''))
    env = {**os.environ, 'ANSIBLE_CONFIG': str(ROOT / 'ansible.cfg'), 'ANSIBLE_ROLES_PATH': str(ROOT / 'roles'),
           'ANSIBLE_STDOUT_CALLBACK': 'ansible.posix.json', 'ANSIBLE_CALLBACKS_ENABLED': 'ansible.posix.json',
           'ANSIBLE_FORCE_COLOR': '0', 'ANSIBLE_FORKS': '10'}
    proc = subprocess.run([str(Path(sys.executable).parent / 'ansible-playbook'), str(tmp / 'play.yml'),
                           '-i', str(tmp / 'hosts.yml'), '--check'], cwd=tmp, env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    tasks = {}
    for task in json.loads(proc.stdout)['plays'][0]['tasks']:
        # 'safe_reboot : Report ...' -> 'Report ...'
        tasks.setdefault(task['task']['name'].split(' : ', 1)[-1], {}).update(task['hosts'])
    return tasks, controller_id


@pytest.mark.parametrize('host', sorted(CASES))
def test_decision(decisions, host):
    tasks, controller_id = decisions
    if host == 'same-machine' and not controller_id:
        pytest.skip('this machine has no /etc/machine-id')
    rebooted, reasons = EXPECTED[host]
    result = tasks['Show the result'][host]['safe_reboot_result']
    assert result == {'rebooted': rebooted, 'skipped': not rebooted, 'reason': '; '.join(reasons)}
    report = tasks['Report the reboot the host cannot do'][host]
    reboot = tasks['Reboot for the test firmware'][host]
    if rebooted:
        assert report.get('skipped') and reboot['changed'] and reboot['rebooted']
    else:
        assert reboot.get('skipped') and not report.get('changed')
        assert report['msg'] == (f"{host}: reboot for the test firmware SKIPPED: {'; '.join(reasons)}; it is not in "
                                 'effect until the host restarts.')


def test_facts_gathered_only_when_missing(decisions):
    tasks, _ = decisions
    assert all(r.get('skipped') for r in tasks['Gather the virtualization facts and the machine id'].values())
