"""Unit tests for the pure checks of the ai_platform.l1.inventory_validate action plugin."""

import importlib.util
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
COLLECTION = ROOT / 'collections/ansible_collections/ai_platform/l1'


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


iv = _load(COLLECTION / 'plugins/action/inventory_validate.py', 'inventory_validate_action')

GROUPS = {
    'all': ['cp1', 'cp2', 'cp3', 'gpu1', 'gpu2', 'npu1'],
    'k8s_control_plane': ['cp1', 'cp2', 'cp3'],
    'k8s_worker': ['gpu1', 'gpu2', 'npu1'],
    'gpu_nvidia': ['gpu1', 'gpu2'],
    'npu_ascend': ['npu1'],
}
CLUSTER = {'k8s_version': '1.28.15', 'k8s_pod_cidr': '10.244.0.0/16', 'k8s_service_cidr': '10.96.0.0/12'}


def hostvars(**overrides):
    """Every host gets the cluster values; overrides map host -> extra/replaced vars."""
    return {host: {**CLUSTER, **overrides.get(host, {})} for host in GROUPS['all']}


def test_type_name_tells_bool_from_int_and_float():
    assert [iv.type_name(v) for v in (True, 3, 12.4, 'x', {}, [], None)] == [
        'bool', 'int', 'float', 'str', 'dict', 'list', 'null']


@pytest.mark.parametrize(('value', 'rule', 'expected'), [
    ('550.54.15', {'type': 'str', 'pattern': r'^\d{3}\.\d{2,3}(\.\d{2,3})?$'}, []),
    ('55x', {'type': 'str', 'pattern': r'^\d{3}$'}, [r"v must match ^\d{3}$ (got '55x')"]),
    (12.4, {'type': 'str'}, ['v must be a string (got float 12.4; quote it in YAML)']),
    ('22', {'type': 'int'}, ["v must be an integer (got str '22')"]),
    (True, {'type': 'int'}, ['v must be an integer (got bool True)']),
    ('yes', {'type': 'bool'}, ["v must be a boolean (got str 'yes')"]),
    (3, {'type': 'float'}, []),
    (0, {'type': 'int', 'min': 1, 'max': 65535}, ['v must be >= 1 (got 0)']),
    (70000, {'type': 'int', 'min': 1, 'max': 65535}, ['v must be <= 65535 (got 70000)']),
    ('xfs', {'choices': ['ext4', 'btrfs']}, ["v must be one of 'ext4', 'btrfs' (got 'xfs')"]),
    (['a', 1], {'type': 'list', 'elements': 'str'}, ['v items must each be a string (got 1)']),
    ('1.27.9', {'version_min': '1.28.0'}, ["v must be version 1.28.0 or newer (got '1.27.9')"]),
    ('1.30.0', {'version_min': '1.28.0'}, []),
    ('1.28.0-rc.1', {'version_min': '1.28.0'}, []),
    # A value failing its pattern is not also compared as a version (one error, not two).
    ('x1', {'pattern': r'^\d', 'version_min': '1.28.0'}, [r"v must match ^\d (got 'x1')"]),
])
def test_check_value(value, rule, expected):
    assert iv.check_value('v', value, rule) == expected


@pytest.mark.parametrize(('value', 'fmt', 'problem'), [
    ('10.244.0.0/16', 'cidr', None),
    ('fd00:10:244::/56', 'cidr', None),
    ('10.244.0.0/33', 'cidr', 'a CIDR such as 10.244.0.0/16'),
    ('10.244.1.0/15', 'cidr', 'a network address, 10.244.0.0/15'),
    ('10.244.0.0', 'cidr', 'a CIDR with a prefix length such as 10.244.0.0/16'),
    ('192.0.2.1', 'ip', None),
    ('192.0.2.300', 'ip', 'an IP address'),
    ('/srv/cache', 'abspath', None),
    ('srv/cache', 'abspath', 'an absolute path'),
    ('gpu-a100-01.dc1.example.com', 'hostname_or_ip', None),
    ('192.0.2.7', 'hostname_or_ip', None),
    ('192.0.2.300', 'hostname_or_ip', 'an IP address or a DNS name'),
    ('gpu_01', 'hostname_or_ip', 'an IP address or a DNS name'),
])
def test_formats(value, fmt, problem):
    message = iv.check_format('v', value, fmt)
    assert message == (f'v must be {problem} (got {value!r})' if problem else None)


def test_valid_inventory_has_no_errors():
    rules = {'k8s_pod_cidr': {'required': True, 'type': 'str', 'format': 'cidr', 'same_on_all_hosts': True}}
    assert iv.validate_inventory(
        GROUPS, hostvars(), required_groups=['k8s_control_plane', 'k8s_worker'],
        group_sizes={'k8s_control_plane': [1, 3, 5, 7]}, exclusive_groups=[['k8s_control_plane', 'k8s_worker']],
        member_of={'gpu_nvidia': 'k8s_worker'}, unique_vars=['ansible_host'], rules=rules,
        disjoint_cidrs=[['k8s_pod_cidr', 'k8s_service_cidr', 'ansible_host']]) == []


def test_group_checks():
    groups = {**GROUPS, 'k8s_control_plane': ['cp1', 'cp2'], 'k8s_worker': []}
    assert iv.validate_inventory(groups, hostvars(), required_groups=['k8s_worker', 'storage'],
                                 group_sizes={'k8s_control_plane': [1, 3, 5]}) == [
        'group k8s_worker: required group has no hosts',
        'group storage: required group is missing from the inventory',
        'group k8s_control_plane: must have 1, 3 or 5 hosts (has 2: cp1, cp2)',
    ]


def test_membership_checks():
    groups = {**GROUPS, 'npu_ascend': ['npu1', 'gpu1', 'cp9'], 'all': [*GROUPS['all'], 'cp9']}
    assert iv.validate_inventory(groups, hostvars(), exclusive_groups=[['gpu_nvidia', 'npu_ascend']],
                                 member_of={'npu_ascend': 'k8s_worker'}) == [
        'host gpu1: is in gpu_nvidia and npu_ascend, which are mutually exclusive',
        'host cp9: is in npu_ascend but not in k8s_worker',
    ]


def test_unique_ignores_hosts_without_the_variable():
    hv = hostvars(gpu1={'ansible_host': '192.0.2.5'}, gpu2={'ansible_host': '192.0.2.5'},
                  npu1={'ansible_host': '192.0.2.6'})
    assert iv.validate_inventory(GROUPS, hv, unique_vars=['ansible_host']) == [
        "hosts gpu1, gpu2: ansible_host must be unique (each is '192.0.2.5')"]


def test_same_error_on_every_host_of_the_scope_folds_into_a_group_line():
    hv = hostvars(**{h: {'nvidia_driver_version': '55x'} for h in ('gpu1', 'gpu2')})
    rules = {'nvidia_driver_version': {'hosts': 'gpu_nvidia', 'pattern': r'^\d{3}\.'}}
    assert iv.validate_inventory(GROUPS, hv, rules=rules) == [
        r"group gpu_nvidia: nvidia_driver_version must match ^\d{3}\. (got '55x')"]


def test_same_error_on_some_hosts_names_them_and_truncates_long_lists():
    groups = {'all': [f'n{i}' for i in range(10)]}
    hv = {h: {'x': 'bad' if h != 'n9' else 1} for h in groups['all']}
    assert iv.validate_inventory(groups, hv, rules={'x': {'type': 'int'}}) == [
        "hosts n0, n1, n2, n3, n4 and 4 more: x must be an integer (got str 'bad')"]


def test_required_and_same_on_all_hosts():
    hv = hostvars(gpu1={'k8s_version': '1.29.2'})
    del hv['npu1']['k8s_version']
    rules = {'k8s_version': {'required': True, 'same_on_all_hosts': True}}
    assert iv.validate_inventory(GROUPS, hv, rules=rules) == [
        'host npu1: k8s_version is required but not defined',
        "group all: k8s_version must be the same on every host "
        "(got '1.28.15' on cp1, cp2, cp3, gpu2; '1.29.2' on gpu1)",
    ]


def test_rules_for_an_absent_group_check_nothing():
    groups = {k: v for k, v in GROUPS.items() if k != 'npu_ascend'}
    rules = {'ascend_cann_version': {'hosts': 'npu_ascend', 'required': True}}
    assert iv.validate_inventory(groups, hostvars(), rules=rules) == []


def test_disjoint_cidrs():
    hv = hostvars(**{h: {'k8s_pod_cidr': '10.96.0.0/16'} for h in GROUPS['all']})
    hv['gpu1']['ansible_host'] = 'gpu1.example.com'  # DNS names are not addresses: ignored
    hv['npu1']['ansible_host'] = '10.100.0.7'
    assert iv.validate_inventory(GROUPS, hv, disjoint_cidrs=[['k8s_pod_cidr', 'k8s_service_cidr', 'ansible_host']]) == [
        "group all: k8s_pod_cidr '10.96.0.0/16' overlaps k8s_service_cidr '10.96.0.0/12'",
        "host npu1: k8s_service_cidr '10.96.0.0/12' overlaps ansible_host '10.100.0.7'",
    ]


class Exploding(dict):
    """A host's vars where one value fails to template, as HostVarsVars raises."""

    def __getitem__(self, key):
        if key == 'k8s_version':
            raise RuntimeError("'undefined_var' is undefined\nmore detail")
        return super().__getitem__(key)


def test_templating_error_is_a_finding_not_a_crash():
    hv = hostvars()
    hv['cp1'] = Exploding(hv['cp1'])
    assert iv.validate_inventory(GROUPS, hv, rules={'k8s_version': {'type': 'str'}}) == [
        "host cp1: k8s_version cannot be templated: 'undefined_var' is undefined"]


COMMON_SPEC = {
    'common_chrony_servers': {'type': 'list', 'elements': 'str', 'required': True},
    'common_hugepages_2m': {'type': 'int', 'default': 0},
    'common_rdma_enabled': {'type': 'bool', 'default': False},
}


def test_role_argument_specs():
    hv = hostvars(**{h: {'common_chrony_servers': ['ntp1']} for h in GROUPS['all']})
    hv['gpu1']['common_hugepages_2m'] = 'lots'
    hv['npu1']['common_rdma_enable'] = True
    del hv['cp2']['common_chrony_servers']
    errors = iv.validate_inventory(GROUPS, hv, role_specs={'common': iv.RoleSpec('all', COMMON_SPEC)})
    assert errors == [
        'host cp2: role common: missing required arguments: common_chrony_servers',
        "host gpu1: role common: argument 'common_hugepages_2m' is of type str and we were unable to convert to int: "
        "\"'lots'\" cannot be converted to an int",
        'host npu1: common_rdma_enable is not a variable of role common (did you mean common_rdma_enabled?)',
    ]


def test_role_spec_conversion_is_accepted_as_ansible_does():
    hv = hostvars(**{h: {'common_chrony_servers': ['ntp1'], 'common_hugepages_2m': '64'} for h in GROUPS['all']})
    assert iv.validate_inventory(GROUPS, hv, role_specs={'common': iv.RoleSpec('all', COMMON_SPEC)}) == []


def test_missing_role_spec_is_an_error():
    role_specs = {'nope': iv.RoleSpec('all', 'no meta/argument_specs.yml found')}
    errors = iv.validate_inventory(GROUPS, hostvars(), role_specs=role_specs)
    assert errors == ['role nope: no meta/argument_specs.yml found']


def test_find_role_options(tmp_path):
    class Loader:
        @staticmethod
        def load_from_file(path):
            return yaml.safe_load(Path(path).read_text())

    meta = tmp_path / 'roles/common/meta'
    meta.mkdir(parents=True)
    (meta / 'argument_specs.yml').write_text(yaml.safe_dump({'argument_specs': {'main': {'options': COMMON_SPEC}}}))
    assert iv.find_role_options('common', [str(tmp_path / 'x'), str(tmp_path / 'roles')], Loader()) == COMMON_SPEC
    assert iv.find_role_options('other', [str(tmp_path / 'roles')], Loader()).startswith('no meta/argument_specs.yml')


def test_schema_mistakes_are_reported():
    rules = {'a': {'typ': 'str'}, 'b': {'type': 'string', 'format': 'url', 'pattern': '('}, 'c': 'str'}
    errors = iv.check_rules(rules)
    assert errors[0].startswith("schema: variables.a has unknown rule 'typ' (known: ")
    assert errors[1:4] == [
        'schema: variables.b.type must be one of str, int, float, bool, list, dict (got \'string\')',
        f"schema: variables.b.format must be one of {', '.join(iv.FORMATS)} (got 'url')",
        'schema: variables.b.pattern is not a valid regular expression '
        '(missing ), unterminated subpattern at position 0)',
    ]
    assert errors[4] == 'schema: variables.c must be a dict of rules (got str)'


def test_project_schema_is_well_formed():
    schema = yaml.safe_load((ROOT / 'playbooks/vars/inventory_schema.yml').read_text())['inventory_schema']
    assert iv.check_rules(schema['variables']) == []
    assert set(schema) - {'variables'} <= set(iv.ARGUMENT_SPEC)


def test_documentation_matches_the_argument_spec():
    doc_module = _load(COLLECTION / 'plugins/modules/inventory_validate.py', 'inventory_validate_doc')
    doc = yaml.safe_load(doc_module.DOCUMENTATION)
    documented = {name: {k: v for k, v in opt.items() if k in ('type', 'elements', 'default')}
                  for name, opt in doc['options'].items()}
    assert documented == iv.ARGUMENT_SPEC


def test_union_scope_checks_only_the_hosts_that_run_the_role():
    groups = {**GROUPS, 'storage': ['st1'], 'all': [*GROUPS['all'], 'st1']}
    hv = {**hostvars(), 'st1': dict(CLUSTER)}  # a storage node does not run common: no NTP servers needed
    for host in GROUPS['all']:
        hv[host]['common_hugepages_2m'] = 'x'
    role_specs = {'common': iv.RoleSpec('k8s_control_plane:k8s_worker', COMMON_SPEC)}
    errors = iv.validate_inventory(groups, hv, role_specs=role_specs)
    assert errors == [
        'groups k8s_control_plane, k8s_worker: role common: missing required arguments: common_chrony_servers',
        "groups k8s_control_plane, k8s_worker: role common: argument 'common_hugepages_2m' is of type str and we "
        "were unable to convert to int: \"'x'\" cannot be converted to an int",
    ]


PLUGINS_SPEC = {'k8s_device_plugins_mig_strategy': {'type': 'str', 'choices': ['none', 'single', 'mixed']},
                'k8s_device_plugins_api_host': {'type': 'str', 'required': True}}
NODE_SPEC = {'k8s_node_version': {'type': 'str'}}


def test_the_longest_role_prefix_owns_a_variable():
    hv = hostvars(**{h: {'k8s_node_verison': '1', 'k8s_device_plugins_mig_stratgy': 'x'} for h in GROUPS['all']})
    role_specs = {
        'k8s_node': iv.RoleSpec('all', NODE_SPEC),
        'k8s_device_plugins': iv.RoleSpec('all', PLUGINS_SPEC, frozenset({'k8s_device_plugins_api_host'})),
    }
    assert iv.validate_inventory(GROUPS, hv, role_specs=role_specs) == [
        'group all: k8s_node_verison is not a variable of role k8s_node (did you mean k8s_node_version?)',
        'group all: k8s_device_plugins_mig_stratgy is not a variable of role k8s_device_plugins '
        '(did you mean k8s_device_plugins_mig_strategy?)',
    ]
    assert iv.role_owner('k8s_device_plugins_x', role_specs) == 'k8s_device_plugins'
    assert iv.role_owner('k8s_nodes', role_specs) is None


def test_set_by_playbook_is_not_required_and_an_inventory_value_is_refused():
    spec = iv.RoleSpec('k8s_worker', PLUGINS_SPEC, frozenset({'k8s_device_plugins_api_host'}))
    assert iv.validate_inventory(GROUPS, hostvars(), role_specs={'k8s_device_plugins': spec}) == []
    hv = hostvars(gpu1={'k8s_device_plugins_api_host': 'cp9'})
    assert iv.validate_inventory(GROUPS, hv, role_specs={'k8s_device_plugins': spec}) == [
        'host gpu1: k8s_device_plugins_api_host is set by the playbook that runs role k8s_device_plugins; '
        'the inventory value would be ignored']
    # Without the playbook's value the role would refuse to start: required stays required.
    errors = iv.validate_inventory(GROUPS, hostvars(), role_specs={'k8s_device_plugins': spec._replace(
        set_by_playbook=frozenset())})
    assert errors == ['group k8s_worker: role k8s_device_plugins: missing required arguments: '
                      'k8s_device_plugins_api_host']


def test_a_switched_off_role_is_not_checked_and_its_switch_is_no_typo():
    spec = iv.RoleSpec('k8s_worker', PLUGINS_SPEC, enabled_by='k8s_device_plugins_enabled')
    hv = hostvars(**{h: {'k8s_device_plugins_enabled': False} for h in GROUPS['all']})
    assert iv.validate_inventory(GROUPS, hv, role_specs={'k8s_device_plugins': spec}) == []
    hv['gpu1']['k8s_device_plugins_enabled'] = 'true'  # -e name=true arrives as a string
    assert iv.validate_inventory(GROUPS, hv, role_specs={'k8s_device_plugins': spec}) == [
        'host gpu1: role k8s_device_plugins: missing required arguments: k8s_device_plugins_api_host']


def test_a_role_switched_on_by_a_value_is_checked_only_where_the_variable_has_it():
    spec = iv.RoleSpec('k8s_worker', PLUGINS_SPEC, enabled_by='containerd_snapshotter=stargz')
    hv = hostvars(**{h: {'containerd_snapshotter': 'overlayfs'} for h in GROUPS['all']})
    assert iv.validate_inventory(GROUPS, hv, role_specs={'k8s_device_plugins': spec}) == []
    hv['gpu1']['containerd_snapshotter'] = 'stargz'
    assert iv.validate_inventory(GROUPS, hv, role_specs={'k8s_device_plugins': spec}) == [
        'host gpu1: role k8s_device_plugins: missing required arguments: k8s_device_plugins_api_host']
    # The switch is read (never "not read by any role"); its name, not name=value, is no typo.
    assert iv._switch_name('containerd_snapshotter=stargz') == 'containerd_snapshotter'


def test_a_variable_with_its_own_rule_is_no_typo():
    hv = hostvars(**{h: {'k8s_node_address': '192.0.2.1'} for h in GROUPS['all']})
    role_specs = {'k8s_node': iv.RoleSpec('all', NODE_SPEC)}
    assert iv.validate_inventory(GROUPS, hv, rules={'k8s_node_address': {'format': 'ip'}}, role_specs=role_specs) == []
    assert iv.validate_inventory(GROUPS, hv, role_specs=role_specs) == [
        'group all: k8s_node_address is not a variable of role k8s_node (did you mean k8s_node_version?)']


def test_role_spec_entries():
    assert iv.role_spec('gpu_nvidia', {}) == iv.RoleSpec('gpu_nvidia', {})
    entry = {'hosts': 'k8s_worker', 'set_by_playbook': ['a_b'], 'enabled_by': 'a_on'}
    assert iv.role_spec(entry, {}) == iv.RoleSpec('k8s_worker', {}, frozenset({'a_b'}), 'a_on')


def _role_uses(playbook, seen=None):
    """role -> the vars the playbook's plays pass it (roles: vars and include_role vars), recursively."""
    uses = {} if seen is None else seen
    for play in yaml.safe_load(playbook.read_text()):
        if 'ansible.builtin.import_playbook' in play:
            _role_uses(playbook.parent / play['ansible.builtin.import_playbook'], uses)
            continue
        for entry in play.get('roles') or []:
            name = entry if isinstance(entry, str) else entry['role']
            uses.setdefault(name, set()).update((entry.get('vars') or {}) if isinstance(entry, dict) else ())
        stack = [t for key in ('pre_tasks', 'tasks', 'post_tasks') for t in play.get(key) or []]
        while stack:
            task = stack.pop()
            stack.extend(t for key in ('block', 'rescue', 'always') for t in task.get(key) or [])
            include = task.get('ansible.builtin.include_role') or task.get('ansible.builtin.import_role')
            if include and include.get('tasks_from', 'main') == 'main':
                uses.setdefault(include['name'], set()).update(task.get('vars') or {})
    return uses


def test_schema_covers_every_role_site_runs_with_what_the_playbooks_set():
    schema = yaml.safe_load((ROOT / 'playbooks/vars/inventory_schema.yml').read_text())['inventory_schema']
    uses = _role_uses(ROOT / 'playbooks/site.yml')
    entries = {role: iv.role_spec(entry, {}) for role, entry in schema['role_argument_specs'].items()
               if not iv.is_day2(entry)}
    assert sorted(entries) == sorted(uses)
    for role, names in uses.items():
        assert entries[role].set_by_playbook == names, role


def _internal_roles():
    """Roles that only other roles and playbooks include, with arguments from their own variables (safe_reboot,
    kubeadm_join): their argument specs say 'Internal.'; the inventory never sets their variables."""
    return sorted(p.parents[1].name for p in (ROOT / 'roles').glob('*/meta/argument_specs.yml')
                  if str((yaml.safe_load(p.read_text())['argument_specs'].get('main') or {})
                         .get('short_description', '')).startswith('Internal.'))


def test_internal_roles_are_not_inventory_roles():
    schema = yaml.safe_load((ROOT / 'playbooks/vars/inventory_schema.yml').read_text())['inventory_schema']
    internal = _internal_roles()
    assert {'safe_reboot', 'kubeadm_join'} <= set(internal)
    assert not set(internal) & set(schema['role_argument_specs'])
    assert not set(internal) & set(_role_uses(ROOT / 'playbooks/site.yml'))


def _day2_role_uses():
    """role -> one set per use (roles: entry or include_role, any tasks_from) of the vars a day-2 playbook passes
    (internal roles left out: the playbook passes them its own variables)."""
    uses = {}
    for playbook in sorted((ROOT / 'playbooks/day2').glob('*.yml')):
        for play in yaml.safe_load(playbook.read_text()):
            for entry in play.get('roles') or []:
                name = entry if isinstance(entry, str) else entry['role']
                uses.setdefault(name, []).append(set((entry.get('vars') or {}) if isinstance(entry, dict) else ()))
            stack = [t for key in ('pre_tasks', 'tasks', 'post_tasks') for t in play.get(key) or []]
            while stack:
                task = stack.pop()
                stack.extend(t for key in ('block', 'rescue', 'always') for t in task.get(key) or [])
                include = task.get('ansible.builtin.include_role') or task.get('ansible.builtin.import_role')
                if include and include['name'] not in _internal_roles():
                    uses.setdefault(include['name'], []).append(set(task.get('vars') or {}))
    return uses


def test_schema_marks_the_roles_day2_runs_with_what_every_run_sets():
    schema = yaml.safe_load((ROOT / 'playbooks/vars/inventory_schema.yml').read_text())['inventory_schema']
    entries = {role: iv.role_spec(entry, {}) for role, entry in schema['role_argument_specs'].items()
               if iv.is_day2(entry)}
    uses = _day2_role_uses()
    assert sorted(entries) == sorted(set(uses) - set(_role_uses(ROOT / 'playbooks/site.yml'))) == [
        'node_drain', 'nvidia_mig']
    for role, passed in uses.items():
        if role in entries:
            # Set by every day-2 use: an inventory value would never be read.
            assert entries[role].set_by_playbook == set.intersection(*passed), role


# ---- variables nothing reads

def _unread(groups, hv, **kwargs):
    return iv.validate_inventory(groups, hv, refuse_unread=True, **kwargs)


def test_a_variable_nothing_reads_is_refused_where_it_is_held():
    hv = hostvars(**{h: {'nvidia_cuda_version': '12.4'} for h in GROUPS['gpu_nvidia']})
    hv['npu1']['ascend_cann_version'] = '7.0.0'
    for host in GROUPS['all']:
        hv[host]['cluster_name'] = 'dc1'
    hv['gpu1']['team'] = 'a'
    hv['npu1']['team'] = 'b'
    rules = {name: {} for name in CLUSTER}
    role_specs = {'ascend_driver': iv.RoleSpec('npu_ascend', {'ascend_driver_cann_version': {'type': 'str'}}),
                  'nvidia_driver': iv.RoleSpec('gpu_nvidia', {'nvidia_driver_version': {'type': 'str'}})}
    assert _unread(GROUPS, hv, rules=rules, role_specs=role_specs) == [
        'group all: cluster_name is not read by any role or tool',
        'group gpu_nvidia: nvidia_cuda_version is not read by any role or tool (did you mean nvidia_driver_version?)',
        'hosts gpu1, npu1: team is not read by any role or tool',
        'host npu1: ascend_cann_version is not read by any role or tool (did you mean ascend_driver_cann_version?)',
    ]
    # Off unless asked for: the other checks' tests give hosts whatever variables they need.
    assert iv.validate_inventory(GROUPS, hv, rules=rules, role_specs=role_specs) == []


def test_what_is_read_is_accepted():
    hv = hostvars()
    for host in GROUPS['all']:
        hv[host].update({
            # Ansible's own: connection variables and the magic variables.
            'ansible_host': '192.0.2.1', 'ansible_ssh_common_args': '-o X=y', 'inventory_hostname': host,
            'group_names': [], 'groups': GROUPS, 'playbook_dir': '/p', 'inventory_dir': '/i',
            # A rule (read_by: a tool), a role argument, its switch, a day-2 role's argument.
            'lab_name': 'ai-l1', 'common_chrony_servers': ['ntp1'], 'common_enabled': True, 'nvidia_mig_configs': {},
            # Cached facts (gathering: smart, fact_caching: jsonfile) and an extra variable.
            'discovered_interpreter_python': '/usr/bin/python3', 'ansible_facts': {
                'discovered_interpreter_python': '/usr/bin/python3'},
            'day2_reason': 'maintenance',
        })
    rules = {**{name: {} for name in CLUSTER}, 'lab_name': {'type': 'str', 'read_by': 'lab/labctl.py'}}
    role_specs = {'common': iv.RoleSpec('all', COMMON_SPEC, enabled_by='common_enabled'),
                  'nvidia_mig': iv.RoleSpec('gpu_nvidia', {'nvidia_mig_configs': {'type': 'dict'}}, day2=True)}
    assert _unread(GROUPS, hv, rules=rules, role_specs=role_specs, not_inventory={'day2_reason'}) == []
    # The same names without what makes them read.
    assert _unread(GROUPS, hv, rules={name: {} for name in CLUSTER}, role_specs={}) == [
        f'group all: {name} is not read by any role or tool' for name in (
            'common_chrony_servers', 'common_enabled', 'day2_reason', 'lab_name', 'nvidia_mig_configs')]


def test_a_variable_the_inventory_templates_read_is_read():
    # The vault pattern: a role argument's value refers to a vaulted variable of the inventory.
    channels = {'critical': {'url': '{{ vault_feishu_critical_url }}', 'secret': "{{ vault_feishu_secret | trim }}"}}
    raw = {'monitoring_k8s_feishu_channels': channels, 'vault_feishu_critical_url': 'https://open.feishu.cn/x',
           'vault_feishu_secret': 's', 'vault_unused': 'u', 'broken': '{{ oops(', 'plain': 'no template here',
           'key_file': ["{% if x_cond %}a{% endif %}", "{{ inventory_dir }}/id"]}
    assert iv.template_references(raw.values()) == {
        'vault_feishu_critical_url', 'vault_feishu_secret', 'x_cond', 'inventory_dir'}
    hv = hostvars(**{h: dict(raw) for h in GROUPS['all']})
    rules = {name: {} for name in CLUSTER}
    role_specs = {'monitoring_k8s': iv.RoleSpec('all', {'monitoring_k8s_feishu_channels': {'type': 'dict'}})}
    assert _unread(GROUPS, hv, rules=rules, role_specs=role_specs,
                   referenced=iv.template_references(raw.values())) == [
        f'group all: {name} is not read by any role or tool'
        for name in ('broken', 'key_file', 'plain', 'vault_unused')]


def test_a_misspelt_role_variable_is_reported_once():
    # all.vars: a typo the role's hosts report as one; the other hosts do not repeat it as unread.
    hv = hostvars(**{h: {'k8s_device_plugins_mig_stratgy': 'none'} for h in GROUPS['all']})
    rules = {name: {} for name in CLUSTER}
    role_specs = {'k8s_device_plugins': iv.RoleSpec('gpu_nvidia:npu_ascend', PLUGINS_SPEC,
                                                    frozenset({'k8s_device_plugins_api_host'}))}
    assert _unread(GROUPS, hv, rules=rules, role_specs=role_specs) == [
        'groups gpu_nvidia, npu_ascend: k8s_device_plugins_mig_stratgy is not a variable of role k8s_device_plugins '
        '(did you mean k8s_device_plugins_mig_strategy?)']
    # Held only where the role does not run (or is switched off): nothing reads it, it is unread.
    hv = hostvars(cp1={'k8s_device_plugins_mig_stratgy': 'none'})
    assert _unread(GROUPS, hv, rules=rules, role_specs=role_specs) == [
        'host cp1: k8s_device_plugins_mig_stratgy is not read by any role or tool '
        '(did you mean k8s_device_plugins_mig_strategy?)']


def test_a_day2_role_is_checked_for_typos_and_playbook_values_only():
    spec = {'nvidia_mig_configs': {'type': 'dict'}, 'nvidia_mig_config': {'type': 'str', 'required': True}}
    role_specs = {'nvidia_mig': iv.RoleSpec('gpu_nvidia', spec, frozenset({'nvidia_mig_config'}), day2=True)}
    rules = {name: {} for name in CLUSTER}
    hv = hostvars(gpu1={'nvidia_mig_configs': 'not a dict', 'nvidia_mig_confgs': {}},
                  gpu2={'nvidia_mig_config': 'all-1g.10gb'})
    assert _unread(GROUPS, hv, rules=rules, role_specs=role_specs) == [
        'host gpu1: nvidia_mig_confgs is not a variable of role nvidia_mig (did you mean nvidia_mig_configs?)',
        'host gpu2: nvidia_mig_config is set by the playbook that runs role nvidia_mig; '
        'the inventory value would be ignored',
    ]


def test_find_role_options_of_every_entry_point(tmp_path):
    class Loader:
        @staticmethod
        def load_from_file(path):
            return yaml.safe_load(Path(path).read_text())

    meta = tmp_path / 'node_drain/meta'
    meta.mkdir(parents=True)
    (meta / 'argument_specs.yml').write_text(yaml.safe_dump({'argument_specs': {
        'main': {'options': {'node_drain_node': {'type': 'str'}}},
        'drain': {'options': {'node_drain_node': {'type': 'str'}, 'node_drain_force': {'type': 'bool'}}},
        'cordon': {}}}))
    assert iv.find_role_options('node_drain', [str(tmp_path)], Loader()) == {'node_drain_node': {'type': 'str'}}
    assert iv.find_role_options('node_drain', [str(tmp_path)], Loader(), all_entry_points=True) == {
        'node_drain_node': {'type': 'str'}, 'node_drain_force': {'type': 'bool'}}


def test_read_by_must_name_a_reader():
    assert iv.check_rules({'a': {'read_by': ''}, 'b': {'read_by': ['x']}, 'c': {'read_by': 'lab/labctl.py'}}) == [
        "schema: variables.a.read_by must name what reads the variable (got '')",
        "schema: variables.b.read_by must name what reads the variable (got ['x'])",
    ]


def _schema_and_read():
    class Loader:
        @staticmethod
        def load_from_file(path):
            return yaml.safe_load(Path(path).read_text())

    schema = yaml.safe_load((ROOT / 'playbooks/vars/inventory_schema.yml').read_text())['inventory_schema']
    role_specs = {role: iv.role_spec(entry, iv.find_role_options(role, [str(ROOT / 'roles')], Loader(),
                                                                 all_entry_points=iv.is_day2(entry)))
                  for role, entry in schema['role_argument_specs'].items()}
    return schema, role_specs, iv.read_variables(schema['variables'], role_specs)


def test_every_rule_no_role_reads_names_a_reader_that_reads_it():
    schema, role_specs, _read = _schema_and_read()
    arguments = set().union(*(spec.options for spec in role_specs.values()))
    for name, rule in schema['variables'].items():
        if name in arguments or iv.ansible_variable(name):
            assert 'read_by' not in rule, f'{name} is a role argument or Ansible\'s: no read_by'
            continue
        assert rule.get('read_by'), f'{name}: no role reads it, so its rule says what does (read_by)'
        for reader in (part.strip() for part in rule['read_by'].split(',')):
            path = ROOT / reader
            texts = [p.read_text() for p in ([path] if path.is_file() else sorted(path.rglob('*.y*ml')))]
            assert texts and any(name in text for text in texts), f'{name}: {reader} does not read it'


def _inventory_vars(tree, out):
    """Every variable set in a YAML inventory's group tree (group vars and host vars)."""
    if isinstance(tree, dict):
        out.update((tree.get('vars') or {}))
        for host_vars in (tree.get('hosts') or {}).values():
            out.update(host_vars or {})
        for child in (tree.get('children') or {}).values():
            _inventory_vars(child, out)
    return out


def _shipped_inventories():
    """name -> the variables it sets: inventories/*, tests/inventories/* and the molecule scenarios'."""
    found = {}
    dirs = [*sorted((ROOT / 'inventories').iterdir()), ROOT / 'tests/inventories/unreachable_control_planes',
            *sorted((ROOT / 'tests/inventories/bad').iterdir())]
    for inventory in dirs:
        names = set()
        for path in sorted(inventory.glob('*.yml')):
            for tree in (yaml.safe_load(path.read_text()) or {}).values():
                _inventory_vars(tree, names)
        for path in sorted(inventory.glob('*_vars/**/*.yml')):
            names.update(yaml.safe_load(path.read_text()) or {})
        found[str(inventory.relative_to(ROOT))] = names
    for scenario in sorted((ROOT / 'molecule').glob('*/molecule.yml')):
        inventory = ((yaml.safe_load(scenario.read_text()).get('provisioner') or {}).get('inventory') or {})
        names = set()
        for key in ('group_vars', 'host_vars'):
            for values in (inventory.get(key) or {}).values():
                names.update(values or {})
        found[str(scenario.relative_to(ROOT))] = names
    return found


def test_every_shipped_inventory_sets_only_what_something_reads():
    # The validation play runs on inventories/* (test_validation_play.py); molecule scenarios apply
    # their role directly and never run it, so their inventories are held to the same rule here.
    _schema, role_specs, read = _schema_and_read()
    inventories = _shipped_inventories()
    assert 'molecule/nvidia_mig/molecule.yml' in inventories and 'inventories/lab' in inventories
    expected = {'tests/inventories/bad/unread_variable': ['ascend_cann_version', 'cluster_name', 'nvidia_cuda_version']}
    for name, names in inventories.items():
        # A misspelt role variable (tests/inventories/bad/*_typo) is refused as such, not as unread.
        unread = sorted(n for n in names if n not in read and not iv.ansible_variable(n)
                        and iv.role_owner(n, role_specs) is None)
        assert unread == expected.get(name, []), name


@pytest.mark.parametrize(('value', 'bad'), [
    ('550.54.15', False), (' 550.54.15', True), ('550.54.15\n', True), ('a\tb', False),
    ('line one\nline two\n', False), (12, False),
])
def test_stray_whitespace(value, bad):
    assert iv.stray_whitespace(value) is bad


def test_labels_and_node_names():
    ok = {'pool': 'training', 'ai-platform.io/team': 'a.b_c-d', 'empty': ''}
    assert iv.check_format('labels', ok, 'k8s_labels') is None
    assert iv.check_format('labels', {'-x': 'y', 'Bad_Prefix/x': 'y'}, 'k8s_labels') == (
        "labels: key '-x' is not a label key ([DNS prefix/]name, name at most 63 characters); "
        "key 'Bad_Prefix/x' is not a label key ([DNS prefix/]name, name at most 63 characters)")
    assert iv.check_format('labels', ['x'], 'k8s_labels') == 'labels must be a dict of Kubernetes labels (got list)'
    assert iv.check_format('n', 'gpu-01.dc1', 'k8s_node_name') is None
    assert iv.check_format('n', 'gpu_01', 'k8s_node_name').startswith('n must be a Kubernetes Node name')


def test_placeholder_secrets_are_refused_without_showing_the_value():
    assert iv.check_value('pw', 'Change-Me', {'type': 'str', 'format': 'secret'}) == [
        'pw is a placeholder, not a secret: set a real one (keep it in Ansible Vault)']
    assert iv.check_value('pw', 's3cr3t ', {'type': 'str', 'format': 'secret'}) == ['pw has whitespace around it']
    assert iv.check_value('pw', 'k7Qm2xVb', {'type': 'str', 'format': 'secret'}) == []


def test_distinct_from_names_the_owner():
    hv = hostvars(**{h: {'vip': '192.0.2.5'} for h in GROUPS['k8s_control_plane']})
    hv['gpu2']['ansible_host'] = '192.0.2.5'
    errors = iv.validate_inventory(GROUPS, hv, rules={'vip': {'hosts': 'k8s_control_plane',
                                                             'distinct_from': ['ansible_host']}})
    assert errors == ["group k8s_control_plane: vip '192.0.2.5' is the ansible_host of gpu2"]


def test_check_definitions_compares_connection_variables_only():
    inventory = {'all': {'children': {
        'a': {'hosts': {'h1': {'ansible_host': '192.0.2.1', 'x': 1}, 'h2': None}},
        'b': {'hosts': {'h1': {'ansible_host': '192.0.2.1', 'x': 2}, 'h2': {'ansible_port': 2222}}},
        'c': {'children': {'d': {'hosts': {'h2': {'ansible_port': 22}}}}},
    }}}
    assert iv.check_definitions([inventory]) == [
        ('h2', 'is defined more than once with different ansible_port (2222 in b; 22 in d)', None)]


# ---- classes of mistakes: formats, nested rules, references, numbers, relations, groups

@pytest.mark.parametrize(('value', 'fmt', 'problem'), [
    ('192.0.2.10', 'host_ip', None),
    ('api.example.com', 'host_ip', 'an IP address'),
    ('127.0.0.10', 'host_ip', 'a host address, not a loopback address'),
    ('0.0.0.0', 'host_ip', 'a host address, not the unspecified address'),
    ('224.0.0.5', 'host_ip', 'a host address, not a multicast address'),
    ('169.254.0.7', 'host_ip', 'a host address, not a link-local address'),
    ('255.255.255.255', 'host_ip', 'a host address, not the broadcast address'),
    ('240.0.0.1', 'host_ip', 'a host address, not a reserved address'),
    ('fe80::1', 'host_ip', 'a host address, not a link-local address'),
    ('127.0.0.1', 'hostname_or_ip', None),  # a test's or a local connection's controller
    ('0.0.0.0', 'hostname_or_ip', 'a host address, not the unspecified address'),
    ('/mnt/nvme', 'mount_path', None),
    ('/', 'mount_path', 'a mount point of its own, not a system directory'),
    ('/var', 'mount_path', 'a mount point of its own, not a system directory'),
    ('mnt/nvme', 'mount_path', 'an absolute mount point'),
    ('/mnt/x/../nvme', 'mount_path', 'an absolute mount point without //, /./, /../ or a trailing / (/mnt/nvme)'),
    ('/srv/ a', 'abspath', 'an absolute path'),
    ('/dev/nvme1n1', 'device_path', None),
    ('/dev/disk/by-id/nvme-X_1', 'device_path', None),
    ('nvme1n1', 'device_path', 'an absolute device path such as /dev/disk/by-id/nvme-...'),
    ('/dev/disk/by-id', 'device_path', 'an absolute device path such as /dev/disk/by-id/nvme-...'),
    ('/dev/disk/by-id/nvme-X_1', 'stable_device_path', None),
    ('/var/lib/ai-l1-lab/disks/ssd0', 'stable_device_path', None),  # the lab's disk files
    ('/dev/mapper/vg-osd0', 'stable_device_path', None),
    ('/dev/sdb', 'stable_device_path', 'a stable device path (/dev/disk/by-id/..., by-path or by-uuid): a kernel '
                                       'name such as /dev/sdb can name another disk after a reboot'),
    ('/dev/nvme0n1p2', 'stable_device_path', 'a stable device path (/dev/disk/by-id/..., by-path or by-uuid): a '
                                             'kernel name such as /dev/sdb can name another disk after a reboot'),
    ('ens1f0', 'ifname', None),
    ('bond0.100', 'ifname', None),
    ('enp65s0f0np0rdma', 'ifname', "a network interface name (1 to 15 characters, no '/', ':' or whitespace)"),
    ('eth0:1', 'ifname', "a network interface name (1 to 15 characters, no '/', ':' or whitespace)"),
    ('..', 'ifname', "a network interface name (1 to 15 characters, no '/', ':' or whitespace)"),
    ('0c5c1d2e-7f3a-4b8e-9d61-2a4f6b8c0e13', 'uuid', None),
    ('0c5c1d2e7f3a4b8e9d612a4f6b8c0e13', 'uuid', 'a lowercase UUID such as 0c5c1d2e-7f3a-4b8e-9d61-2a4f6b8c0e13'),
    ('ai-l1-remediation', 'k8s_name', None),
    ('ai.l1', 'k8s_name', 'a Kubernetes name (DNS-1123 label: at most 63 of a-z 0-9 -, alphanumeric at both ends)'),
    ('ceph-rbd.ssd', 'k8s_subdomain', None),
    ('Fast', 'k8s_subdomain', 'a Kubernetes object name (DNS-1123 subdomain: lowercase letters, digits, - and ., at '
                              'most 253 characters)'),
    ('34Gi', 'k8s_quantity', None),
    ('500m', 'k8s_quantity', None),
    ('-2', 'k8s_quantity', 'a Kubernetes quantity such as 2, 500m or 34Gi (no sign)'),
])
def test_formats_of_identifiers_paths_and_addresses(value, fmt, problem):
    message = iv.check_format('v', value, fmt)
    assert message == (f'v must be {problem} (got {value!r})' if problem else None)


def test_nested_rules_name_the_path():
    rule = {'each': {'fields': {'path': {'format': 'stable_device_path'}, 'device_class': {'required': True}}}}
    value = [{'path': '/dev/disk/by-id/a', 'device_class': 'ssd'}, {'path': '/dev/sdb'}]
    assert iv.check_value('osds', value, rule) == [
        "osds[1].path must be a stable device path (/dev/disk/by-id/..., by-path or by-uuid): a kernel name such as "
        "/dev/sdb can name another disk after a reboot (got '/dev/sdb')",
        'osds[1].device_class is required but not defined']
    assert iv.check_value('sel', {'kubernetes.io/hostname': 'x', 'a': -1}, {'each': {'min': 0}}) == [
        'sel.a must be >= 0 (got -1)']


def test_counts_min_items_unique_items_and_allow_empty():
    assert iv.check_value('mons', ['a', 'b'], {'counts': [1, 3, 5, 7]}) == [
        'mons must have 1, 3, 5 or 7 entries (has 2: a, b)']
    assert iv.check_value('mons', [], {'counts': [1, 3]}) == []  # no monitors at all: min_items says so
    assert iv.check_value('ntp', [], {'min_items': 1}) == ['ntp must not be empty']
    assert iv.check_value('ports', ['a', 'b', 'a'], {'unique_items': True}) == ["ports lists 'a' more than once"]
    assert iv.check_value('ifname', '', {'format': 'ifname', 'allow_empty': True}) == []
    # min and max compare numbers and numeric strings, never other strings (the type rule's job).
    assert iv.check_value('t', '5m0s', {'min': 1}) == []
    assert iv.check_value('t', '0', {'min': 1}) == ["t must be >= 1 (got '0')"]


def _ctx(**values):
    return iv.Context({**GROUPS, 'storage': ['stor1', 'stor2', 'stor3'],
                       'all': [*GROUPS['all'], 'stor1', 'stor2', 'stor3']},
                      lambda name: values.get(name, iv.UNDEFINED))


def test_hosts_in_names_hosts_of_the_group():
    rule = {'hosts_in': 'storage'}
    assert iv.check_value('mons', ['stor1', 'stor-2', 'cp1', 'stor1'], rule, _ctx()) == [
        'mons names stor-2, which is not a host of group storage (did you mean stor2?)',
        'mons names cp1, which is not in group storage',
        'mons names stor1 more than once']
    assert iv.check_value('node', 'gpu3', {'hosts_in': 'k8s_control_plane:k8s_worker'}, _ctx()) == [
        'node names gpu3, which is not a host of groups k8s_control_plane, k8s_worker (did you mean gpu2?)']
    assert iv.check_value('api', 'npu1', {'hosts_in': 'all'}, _ctx()) == []
    assert iv.check_value('api', 'x', {'hosts_in': 'all'}) == []  # without a context: not checked


def test_within_a_subnet_another_variable_holds():
    rule = {'format': 'host_ip', 'within': 'net'}
    ctx = _ctx(net='192.0.2.0/24')
    assert iv.check_value('vip', '192.0.2.10', rule, ctx) == []
    assert iv.check_value('vip', '192.0.2.0', rule, ctx) == [
        "vip '192.0.2.0' is the network address of net '192.0.2.0/24'"]
    assert iv.check_value('vip', '192.0.2.255', rule, ctx) == [
        "vip '192.0.2.255' is the broadcast address of net '192.0.2.0/24'"]
    assert iv.check_value('vip', '198.51.100.1', rule, ctx) == ["vip '198.51.100.1' is outside net '192.0.2.0/24'"]
    assert iv.check_value('vip', 'api.example.com', {'within': 'net'}, ctx) == []  # a name: not placed
    assert iv.check_value('vip', '192.0.2.1', rule, _ctx(net='192.0.2.0/31')) == []  # /31: both usable
    assert iv.check_value('vip', '198.51.100.1', rule, _ctx()) == []  # no subnet in the inventory
    # A value its format refuses is not placed as well.
    assert iv.check_value('vip', '224.0.0.1', rule, ctx) == [
        "vip must be a host address, not a multicast address (got '224.0.0.1')"]


def test_no_negative_number_anywhere_but_in_free_form_settings():
    teams = [{'name': 'a', 'capability': {'nvidia.com/gpu': -8, 'memory': '-4Gi', 'cpu': '16'}, 'weight': 1}]
    hv = hostvars(**{h: {'teams': teams, 'sysctls': {'kernel.perf_event_paranoid': -1}, 'count': -1,
                         'unread': -1, 'flag': False} for h in GROUPS['k8s_control_plane']})
    rules = {'teams': {}, 'sysctls': {}, 'count': {}, 'flag': {}}
    numbers = {'min': 0, 'except': ['sysctls']}
    assert iv.validate_inventory(GROUPS, hv, rules=rules, numbers=numbers) == [
        'group k8s_control_plane: teams[0].capability[nvidia.com/gpu] must be >= 0 (got -8)',
        "group k8s_control_plane: teams[0].capability.memory must be >= 0 (got '-4Gi')",
        'group k8s_control_plane: count must be >= 0 (got -1)',
    ]
    # A value its own rule refused is not walked too (one finding per value).
    rules['count'] = {'min': 1}
    errors = iv.validate_inventory(GROUPS, hv, rules=rules, numbers=numbers)
    assert [e for e in errors if 'count' in e] == ['group k8s_control_plane: count must be >= 1 (got -1)']
    assert iv.validate_inventory(GROUPS, hv, rules=rules) == ['group k8s_control_plane: count must be >= 1 (got -1)']


def test_name_rules_apply_to_every_read_variable_of_the_kind():
    hv = hostvars(**{h: {'a_port': 0, 'b_port': 70000, 'c_port': 0, 'unread_port': 0} for h in GROUPS['all']})
    rules = {'b_port': {}, 'c_port': {'min': 0}}
    role_specs = {'a': iv.RoleSpec('all', {'a_port': {'type': 'int'}})}
    assert iv.validate_inventory(GROUPS, hv, rules=rules, role_specs=role_specs,
                                 name_rules={'_port$': {'min': 1, 'max': 65535}}) == [
        'group all: b_port must be <= 65535 (got 70000)',  # its own rule, with the name rule's keys
        'group all: a_port must be >= 1 (got 0)',  # a role argument
    ]
    # A name rule does not make a variable read.
    assert 'unread_port' not in iv.apply_name_rules(rules, {'_port$': {'min': 1}}, iv.read_variables(rules, {}))


NVIDIA_SPEC = {'nvidia_driver_version': {'type': 'str', 'default': '550.54.15'},
               'nvidia_driver_branch': {'type': 'str', 'default': '550'},
               'nvidia_driver_source': {'type': 'str', 'default': 'repository'},
               'nvidia_driver_runfile_sha256': {'type': 'str', 'default': ''},
               'nvidia_driver_runfile_url': {'type': 'str', 'default': 'https://x/{{ nvidia_driver_version }}.run'}}
BRANCH = {'hosts': 'gpu_nvidia', 'that': ['nvidia_driver_version.branch', '==', 'nvidia_driver_branch']}
RUNFILE = {'hosts': 'gpu_nvidia', 'when': {'nvidia_driver_source': 'runfile'},
           'requires': 'nvidia_driver_runfile_sha256', 'why': 'verified'}


def test_relations_fill_in_role_defaults():
    role_specs = {'nvidia_driver': iv.RoleSpec('gpu_nvidia', NVIDIA_SPEC)}
    hv = hostvars(gpu1={'nvidia_driver_version': '535.104.05'},
                  gpu2={'nvidia_driver_version': '535.104.05', 'nvidia_driver_branch': '535',
                        'nvidia_driver_source': 'runfile'})
    assert iv.validate_inventory(GROUPS, hv, relations=[BRANCH, RUNFILE], role_specs=role_specs) == [
        "host gpu1: the branch (535) of nvidia_driver_version '535.104.05' must equal nvidia_driver_branch '550' "
        "(the role's default)",
        "host gpu2: nvidia_driver_runfile_sha256 must be set when nvidia_driver_source is 'runfile': verified",
    ]
    # Only the defaults of a role the host runs; a templated default is not known here.
    assert iv.validate_inventory(GROUPS, hv, relations=[BRANCH]) == []
    assert iv._RoleDefaults(GROUPS, role_specs).get('nvidia_driver_runfile_url', 'gpu1') is iv.UNDEFINED
    assert iv._RoleDefaults(GROUPS, role_specs).get('nvidia_driver_branch', 'cp1') is iv.UNDEFINED


def test_relations_compare_numbers_and_skip_what_is_refused_already():
    order = {'hosts': 'k8s_control_plane', 'that': ['k8s_pod_cidr.prefixlen', '<=', 'mask'], 'why': 'cut from it'}
    dscp = {'that': ['tos.dscp', '==', 'dscp']}
    hv = hostvars(cp1={'mask': 14}, cp2={'mask': '24'}, gpu1={'tos': 106, 'dscp': 26}, gpu2={'tos': 96, 'dscp': 26})
    assert iv.validate_inventory(GROUPS, hv, relations=[order, dscp]) == [
        "host cp1: the prefix length (16) of k8s_pod_cidr '10.244.0.0/16' must be at most mask 14: cut from it",
        'host gpu2: the DSCP (ToS >> 2) (24) of tos 96 must equal dscp 26',
    ]
    # A value its own rule refused (dscp 64 > 63) is not compared as well.
    hv['gpu2']['dscp'] = 64
    assert iv.validate_inventory(GROUPS, hv, rules={'dscp': {'max': 63}}, relations=[dscp]) == [
        'host gpu2: dscp must be <= 63 (got 64)']


def test_role_specs_imply_non_empty_required_and_absolute_paths():
    spec = {'servers': {'type': 'list', 'elements': 'str', 'required': True},
            'root': {'type': 'path', 'default': '/sys'},
            'files': {'type': 'list', 'elements': 'path', 'default': []},
            'osds': {'type': 'list', 'elements': 'dict', 'options': {
                'path': {'type': 'path', 'required': True}, 'device_class': {'type': 'str', 'required': True}}}}
    hv = hostvars(**{h: {'servers': ['ntp1']} for h in GROUPS['all']})
    hv['gpu1'].update(servers=[], root='sys', files=['/a', 'b'], osds=[{'path': 'dev/sdb', 'device_class': ''}])
    assert iv.validate_inventory(GROUPS, hv, role_specs={'r': iv.RoleSpec('all', spec)}) == [
        'host gpu1: role r: servers must not be empty',
        "host gpu1: role r: root must be an absolute path (got 'sys')",
        "host gpu1: role r: files[1] must be an absolute path (got 'b')",
        "host gpu1: role r: osds[0].path must be an absolute path (got 'dev/sdb')",
        'host gpu1: role r: osds[0].device_class must not be empty',
    ]


def test_hosts_in_groups_no_play_runs_on_are_refused():
    groups = {**GROUPS, 'gpu_nvida': ['gpu2'], 'ungrouped': ['stray'], 'empty_site_group': [],
              'all': [*GROUPS['all'], 'stray']}
    known = iv.known_groups(required_groups=['k8s_control_plane', 'k8s_worker'],
                            exclusive_groups=[['gpu_nvidia', 'npu_ascend']])
    entries = [('group_vars', 'all', 'group_vars/all'), ('group_vars', 'gpu_nvdia', 'group_vars/gpu_nvdia'),
               ('host_vars', 'gpu1', 'host_vars/gpu1.yml'), ('host_vars', 'gpu-1', 'host_vars/gpu-1.yml')]
    assert iv.validate_inventory(groups, hostvars(), groups_known=known, vars_entries=entries) == [
        'group gpu_nvida: host gpu2 is in a group no play runs on (did you mean gpu_nvidia?)',
        'host stray: is in no group, so no play runs on it',
        'group gpu_nvdia: group_vars/gpu_nvdia sets variables for a group the inventory does not have, so no host '
        'gets them (did you mean gpu_nvidia?)',
        'host gpu-1: host_vars/gpu-1.yml sets variables for a host the inventory does not have (did you mean gpu1?)',
    ]
    assert iv.validate_inventory(groups, hostvars(), groups_known=known | {'gpu_nvida'})[-1].startswith('host stray')
    # Not asked for (groups_known None): not checked.
    assert iv.validate_inventory(groups, hostvars()) == []


def test_vars_entries_lists_group_and_host_vars_beside_the_inventory(tmp_path):
    (tmp_path / 'group_vars/all').mkdir(parents=True)
    (tmp_path / 'group_vars/gpu_nvidia.yml').write_text('x: 1\n')
    (tmp_path / 'group_vars/README.md').write_text('not variables\n')
    (tmp_path / 'host_vars').mkdir()
    (tmp_path / 'host_vars/gpu1').write_text('x: 1\n')
    (tmp_path / 'hosts.yml').write_text('all: {}\n')
    expected = [('group_vars', 'all', 'group_vars/all'), ('group_vars', 'gpu_nvidia', 'group_vars/gpu_nvidia.yml'),
                ('host_vars', 'gpu1', 'host_vars/gpu1')]
    assert iv.vars_entries([str(tmp_path)]) == expected
    assert iv.vars_entries([str(tmp_path / 'hosts.yml')]) == expected


def test_schema_mistakes_in_the_new_keys_are_reported():
    rules = {'a': {'each': {'hosts': 'x', 'format': 'nope'}, 'counts': [2, 'x'], 'fields': {'k': 'str'}}}
    errors = iv.check_rules(rules, name_rules={'(': {}, '_port$': {'min': 'one'}},
                            relations=[{'that': ['a', '=', 'b']}, {'that': ['a.major', '==', 'b']},
                                       {'requires': 'a', 'that': ['a', '==', 'b']}, {'whenn': {}}],
                            numbers={'min': 'zero', 'exept': []})
    assert [e.split(' (known')[0] for e in errors] == [
        'schema: variables.a.counts must be a non-empty list of integers',
        "schema: variables.a.each has unknown rule 'hosts'",
        f"schema: variables.a.each.format must be one of {', '.join(iv.FORMATS)} (got 'nope')",
        'schema: variables.a.fields[k] must be a dict of rules (got str)',
        "schema: name_rules['('] is not a valid regular expression (missing ), unterminated subpattern at position 0)",
        "schema: name_rules['_port$'].min must be a number (got 'one')",
        "schema: relations[0].that must be [A, OP, B] with OP one of ==, !=, <=, <, >=, > (got ['a', '=', 'b'])",
        'schema: relations[1].that: a.major has no attribute major',
        'schema: relations[2] needs one of that: [A, OP, B] or requires: NAME',
        "schema: relations[3] has unknown key 'whenn'",
        'schema: relations[3] needs one of that: [A, OP, B] or requires: NAME',
        "schema: numbers has unknown key 'exept'",
        "schema: numbers.min must be a number (got 'zero')",
    ]


def _play_groups():
    """Every group a play of playbooks/ and playbooks/day2/ runs on (hosts: a:b, group[0])."""
    found = set()
    for playbook in sorted((ROOT / 'playbooks').glob('*.yml')) + sorted((ROOT / 'playbooks/day2').glob('*.yml')):
        for play in yaml.safe_load(playbook.read_text()) or []:
            for pattern in str(play.get('hosts', '')).split(':'):
                group = pattern.lstrip('&!').split('[')[0]
                if group and '{' not in group:
                    found.add(group)
    return found - {'all', 'localhost'}


def test_every_group_a_play_runs_on_is_known_and_the_schema_is_well_formed():
    schema = yaml.safe_load((ROOT / 'playbooks/vars/inventory_schema.yml').read_text())['inventory_schema']
    assert iv.check_rules(schema['variables'], schema['name_rules'], schema['relations'], schema['numbers']) == []
    _schema, role_specs, read = _schema_and_read()
    known = iv.known_groups(required_groups=schema['required_groups'], group_sizes=schema['group_sizes'],
                            exclusive_groups=schema['exclusive_groups'], member_of=schema['member_of'],
                            role_specs=role_specs, rules=schema['variables'], relations=schema['relations'],
                            extra=schema['known_groups'])
    assert {'gpu_nvidia', 'npu_ascend', 'storage', 'monitoring', 'remediation_receiver'} <= _play_groups() <= known
    # What the relations and the numbers' exceptions name is read: a renamed variable fails here.
    for relation in schema['relations']:
        names = [str(o).partition('.')[0] for o in relation.get('that', [])[::2] if not isinstance(o, int)]
        required = relation.get('requires', [])
        names += [*relation.get('when', {}), *(required if isinstance(required, list) else [required])]
        assert set(names) <= read, relation
    assert set(schema['numbers']['except']) <= read
