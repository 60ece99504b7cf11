"""The pinned vendor APT repository in one place (issue 16, item 9): roles/vendor_apt_repo adds the
signing key and the source entry, refreshes only that source's index when it is new or lacks a
pin, refuses a version the index does not have (naming the repository, the package, the version
and what the index has), writes the pins and tells the caller what it found. nvidia_driver,
nvidia_container_toolkit and dcgm import it and keep no copy of those steps.

The role runs for real here, on localhost: its file paths moved under a temporary directory
(extra variables), apt-get and apt-cache replaced by stand-ins on PATH that keep a fake index
(`apt-get update` copies the "remote" index over the local one and logs its arguments).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_tree import walk_tasks

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / 'roles/vendor_apt_repo'

# The roles that use it -> (task file, what they pass it).
CALLERS = {
    'nvidia_driver': ('tasks/repository.yml', {
        'vendor_apt_repo_owner', 'vendor_apt_repo_name', 'vendor_apt_repo_url', 'vendor_apt_repo_key_url',
        'vendor_apt_repo_files_mirror', 'vendor_apt_repo_pin_file', 'vendor_apt_repo_packages'}),
    'nvidia_container_toolkit': ('tasks/install.yml', {
        'vendor_apt_repo_owner', 'vendor_apt_repo_name', 'vendor_apt_repo_url', 'vendor_apt_repo_key_url',
        'vendor_apt_repo_files_mirror', 'vendor_apt_repo_pin_file', 'vendor_apt_repo_packages'}),
    'dcgm': ('tasks/main.yml', {
        'vendor_apt_repo_owner', 'vendor_apt_repo_name', 'vendor_apt_repo_manage_source', 'vendor_apt_repo_pin_file',
        'vendor_apt_repo_packages', 'vendor_apt_repo_hint'}),
}


def _spec():
    return yaml.safe_load((ROLE / 'meta/argument_specs.yml').read_text())['argument_specs']['main']


# ---- the callers

@pytest.mark.parametrize('role', sorted(CALLERS))
def test_callers_import_the_role_then_end_on_pending(role):
    path, passed = CALLERS[role]
    tasks = yaml.safe_load((ROOT / 'roles' / role / path).read_text())
    [index] = [i for i, t in enumerate(tasks)
               if (t.get('ansible.builtin.import_role') or {}).get('name') == 'vendor_apt_repo']
    # Imported, not included: the caller's tags (--tags nvidia_driver) reach the tasks.
    assert set(tasks[index]['vars']) == passed
    options = _spec()['options']
    assert passed <= set(options)
    assert {name for name, option in options.items() if option.get('required')} <= passed
    assert tasks[index]['vars']['vendor_apt_repo_owner'] == role
    # A check run on a fresh host stops the caller (end_role in vendor_apt_repo would end only that role).
    end = tasks[index + 1]
    assert end['ansible.builtin.meta'] == 'end_role' and end['when'] == 'vendor_apt_repo_result.pending'


def test_the_driver_and_dcgm_share_the_cuda_source_and_keep_their_pin_files():
    passed = {role: next(t for t in yaml.safe_load((ROOT / 'roles' / role / path).read_text())
                         if 'ansible.builtin.import_role' in t)['vars'] for role, (path, _) in CALLERS.items()}
    assert passed['nvidia_driver']['vendor_apt_repo_name'] == passed['dcgm']['vendor_apt_repo_name'] == 'nvidia-cuda'
    assert passed['dcgm']['vendor_apt_repo_manage_source'] is False
    assert passed['nvidia_container_toolkit']['vendor_apt_repo_name'] == 'nvidia-container-toolkit'
    # The file names hosts already have: a renamed pin file would leave the old pin beside the new one.
    assert {role: v['vendor_apt_repo_pin_file'] for role, v in passed.items()} == {
        'nvidia_driver': 'nvidia-driver', 'nvidia_container_toolkit': 'nvidia-container-toolkit', 'dcgm': 'nvidia-dcgm'}


def test_no_copy_of_the_repository_steps_is_left():
    words = ('sources.list.d', 'preferences.d', '/etc/apt/keyrings', 'apt-cache', 'apt-get', 'signed-by')
    modules = {'ansible.builtin.apt_repository', 'ansible.builtin.apt_key', 'ansible.builtin.deb822_repository',
               'apt_repository', 'apt_key', 'deb822_repository'}
    copies = []
    for top in ('roles', 'playbooks'):
        for path in sorted((ROOT / top).rglob('*')):
            # Task files and templates (meta/ may name the steps in a description).
            if (not path.is_file() or path.suffix not in ('.yml', '.yaml', '.j2') or ROLE in path.parents
                    or path.parent.name == 'meta'):
                continue
            text = path.read_text()
            if any(word in text for word in words):
                copies.append(str(path.relative_to(ROOT)))
            elif path.suffix != '.j2' and any(modules & set(t) for t in walk_tasks(yaml.safe_load(text))):
                copies.append(str(path.relative_to(ROOT)))
    assert copies == []
    assert not (ROOT / 'roles/nvidia_driver/templates/preferences.j2').exists()


def test_spec_and_defaults():
    spec = _spec()
    assert spec['short_description'].startswith('Internal.')
    defaults = yaml.safe_load((ROLE / 'defaults/main.yml').read_text())
    options = spec['options']
    assert {k: v['default'] for k, v in options.items() if 'default' in v} == defaults
    # No default stands in for an input the caller must give.
    assert {k for k, v in options.items() if v.get('required')} == {
        'vendor_apt_repo_owner', 'vendor_apt_repo_name', 'vendor_apt_repo_pin_file', 'vendor_apt_repo_packages'}
    assert 'vendor_apt_repo_url' not in defaults and 'vendor_apt_repo_key_url' not in defaults


# ---- the role, run

APT_CACHE = '''\
#!/bin/sh
# apt-cache madison PKG...: the fake index ($FAKE_APT/lists, "name version" lines, newest first).
[ "$1" = madison ] || exit 1
shift
for p in "$@"; do
  [ -f "$FAKE_APT/lists" ] || continue
  while read -r name version; do
    [ "$name" = "$p" ] && printf '%10s | %s | file:/fake ./ Packages\\n' "$name" "$version"
  done < "$FAKE_APT/lists"
done
exit 0
'''
APT_GET = '''\
#!/bin/sh
# apt-get update -o ...: logs its arguments, the local index becomes the remote one.
echo "$*" >> "$FAKE_APT/update.log"
cp "$FAKE_APT/remote" "$FAKE_APT/lists"
'''
PLAY = '''\
- name: A vendor repository
  hosts: all
  gather_facts: false
  environment:
    PATH: "{{ t_bin }}:{{ lookup('ansible.builtin.env', 'PATH') }}"
    FAKE_APT: "{{ t_root }}"
  tasks:
    - name: The repository
      ansible.builtin.import_role:
        name: vendor_apt_repo
      vars:
        vendor_apt_repo_owner: test_owner
        vendor_apt_repo_name: test-repo
        vendor_apt_repo_manage_source: "{{ t_manage }}"
        vendor_apt_repo_url: file://{{ t_root }}/repo/
        vendor_apt_repo_key_url: file://{{ t_root }}/key.asc
        vendor_apt_repo_pin_file: test-pins
        vendor_apt_repo_hint: "{{ t_hint }}"
        vendor_apt_repo_packages: "{{ t_packages }}"

    - name: Show the result
      ansible.builtin.debug:
        var: vendor_apt_repo_result
'''
# Where the role's files go instead of /etc/apt (extra variables win over role variables).
PATHS = {
    'vendor_apt_repo__keyring': '{{ t_root }}/etc/keyrings/test-repo.asc',
    'vendor_apt_repo__source_path': '{{ t_root }}/etc/sources.list.d/test-repo.list',
    'vendor_apt_repo__pin_path': '{{ t_root }}/etc/preferences.d/test-pins',
}
REMOTE = 'nvidia-driver 550.127.05-1\nnvidia-driver 550.54.15-1\nnvidia-driver 535.183.01-1\n' \
         'nvidia-container-toolkit 1.17.8-1\ndatacenter-gpu-manager 1:3.3.9\ndatacenter-gpu-manager 1:3.3.8\n'
DRIVER = [{'name': 'nvidia-driver', 'version': '{{ t_version }}', 'match': 'upstream',
           'variable': 'nvidia_driver_version', 'pin': ['nvidia-driver', 'libnvidia-ml1']},
          {'name': 'nvidia-container-toolkit', 'version': '1.17.8-1', 'pin': []}]
DCGM = [{'name': 'datacenter-gpu-manager', 'version': '1:3.3.9', 'variable': 'dcgm_version'}]
# The role is one task (the module); its name is templated.
TASK = 'Repository, index check and pins'
TEMPLATED = (TASK,)
HOSTS = {
    # host -> (manage the source, packages, local index at the start, a source list another role added)
    'fresh': (True, DRIVER, None, False),
    'upgrade': (True, DRIVER, None, False),  # as fresh; its pin changes between two runs (t_version)
    'missing': (True, [{**DRIVER[0], 'version': '550.99.99'}], REMOTE, False),
    'external': (False, DCGM, 'datacenter-gpu-manager 1:3.3.8\n', True),
    'external-missing': (False, DCGM, None, False),
    'check-fresh': (True, DRIVER, None, False),
}


@pytest.fixture(scope='module')
def lab(tmp_path_factory):
    tmp = tmp_path_factory.mktemp('vendor_apt_repo')
    bin_dir = tmp / 'bin'
    bin_dir.mkdir()
    for name, text in (('apt-cache', APT_CACHE), ('apt-get', APT_GET)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    hosts = {}
    for host, (manage, packages, local, added) in HOSTS.items():
        root = tmp / host
        for sub in ('etc/sources.list.d', 'etc/preferences.d', 'repo'):
            (root / sub).mkdir(parents=True)
        (root / 'key.asc').write_text('-----BEGIN PGP PUBLIC KEY BLOCK-----\ntest\n')
        (root / 'remote').write_text(REMOTE)
        if local is not None:
            (root / 'lists').write_text(local)
        if added:
            (root / 'etc/sources.list.d/test-repo.list').write_text('deb [signed-by=x] file:/elsewhere/ /\n')
        hosts[host] = {'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable,
                       't_root': str(root), 't_bin': str(bin_dir), 't_manage': manage, 't_packages': packages,
                       't_version': "{{ lookup('ansible.builtin.file', t_root ~ '/version') }}",
                       't_hint': 'apply the other role first' if not manage else ''}
        (root / 'version').write_text('550.54.15')
    (tmp / 'hosts.yml').write_text(yaml.safe_dump({'all': {'hosts': hosts}}))
    (tmp / 'play.yml').write_text(PLAY)

    def run(*args):
        env = {**os.environ, 'ANSIBLE_CONFIG': str(ROOT / 'ansible.cfg'), 'ANSIBLE_ROLES_PATH': str(ROOT / 'roles'),
               'ANSIBLE_STDOUT_CALLBACK': 'ansible.posix.json', 'ANSIBLE_CALLBACKS_ENABLED': 'ansible.posix.json',
               'ANSIBLE_FORCE_COLOR': '0', 'ANSIBLE_FORKS': '10'}
        proc = subprocess.run([str(Path(sys.executable).parent / 'ansible-playbook'), str(tmp / 'play.yml'),
                               '-i', str(tmp / 'hosts.yml'), '-e', json.dumps(PATHS), *args], cwd=tmp, env=env,
                              capture_output=True, text=True, timeout=300, check=False)
        report = json.loads(proc.stdout)
        tasks = {}
        for task in report['plays'][0]['tasks']:
            # 'vendor_apt_repo : Pin nvidia-driver=...' -> 'Pin': a name is templated for one host only.
            name = task['task']['name'].split(' : ', 1)[-1]
            tasks.setdefault(next((p for p in TEMPLATED if name.startswith(p + ' ')), name), {}).update(task['hosts'])
        return tasks, report['stats']

    return tmp, run


def _changed(tmp, tasks, host):
    """The files the module wrote on host, relative to its root; [] when it reported no change."""
    result = tasks[TASK][host]
    assert result['changed'] == bool(result['changes'])
    return sorted(str(Path(path).relative_to(tmp / host)) for path in result['changes'])


def _result(tasks, host):
    result = tasks['Show the result'][host]['vendor_apt_repo_result']
    return {key: result[key] for key in ('pending', 'versions')}


def _updates(tmp, host):
    log = tmp / host / 'update.log'
    return log.read_text().splitlines() if log.exists() else []


def test_the_role_on_fresh_and_converged_hosts(lab):
    tmp, run = lab
    tasks, stats = run('--limit', 'fresh,upgrade,missing,external,external-missing')
    root = tmp / 'fresh'
    assert stats['upgrade'] == stats['fresh']

    # A fresh host: key, source entry and pins written; only this source's index refreshed, once.
    assert _changed(tmp, tasks, 'fresh') == ['etc/keyrings', 'etc/keyrings/test-repo.asc',
                                             'etc/preferences.d/test-pins', 'etc/sources.list.d/test-repo.list']
    assert tasks[TASK]['fresh']['refreshed'] is True
    assert (root / 'etc/keyrings/test-repo.asc').read_text() == (root / 'key.asc').read_text()
    assert _updates(tmp, 'fresh') == [
        'update -o Dir::Etc::sourcelist=sources.list.d/test-repo.list -o Dir::Etc::sourceparts=- '
        '-o APT::Get::List-Cleanup=0']
    assert (root / 'etc/sources.list.d/test-repo.list').read_text() == (
        f'# Managed by ai_platform test_owner (role vendor_apt_repo): file://{root}/repo/.\n'
        f'deb [signed-by={root}/etc/keyrings/test-repo.asc] file://{root}/repo/ /\n')
    pins = (root / 'etc/preferences.d/test-pins').read_text()
    assert pins.endswith('Change nvidia_driver_version to upgrade.\n'
                         'Package: nvidia-driver libnvidia-ml1\nPin: version 550.54.15-1\nPin-Priority: 1001\n')
    assert _result(tasks, 'fresh') == {
        'pending': False, 'versions': {'nvidia-driver': '550.54.15-1', 'nvidia-container-toolkit': '1.17.8-1'}}

    # A version the repository does not have: refused after one refresh, naming what the index has.
    assert stats['missing']['failures'] == 1
    assert tasks[TASK]['missing']['msg'] == (
        f"test_owner: the repository file://{tmp}/missing/repo/ ({tmp}/missing/etc/sources.list.d/test-repo.list) "
        "has no nvidia-driver 550.99.99-<revision> (nvidia_driver_version): the index has 550.127.05-1, "
        "550.54.15-1, 535.183.01-1")
    assert len(_updates(tmp, 'missing')) == 1
    assert not (tmp / 'missing/etc/preferences.d/test-pins').exists()

    # A source another role added, whose index lacks the pin: refreshed, pinned; its files untouched.
    assert _changed(tmp, tasks, 'external') == ['etc/preferences.d/test-pins']
    assert len(_updates(tmp, 'external')) == 1
    assert (tmp / 'external/etc/sources.list.d/test-repo.list').read_text() == 'deb [signed-by=x] file:/elsewhere/ /\n'
    assert not (tmp / 'external/etc/keyrings').exists()
    assert 'Package: datacenter-gpu-manager\nPin: version 1:3.3.9\n' in (
        tmp / 'external/etc/preferences.d/test-pins').read_text()

    # ... and without it: refused with the caller's hint, nothing refreshed.
    assert tasks[TASK]['external-missing']['msg'] == (
        f"test_owner: the package index (there is no {tmp}/external-missing/etc/sources.list.d/test-repo.list) has no "
        "datacenter-gpu-manager 1:3.3.9 (dcgm_version): the index has none of it. apply the other role first")
    assert _updates(tmp, 'external-missing') == []

    # Converged: nothing changed, nothing refreshed (reading an index is no change). A new pin the
    # index has: only the pin changes, no refresh.
    (tmp / 'upgrade/version').write_text('550.127.05')
    tasks, stats = run('--limit', 'fresh,external,upgrade')
    assert stats['fresh']['changed'] == stats['external']['changed'] == 0
    assert _changed(tmp, tasks, 'upgrade') == ['etc/preferences.d/test-pins']
    assert tasks[TASK]['upgrade']['refreshed'] is tasks[TASK]['fresh']['refreshed'] is False
    assert 'Pin: version 550.127.05-1\n' in (tmp / 'upgrade/etc/preferences.d/test-pins').read_text()
    assert tasks['Show the result']['upgrade']['vendor_apt_repo_result']['versions']['nvidia-driver'] == '550.127.05-1'
    assert len(_updates(tmp, 'fresh')) == len(_updates(tmp, 'external')) == len(_updates(tmp, 'upgrade')) == 1

    # Check mode: a converged host is predicted (no change); a fresh one is reported pending, untouched.
    (tmp / 'check-fresh/version').write_text('550.127.05')
    tasks, stats = run('--limit', 'fresh,check-fresh', '--check')
    assert stats['fresh']['changed'] == 0 and stats['check-fresh']['failures'] == 0
    assert _result(tasks, 'fresh')['pending'] is False
    assert _result(tasks, 'check-fresh') == {
        'pending': True, 'versions': {'nvidia-driver': '', 'nvidia-container-toolkit': ''}}
    check = tmp / 'check-fresh'
    assert tasks[TASK]['check-fresh']['msg'] == (
        f'Check mode: file://{check}/repo/ would be added as {check}/etc/sources.list.d/test-repo.list; '
        'nvidia-driver 550.127.05-<revision> (nvidia_driver_version), nvidia-container-toolkit 1.17.8-1 cannot be '
        'checked against it before it is; the rest of test_owner is not predicted on this host')
    assert tasks[TASK]['check-fresh']['warnings'] == [tasks[TASK]['check-fresh']['msg']]
    assert tasks[TASK]['check-fresh']['changed'] is True
    assert _updates(tmp, 'check-fresh') == []
    assert sorted(str(p.relative_to(check)) for p in (check / 'etc').rglob('*')) == [
        'etc/preferences.d', 'etc/sources.list.d']
