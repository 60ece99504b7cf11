# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ai_platform L1 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ai_platform.l1.calico_manifest: Calico's release manifest, set up for this cluster.

Docs in calico_manifest.yml. The release manifest is applied as released, except for what its own
comments tell an installer to edit (the pool, the encapsulation, the address detection) and the
images, which come from the site's mirror by digest.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError
from ansible_collections.ai_platform.l1.plugins.module_utils.release_manifest import (
    ReleaseManifestError,
    containers,
    plain,
    set_images,
)

# Image repository in the release manifest -> key of the `images` option.
CALICO_IMAGES = {'calico/node': 'node', 'calico/cni': 'cni', 'calico/kube-controllers': 'kube-controllers'}
ENCAPSULATION = ('Always', 'CrossSubnet', 'Never')
# calico-node's probe commands that only ask Felix's health endpoint (calico-node -felix-live is an
# HTTP GET of http://FELIX_HEALTHHOST:FELIX_HEALTHPORT/liveness, 200-399 healthy): probe -> path.
FELIX_ONLY_PROBES = {('/bin/calico-node', '-felix-live'): '/liveness',
                     ('/bin/calico-node', '-felix-ready'): '/readiness'}


def _set_env(container, name, value):
    env = container.setdefault('env', [])
    for item in env:
        if item.get('name') == name:
            item.pop('valueFrom', None)
            item['value'] = value
            return
    env.append({'name': name, 'value': value})


def _felix_http_probes(container):
    """A probe that only asks Felix (the VXLAN backend's, no bird checks) becomes the same HTTP GET done
    by the kubelet itself: no process started in the container every period on every node."""
    env = {e.get('name'): e.get('value') for e in container.get('env', [])}
    host = env.get('FELIX_HEALTHHOST') or 'localhost'
    port = int(env.get('FELIX_HEALTHPORT') or 9099)
    for key in ('livenessProbe', 'readinessProbe'):
        probe = container.get(key) or {}
        path = FELIX_ONLY_PROBES.get(tuple((probe.get('exec') or {}).get('command') or ()))
        if path:
            del probe['exec']
            probe['httpGet'] = {'host': host, 'path': path, 'port': port}


def calico_manifest(documents, images, pool_cidr, *, encapsulation='CrossSubnet', autodetect='kubernetes-internal-ip',
                    block_size=None, node_env=None):
    """The manifest's objects with the mirror's images, the pool and the encapsulation set."""
    if not isinstance(images, Mapping) or set(images) != set(CALICO_IMAGES.values()):
        raise AnsibleFilterError('calico_manifest: images must name exactly %s, got %s'
                                 % (', '.join(sorted(CALICO_IMAGES.values())), sorted(images or {})))
    if encapsulation not in ENCAPSULATION:
        raise AnsibleFilterError('calico_manifest: encapsulation must be one of %s, got %r'
                                 % (', '.join(ENCAPSULATION), encapsulation))
    if not pool_cidr or '/' not in str(pool_cidr):
        raise AnsibleFilterError('calico_manifest: pool_cidr must be a CIDR (the cluster pod network), got %r'
                                 % (pool_cidr,))
    objects = plain(documents)
    backend = None
    node = None
    for obj in objects:
        if obj.get('kind') == 'ConfigMap' and obj.get('metadata', {}).get('name') == 'calico-config':
            backend = obj.get('data', {}).get('calico_backend')
        if obj.get('kind') == 'DaemonSet':
            node = next((c for c in containers(obj) if c.get('name') == 'calico-node'), node)
    try:
        set_images(objects, {repo: images[key] for repo, key in CALICO_IMAGES.items()})
    except ReleaseManifestError as exc:
        raise AnsibleFilterError('calico_manifest: %s' % exc) from exc
    if node is None or backend is None:
        raise AnsibleFilterError('calico_manifest: not a Calico manifest (no calico-node DaemonSet or calico-config)')
    _set_env(node, 'CALICO_IPV4POOL_CIDR', str(pool_cidr))
    # The backend decides the encapsulation: BGP (bird) peers route unencapsulated or with IP-in-IP,
    # the VXLAN backend has no BGP daemon, so VXLAN is its only way across subnets.
    _set_env(node, 'CALICO_IPV4POOL_VXLAN', encapsulation if backend == 'vxlan' else 'Never')
    _set_env(node, 'CALICO_IPV4POOL_IPIP', encapsulation if backend != 'vxlan' else 'Never')
    _set_env(node, 'IP_AUTODETECTION_METHOD', autodetect)
    if block_size is not None:
        _set_env(node, 'CALICO_IPV4POOL_BLOCK_SIZE', str(block_size))
    for name, value in sorted((node_env or {}).items()):
        _set_env(node, name, str(value))
    _felix_http_probes(node)
    return objects


class FilterModule(object):
    def filters(self):
        return {'calico_manifest': calico_manifest}
