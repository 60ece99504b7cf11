# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter ai_platform.l1.slo_rules: service-level objectives to Prometheus recording and alerting rules.

Docs in slo_rules.yml. The alerts are the multi-window, multi-burn-rate alerts of Google's SRE
workbook ("Alerting on SLOs", table 5-8): a page when the budget of a 30-day period burns 14.4
times too fast over 1 h (and still over 5 min) or 6 times over 6 h (and 30 min), a ticket at 3
times over 1 day (and 2 h) or once over 3 days (and 6 h).
"""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError

WINDOWS = ('5m', '30m', '1h', '2h', '6h', '1d', '3d')
# (severity, [(burn rate, long window, short window), ...], for)
BURN_ALERTS = (
    ('critical', ((14.4, '1h', '5m'), (6, '6h', '30m')), '2m'),
    ('warning', ((3, '1d', '2h'), (1, '3d', '6h')), '15m'),
)
ALERT_NAMES = {'critical': 'L1SLOErrorBudgetBurnFast', 'warning': 'L1SLOErrorBudgetBurnSlow'}
NAME = re.compile(r'^[a-z][a-z0-9_]*$')
WINDOW = '$window'
RECORD = 'ai_l1_slo:error_ratio:rate{window}'


def _fail(slo, msg):
    raise AnsibleFilterError('slo_rules: %s: %s' % (slo.get('name', '?') if isinstance(slo, dict) else slo, msg))


def _check(slo, seen):
    if not isinstance(slo, dict):
        _fail(slo, 'each objective must be a dict, got %s' % type(slo).__name__)
    unknown = set(slo) - {'name', 'description', 'objective', 'errors', 'total', 'bad_ratio'}
    if unknown:
        _fail(slo, 'unknown keys %s' % ', '.join(sorted(unknown)))
    name = slo.get('name')
    if not isinstance(name, str) or not NAME.match(name):
        _fail(slo, 'name must be lower case letters, digits and _ (it becomes a label value), got %r' % (name,))
    if name in seen:
        _fail(slo, 'defined twice')
    seen.add(name)
    if not isinstance(slo.get('description'), str) or not slo['description'].strip():
        _fail(slo, 'description must say what is measured')
    objective = slo.get('objective')
    if isinstance(objective, bool) or not isinstance(objective, (int, float)) or not 0.5 <= objective < 1:
        _fail(slo, 'objective must be the fraction that must be good, 0.5 <= objective < 1 (e.g. 0.999), got %r'
              % (objective,))
    kinds = [k for k in ('bad_ratio', 'errors') if slo.get(k)]
    if kinds == ['errors']:
        for key in ('errors', 'total'):
            if not isinstance(slo.get(key), str) or WINDOW not in slo[key]:
                _fail(slo, '%s must be a PromQL expression with %s where the range goes' % (key, WINDOW))
    elif kinds == ['bad_ratio']:
        if not isinstance(slo['bad_ratio'], str) or WINDOW in slo['bad_ratio'] or slo.get('total'):
            _fail(slo, 'bad_ratio is an instant PromQL expression (0 to 1, no %s) and takes no total' % WINDOW)
    else:
        _fail(slo, 'give either errors and total (events, with %s) or bad_ratio (a fraction at each instant)'
              % WINDOW)


def _number(value):
    return ('%.6f' % value).rstrip('0').rstrip('.')


def _group(slo):
    name = slo['name']
    labels = {'slo': name}
    budget = 1 - slo['objective']
    rules = []
    if slo.get('bad_ratio'):
        instant = 'ai_l1_slo:bad_ratio:instant'
        rules.append({'record': instant, 'expr': slo['bad_ratio'].strip(), 'labels': dict(labels)})
        for w in WINDOWS:
            rules.append({'record': RECORD.format(window=w),
                          'expr': 'avg_over_time(%s{slo="%s"}[%s])' % (instant, name, w), 'labels': dict(labels)})
    else:
        for w in WINDOWS:
            errors, total = slo['errors'].strip().replace(WINDOW, w), slo['total'].strip().replace(WINDOW, w)
            rules.append({'record': RECORD.format(window=w),
                          # No error series at all (no 5xx yet) is a ratio of 0, not no ratio.
                          'expr': '((%s) or vector(0))\n/\n(%s)' % (errors, total),
                          'labels': dict(labels)})
    rules.append({'record': 'ai_l1_slo:objective', 'expr': 'vector(%s)' % _number(slo['objective']),
                  'labels': dict(labels)})
    for severity, pairs, hold in BURN_ALERTS:
        expr = '\nor\n'.join(
            '(\n  %s{slo="%s"} > (%s * %s)\n  and\n  %s{slo="%s"} > (%s * %s)\n)' % (
                RECORD.format(window=long_w), name, _number(rate), _number(budget),
                RECORD.format(window=short_w), name, _number(rate), _number(budget))
            for rate, long_w, short_w in pairs)
        rules.append({
            'alert': ALERT_NAMES[severity],
            'expr': expr,
            'for': hold,
            'labels': {'slo': name, 'severity': severity, 'team': 'infra'},
            'annotations': {
                'summary': 'SLO %s: the error budget burns too fast' % name,
                'description': '%s Objective %s over 30 days (error budget %s); the SLO dashboard shows the '
                               'burn rate.' % (slo['description'].strip(), _number(slo['objective']),
                                               _number(budget)),
            },
        })
    return {'name': 'ai-l1-slo-%s' % name.replace('_', '-'), 'interval': '30s', 'rules': rules}


def slo_rules(slos):
    """slos: a list of objectives (name, description, objective, errors+total or bad_ratio)."""
    if not isinstance(slos, list):
        raise AnsibleFilterError('slo_rules: expected a list of objectives, got %s' % type(slos).__name__)
    seen = set()
    for slo in slos:
        _check(slo, seen)
    return {'groups': [_group(slo) for slo in slos]}


class FilterModule(object):
    def filters(self):
        return {'slo_rules': slo_rules}
