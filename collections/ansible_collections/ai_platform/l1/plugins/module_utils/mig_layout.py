# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""MIG layouts: the mig-parted config format, nvidia-smi MIG output, and the diff.

A layout is what one GPU should look like: ``{'mig_enabled': bool, 'devices': {'1g.10gb': 7}}``.
Everything here is pure (text and dicts in, plain data out) so it is unit-tested without a
GPU; ai_platform.l1.nvidia_mig runs the commands.

mig-parted config (github.com/NVIDIA/mig-parted, ``version: v1``)::

    version: v1
    mig-configs:
      all-1g.10gb:
        - devices: all            # or a list of GPU indexes
          device-filter: "0x20B210DE"   # optional: PCI device ID(s) it applies to
          mig-enabled: true
          mig-devices: {"1g.10gb": 7}
"""

from __future__ import annotations

import re


class MigLayoutError(ValueError):
    """The config is not a valid mig-parted config, or nvidia-smi printed something else."""


_PROFILE_RE = re.compile(r'^(?:MIG )?((\d+)g\.\d+gb(?:\+me)?)$')
_LGI_ROW_RE = re.compile(r'^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+):(\d+)\s*\|$')
_LGIP_ROW_RE = re.compile(r'^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)/(\d+)\s')
_EMPTY_MARKERS = ('No GPU instances found', 'No MIG-enabled devices found')
# Compute slices of a MIG-capable GPU (A100, H100, H200: 7).
COMPUTE_SLICES = 7


def profile_name(name):
    """'MIG 1g.10gb' or '1g.10gb' -> '1g.10gb'; anything else is an error."""
    m = _PROFILE_RE.match(str(name).strip())
    if not m:
        raise MigLayoutError("'%s' is not a MIG profile name (like 1g.10gb)" % name)
    return m.group(1)


def profile_slices(name):
    return int(_PROFILE_RE.match(profile_name(name)).group(2))


def _device_ids(value, where):
    if value is None:
        return None
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        if not isinstance(item, str) or not re.match(r'^0x[0-9A-Fa-f]{4,8}$', item):
            raise MigLayoutError('%s: device-filter %r is not a PCI device ID like 0x20B210DE' % (where, item))
        out.append(item.upper().replace('0X', '0x'))
    return out


def select_config(config, name):
    """Validate a mig-parted config and return the entries of config ``name``.

    Each entry: {'devices': 'all' | [int], 'device_filter': None | [str], 'mig_enabled': bool,
    'mig_devices': {profile: count}}.
    """
    if not isinstance(config, dict):
        raise MigLayoutError('the MIG config must be a mapping with version and mig-configs')
    if config.get('version') != 'v1':
        raise MigLayoutError("MIG config version must be v1 (got %r)" % config.get('version'))
    configs = config.get('mig-configs')
    if not isinstance(configs, dict) or not configs:
        raise MigLayoutError('MIG config has no mig-configs mapping')
    if name not in configs:
        raise MigLayoutError("MIG config '%s' is not in mig-configs (known: %s)" % (name, ', '.join(sorted(configs))))
    entries = configs[name]
    if not isinstance(entries, list) or not entries:
        raise MigLayoutError("mig-configs.%s must be a non-empty list of entries" % name)
    return [_entry(entry, 'mig-configs.%s[%d]' % (name, i)) for i, entry in enumerate(entries)]


def _entry(entry, where):
    if not isinstance(entry, dict):
        raise MigLayoutError('%s must be a mapping' % where)
    unknown = set(entry) - {'devices', 'device-filter', 'mig-enabled', 'mig-devices'}
    if unknown:
        raise MigLayoutError('%s: unknown keys %s' % (where, ', '.join(sorted(unknown))))
    devices = entry.get('devices')
    if devices != 'all' and not (isinstance(devices, list) and devices
                                 and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                         for d in devices)):
        raise MigLayoutError("%s: devices must be 'all' or a list of GPU indexes" % where)
    enabled = entry.get('mig-enabled')
    if not isinstance(enabled, bool):
        raise MigLayoutError('%s: mig-enabled must be true or false' % where)
    raw = entry.get('mig-devices') or {}
    if not isinstance(raw, dict):
        raise MigLayoutError('%s: mig-devices must be a mapping of profile to count' % where)
    if raw and not enabled:
        raise MigLayoutError('%s: mig-devices given with mig-enabled: false' % where)
    devs = {}
    for prof, count in raw.items():
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise MigLayoutError('%s: count of %s must be a non-negative integer' % (where, prof))
        if count:
            devs[profile_name(prof)] = devs.get(profile_name(prof), 0) + count
    slices = sum(profile_slices(p) * c for p, c in devs.items())
    if slices > COMPUTE_SLICES:
        raise MigLayoutError('%s: the profiles need %d compute slices, a GPU has %d'
                             % (where, slices, COMPUTE_SLICES))
    return {'devices': devices, 'device_filter': _device_ids(entry.get('device-filter'), where),
            'mig_enabled': enabled, 'mig_devices': devs}


def desired_layout(entries, gpus):
    """Map each GPU index to its wanted layout. ``gpus``: {index: {'device_id': '0x...'}}.

    GPUs no entry selects are left out (not managed). A later entry wins for a GPU
    several entries select, as in mig-parted. A device index the host lacks is an error.
    """
    want = {}
    for entry in entries:
        if entry['devices'] != 'all':
            missing = [d for d in entry['devices'] if d not in gpus]
            if missing:
                raise MigLayoutError('MIG config names GPU %s but the host has GPUs %s'
                                     % (', '.join(map(str, missing)), ', '.join(map(str, sorted(gpus))) or 'none'))
        for idx in sorted(gpus):
            if entry['devices'] != 'all' and idx not in entry['devices']:
                continue
            if entry['device_filter'] and (gpus[idx].get('device_id') or '').upper().replace('0X', '0x') \
                    not in entry['device_filter']:
                continue
            want[idx] = {'mig_enabled': entry['mig_enabled'], 'devices': dict(entry['mig_devices'])}
    return want


def _mode(value):
    return {'Enabled': True, 'Disabled': False}.get(value)  # [N/A]: not MIG capable


def parse_mig_modes(text):
    """``--query-gpu=index,uuid,pci.device_id,mig.mode.current,mig.mode.pending --format=csv,noheader``."""
    gpus = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(',')]
        if len(parts) != 5 or not parts[0].isdigit():
            raise MigLayoutError('unexpected nvidia-smi --query-gpu line: %r' % line)
        gpus[int(parts[0])] = {'uuid': parts[1], 'device_id': parts[2], 'mig_capable': _mode(parts[3]) is not None,
                               'mig_current': bool(_mode(parts[3])), 'mig_pending': bool(_mode(parts[4]))}
    return gpus


def _is_empty(text):
    return any(marker in text for marker in _EMPTY_MARKERS)


def parse_lgi(text):
    """``nvidia-smi mig -lgi`` -> {gpu: [{'profile', 'profile_id', 'gi_id', 'start', 'size'}]}."""
    out = {}
    if _is_empty(text):
        return out
    rows = 0
    for line in text.splitlines():
        m = _LGI_ROW_RE.match(line.strip())
        if m:
            rows += 1
            out.setdefault(int(m.group(1)), []).append({
                'profile': profile_name(m.group(2)), 'profile_id': int(m.group(3)), 'gi_id': int(m.group(4)),
                'start': int(m.group(5)), 'size': int(m.group(6))})
    if not rows and 'GPU instances:' not in text:
        raise MigLayoutError('unexpected nvidia-smi mig -lgi output: %r' % text[:200])
    return out


def parse_lgip(text):
    """``nvidia-smi mig -lgip`` -> {gpu: {profile: {'id', 'free', 'total'}}}."""
    out = {}
    if _is_empty(text):
        return out
    for line in text.splitlines():
        m = _LGIP_ROW_RE.match(line.strip())
        if m:
            out.setdefault(int(m.group(1)), {})[profile_name(m.group(2))] = {
                'id': int(m.group(3)), 'free': int(m.group(4)), 'total': int(m.group(5))}
    if not out:
        raise MigLayoutError('unexpected nvidia-smi mig -lgip output: %r' % text[:200])
    return out


def current_layout(modes, instances):
    """{gpu: {'mig_enabled', 'devices': {profile: count}}} from parse_mig_modes + parse_lgi."""
    out = {}
    for idx, gpu in modes.items():
        devs = {}
        for gi in instances.get(idx, []) if gpu['mig_current'] else []:
            devs[gi['profile']] = devs.get(gi['profile'], 0) + 1
        out[idx] = {'mig_enabled': gpu['mig_current'], 'devices': devs}
    return out


def check_supported(want, modes, profiles):
    """Errors (list of str) for wanted layouts the GPUs cannot have: not MIG capable, unknown profile."""
    errors = []
    for idx, layout in sorted(want.items()):
        gpu = modes.get(idx, {})
        if layout['mig_enabled'] and not gpu.get('mig_capable'):
            errors.append('GPU %d is not MIG capable' % idx)
            continue
        known = profiles.get(idx)
        if known is None:
            continue  # MIG not enabled yet: the profiles are only listed once it is
        for prof, count in sorted(layout['devices'].items()):
            if prof not in known:
                errors.append('GPU %d has no MIG profile %s (it has %s)' % (idx, prof, ', '.join(sorted(known))))
            elif count > known[prof]['total']:
                errors.append('GPU %d: %d x %s wanted, the profile allows %d'
                              % (idx, count, prof, known[prof]['total']))
    return errors


def plan(current, want):
    """Steps per GPU to go from current to want: {gpu: [step, ...]}; GPUs already right are absent.

    Steps: ('destroy',) all GPU/compute instances; ('mode', bool); ('create', [profiles]) in
    creation order, largest first (placement needs the big ones first).
    """
    steps = {}
    for idx, layout in sorted(want.items()):
        have = current.get(idx, {'mig_enabled': False, 'devices': {}})
        todo = []
        same_devices = have['devices'] == layout['devices']
        if have['mig_enabled'] and (not layout['mig_enabled'] or not same_devices) and have['devices']:
            todo.append(('destroy',))
        if have['mig_enabled'] != layout['mig_enabled']:
            todo.append(('mode', layout['mig_enabled']))
        if layout['mig_enabled'] and layout['devices'] and (not same_devices or not have['mig_enabled']):
            order = sorted(layout['devices'], key=lambda p: (-profile_slices(p), p))
            todo.append(('create', [p for p in order for dummy in range(layout['devices'][p])]))
        if todo:
            steps[idx] = todo
    return steps


def describe(layout):
    """One line: 'MIG on: 1g.10gb x7' / 'MIG off'."""
    if not layout['mig_enabled']:
        return 'MIG off'
    if not layout['devices']:
        return 'MIG on: no instances'
    items = sorted(layout['devices'].items(), key=lambda pc: (-profile_slices(pc[0]), pc[0]))
    return 'MIG on: ' + ', '.join('%s x%d' % (p, c) for p, c in items)


def render(layouts):
    """Text for a diff: one line per GPU."""
    return ''.join('GPU %d: %s\n' % (idx, describe(layouts[idx])) for idx in sorted(layouts))
