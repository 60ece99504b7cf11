# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""RoCE lines of NVIDIA Onyx and Cumulus NVUE switch configurations: wanted lines, what is
managed in a running configuration, and the commands that turn one into the other.

Free of netmiko and AnsibleModule so it can be unit-tested on its own.
"""

from __future__ import annotations

import re

DEVICE_TYPES = ('mellanox_mlnxos', 'cumulus_linux')
ROCE_MODES = ('lossless', 'lossy')


class SwitchRoceError(Exception):
    """Invalid wanted settings."""


_ONYX_PFC = re.compile(r'^dcb priority-flow-control priority ([0-7]) enable$')
_NV_PFC = re.compile(r'^nv set qos pfc default-global switch-priority ([0-7])$')


def validate(device_type, roce_mode, pfc_priorities):
    if device_type not in DEVICE_TYPES:
        raise SwitchRoceError('device_type %r is not supported; use one of %s' % (device_type, ', '.join(DEVICE_TYPES)))
    if roce_mode not in ROCE_MODES:
        raise SwitchRoceError('roce_mode must be one of %s, got %r' % (ROCE_MODES, roce_mode))
    prios = []
    for p in pfc_priorities or []:
        if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p <= 7:
            raise SwitchRoceError('pfc_priorities: priority %r is out of 0..7' % (p,))
        if p not in prios:
            prios.append(p)
    if roce_mode == 'lossless' and not prios:
        raise SwitchRoceError('roce_mode lossless needs at least one PFC priority')
    return sorted(prios)


def wanted_lines(device_type, roce_mode, pfc_priorities, onyx_roce_command=True):
    """The managed configuration lines the switch should have, in the platform's syntax."""
    if device_type == 'mellanox_mlnxos':
        lines = ['roce %s' % roce_mode] if onyx_roce_command else []
        if pfc_priorities:
            lines.append('dcb priority-flow-control enable force')
        lines += ['dcb priority-flow-control priority %d enable' % p for p in pfc_priorities]
        return lines
    lines = ['nv set qos roce enable on', 'nv set qos roce mode %s' % roce_mode]
    lines += ['nv set qos pfc default-global switch-priority %d' % p for p in pfc_priorities]
    return lines


def managed(device_type, line, onyx_roce_command=True):
    """Whether a running-configuration line is one this module owns."""
    if device_type == 'mellanox_mlnxos':
        return (onyx_roce_command and line.startswith('roce')) \
            or line.startswith('dcb priority-flow-control enable') or bool(_ONYX_PFC.match(line))
    return line.startswith(('nv set qos roce ', 'nv set qos pfc default-global switch-priority '))


def current_lines(device_type, text, onyx_roce_command=True):
    lines = [line.strip() for line in text.splitlines()]
    return [line for line in lines
            if line and not line.startswith('#') and managed(device_type, line, onyx_roce_command)]


def _negate(device_type, line):
    if device_type == 'mellanox_mlnxos':
        return 'no ' + line
    m = _NV_PFC.match(line)
    if m:
        return 'nv unset qos pfc default-global switch-priority %s' % m.group(1)
    # nv unset PATH drops a single-valued key; the value is not part of the path
    return 'nv unset ' + ' '.join(line.split()[2:-1])


def _single_key(device_type, line):
    """Key of a single-valued line: setting a new value replaces the old one, no unset needed."""
    if device_type == 'mellanox_mlnxos':
        return 'roce' if line.startswith('roce') else None
    if _NV_PFC.match(line):
        return None
    return ' '.join(line.split()[:-1])


def plan(device_type, current, wanted):
    """Return (commands, removed lines, added lines) to go from current to wanted lines."""
    added = [line for line in wanted if line not in current]
    replaced = set(_single_key(device_type, line) for line in added) - {None}
    removed = [line for line in current if line not in wanted]
    commands = [_negate(device_type, line) for line in removed if _single_key(device_type, line) not in replaced]
    # Onyx turns per-priority PFC off before the global switch; on after it.
    commands += added
    return commands, removed, added


def describe(device_type, removed, added):
    """Human-readable change notes that name each PFC priority."""
    notes = []
    for line, verb in [(line, 'remove') for line in removed] + [(line, 'add') for line in added]:
        m = _ONYX_PFC.match(line) or _NV_PFC.match(line)
        if m:
            notes.append('PFC priority %s: %s' % (m.group(1), 'on' if verb == 'add' else 'off'))
        else:
            notes.append('%s: %s' % (verb, line))
    return notes
