"""Upstream release manifests with the site's images: module_utils/release_manifest.py,
shared by the filters ai_platform.l1.release_manifest (Multus, whereabouts) and calico_manifest."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.ai_platform.l1.plugins.filter.release_manifest import FilterModule, release_manifest
from ansible_collections.ai_platform.l1.plugins.module_utils.release_manifest import repository

MULTUS = 'mirror:5000/k8snetworkplumbingwg/multus-cni:v4.3.0@sha256:aa'


def daemonset(*images, kind='DaemonSet'):
    return {'kind': kind, 'metadata': {'name': 'x'},
            'spec': {'template': {'spec': {'initContainers': [{'name': 'init', 'image': images[0]}],
                                           'containers': [{'name': f'c{i}', 'image': im}
                                                          for i, im in enumerate(images[1:])]}}}}


@pytest.mark.parametrize(('ref', 'repo'), [
    ('ghcr.io/k8snetworkplumbingwg/multus-cni:snapshot', 'ghcr.io/k8snetworkplumbingwg/multus-cni'),
    ('10.89.100.1:5000/calico/node:v3.32.1@sha256:ab', '10.89.100.1:5000/calico/node'),
    ('10.89.100.1:5000/calico/node', '10.89.100.1:5000/calico/node'),
    ('localhost:5000/x@sha256:ab', 'localhost:5000/x'),
])
def test_repository(ref, repo):
    assert repository(ref) == repo


def test_every_image_replaced_whatever_the_tag():
    upstream = 'ghcr.io/k8snetworkplumbingwg/multus-cni:snapshot'
    docs = [{'kind': 'ConfigMap', 'data': {}}, None, daemonset(upstream, upstream)]
    out = release_manifest(docs, {'k8snetworkplumbingwg/multus-cni': MULTUS})
    pod = out[1]['spec']['template']['spec']
    assert [c['image'] for c in pod['initContainers'] + pod['containers']] == [MULTUS, MULTUS]
    assert docs[2]['spec']['template']['spec']['containers'][0]['image'].endswith(':snapshot'), 'input changed'
    assert len(out) == 2


def test_the_longest_key_wins_and_a_suffix_matches_whole_path_elements():
    out = release_manifest([daemonset('ghcr.io/a/whereabouts:latest', 'ghcr.io/b/whereabouts:latest')],
                           {'whereabouts': 'W', 'b/whereabouts': 'B'})
    pod = out[0]['spec']['template']['spec']
    assert [pod['initContainers'][0]['image'], pod['containers'][0]['image']] == ['W', 'B']
    with pytest.raises(AnsibleFilterError, match='no mirror image for ghcr.io/a/xwhereabouts:1'):
        release_manifest([daemonset('ghcr.io/a/xwhereabouts:1')], {'whereabouts': 'W'})


def test_an_image_without_a_replacement_is_refused_by_name():
    refused = r'no mirror image for docker.io/other:1 \(Deployment x, container c0\)'
    with pytest.raises(AnsibleFilterError, match=refused):
        release_manifest([daemonset('ghcr.io/k8snetworkplumbingwg/multus-cni:snapshot', 'docker.io/other:1',
                                    kind='Deployment')], {'k8snetworkplumbingwg/multus-cni': MULTUS})
    with pytest.raises(AnsibleFilterError, match='images must map'):
        release_manifest([], {})


def test_registered():
    assert FilterModule().filters()['release_manifest'] is release_manifest
