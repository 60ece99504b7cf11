"""Calico's release manifest set up for the cluster (Calico as the pod network, built and run in the lab): the filter
ai_platform.l1.calico_manifest changes the images, the pool, the encapsulation and the address
detection, refuses what it cannot redirect, and leaves every other field as released."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError
from ansible_collections.ai_platform.l1.plugins.filter.calico_manifest import FilterModule, calico_manifest

REPO = Path(__file__).resolve().parents[2]
IMAGES = {'node': 'mirror:5000/calico/node:v3.32.1@sha256:aa',
          'cni': 'mirror:5000/calico/cni:v3.32.1@sha256:bb',
          'kube-controllers': 'mirror:5000/calico/kube-controllers:v3.32.1@sha256:cc'}


def release(backend='vxlan'):
    """The shape of the release's calico-vxlan.yaml / calico.yaml (v3.32.1), abridged."""
    return [
        {'kind': 'ConfigMap', 'metadata': {'name': 'calico-config', 'namespace': 'kube-system'},
         'data': {'calico_backend': backend, 'veth_mtu': '0'}},
        None,  # an empty document (a lone ---) in the file
        {'kind': 'CustomResourceDefinition', 'metadata': {'name': 'ippools.crd.projectcalico.org'}},
        {'kind': 'DaemonSet', 'metadata': {'name': 'calico-node', 'namespace': 'kube-system'},
         'spec': {'template': {'spec': {
             'initContainers': [
                 {'name': 'upgrade-ipam', 'image': 'quay.io/calico/cni:v3.32.1'},
                 {'name': 'install-cni', 'image': 'quay.io/calico/cni:v3.32.1'},
                 {'name': 'mount-bpffs', 'image': 'quay.io/calico/node:v3.32.1'}],
             'containers': [{'name': 'calico-node', 'image': 'quay.io/calico/node:v3.32.1', 'env': [
                 {'name': 'CALICO_NETWORKING_BACKEND',
                  'valueFrom': {'configMapKeyRef': {'name': 'calico-config', 'key': 'calico_backend'}}},
                 {'name': 'IP', 'value': 'autodetect'},
                 {'name': 'CALICO_IPV4POOL_IPIP', 'value': 'Never' if backend == 'vxlan' else 'Always'},
                 {'name': 'CALICO_IPV4POOL_VXLAN', 'value': 'CrossSubnet' if backend == 'vxlan' else 'Never'},
                 {'name': 'FELIX_HEALTHENABLED', 'value': 'true'}],
                 # The release's probes: the VXLAN manifest asks Felix only, calico.yaml bird too.
                 'livenessProbe': {'exec': {'command': ['/bin/calico-node', '-felix-live']
                                            + ([] if backend == 'vxlan' else ['-bird-live'])},
                                   'periodSeconds': 10, 'initialDelaySeconds': 10, 'failureThreshold': 6,
                                   'timeoutSeconds': 10},
                 'readinessProbe': {'exec': {'command': ['/bin/calico-node', '-felix-ready']
                                             + ([] if backend == 'vxlan' else ['-bird-ready'])},
                                    'periodSeconds': 10, 'timeoutSeconds': 10}}]}}}},
        {'kind': 'Deployment', 'metadata': {'name': 'calico-kube-controllers', 'namespace': 'kube-system'},
         'spec': {'template': {'spec': {'containers': [
             {'name': 'calico-kube-controllers', 'image': 'quay.io/calico/kube-controllers:v3.32.1'}]}}}},
    ]


def node_container(objects):
    ds = next(o for o in objects if o['kind'] == 'DaemonSet')
    return ds['spec']['template']['spec']['containers'][0]


def env(objects):
    ds = next(o for o in objects if o['kind'] == 'DaemonSet')
    return {e['name']: e.get('value') for e in ds['spec']['template']['spec']['containers'][0]['env']}


def images(objects):
    out = []
    for o in objects:
        pod = o.get('spec', {}).get('template', {}).get('spec', {})
        out += [c['image'] for c in pod.get('initContainers', []) + pod.get('containers', [])]
    return out


def test_vxlan_backend_gets_the_pool_the_tunnel_and_the_mirror_images():
    docs = release('vxlan')
    before = copy.deepcopy(docs)
    out = calico_manifest(docs, IMAGES, '10.244.0.0/16', encapsulation='Always')
    assert docs == before, 'the input must not be changed in place'
    e = env(out)
    assert e['CALICO_IPV4POOL_CIDR'] == '10.244.0.0/16'
    assert e['CALICO_IPV4POOL_VXLAN'] == 'Always'
    assert e['CALICO_IPV4POOL_IPIP'] == 'Never'
    assert e['IP_AUTODETECTION_METHOD'] == 'kubernetes-internal-ip'
    assert e['FELIX_HEALTHENABLED'] == 'true' and e['IP'] == 'autodetect'
    assert images(out) == [IMAGES['cni'], IMAGES['cni'], IMAGES['node'], IMAGES['node'], IMAGES['kube-controllers']]
    assert len(out) == 4  # the empty document dropped, nothing else
    assert out[1] == before[2]


def test_bird_backend_encapsulates_with_ipip_and_never_vxlan():
    e = env(calico_manifest(release('bird'), IMAGES, '10.244.0.0/16', encapsulation='CrossSubnet',
                            autodetect='interface=bond0', block_size=24))
    assert (e['CALICO_IPV4POOL_IPIP'], e['CALICO_IPV4POOL_VXLAN']) == ('CrossSubnet', 'Never')
    assert e['IP_AUTODETECTION_METHOD'] == 'interface=bond0'
    assert e['CALICO_IPV4POOL_BLOCK_SIZE'] == '24'


def test_a_value_from_a_configmap_is_replaced_not_doubled():
    docs = release()
    node = docs[3]['spec']['template']['spec']['containers'][0]
    node['env'].append({'name': 'IP_AUTODETECTION_METHOD',
                        'valueFrom': {'configMapKeyRef': {'name': 'x', 'key': 'y'}}})
    out = calico_manifest(docs, IMAGES, '10.244.0.0/16')
    entries = [x for x in out[2]['spec']['template']['spec']['containers'][0]['env']
               if x['name'] == 'IP_AUTODETECTION_METHOD']
    assert entries == [{'name': 'IP_AUTODETECTION_METHOD', 'value': 'kubernetes-internal-ip'}]


@pytest.mark.parametrize(('change', 'args', 'message'), [
    (lambda d: d[3]['spec']['template']['spec']['initContainers'].append(
        {'name': 'flexvol', 'image': 'quay.io/calico/pod2daemon-flexvol:v3.32.1'}), {},
     'no mirror image for quay.io/calico/pod2daemon-flexvol'),
    (lambda d: d.pop(3), {}, 'not a Calico manifest'),
    (lambda d: d.pop(0), {}, 'not a Calico manifest'),
    (lambda d: None, {'images': {'node': 'x'}}, 'images must name exactly'),
    (lambda d: None, {'encapsulation': 'Sometimes'}, 'encapsulation must be one of'),
    (lambda d: None, {'pool_cidr': ''}, 'pool_cidr must be a CIDR'),
])
def test_refusals(change, args, message):
    docs = release()
    change(docs)
    kwargs = {'images': IMAGES, 'pool_cidr': '10.244.0.0/16', **args}
    with pytest.raises(AnsibleFilterError, match=message):
        calico_manifest(docs, **kwargs)


def test_registered():
    assert FilterModule().filters()['calico_manifest'] is calico_manifest


def test_through_ansible_the_changes_are_kept(tmp_path):
    """Ansible hands filters lazy containers (2.19): edits made through them must reach the output."""
    manifest = tmp_path / "calico.yaml"
    manifest.write_text(yaml.safe_dump_all(release()))
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": [{
        "ansible.builtin.copy": {
            "dest": str(tmp_path / "out.json"),
            "content": "{{ lookup('ansible.builtin.file', '%s') | ansible.builtin.from_yaml_all | list"
                       " | ai_platform.l1.calico_manifest(images, '10.244.0.0/16') | to_json }}" % manifest},
        "vars": {"images": IMAGES}}]}]))
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                           str(play), "-e", f"ansible_python_interpreter={sys.executable}"],
                          capture_output=True, text=True, check=False, cwd=REPO)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out = json.loads((tmp_path / "out.json").read_text())
    assert images(out) == [IMAGES['cni'], IMAGES['cni'], IMAGES['node'], IMAGES['node'], IMAGES['kube-controllers']]
    assert env(out)['CALICO_IPV4POOL_CIDR'] == '10.244.0.0/16'


def test_node_env_is_set_last_and_wins():
    extra = {'FELIX_DebugSkipCTLBCleanup': 'true', 'IP_AUTODETECTION_METHOD': 'can-reach=1.1.1.1'}
    e = env(calico_manifest(release(), IMAGES, '10.244.0.0/16', node_env=extra))
    assert e['FELIX_DebugSkipCTLBCleanup'] == 'true'
    assert e['IP_AUTODETECTION_METHOD'] == 'can-reach=1.1.1.1'


def test_felix_only_probes_become_the_kubelets_http_get_with_the_releases_timing():
    """calico-node -felix-live / -felix-ready is a GET of Felix's health endpoint: the kubelet makes it
    itself instead of starting a process in the container every 10 s (measured in the lab: 0.1 of a core
    across six nodes, tests/bench/lab_cpu.py --pods)."""
    node = node_container(calico_manifest(release('vxlan'), IMAGES, '10.244.0.0/16'))
    assert node['livenessProbe'] == {'httpGet': {'host': 'localhost', 'path': '/liveness', 'port': 9099},
                                     'periodSeconds': 10, 'initialDelaySeconds': 10, 'failureThreshold': 6,
                                     'timeoutSeconds': 10}
    assert node['readinessProbe'] == {'httpGet': {'host': 'localhost', 'path': '/readiness', 'port': 9099},
                                      'periodSeconds': 10, 'timeoutSeconds': 10}


def test_felix_probes_follow_a_health_address_set_in_node_env():
    node = node_container(calico_manifest(release('vxlan'), IMAGES, '10.244.0.0/16',
                                          node_env={'FELIX_HEALTHPORT': 19099, 'FELIX_HEALTHHOST': '127.0.0.1'}))
    for probe, path in (('livenessProbe', '/liveness'), ('readinessProbe', '/readiness')):
        assert node[probe]['httpGet'] == {'host': '127.0.0.1', 'path': path, 'port': 19099}
        assert 'exec' not in node[probe]


def test_bird_probes_that_also_check_bgp_stay_as_released():
    docs = release('bird')
    released = copy.deepcopy(node_container([d for d in docs if d]))
    node = node_container(calico_manifest(docs, IMAGES, '10.244.0.0/16'))
    assert node['livenessProbe'] == released['livenessProbe']
    assert node['readinessProbe'] == released['readinessProbe']
    assert node['readinessProbe']['exec']['command'] == ['/bin/calico-node', '-felix-ready', '-bird-ready']
