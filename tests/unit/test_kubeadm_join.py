"""One kubeadm join for control planes and workers (issue 16, item 9): roles/kubeadm_join, used by
k8s_control_plane (as a control plane) and k8s_worker. The join configuration it renders is the one
each role rendered before; the join runs with `creates` (idempotent), control planes one at a time,
and a failed join is reset and reported with kubeadm's message.

The role runs here for real against a stand-in kubeadm on PATH (the configuration file and the
`creates` file are moved into a temporary directory through the role's internal variables)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import jinja2
import pytest
import yaml
from ansible.plugins.filter.core import FilterModule as CoreFilters

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / 'roles/kubeadm_join'
MANAGED = 'Ansible managed'

# The two templates before they were one (roles/k8s_control_plane and roles/k8s_worker).
OLD_CONTROL_PLANE = """\
# {{ ansible_managed }}
apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
# Per-node KubeletConfiguration patches (written by the k8s_node role).
patches:
  directory: /etc/kubernetes/patches
discovery:
  bootstrapToken:
    apiServerEndpoint: {{ k8s_control_plane_join.endpoint }}
    token: {{ k8s_control_plane_join.token }}
    caCertHashes:
      - {{ k8s_control_plane_join.ca_cert_hash }}
nodeRegistration:
  name: {{ inventory_hostname }}
  criSocket: unix:///run/containerd/containerd.sock
  kubeletExtraArgs:
    - name: node-ip
      value: {{ k8s_control_plane_node_address }}
{% if k8s_control_plane_ignore_preflight_errors %}
  ignorePreflightErrors: {{ k8s_control_plane_ignore_preflight_errors | to_json }}
{% endif %}
controlPlane:
  localAPIEndpoint:
    advertiseAddress: {{ k8s_control_plane_node_address }}
    bindPort: 6443
  certificateKey: {{ k8s_control_plane_join.certificate_key }}
"""
OLD_WORKER = """\
# {{ ansible_managed }}
apiVersion: kubeadm.k8s.io/v1beta4
kind: JoinConfiguration
discovery:
  bootstrapToken:
    apiServerEndpoint: {{ k8s_worker_join.endpoint }}
    token: {{ k8s_worker_join.token }}
    caCertHashes:
      - {{ k8s_worker_join.ca_cert_hash }}
nodeRegistration:
  name: {{ inventory_hostname }}
  criSocket: unix:///run/containerd/containerd.sock
  kubeletExtraArgs:
    - name: node-ip
      value: {{ k8s_worker_node_address }}
  taints: {{ k8s_worker_node_taints | to_json }}
{% if k8s_worker_ignore_preflight_errors %}
  ignorePreflightErrors: {{ k8s_worker_ignore_preflight_errors | to_json }}
{% endif %}
# Per-node KubeletConfiguration patches (written by the k8s_node role).
patches:
  directory: /etc/kubernetes/patches
"""
PATCHES = """\
# Per-node KubeletConfiguration patches (written by the k8s_node role).
patches:
  directory: /etc/kubernetes/patches
"""
CREDENTIALS = {'endpoint': '10.0.0.100:6443', 'token': 'abcdef.0123456789abcdef',
               'ca_cert_hash': 'sha256:' + 'a' * 64, 'certificate_key': 'c' * 64}
TAINTS = [[], [{'key': 'nvidia.com/gpu', 'value': 'present', 'effect': 'NoSchedule'},
               {'key': 'dedicated', 'effect': 'NoExecute'}]]
PREFLIGHT = [[], ['Swap', 'SystemVerification']]


def _render(template, variables):
    # As the template module renders: trim_blocks, the trailing newline kept.
    env = jinja2.Environment(trim_blocks=True, keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    core = CoreFilters().filters()
    env.filters.update(to_json=core['to_json'], bool=core['bool'])
    return env.from_string(template).render({'ansible_managed': MANAGED, 'inventory_hostname': 'node1', **variables})


def _new(control_plane, address, taints, preflight):
    return _render((ROLE / 'templates/kubeadm-join.yaml.j2').read_text(), {
        'kubeadm_join_control_plane': control_plane, 'kubeadm_join_credentials': CREDENTIALS,
        'kubeadm_join_node_address': address, 'kubeadm_join_taints': taints,
        'kubeadm_join_ignore_preflight_errors': preflight})


@pytest.mark.parametrize('preflight', PREFLIGHT)
def test_the_control_plane_configuration_is_unchanged(preflight):
    old = _render(OLD_CONTROL_PLANE, {'k8s_control_plane_join': CREDENTIALS,
                                      'k8s_control_plane_node_address': '10.0.0.11',
                                      'k8s_control_plane_ignore_preflight_errors': preflight})
    assert _new(True, '10.0.0.11', [], preflight) == old
    assert yaml.safe_load(old)['controlPlane']['certificateKey'] == 'c' * 64


@pytest.mark.parametrize('taints', TAINTS)
@pytest.mark.parametrize('preflight', PREFLIGHT)
def test_the_worker_configuration_is_unchanged(taints, preflight):
    old = _render(OLD_WORKER, {'k8s_worker_join': CREDENTIALS, 'k8s_worker_node_address': '10.0.0.21',
                               'k8s_worker_node_taints': taints, 'k8s_worker_ignore_preflight_errors': preflight})
    new = _new(False, '10.0.0.21', taints, preflight)
    # The same document; only the patches block sits where the control plane's has it.
    assert yaml.safe_load(new) == yaml.safe_load(old)
    assert new.replace(PATCHES, '') == old.replace(PATCHES, '') and new.count(PATCHES) == 1
    assert yaml.safe_load(new)['nodeRegistration']['taints'] == taints and 'controlPlane' not in yaml.safe_load(new)


def test_the_roles_use_the_shared_join():
    tasks = yaml.safe_load((ROOT / 'roles/k8s_control_plane/tasks/join.yml').read_text())
    [include] = tasks
    assert include['ansible.builtin.include_role'] == {'name': 'kubeadm_join'}
    assert include['vars'] == {
        'kubeadm_join_control_plane': True, 'kubeadm_join_credentials': '{{ k8s_control_plane_join }}',
        'kubeadm_join_node_address': '{{ k8s_control_plane_node_address }}',
        'kubeadm_join_ignore_preflight_errors': '{{ k8s_control_plane_ignore_preflight_errors }}'}
    [join] = [t for t in yaml.safe_load((ROOT / 'roles/k8s_worker/tasks/main.yml').read_text()) if t['name'] == 'Join']
    assert join['ansible.builtin.include_role'] == {'name': 'kubeadm_join'} and join['when'] == 'not k8s_node_joined'
    assert join['vars'] == {
        'kubeadm_join_credentials': '{{ k8s_worker_join }}',
        'kubeadm_join_node_address': '{{ k8s_worker_node_address }}',
        'kubeadm_join_taints': '{{ k8s_worker_node_taints }}',
        'kubeadm_join_ignore_preflight_errors': '{{ k8s_worker_ignore_preflight_errors }}'}
    # No other copy of the join or its template (init.yml's reset undoes a failed init).
    copies = sorted(str(p.relative_to(ROOT)) for p in (ROOT / 'roles').rglob('*')
                    if p.is_file() and 'kubeadm_join' not in p.parts
                    and (p.name == 'kubeadm-join.yaml.j2'
                         or any(s in p.read_text(errors='ignore')
                                for s in ('kubeadm, join,', '/etc/kubernetes/kubeadm-join.yaml'))))
    assert copies == []


def test_each_command_says_why_it_is_not_a_module():
    lines = (ROLE / 'tasks/main.yml').read_text().splitlines()
    for i, line in enumerate(lines):
        if 'ansible.builtin.command:' in line:
            comment = next(lines[j] for j in range(i - 1, -1, -1) if lines[j].strip().startswith('#'))
            assert 'kubeadm has no Ansible module' in comment, lines[i - 1]


FAKE_KUBEADM = """\
#!/bin/sh
# A stand-in kubeadm: logs each call; `join --config <dir>/kubeadm-join.yaml` keeps a copy of the
# configuration, takes a second, and leaves <dir>/joined (or fails for a host dir named bad*).
log="$(dirname "$0")/calls.log"
case "$1" in
  join)
    dir=$(dirname "$3")
    host=$(basename "$dir")
    echo "$host join-start $(date +%s.%N)" >> "$log"
    cp "$3" "$dir/seen.yaml"
    sleep 1
    echo "$host join-end $(date +%s.%N)" >> "$log"
    case "$host" in bad*) echo "error execution phase preflight: boom" >&2; exit 1;; esac
    touch "$dir/joined" ;;
  reset)
    echo "- reset $*" >> "$log" ;;
esac
"""
HOSTS = {
    # host: (control plane, credentials)
    'cp2': (True, CREDENTIALS),
    'cp3': (True, CREDENTIALS),
    'cp4': (True, CREDENTIALS),
    'w1': (False, CREDENTIALS),
    'w2': (False, CREDENTIALS),
    'badw': (False, CREDENTIALS),
    'nocreds': (False, {}),
    'cpnokey': (True, {**CREDENTIALS, 'certificate_key': ''}),
}


def _run(tmp, env):
    proc = subprocess.run([str(Path(sys.executable).parent / 'ansible-playbook'), str(tmp / 'play.yml'),
                           '-i', str(tmp / 'hosts.yml')], cwd=tmp, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    tasks = {}
    for task in json.loads(proc.stdout)['plays'][0]['tasks']:
        tasks.setdefault(task['task']['name'].split(' : ', 1)[-1], {}).update(task['hosts'])
    return proc, tasks


@pytest.fixture(scope='module')
def joined(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('kubeadm_join')
    bindir = tmp / 'bin'
    bindir.mkdir()
    (bindir / 'kubeadm').write_text(FAKE_KUBEADM)
    (bindir / 'kubeadm').chmod(0o755)
    hosts = {}
    for host, (control_plane, credentials) in HOSTS.items():
        (tmp / host).mkdir()
        hosts[host] = {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable,
                       'test_control_plane': control_plane, 'test_credentials': credentials}
    (tmp / 'hosts.yml').write_text(yaml.safe_dump({'all': {'hosts': hosts}}))
    (tmp / 'play.yml').write_text(textwrap.dedent(f'''\
        - name: Join
          hosts: all
          gather_facts: false
          tasks:
            - name: Join
              ansible.builtin.include_role:
                name: kubeadm_join
              vars:
                kubeadm_join_control_plane: "{{{{ test_control_plane }}}}"
                kubeadm_join_credentials: "{{{{ test_credentials }}}}"
                kubeadm_join_node_address: 10.0.0.2
                kubeadm_join_taints: [{{key: dedicated, effect: NoSchedule}}]
                # Into the test's directory instead of /etc/kubernetes.
                kubeadm_join__config: "{tmp}/{{{{ inventory_hostname }}}}/kubeadm-join.yaml"
                kubeadm_join__creates: "{tmp}/{{{{ inventory_hostname }}}}/joined"
        '''))
    env = {**os.environ, 'ANSIBLE_CONFIG': str(ROOT / 'ansible.cfg'), 'ANSIBLE_ROLES_PATH': str(ROOT / 'roles'),
           'ANSIBLE_STDOUT_CALLBACK': 'ansible.posix.json', 'ANSIBLE_CALLBACKS_ENABLED': 'ansible.posix.json',
           'ANSIBLE_FORCE_COLOR': '0', 'ANSIBLE_FORKS': '10', 'PATH': f"{bindir}:{os.environ['PATH']}"}
    first = _run(tmp, env)
    calls_first = (bindir / 'calls.log').read_text().splitlines()
    second = _run(tmp, env)
    calls_second = (bindir / 'calls.log').read_text().splitlines()[len(calls_first):]
    return tmp, first, calls_first, second, calls_second


def test_nodes_join_once(joined):
    tmp, (proc, tasks), calls, (proc2, tasks2), calls2 = joined
    assert proc.returncode == 2, proc.stderr
    for host in ('cp2', 'cp3', 'cp4', 'w1', 'w2'):
        assert tasks['Run kubeadm join'][host]['changed'], host
        assert (tmp / host / 'joined').exists() and not (tmp / host / 'kubeadm-join.yaml').exists(), host
        seen = yaml.safe_load((tmp / host / 'seen.yaml').read_text())
        assert seen['nodeRegistration']['name'] == host
        assert seen['discovery']['bootstrapToken']['token'] == CREDENTIALS['token']
        assert ('controlPlane' in seen) == HOSTS[host][0]
        assert ('taints' in seen['nodeRegistration']) == (not HOSTS[host][0])
    # `creates`: the second run joins no node again.
    assert [c.split()[0] for c in calls2 if 'join-start' in c] == ['badw']
    assert not any(tasks2['Run kubeadm join'][h]['changed'] for h in ('cp2', 'cp3', 'cp4', 'w1', 'w2'))


def test_control_planes_join_one_at_a_time(joined):
    _tmp, _first, calls, _second, _calls2 = joined
    spans = {}
    for line in calls:
        host, what, *when = line.split()
        if host.startswith('cp') and what in ('join-start', 'join-end'):
            spans.setdefault(host, {})[what] = float(when[0])
    assert sorted(spans) == ['cp2', 'cp3', 'cp4']
    ordered = sorted(spans.values(), key=lambda s: s['join-start'])
    assert all(a['join-end'] <= b['join-start'] for a, b in zip(ordered, ordered[1:], strict=False)), ordered


def test_a_failed_join_is_reset_and_reported(joined):
    _tmp, (_proc, tasks), calls, _second, _calls2 = joined
    assert tasks['Undo the failed join']['badw']['changed']
    assert calls.count('- reset reset --force') == 1
    assert tasks['Report the failed join']['badw']['msg'] == (
        'kubeadm join failed and was reset: error execution phase preflight: boom')
    assert set(tasks['Undo the failed join']) == {'badw'}


def test_missing_credentials_are_refused_by_name(joined):
    _tmp, (_proc, tasks), _calls, _second, _calls2 = joined
    check = tasks['Check the control planes issued join credentials']
    assert check['nocreds']['failed'] and check['nocreds']['msg'] == (
        'nocreds has not joined, but the join credentials (k8s_control_plane_join) lack endpoint, token, ca_cert_hash')
    assert check['cpnokey']['failed'] and check['cpnokey']['msg'].endswith('lack certificate_key')
    assert not check['w1'].get('failed')
    assert 'nocreds' not in tasks['Render the join configuration (holds the token; removed after the join)']


def test_the_spec_and_defaults_agree():
    spec = yaml.safe_load((ROLE / 'meta/argument_specs.yml').read_text())['argument_specs']['main']
    defaults = yaml.safe_load((ROLE / 'defaults/main.yml').read_text())
    assert spec['short_description'].startswith('Internal.')
    assert {k: v['default'] for k, v in spec['options'].items() if 'default' in v} == defaults
    assert spec['options']['kubeadm_join_credentials']['no_log'] is True
