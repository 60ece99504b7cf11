# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters ai_platform.l1.fleet_compliance, fleet_compliance_table and fleet_compliance_metrics: what
each node runs (driver, CUDA, VBIOS, CANN, firmware, kernel, NIC firmware, containerd, kubelet) against the golden
baseline of the inventory. Docs in fleet_compliance.yml, fleet_compliance_table.yml and fleet_compliance_metrics.yml.

The input is what the report play read on each node, unparsed (command output and the results of
gpu_info and npu_info), so that the parsing is tested here on captured output and the play stays
read-only wiring.
"""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

# The components, in report order; each is read from the node's raw facts by PARSERS.
COMPONENTS = ('kernel', 'containerd', 'kubelet', 'nvidia_driver', 'cuda', 'vbios', 'ascend_driver',
              'ascend_firmware', 'cann', 'ofed', 'nic_firmware')
RAW_KEYS = frozenset(('groups', 'kernel', 'containerd', 'kubelet', 'gpu_info', 'npu_info', 'ofed', 'nic_firmware'))
VERSION = re.compile(r'\bv?(\d+\.\d+(?:\.\d+)*(?:[-~+.][0-9A-Za-z.~+-]*)?)')


def _fail(msg):
    raise AnsibleFilterError('fleet_compliance: %s' % msg)


def _version_in(text, what, host):
    """The first version-looking token of a command's output ('' when the command printed nothing)."""
    if text is None or text == '':
        return ''
    if not isinstance(text, str):
        _fail('%s: %s must be the command output (a string), got %s' % (host, what, type(text).__name__))
    match = VERSION.search(text)
    if not match:
        _fail('%s: no version in the %s output %r' % (host, what, text[:200]))
    return match.group(1)


def _kubelet(text, host):
    if text and 'Kubernetes' not in text:
        _fail('%s: kubelet --version printed %r, not "Kubernetes vX.Y.Z"' % (host, text[:200]))
    return _version_in(text, 'kubelet --version', host)


def _containerd(text, host):
    # "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3" (Debian) or
    # "containerd containerd.io 1.7.22 7f7fdf5f..." (Docker's packages): the third field.
    if not text:
        return ''
    fields = text.split()
    if len(fields) < 3 or fields[0] != 'containerd':
        _fail('%s: containerd --version printed %r, not "containerd <source> <version> ..."' % (host, text[:200]))
    return _version_in(fields[2], 'containerd --version', host)


def _ofed(text, host):
    # ofed_info -s: "MLNX_OFED_LINUX-24.10-1.1.4.0:" (absent on nodes without MLNX_OFED: '').
    if not text:
        return ''
    match = re.match(r'^\s*(?:MLNX_OFED_LINUX|OFED-internal|DOCA[A-Za-z_-]*)-([0-9][0-9A-Za-z.-]*?):?\s*$', text)
    if not match:
        _fail('%s: ofed_info -s printed %r, not "MLNX_OFED_LINUX-<version>:"' % (host, text[:200]))
    return match.group(1)


def _nic_firmware(values, host):
    # /sys/class/infiniband/<dev>/fw_ver of each RDMA device; one value when they agree.
    if values in (None, '', []):
        return ''
    if isinstance(values, str):
        values = values.split()
    if not isinstance(values, list) or not all(isinstance(v, str) and v.strip() for v in values):
        _fail('%s: nic_firmware must be the list of fw_ver values, got %r' % (host, values))
    found = sorted({v.strip() for v in values})
    for value in found:
        if not re.match(r'^\d+(\.\d+)+$', value):
            _fail('%s: fw_ver %r is not a firmware version (e.g. 28.39.1002)' % (host, value))
    return ','.join(found)


def _module(raw, key, host):
    value = raw.get(key) or {}
    if not isinstance(value, dict):
        _fail('%s: %s must be the module result, got %s' % (host, key, type(value).__name__))
    return value.get(key, value)


def observed(raw, host='?'):
    """The component versions of one node from its raw facts ('' where the node has none)."""
    if not isinstance(raw, dict):
        _fail('%s: the node facts must be a dict, got %s' % (host, type(raw).__name__))
    unknown = set(raw) - RAW_KEYS
    if unknown:
        _fail('%s: unknown keys %s' % (host, ', '.join(sorted(unknown))))
    gpu = _module(raw, 'gpu_info', host)
    npu = _module(raw, 'npu_info', host)
    installed = npu.get('installed') or {}
    kernel = raw.get('kernel') or ''
    if not isinstance(kernel, str):
        _fail('%s: kernel must be a string' % host)
    return {
        'kernel': kernel,
        'containerd': _containerd(raw.get('containerd'), host),
        'kubelet': _kubelet(raw.get('kubelet'), host),
        'nvidia_driver': str(gpu.get('driver_version') or '') if gpu.get('present') else '',
        'cuda': str(gpu.get('cuda_driver_version') or '') if gpu.get('present') else '',
        # Each GPU's VBIOS; one value when they agree (the usual case), all of them when they do not.
        'vbios': ','.join(sorted({str(g.get('vbios_version') or '') for g in gpu.get('gpus') or []
                                  if isinstance(g, dict) and g.get('vbios_version')})) if gpu.get('present') else '',
        'ascend_driver': str(installed.get('driver') or ''),
        'ascend_firmware': str(installed.get('firmware') or ''),
        'cann': str(installed.get('cann') or ''),
        'ofed': _ofed(raw.get('ofed'), host),
        'nic_firmware': _nic_firmware(raw.get('nic_firmware'), host),
    }


def _allowed(value, where):
    values = value if isinstance(value, list) else [value]
    out = []
    for item in values:
        if isinstance(item, bool) or not isinstance(item, (str, int, float)) or not str(item).strip():
            _fail('%s: a baseline version must be a non-empty string or a list of them, got %r' % (where, value))
        out.append(str(item).strip())
    return out


def check_baseline(baseline):
    """{group: {component: [allowed versions]}}, in the inventory's order; fails on bad input."""
    if not isinstance(baseline, dict):
        _fail('the baseline must be a dict of inventory group -> {component: version}, got %s'
              % type(baseline).__name__)
    checked = {}
    for group, pins in baseline.items():
        if not isinstance(pins, dict):
            _fail('baseline group %s must be a dict of component -> version' % group)
        unknown = set(pins) - set(COMPONENTS)
        if unknown:
            _fail('baseline group %s: unknown components %s (known: %s)'
                  % (group, ', '.join(sorted(unknown)), ', '.join(COMPONENTS)))
        checked[group] = {c: _allowed(v, 'baseline %s.%s' % (group, c)) for c, v in pins.items()}
    return checked


def _same(seen, allowed):
    return seen.lstrip('v') in [a.lstrip('v') for a in allowed]


def fleet_compliance(nodes, baseline):
    """Each node's component versions against the baseline of the groups it is in (later groups of
    the baseline win for a component both name)."""
    if not isinstance(nodes, dict) or not nodes:
        _fail('the nodes must be a non-empty dict of host -> facts read on the node')
    pins = check_baseline(baseline)
    report = {'nodes': {}, 'drift': []}
    for host in sorted(nodes):
        raw = nodes[host]
        groups = raw.get('groups', []) if isinstance(raw, dict) else []
        if not isinstance(groups, list):
            _fail('%s: groups must be the list of the host\'s groups' % host)
        seen = observed(raw, host)
        expected = {}
        for group, group_pins in pins.items():
            if group == 'all' or group in groups:
                expected.update(group_pins)
        components = {}
        for comp in COMPONENTS:
            want = expected.get(comp)
            if want is None:
                status = 'unpinned'
            elif not seen[comp]:
                status = 'missing'
            else:
                status = 'ok' if _same(seen[comp], want) else 'drift'
            components[comp] = {'observed': seen[comp], 'expected': want, 'status': status}
            if status in ('drift', 'missing'):
                report['drift'].append({'node': host, 'component': comp, 'observed': seen[comp],
                                        'expected': want, 'status': status})
        bad = sum(1 for c in components.values() if c['status'] in ('drift', 'missing'))
        report['nodes'][host] = {'components': components, 'compliant': bad == 0}
    report['summary'] = {
        'nodes': len(report['nodes']),
        'compliant': sum(1 for n in report['nodes'].values() if n['compliant']),
        'drifted': sum(1 for n in report['nodes'].values() if not n['compliant']),
    }
    return report


def fleet_compliance_table(report):
    """The report as a text table: a row per node, a column per component any node has or pins;
    '!' after a value that differs from the baseline, '?' where a pinned component is missing."""
    if not isinstance(report, dict) or not isinstance(report.get('nodes'), dict):
        _fail('fleet_compliance_table takes the result of fleet_compliance')
    nodes = report['nodes']
    columns = [c for c in COMPONENTS
               if any(n['components'][c]['observed'] or n['components'][c]['expected'] for n in nodes.values())]
    mark = {'drift': '!', 'missing': '?'}
    rows = [['node'] + columns]
    for host, node in nodes.items():
        cells = [host]
        for comp in columns:
            entry = node['components'][comp]
            cells.append((entry['observed'] or '-') + mark.get(entry['status'], ''))
        rows.append(cells)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ['  '.join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    summary = report.get('summary', {})
    lines.append('%s of %s nodes match the baseline' % (summary.get('compliant', '?'), summary.get('nodes', '?')))
    for d in report.get('drift', []):
        found = d['observed'] or 'not found'
        lines.append('%s %s: %s, baseline %s' % (d['node'], d['component'], found, ' or '.join(d['expected'])))
    return '\n'.join(lines)


def _label(value):
    return str(value).replace('\\', '\\\\').replace('"', '\\"').replace('\n', '\\n')


def fleet_compliance_metrics(report, host, timestamp):
    """One node's part of the report as node_exporter textfile metrics: a drift gauge per pinned
    component and the time of the report (an alert on its age catches a report that stopped)."""
    if not isinstance(report, dict) or host not in (report.get('nodes') or {}):
        _fail('fleet_compliance_metrics: %s is not a node of the report' % host)
    if isinstance(timestamp, bool) or not isinstance(timestamp, (int, float)) or timestamp <= 0:
        _fail('fleet_compliance_metrics: the timestamp must be seconds since the epoch, got %r' % (timestamp,))
    lines = [
        '# HELP ai_l1_fleet_component_drift 1 when the node runs a version of the component its baseline does not '
        'allow, or none; 0 when it runs an allowed one (pinned components only).',
        '# TYPE ai_l1_fleet_component_drift gauge',
    ]
    for comp, entry in report['nodes'][host]['components'].items():
        if entry['status'] == 'unpinned':
            continue
        lines.append('ai_l1_fleet_component_drift{component="%s",observed="%s",expected="%s"} %d' % (
            comp, _label(entry['observed'] or 'not found'), _label(' or '.join(entry['expected'])),
            0 if entry['status'] == 'ok' else 1))
    lines += [
        '# HELP ai_l1_fleet_compliance_timestamp_seconds When the fleet compliance report last read the node.',
        '# TYPE ai_l1_fleet_compliance_timestamp_seconds gauge',
        'ai_l1_fleet_compliance_timestamp_seconds %d' % int(timestamp),
    ]
    return '\n'.join(lines) + '\n'


class FilterModule(object):
    def filters(self):
        return {'fleet_compliance': fleet_compliance, 'fleet_compliance_table': fleet_compliance_table,
                'fleet_compliance_metrics': fleet_compliance_metrics}
