# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parse `mlnx_qos -i IF` output, validate wanted QoS settings and compute the commands.

Kept free of AnsibleModule so that unit tests can table-test it on captured outputs.
"""

from __future__ import annotations

import re

from ansible_collections.ai_platform.l1.plugins.module_utils.device_io import Arg, format_args

PRIORITIES = range(8)
TSA_CHOICES = ('ets', 'strict', 'vendor')
TRUST_CHOICES = ('pcp', 'dscp')

# mlnx_qos options, for the collection's CLI runner (device_io.CliRunner): one named value each.
ARG_FORMATS = {
    'interface': Arg.opt_val('-i'),
    'trust': Arg.opt_val('--trust'),
    'pfc': Arg.joined('--pfc'),
    'dscp2prio': lambda pair: [] if pair is None else ['--dscp2prio', 'set,%d,%d' % tuple(pair)],
    'prio_tc': Arg.joined('--prio_tc'),
    'tsa': Arg.joined('--tsa'),
    'tcbw': Arg.joined('--tcbw'),
}


def qos_args(order, **values):
    """mlnx_qos arguments for the named values (ARG_FORMATS), e.g. qos_args('pfc', pfc=[0, 0, 0, 1, 0, 0, 0, 0])."""
    return format_args(ARG_FORMATS, order, values)


class MlnxQosError(Exception):
    """Output that cannot be parsed, or wanted settings that are invalid."""


_TRUST = re.compile(r'^\s*Priority trust state:\s*(\S+)', re.M)
_DCBX = re.compile(r'^\s*DCBX mode:\s*(.+?)\s*$', re.M)
# The DSCP list is taken whole and checked in _dscp2prio: "([\d,\s]*?)\s*$" backtracked
# quadratically on a long run of blanks.
_DSCP = re.compile(r'^[ \t]*prio:[ \t]*(\d+)[ \t]+dscp:([^\n]*)$', re.M)
_PFC_PRIO = re.compile(r'^\s*priority\s+((?:\d+\s+){7}\d+)\s*$', re.M)
_PFC_EN = re.compile(r'^\s*enabled\s+((?:[01]\s+){7}[01])\s*$', re.M)
_TC = re.compile(r'^\s*tc:\s*(\d+)\s+ratelimit:\s*([^,]+),\s*tsa:\s*(\w+)(?:,\s*bw:\s*(\d+)%)?\s*$')
# Numbers separated by blanks; "(?:\d+\s*)+" split a long digit run exponentially many ways.
_TC_PRIO = re.compile(r'^\s*priority:[ \t]*(\d+(?:[ \t]+\d+)*)\s*$')


def _pfc(text):
    prio = _PFC_PRIO.search(text)
    enabled = _PFC_EN.search(text)
    if not prio or not enabled:
        raise MlnxQosError('no PFC table ("priority 0 .. 7" / "enabled ...") in the mlnx_qos output')
    order = [int(x) for x in prio.group(1).split()]
    if sorted(order) != list(PRIORITIES):
        raise MlnxQosError('PFC table lists priorities %s, not 0..7' % order)
    values = [int(x) for x in enabled.group(1).split()]
    pfc = [0] * 8
    for i, p in enumerate(order):
        pfc[p] = values[i]
    return pfc


def _excerpt(text):
    """A line for an error message: blank runs folded, at most 120 characters."""
    return ' '.join(text.split())[:120]


def _dscp2prio(text):
    dscp2prio = {}
    for m in _DSCP.finditer(text):
        prio = int(m.group(1))
        if prio not in PRIORITIES:
            raise MlnxQosError('DSCP map priority %d out of 0..7 in: %s' % (prio, _excerpt(m.group(0))))
        for raw in m.group(2).split(','):
            d = raw.strip()
            if not d:
                continue
            if not d.isdigit() or not 0 <= int(d) <= 63:
                raise MlnxQosError('DSCP map entry %r is not a DSCP value 0..63 in: %s'
                                   % (_excerpt(d), _excerpt(m.group(0))))
            dscp2prio[int(d)] = prio
    return dscp2prio


def _tcs(text):
    prio_tc = [None] * 8
    tsa = ['vendor'] * 8
    tcbw = [0] * 8
    current = None
    for line in text.splitlines():
        m = _TC.match(line)
        if m:
            current = int(m.group(1))
            if current > 7:
                raise MlnxQosError('traffic class %d out of 0..7 in: %s' % (current, line.strip()))
            tsa[current] = m.group(3).lower()
            tcbw[current] = int(m.group(4)) if m.group(4) else 0
            continue
        m = _TC_PRIO.match(line)
        if m and current is not None:
            for p in m.group(1).split():
                if int(p) not in PRIORITIES:
                    raise MlnxQosError('traffic class %d lists priority %s, not one of 0..7: %s'
                                       % (current, p, _excerpt(line)))
                prio_tc[int(p)] = current
    if current is None:
        raise MlnxQosError('no traffic class lines ("tc: N ratelimit: ..., tsa: ...") in the mlnx_qos output')
    if None in prio_tc:
        missing = [p for p, tc in enumerate(prio_tc) if tc is None]
        raise MlnxQosError('priorities %s are not assigned to any traffic class in the mlnx_qos output' % missing)
    return prio_tc, tsa, tcbw


def parse(text):
    """Return the state printed by `mlnx_qos -i IF` as a dict.

    Keys: trust (pcp/dscp or None when the tool does not print it), dcbx, pfc (8 ints),
    dscp2prio ({dscp: priority}, empty when not printed), prio_tc (8 ints: the TC of each
    priority), tsa (8 strings per TC), tcbw (8 ints per TC; 0 where the TSA has no bandwidth).
    """
    m = _TRUST.search(text)
    trust = m.group(1).lower() if m else None
    m = _DCBX.search(text)
    dcbx = m.group(1) if m else None
    pfc = _pfc(text)
    prio_tc, tsa, tcbw = _tcs(text)
    return dict(trust=trust, dcbx=dcbx, pfc=pfc, dscp2prio=_dscp2prio(text),
                prio_tc=prio_tc, tsa=tsa, tcbw=tcbw)


def _vector(name, value, allowed, what):
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or len(value) != 8:
        raise MlnxQosError('%s must be a list of 8 values (one per %s), got %r' % (name, what, value))
    out = []
    for i, v in enumerate(value):
        try:
            iv = int(v) if not isinstance(v, bool) else None
        except (TypeError, ValueError):
            iv = None
        if iv is None or iv not in allowed or str(v).strip() != str(iv):
            raise MlnxQosError('%s[%d] is %r; allowed: %s' % (name, i, v, ', '.join(str(a) for a in allowed)))
        out.append(iv)
    return out


def validate(wanted):
    """Check and normalise the wanted settings; raise MlnxQosError before anything runs."""
    out = {}
    out['trust'] = wanted.get('trust')
    if out['trust'] is not None and out['trust'] not in TRUST_CHOICES:
        raise MlnxQosError('trust must be one of %s, got %r' % (TRUST_CHOICES, out['trust']))
    out['pfc'] = _vector('pfc', wanted.get('pfc'), (0, 1), 'priority 0..7')
    out['prio_tc'] = _vector('prio_tc', wanted.get('prio_tc'), PRIORITIES, 'priority 0..7')
    tsa = wanted.get('tsa')
    if tsa is not None:
        if not isinstance(tsa, (list, tuple)) or len(tsa) != 8 or any(t not in TSA_CHOICES for t in tsa):
            raise MlnxQosError('tsa must be a list of 8 of %s (one per traffic class), got %r' % (TSA_CHOICES, tsa))
        tsa = list(tsa)
    out['tsa'] = tsa
    out['tcbw'] = _vector('tcbw', wanted.get('tcbw'), range(101), 'traffic class')
    if out['tcbw'] is not None:
        ets = [i for i in range(8) if (tsa or ['ets'] * 8)[i] == 'ets']
        total = sum(out['tcbw'][i] for i in ets)
        if ets and total != 100:
            raise MlnxQosError('tcbw of the ETS traffic classes %s must add up to 100, got %d' % (ets, total))
    dscp2prio = {}
    for item in wanted.get('dscp2prio') or []:
        d, p = item.get('dscp'), item.get('priority')
        if not isinstance(d, int) or isinstance(d, bool) or not 0 <= d <= 63:
            raise MlnxQosError('dscp2prio: dscp must be 0..63, got %r' % (d,))
        if not isinstance(p, int) or isinstance(p, bool) or p not in PRIORITIES:
            raise MlnxQosError('dscp2prio: priority for dscp %d must be 0..7, got %r' % (d, p))
        if d in dscp2prio and dscp2prio[d] != p:
            raise MlnxQosError('dscp2prio: dscp %d is mapped to both %d and %d' % (d, dscp2prio[d], p))
        dscp2prio[d] = p
    if dscp2prio and out['trust'] != 'dscp':
        # The tool only uses (and, from 5.x, only prints) the map in DSCP trust.
        raise MlnxQosError('dscp2prio needs trust: dscp')
    out['dscp2prio'] = dscp2prio
    return out


def _onoff(v):
    return 'on' if v else 'off'


def _ets_changes(current, wanted, notes, commands):
    tsa, tcbw = wanted['tsa'], wanted['tcbw']
    new_tsa = tsa or current['tsa']
    new_bw = tcbw or current['tcbw']
    ets = [i for i in range(8) if new_tsa[i] == 'ets']
    bw_diff = tcbw is not None and [current['tcbw'][i] for i in ets] != [tcbw[i] for i in ets]
    if not ((tsa is not None and current['tsa'] != tsa) or bw_diff):
        return
    for i in range(8):
        if current['tsa'][i] != new_tsa[i]:
            notes.append('tc %d: tsa %s -> %s' % (i, current['tsa'][i], new_tsa[i]))
        if i in ets and current['tcbw'][i] != new_bw[i]:
            notes.append('tc %d: bw %d%% -> %d%%' % (i, current['tcbw'][i], new_bw[i]))
    # mlnx_qos sets TSA and bandwidth together: --tcbw needs the ETS classes of --tsa.
    # The bandwidth of non-ETS classes is written as 0.
    commands.append(qos_args('tsa tcbw', tsa=new_tsa,
                             tcbw=[new_bw[i] if i in ets else 0 for i in range(8)] if ets else None))


def changes(current, wanted):
    """Return (human-readable changes, mlnx_qos argument lists) to go from current to wanted.

    Only settings given in `wanted` are compared; the commands set only what differs.
    """
    notes, commands = [], []
    if wanted['trust'] is not None and current.get('trust') != wanted['trust']:
        notes.append('trust: %s -> %s' % (current.get('trust'), wanted['trust']))
        commands.append(qos_args('trust', trust=wanted['trust']))
    if wanted['pfc'] is not None and current['pfc'] != wanted['pfc']:
        notes += ['pfc priority %d: %s -> %s' % (p, _onoff(current['pfc'][p]), _onoff(wanted['pfc'][p]))
                  for p in PRIORITIES if current['pfc'][p] != wanted['pfc'][p]]
        commands.append(qos_args('pfc', pfc=wanted['pfc']))
    for d in sorted(wanted['dscp2prio']):
        if current['dscp2prio'].get(d) != wanted['dscp2prio'][d]:
            notes.append('dscp %d: priority %s -> %d' % (d, current['dscp2prio'].get(d), wanted['dscp2prio'][d]))
            commands.append(qos_args('dscp2prio', dscp2prio=(d, wanted['dscp2prio'][d])))
    if wanted['prio_tc'] is not None and current['prio_tc'] != wanted['prio_tc']:
        notes += ['priority %d: tc %d -> %d' % (p, current['prio_tc'][p], wanted['prio_tc'][p])
                  for p in PRIORITIES if current['prio_tc'][p] != wanted['prio_tc'][p]]
        commands.append(qos_args('prio_tc', prio_tc=wanted['prio_tc']))
    _ets_changes(current, wanted, notes, commands)
    return notes, commands


def view(state, wanted=None):
    """The managed part of a state, in a form whose diff names single priorities."""
    keys = ('trust', 'pfc', 'dscp2prio', 'prio_tc', 'tsa', 'tcbw')
    if wanted is not None:
        keys = [k for k in keys if wanted.get(k) not in (None, {})]
    out = {}
    for k in keys:
        if k == 'pfc':
            out['pfc'] = dict(('priority %d' % p, 'on' if state['pfc'][p] else 'off') for p in PRIORITIES)
        elif k == 'prio_tc':
            out['prio_tc'] = dict(('priority %d' % p, state['prio_tc'][p]) for p in PRIORITIES)
        elif k == 'dscp2prio':
            dscps = sorted(wanted['dscp2prio']) if wanted is not None else sorted(state['dscp2prio'])
            out['dscp2prio'] = dict(('dscp %d' % d, state['dscp2prio'].get(d)) for d in dscps)
        elif k in ('tsa', 'tcbw'):
            out[k] = dict(('tc %d' % i, state[k][i]) for i in range(8))
        else:
            out[k] = state[k]
    return out


def apply_to(state, commands):
    """What the state becomes after the commands (for check mode's `after`)."""
    new = dict(state, pfc=list(state['pfc']), prio_tc=list(state['prio_tc']),
               tsa=list(state['tsa']), tcbw=list(state['tcbw']), dscp2prio=dict(state['dscp2prio']))
    for args in commands:
        opts = dict((args[i], args[i + 1]) for i in range(0, len(args), 2))
        if '--trust' in opts:
            new['trust'] = opts['--trust']
        if '--pfc' in opts:
            new['pfc'] = [int(v) for v in opts['--pfc'].split(',')]
        if '--dscp2prio' in opts:
            d, p = opts['--dscp2prio'].split(',')[1:]
            new['dscp2prio'][int(d)] = int(p)
        if '--prio_tc' in opts:
            new['prio_tc'] = [int(v) for v in opts['--prio_tc'].split(',')]
        if '--tsa' in opts:
            new['tsa'] = opts['--tsa'].split(',')
        if '--tcbw' in opts:
            new['tcbw'] = [int(v) for v in opts['--tcbw'].split(',')]
    return new
