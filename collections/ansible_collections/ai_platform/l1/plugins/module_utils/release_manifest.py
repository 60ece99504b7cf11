# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ai_platform L1 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""An upstream release manifest (Calico, Multus, whereabouts), applied as released with the site's images.

The shared part of the filters that set such a manifest up: plain copies of the parsed documents,
every container image of a workload replaced by the one the artifact manifest resolved (by
repository, whatever the release's tag), and an image the caller has no replacement for refused,
so nothing is pulled from upstream on an air-gapped site.
"""

from __future__ import annotations

import json

POD_TEMPLATE_KINDS = ('DaemonSet', 'Deployment', 'StatefulSet', 'Job', 'ReplicaSet')


class ReleaseManifestError(ValueError):
    pass


def plain(documents):
    """Plain copies of the documents, empty ones dropped. Ansible hands a filter lazy containers whose
    nested values are fresh copies on every access, so an edit made through them would be lost."""
    return [json.loads(json.dumps(d)) for d in documents if d]


def repository(ref):
    """The repository of an image reference: without digest and tag (a registry port is kept)."""
    name = ref.split('@', 1)[0]
    last = name.rsplit('/', 1)[-1]
    return name.rsplit(':', 1)[0] if ':' in last else name


def containers(obj):
    """The init containers and containers of a workload's Pod template (or of a Pod)."""
    spec = obj.get('spec', {})
    pod = spec if obj.get('kind') == 'Pod' else spec.get('template', {}).get('spec', {})
    if obj.get('kind') == 'CronJob':
        pod = spec.get('jobTemplate', {}).get('spec', {}).get('template', {}).get('spec', {})
    return pod.get('initContainers', []) + pod.get('containers', [])


def set_images(objects, images):
    """Replace every container image by images[key], key the image's repository or its last path
    elements (``calico/node`` matches ``quay.io/calico/node``). Refuses an image with no key."""
    for obj in objects:
        for container in containers(obj):
            repo = repository(container.get('image', ''))
            key = next((k for k in sorted(images, key=len, reverse=True)
                        if repo == k or repo.endswith('/' + k)), None)
            if key is None:
                raise ReleaseManifestError('no mirror image for %s (%s %s, container %s)' % (
                    container.get('image'), obj.get('kind'), obj.get('metadata', {}).get('name'),
                    container.get('name')))
            container['image'] = images[key]
    return objects
