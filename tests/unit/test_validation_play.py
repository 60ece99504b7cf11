"""The validation play refuses bad inventories before any host is touched.

Each case runs the real `ansible-playbook playbooks/site.yml` against one inventory under
tests/inventories/bad/ (one mistake each; addresses are unroutable 192.0.2.0/24 and
198.51.100.0/24) and asserts the exact error lines, a failed run, and that the validation
play was the only play that started.
"""

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BAD = ROOT / 'tests/inventories/bad'
VALIDATION_PLAY = 'Validate the inventory'
VALIDATION_TASK = 'Check groups, per-host values and role arguments'
CANN = r'^(\d+\.\d+\.(RC\d+|\d+)(\.\d+)?)?$'
DRIVER = r'^\d{3}\.\d{2,3}(\.\d{2})?$'
# The sample inventory ships a placeholder VRRP password the validation refuses: runs that
# use the sample for something else give a real-looking one.
SAMPLE_SECRET = ('-e', 'k8s_control_plane_vrrp_password=9fQ2vR7x',
                 '-e', 'juicefs_metadata_password=Hq3m8vZt')

CASES = {
    'missing_worker_group': ['group k8s_worker: required group is missing from the inventory'],
    'even_control_plane': ['group k8s_control_plane: must have 1, 3, 5 or 7 hosts (has 2: cp1, cp2)'],
    'control_plane_is_worker': ['host cp3: is in k8s_control_plane and k8s_worker, which are mutually exclusive'],
    'gpu_in_both_vendors': ['host gpu1: is in gpu_nvidia and npu_ascend, which are mutually exclusive'],
    'gpu_not_worker': ['host gpu1: is in gpu_nvidia but not in k8s_worker'],
    'bad_driver_version': [f"host gpu1: nvidia_driver_version must match {DRIVER} (got '55x')"],
    'cann_version_float': ['host npu1: ascend_driver_cann_version must be a string (got float 8.0; quote it in YAML)'],
    'bad_cann_version': [f"host npu1: ascend_driver_cann_version must match {CANN} (got '7.0')"],
    'bad_cidr': ["group all: k8s_pod_cidr must be a CIDR such as 10.244.0.0/16 (got '10.244.0.0/33')"],
    'cidr_host_bits': ["group all: k8s_pod_cidr must be a network address, 10.244.0.0/15 (got '10.244.1.0/15')"],
    'overlapping_cidrs': ["group all: k8s_pod_cidr '10.96.0.0/16' overlaps k8s_service_cidr '10.96.0.0/12'"],
    'node_in_pod_cidr': ["host npu1: k8s_pod_cidr '198.51.100.0/24' overlaps ansible_host '198.51.100.31'"],
    'duplicate_ansible_host': ["hosts gpu1, npu1: ansible_host must be unique (each is '192.0.2.21')"],
    'port_not_int': ["host cp1: ansible_port must be an integer (got str 'ssh')"],
    'k8s_version_too_old': ["group all: k8s_version must be version 1.28.0 or newer (got '1.27.9')"],
    'k8s_version_not_semver': [r"group all: k8s_version must match ^\d+\.\d+\.\d+$ (got '1.28')"],
    'k8s_version_differs': [
        "group all: k8s_version must be the same on every host "
        "(got '1.28.15' on cp1, cp2, cp3, npu1; '1.29.2' on gpu1)"],
    'missing_k8s_version': ['group all: k8s_version is required but not defined'],
    'undefined_template': ["group all: k8s_pod_cidr cannot be templated: 'pod_range' is undefined"],
    'role_var_missing': [
        'groups k8s_control_plane, k8s_worker, storage: role common: missing required arguments: '
        'common_chrony_servers'],
    'role_var_wrong_type': [
        "host gpu1: role common: argument 'common_hugepages_2m' is of type str and we were unable to convert to int: "
        "\"'lots'\" cannot be converted to an int"],
    'role_var_typo': [
        'host npu1: common_rdma_enable is not a variable of role common (did you mean common_rdma_enabled?)'],
    'nvidia_driver_typo': [
        'group gpu_nvidia: nvidia_driver_verison is not a variable of role nvidia_driver '
        '(did you mean nvidia_driver_version?)'],
    'device_plugins_typo': [
        'groups gpu_nvidia, npu_ascend: k8s_device_plugins_mig_stratgy is not a variable of role k8s_device_plugins '
        '(did you mean k8s_device_plugins_mig_strategy?)',
        'host gpu1: k8s_device_plugins_nvidia_device_list_strategy is not a variable of role k8s_device_plugins '
        '(did you mean k8s_device_plugins_device_list_strategy?)'],
    'unread_variable': [
        'group all: cluster_name is not read by any role or tool',
        'group gpu_nvidia: nvidia_cuda_version is not read by any role or tool (did you mean nvidia_driver_version?)',
        'host npu1: ascend_cann_version is not read by any role or tool (did you mean ascend_driver_cann_version?)'],
    'set_by_playbook': [
        'group k8s_control_plane: k8s_control_plane_version is set by the playbook that runs role '
        'k8s_control_plane; the inventory value would be ignored'],
    'host_defined_twice': [
        "host gpu1: is defined more than once with different ansible_host "
        "('192.0.2.21' in gpu_nvidia; '192.0.2.99' in remediation_receiver)"],
    'stray_whitespace': ["host gpu1: nvidia_driver_version has whitespace around it (got '550.127.05 ')"],
    'bad_node_labels': [
        "group k8s_worker: k8s_worker_node_labels: team='ai platform' is not a label value (at most 63 of "
        "A-Z a-z 0-9 - _ ., alphanumeric at both ends); cost-centre must be a string (got int 4711; quote it in "
        "YAML); ai-platform.io/owner='a-very-long-owner-name-that-goes-on-and-on-past-the-sixty-three-limit' is "
        "not a label value (at most 63 of A-Z a-z 0-9 - _ ., alphanumeric at both ends)"],
    'bad_team_queues': [
        "group k8s_control_plane: gpu_queues_teams[0] (ai-platform-team).capability[nvidia.com/gpu]: devices are "
        "whole numbers, got 12.5; gpu_queues_teams[0] (ai-platform-team).capability[memory]: '4096GB' is not a "
        "Kubernetes quantity (e.g. 128, 512, 500m, 4096Gi); gpu_queues_teams[0] (ai-platform-team).guarantee.percent: "
        "150 is not a number from 0 to 100; gpu_queues_teams[1].name: 'Research_Lab' is not a DNS-1123 label (lower "
        "case, digits, '-'); gpu_queues_teams[1].weight: 0 is not an integer >= 1; gpu_queues_teams[1].reclaimable: "
        "'no' is not a boolean; gpu_queues_teams[1].capability: memory is required (Kueue admits no workload whose "
        "requests its ClusterQueue does not cover); gpu_queues_teams[1].namespaces: ai-platform already belongs to "
        "team ai-platform-team (a namespace submits to one team's queue)"],
    'bad_node_name': [
        "host CP_1: inventory_hostname must be a Kubernetes Node name (lowercase letters, digits, - and ., at "
        "most 253 characters) (got 'CP_1')"],
    'protocol_ranges': [
        'group k8s_control_plane: k8s_control_plane_vrrp_router_id must be >= 1 (got 0)',
        "host gpu1: rdma_network_priority must be an integer (got str '3')",
        'host gpu1: rdma_network_dscp must be <= 63 (got 64)'],
    'vip_is_node_address': [
        "groups k8s_control_plane, k8s_worker: k8s_control_plane_vip '192.0.2.12' is the ansible_host of cp2"],
    'vip_in_service_cidr': ["group all: k8s_service_cidr '10.96.0.0/12' overlaps k8s_control_plane_vip '10.96.0.10'"],
    'vip_not_an_address': [
        "groups k8s_control_plane, k8s_worker: k8s_control_plane_vip must be an IP address (got 'api.example.com')"],
    'placeholder_secret': [
        'group k8s_control_plane: k8s_control_plane_vrrp_password is a placeholder, not a secret: set a real one '
        '(keep it in Ansible Vault)'],
    'rollout_misplaced': [
        "group all: rollout_batch_size is 10 here, but the plays read '100%': play keywords cannot see host "
        "variables, so set rollout_batch_size in the inventory's group_vars/all/rollout.yml and nowhere else "
        "(playbooks/vars/rollout.yml)"],
    'rollout_bad_values': [
        "group all: rollout_batch_size must match ^([1-9][0-9]*|([1-9]|[1-9][0-9]|100)%)$ (got '0%')",
        'group all: rollout_max_fail_percentage must be <= 100 (got 150)'],
    'several_mistakes': [
        'group k8s_control_plane: must have 1, 3, 5 or 7 hosts (has 4: cp1, cp2, cp3, cp4)',
        "group all: k8s_service_cidr must be a CIDR with a prefix length such as 10.244.0.0/16 (got '10.96.0.0')",
        'host gpu1: nvidia_driver_version must be a string (got int 550; quote it in YAML)',
    ],
    # Classes of mistakes, each refused by a rule of its class (playbooks/vars/inventory_schema.yml:
    # numbers, name_rules, relations, the roles' argument specs, variables' formats, known groups).
    'negative_quantities': [
        'group all: gpu_queues_teams[0].capability[nvidia.com/gpu] must be >= 0 (got -8)',
        'host gpu1: rdma_network_persist_wait must be >= 0 (got -5)',
        'host gpu1: nvidia_mig_configs[mig-configs][all-1g.10gb][0][mig-devices][1g.10gb] must be >= 0 (got -7)',
        'host gpu1: common_hugepages_2m must be >= 0 (got -512)',
    ],
    'out_of_range_by_name': [
        'host gpu1: dcgm_exporter_port must be <= 65535 (got 94000)',
        'group k8s_control_plane: k8s_control_plane_vip_port must be >= 1 (got 0)',
        'host gpu1: nvidia_driver_reboot_timeout must be >= 1 (got 0)',
        'group all: remediation_receiver_workers must be >= 1 (got 0)',
    ],
    'version_not_in_branch': [
        "group gpu_nvidia: the branch (535) of nvidia_driver_version '535.104.05' must equal "
        "nvidia_driver_branch '550' (the role's default): the role installs the version from the branch's "
        'packages and refuses one of another branch',
    ],
    'minimum_above_maximum': [
        'host stor1: ceph_pool_min_size 3 must be at most ceph_pool_size 2: a pool needs min_size of its size '
        'replicas to serve I/O',
        "group k8s_control_plane: the prefix length (25) of k8s_pod_cidr '10.244.0.0/25' must be at most "
        "k8s_control_plane_node_cidr_mask_size 24 (the role's default): each node's pod range is cut from "
        'k8s_pod_cidr',
    ],
    'implied_settings': [
        "host gpu1: nvidia_driver_runfile_sha256 must be set when nvidia_driver_source is 'runfile': the "
        'installer is verified before it runs',
        'host gpu1: the DSCP (ToS >> 2) (24) of rdma_network_roce_tos 96 must equal rdma_network_dscp 26 (the '
        "role's default): the RoCE traffic class carries the DSCP in its upper 6 bits, or RoCE lands off the "
        'lossless priority',
        'group k8s_control_plane: gpu_queues_teams must be set when gpu_queues_enabled is true',
        'groups k8s_control_plane, remediation_receiver: remediation_receiver_host_path_node must be set when '
        "remediation_receiver_enabled is true and remediation_receiver_mode is 'kubernetes' and "
        "remediation_receiver_storage is 'hostPath': the receiver's Pod is pinned to the Node that keeps its "
        'store',
    ],
    'quorum_sizes': [
        'group k8s_control_plane: must have 1, 3, 5 or 7 hosts (has 9: cp1, cp2, cp3, cp4, cp5, cp6, cp7, cp8, '
        'cp9)',
        'group k8s_control_plane: k8s_control_plane_etcd_external.endpoints must have 1, 3, 5 or 7 entries '
        '(has 4: https://192.0.2.51:2379, https://192.0.2.52:2379, https://192.0.2.53:2379, '
        'https://192.0.2.54:2379)',
        'group storage: ceph_mon_hosts must have 1, 3, 5 or 7 entries (has 2: stor1, stor2)',
    ],
    'unknown_host_references': [
        'group storage: ceph_mon_hosts names stor-3, which is not a host of group storage (did you mean stor3?)',
        'group storage: ceph_rgw_hosts names cp1, which is not in group storage',
        'groups k8s_control_plane, remediation_receiver: remediation_receiver_host_path_node names cp4, which '
        'is not a host of groups k8s_control_plane, k8s_worker (did you mean cp3?)',
        'group k8s_control_plane: gpu_queues_system_node_selector[kubernetes.io/hostname] names npu2, which is '
        'not a host of groups k8s_control_plane, k8s_worker (did you mean npu1?)',
        'group all: day2_api_host names cp-1, which is not a host of the inventory (did you mean cp1?)',
    ],
    'bad_identifiers': [
        'host stor1: ceph_fsid must be a lowercase UUID such as 0c5c1d2e-7f3a-4b8e-9d61-2a4f6b8c0e13 (got '
        "'0C5C1D2E-7F3A-4B8E-9D61-2A4F6B8C0E13')",
        'group k8s_control_plane: k8s_control_plane_vip_interface must be a network interface name (1 to 15 '
        "characters, no '/', ':' or whitespace) (got 'bond0 mgmt')",
        "host gpu1: rdma_network_interfaces lists 'ens1f0' more than once",
        "host gpu1: rdma_network_interfaces[1] must be a network interface name (1 to 15 characters, no '/', "
        "':' or whitespace) (got '1/1')",
        "host gpu1: rdma_network_interfaces[2] must be a network interface name (1 to 15 characters, no '/', "
        "':' or whitespace) (got 'enp65s0f0np0rdma0')",
    ],
    'bad_k8s_names': [
        "group all: k8s_device_plugins_node_selector: key 'accelerator type' is not a label key ([DNS "
        'prefix/]name, name at most 63 characters)',
        'group all: remediation_receiver_namespace must be a Kubernetes name (DNS-1123 label: at most 63 of '
        "a-z 0-9 -, alphanumeric at both ends) (got 'AI_Remediation')",
        'group all: remediation_receiver_storage_class must be a Kubernetes object name (DNS-1123 subdomain: '
        "lowercase letters, digits, - and ., at most 253 characters) (got 'fast_ssd')",
    ],
    'bad_device_paths': [
        'host gpu1: common_nvme_cache.device must be an absolute device path such as /dev/disk/by-id/nvme-... '
        "(got 'nvme1n1')",
        'host stor1: ceph_osd_devices[1].path must be a stable device path (/dev/disk/by-id/..., by-path or '
        "by-uuid): a kernel name such as /dev/sdb can name another disk after a reboot (got '/dev/sdb')",
        'host stor1: ceph_osd_devices[2].path must be an absolute device path such as /dev/disk/by-id/nvme-... '
        "(got 'dev/disk/by-id/ata-ST16000NM001G-2KK103_ZL2000A1')",
        'host stor1: ceph_osd_devices[3].path must be an absolute device path such as /dev/disk/by-id/nvme-... '
        "(got '/dev/disk/by-id')",
    ],
    'bad_mount_paths': [
        "host gpu1: common_nvme_cache.path must be a mount point of its own, not a system directory (got '/')",
        "group all: k8s_storage_juicefs_cache_dir must be an absolute path (got 'mnt/nvme/juicefs-cache')",
        'group all: node_labels_kubeconfig must be an absolute path without //, /./, /../ or a trailing / '
        "(/etc/kubernetes/admin.conf) (got '/etc/kubernetes/../kubernetes/admin.conf')",
        "host gpu1: role rdma_network: rdma_network_sysfs_root must be an absolute path (got 'sys')",
    ],
    'unusable_addresses': [
        "host npu1: ansible_host must be a host address, not the unspecified address (got '0.0.0.0')",
        "host gpu1: k8s_node_address must be a host address, not a multicast address (got '224.0.0.21')",
        'groups k8s_control_plane, k8s_worker: k8s_control_plane_vip must be a host address, not a loopback '
        "address (got '127.0.0.10')",
        "host stor1: ceph_address must be a host address, not the broadcast address (got '255.255.255.255')",
    ],
    'address_outside_subnet': [
        "host npu1: ansible_host '198.51.100.31' is outside lab_subnet '192.0.2.0/24'",
        "host gpu1: k8s_node_address '192.0.2.0' is the network address of lab_subnet '192.0.2.0/24'",
        "groups k8s_control_plane, k8s_worker: k8s_control_plane_vip '192.0.2.255' is the broadcast address of "
        "lab_subnet '192.0.2.0/24'",
        "host stor1: ceph_address '198.51.100.141' is outside ceph_public_network '198.51.100.0/25'",
    ],
    'empty_required_lists': [
        'groups k8s_control_plane, k8s_worker, storage: role common: common_chrony_servers must not be empty',
        'host gpu1: role rdma_network: rdma_network_interfaces must not be empty',
    ],
    'misspelt_group': [
        'group gpu_nvida: host gpu2 is in a group no play runs on (did you mean gpu_nvidia?)',
        'host gpu3: is in no group, so no play runs on it',
        'group gpu_nvdia: group_vars/gpu_nvdia sets variables for a group the inventory does not have, so no '
        'host gets them (did you mean gpu_nvidia?)',
    ],
}


def run_playbook(playbook, inventory, *extra, env=None):
    """Run ansible-playbook with the JSON callback; returns (CompletedProcess, report)."""
    env = {
        **os.environ,
        **(env or {}),
        'ANSIBLE_CONFIG': str(ROOT / 'ansible.cfg'),
        'ANSIBLE_STDOUT_CALLBACK': 'ansible.posix.json',
        # Replaces ansible.cfg's profile_tasks, which would print into the JSON on stdout.
        'ANSIBLE_CALLBACKS_ENABLED': 'ansible.posix.json',
        'ANSIBLE_FORCE_COLOR': '0',
    }
    bindir = Path(sys.executable).parent
    proc = subprocess.run([str(bindir / 'ansible-playbook'), str(ROOT / playbook), '-i', str(inventory), *extra],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    try:
        report = json.loads(proc.stdout)
    except json.JSONDecodeError:
        report = None
    return proc, report


@pytest.fixture(scope='module')
def bad_runs():
    """One ansible-playbook per bad inventory, a few at a time: each is mostly interpreter start-up.
    validate.yml, not site.yml (a third less CPU per run: site.yml loads every layer's playbook); that
    site.yml stops at the same play is test_limit_does_not_skip_validation's and
    test_site_starts_with_the_validation_play's."""
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        futures = {name: pool.submit(run_playbook, 'playbooks/validate.yml', BAD / name) for name in CASES}
        return {name: future.result() for name, future in futures.items()}


def checked(run):
    proc, report = run
    if report is None:
        pytest.fail(f'ansible-playbook printed no JSON report (rc={proc.returncode}):\n{proc.stdout}\n{proc.stderr}')
    return proc, report


def validation_result(report):
    """The validation task's only result, after asserting nothing else ran."""
    plays = [p['play']['name'] for p in report['plays']]
    assert plays == [VALIDATION_PLAY], f'plays that started: {plays}'
    tasks = report['plays'][0]['tasks']
    assert [t['task']['name'] for t in tasks] == [VALIDATION_TASK]
    results = list(tasks[0]['hosts'].values())
    assert len(results) == 1, 'the validation task must run once, on the controller'
    assert results[0]['action'] == 'ai_platform.l1.inventory_validate'
    return results[0]


def test_every_bad_inventory_has_a_case():
    assert sorted(p.name for p in BAD.iterdir() if p.is_dir()) == sorted(CASES)


def test_site_starts_with_the_validation_play():
    site = yaml.safe_load((ROOT / 'playbooks/site.yml').read_text())
    assert site[0]['ansible.builtin.import_playbook'] == 'validate.yml'


@pytest.mark.parametrize('name', sorted(CASES))
def test_bad_inventory_fails_before_any_host_is_touched(name, bad_runs):
    proc, report = checked(bad_runs[name])
    assert proc.returncode == 2, proc.stderr
    result = validation_result(report)
    assert result['failed'] is True
    assert result['errors'] == CASES[name]
    assert result['msg'].splitlines() == [f'inventory validation found {len(CASES[name])} error(s):', *CASES[name]]
    # Every host but the one the task was attributed to never had a result: nothing ran there.
    assert all(s['ok'] == 0 and s['changed'] == 0 for s in report['stats'].values())


def test_limit_does_not_skip_validation():
    # A play on localhost would be skipped by --limit; the validation play must not be.
    proc, report = checked(run_playbook('playbooks/site.yml', BAD / 'even_control_plane', '--limit', 'gpu1'))
    assert proc.returncode == 2, proc.stderr
    assert validation_result(report)['errors'] == CASES['even_control_plane']


@pytest.mark.parametrize(('inventory', 'hosts', 'extra'), [
    ('inventories/sample', 103, list(SAMPLE_SECRET)),
    ('inventories/lab', 7, []),
])
def test_shipped_inventories_pass(inventory, hosts, extra):
    # validate.yml alone: site.yml would go on to configure the hosts.
    proc, report = checked(run_playbook('playbooks/validate.yml', ROOT / inventory, *extra))
    result = validation_result(report)
    assert proc.returncode == 0, result.get('msg')
    assert result['errors'] == []
    assert result['checked_hosts'] == hosts


def test_variables_read_through_templates_or_given_with_e_are_not_refused(tmp_path):
    # A vaulted variable the inventory's own templates read (group_vars/all/vault.yml, as a site keeps
    # its secrets) is read; -e values are the caller's, not the inventory's.
    inventory = yaml.safe_load((BAD / 'unread_variable/hosts.yml').read_text())
    for name in ('cluster_name',):
        del inventory['all']['vars'][name]
    del inventory['all']['children']['k8s_worker']['children']['gpu_nvidia']['vars']
    del inventory['all']['children']['k8s_worker']['children']['npu_ascend']['hosts']['npu1']['ascend_cann_version']
    inventory['all']['vars']['monitoring_k8s_feishu_channels'] = {
        'critical': {'url': '{{ vault_feishu_critical_url }}', 'secret': '{{ vault_feishu_critical_secret }}'}}
    (tmp_path / 'hosts.yml').write_text(yaml.safe_dump(inventory))
    (tmp_path / 'group_vars/all').mkdir(parents=True)
    (tmp_path / 'group_vars/all/vault.yml').write_text(yaml.safe_dump({
        'vault_feishu_critical_url': 'https://open.feishu.cn/open-apis/bot/v2/hook/x',
        'vault_feishu_critical_secret': 'k7Qm2xVb'}))
    proc, report = checked(run_playbook('playbooks/validate.yml', tmp_path, '-e', 'cluster_name=dc1',
                                        '-e', '{"day2_reason": "maintenance"}'))
    result = validation_result(report)
    assert proc.returncode == 0, result.get('msg')
    assert result['errors'] == []
    # Cached facts (ansible.cfg: gathering smart, fact_caching jsonfile), such as a lab that has run
    # site.yml leaves, are not inventory variables.
    # Gathered for real on this machine under gpu1's name (the cache's format is Ansible's own).
    cache = {'ANSIBLE_CACHE_PLUGIN_CONNECTION': str(tmp_path / 'facts')}
    local = tmp_path / 'local'
    local.mkdir()
    (local / 'hosts.yml').write_text(yaml.safe_dump({'all': {'hosts': {'gpu1': {
        'ansible_connection': 'local', 'ansible_python_interpreter': sys.executable}}}}))
    (local / 'gather.yml').write_text(yaml.safe_dump([{'hosts': 'all', 'gather_facts': True, 'gather_subset': ['min'],
                                                       'tasks': []}]))
    proc, _report = run_playbook(local / 'gather.yml', local / 'hosts.yml', env=cache)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert list((tmp_path / 'facts').iterdir()), 'no facts were cached'
    proc, report = checked(run_playbook('playbooks/validate.yml', tmp_path, env=cache))
    assert validation_result(report)['errors'] == []
    # The same variable in the inventory is refused.
    (tmp_path / 'group_vars/all/site.yml').write_text('cluster_name: dc1\n')
    proc, report = checked(run_playbook('playbooks/validate.yml', tmp_path))
    assert validation_result(report)['errors'] == ['group all: cluster_name is not read by any role or tool']


def test_the_sample_placeholder_secret_is_refused():
    proc, report = checked(run_playbook('playbooks/validate.yml', ROOT / 'inventories/sample'))
    assert proc.returncode == 2
    assert validation_result(report)['errors'] == [
        'group k8s_control_plane: k8s_control_plane_vrrp_password is a placeholder, not a secret: set a real one '
        '(keep it in Ansible Vault)',
        'group storage: juicefs_metadata_password is a placeholder, not a secret: set a real one '
        '(keep it in Ansible Vault)']


def test_a_day2_run_with_every_control_plane_down_ends_with_its_refusal():
    inventory = ROOT / 'tests/inventories/unreachable_control_planes'
    proc, report = checked(run_playbook('playbooks/day2/cordon.yml', inventory, '--limit', 'gpu1',
                                        '-e', 'day2_reason=maintenance'))
    assert proc.returncode == 2, proc.stderr
    tasks = {t['task']['name']: t['hosts'] for t in report['plays'][0]['tasks']}
    [refusal] = tasks['Refuse a run without a reachable control plane'].values()
    assert refusal['failed'] is True
    assert refusal['msg'].startswith('No control plane of cp1, cp2, cp3 answers with a readable '
                                     '/etc/kubernetes/admin.conf')
    assert [p['play']['name'] for p in report['plays']] == ['Validate the day-2 request']


def test_a_sites_own_groups_pass_when_the_inventory_names_them(tmp_path):
    """Racks for --limit are groups no play runs on: named in validate_site_groups they pass; a
    misspelt play group is still refused with its "did you mean"."""
    inventory = yaml.safe_load((BAD / 'misspelt_group/hosts.yml').read_text())
    children = inventory['all']['children']
    children['k8s_worker']['children']['gpu_nvidia']['hosts'].update(
        children['k8s_worker']['children'].pop('gpu_nvida')['hosts'])
    children['k8s_worker']['children']['gpu_nvidia']['hosts'].update(inventory['all'].pop('hosts'))
    children['rack01'] = {'hosts': {'gpu1': None, 'gpu2': None}}
    (tmp_path / 'hosts.yml').write_text(yaml.safe_dump(inventory))
    proc, report = checked(run_playbook('playbooks/validate.yml', tmp_path / 'hosts.yml'))
    assert 'group rack01' in validation_result(report).get('msg', ''), 'an undeclared site group passed'
    inventory['all']['vars']['validate_site_groups'] = ['rack01']
    (tmp_path / 'hosts.yml').write_text(yaml.safe_dump(inventory))
    proc, report = checked(run_playbook('playbooks/validate.yml', tmp_path / 'hosts.yml'))
    assert proc.returncode == 0, validation_result(report).get('msg')
