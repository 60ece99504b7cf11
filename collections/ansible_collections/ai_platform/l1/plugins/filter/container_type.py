# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ai_platform.l1.container_type: the container a host runs in, from its virtualization facts.

Docs in container_type.yml. The one place that says "this host is a container" (it shares its
host's kernel): the common role's common_in_container and the safe_reboot role read it.
"""

from __future__ import annotations

from collections.abc import Mapping

from ansible.errors import AnsibleFilterError

# ansible_virtualization_type / ansible_virtualization_tech_guest values of a container. Ansible adds
# the generic 'container' to tech_guest for any of the others and for what /run/systemd/container names.
CONTAINER_TYPES = ('container', 'containerd', 'docker', 'lxc', 'openvz', 'podman', 'systemd-nspawn')
FACTS = ('virtualization_type', 'virtualization_role', 'virtualization_tech_guest')


def _fact(facts, name):
    """A fact from ansible_facts (virtualization_type) or from hostvars (ansible_virtualization_type)."""
    for key in (name, 'ansible_' + name):
        if key in facts:
            return facts[key]
    return None


def container_type(facts):
    """The container technology (podman, docker, lxc, ...), or '' when the host is not a container."""
    if not isinstance(facts, Mapping):
        raise AnsibleFilterError('container_type expects the host facts (ansible_facts), got %s' % type(facts).__name__)
    if all(_fact(facts, name) is None for name in FACTS):
        raise AnsibleFilterError('container_type: no virtualization facts; gather them first '
                                 '(ansible.builtin.setup with gather_subset [virtual])')
    vtype = _fact(facts, 'virtualization_type') or ''
    if _fact(facts, 'virtualization_role') == 'guest' and vtype in CONTAINER_TYPES:
        return vtype
    guest = _fact(facts, 'virtualization_tech_guest') or []
    if isinstance(guest, str):
        guest = [guest]
    # The specific technology before the generic 'container'.
    found = sorted((t for t in guest if t in CONTAINER_TYPES), key=lambda t: (t == 'container', t))
    return found[0] if found else ''


class FilterModule(object):
    def filters(self):
        return {'container_type': container_type}
