# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ai_platform L1 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node acceptance gate's readings and its verdict: what a node must prove before it takes work.

Parsers, pure (text in, plain data out, AcceptanceParseError saying what was expected otherwise):
- parse_dcgmi_diag: `dcgmi diag -r LEVEL -j`, DCGM 3.x ("DCGM GPU Diagnostic") and 4.x ("DCGM
  Diagnostic" plus "metadata") documents, with the banner dcgmi may print before the JSON;
- parse_nccl_tests: nccl-tests' text report (`all_reduce_perf -b 8 -e 8G -f 2 -g 8`): the size table
  by its header (out-of-place and in-place columns), `#wrong` and the closing summary lines;
- parse_hccl_test: Ascend's HCCL performance tester (`hccl_test`'s all_reduce_test): data_size,
  aveg_time, alg_bandwidth, check_result.

A status word a parser has never seen is never read as a pass: a renamed "Pass" in a future release
must not turn every node green without a test having run.

The verdict: one document per node, every check with its figure, threshold and pass or fail, and a
digest of it (sha256 of the canonical JSON) short enough for a Node annotation.

Standard library only, no Ansible import.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import re

PASS, FAIL, WARN, SKIP, NOT_RUN, UNKNOWN = 'pass', 'fail', 'warn', 'skip', 'not-run', 'unknown'
# Statuses that fail the gate: a failure, a test that did not run, a word we cannot read.
FAILING = (FAIL, NOT_RUN, UNKNOWN)
# The order results fold into one status, the worst first: a skip (not applicable to this part) only
# when nothing else was said.
_SEVERITY = (FAIL, UNKNOWN, NOT_RUN, WARN, PASS, SKIP)
_DCGM_STATUS = {'pass': PASS, 'fail': FAIL, 'warn': WARN, 'warning': WARN, 'skip': SKIP, 'skipped': SKIP,
                'not run': NOT_RUN, 'notrun': NOT_RUN, 'not_run': NOT_RUN}

# Single-node all_reduce bus bandwidth (GB/s) an 8-GPU NVSwitch node must reach, 80 % of the low end of
# the large-message busbw published for it (alayanew, "NCCL-tests in practice", 2026-05-06,
# https://docs.alayanew.com/en/docs/tech-blog/2026-05-06-nccl-tests: 8x A100 SXM4 230-250 GB/s, 8x H100
# SXM5 460-480 GB/s, "more than 20 % below this, something is off"). Other models: the inventory's.
NCCL_BUSBW_DEFAULTS = {'a100-sxm-8': 184.0, 'h100-sxm-8': 368.0}


class AcceptanceParseError(ValueError):
    """The text is not the tool's output the parser expects."""


def status_of(word):
    """DCGM's status word as one of PASS .. NOT_RUN, UNKNOWN for any word it does not document."""
    if not isinstance(word, str):
        return UNKNOWN
    return _DCGM_STATUS.get(' '.join(word.strip().lower().split()), UNKNOWN)


def worst(statuses):
    statuses = list(statuses)
    return next((s for s in _SEVERITY if s in statuses), NOT_RUN)


def _document(text):
    if not isinstance(text, str) or '{' not in text or '}' not in text:
        raise AcceptanceParseError('no JSON document in the output')
    try:
        return json.loads(text[text.index('{'):text.rindex('}') + 1])
    except ValueError as exc:
        raise AcceptanceParseError('the JSON document does not parse: %s' % exc) from None


def _messages(result):
    out = []
    for key in ('warnings', 'info'):
        for item in result.get(key) or []:
            text = item.get('warning') if isinstance(item, dict) else item
            if isinstance(text, str) and text.strip():
                out.append(text.strip())
    return out


def _entity(result):
    for key in ('entity_id', 'gpu_ids', 'gpu_id'):
        if key in result:
            return str(result[key])
    return ''


def _first(mapping, *keys):
    for key in keys:
        value = mapping.get(key) if isinstance(mapping, dict) else None
        if isinstance(value, (str, int, float)) and str(value):
            return str(value)
    return ''


def parse_dcgmi_diag(text):
    """`dcgmi diag -j` -> {version, driver_version, status, tests: [{name, category, status, gpus, messages}]}.

    A test's status is the worst of its results (one failing GPU fails the test for the node); the
    document's status the worst of its tests.
    """
    doc = _document(text)
    if not isinstance(doc, dict):
        raise AcceptanceParseError('the JSON document is not an object')
    root = doc.get('DCGM GPU Diagnostic') or doc.get('DCGM Diagnostic') or doc
    if not isinstance(root, dict):
        raise AcceptanceParseError('the diagnostic section is not an object')
    categories = root.get('test_categories')
    if categories is None and isinstance(root.get('tests'), list):
        categories = [{'category': '', 'tests': root['tests']}]
    if not isinstance(categories, list):
        raise AcceptanceParseError('no "test_categories" or "tests" in the diagnostic document')
    tests = []
    for category in categories:
        for test in (category.get('tests') if isinstance(category, dict) else None) or []:
            name = test.get('name') if isinstance(test, dict) else None
            results = test.get('results') if isinstance(test, dict) else None
            if not isinstance(name, str) or not name or not isinstance(results, list) or not results:
                raise AcceptanceParseError('a test without a name or results: %s' % json.dumps(test)[:200])
            results = [r if isinstance(r, dict) else {} for r in results]
            summary = test.get('test_summary') if isinstance(test.get('test_summary'), dict) else {}
            statuses = [status_of(r.get('status')) for r in results]
            if summary:
                statuses.append(status_of(summary.get('status')))
            messages = [m for r in results + [summary] for m in _messages(r)]
            tests.append({'name': name, 'category': category.get('category') or '', 'status': worst(statuses),
                          'gpus': [e for e in (_entity(r) for r in results) if e], 'messages': messages})
    if not tests:
        raise AcceptanceParseError('the diagnostic document has no test results')
    meta = doc.get('metadata') if isinstance(doc.get('metadata'), dict) else {}
    return {
        'version': _first(root, 'version') or _first(meta, 'version', 'DCGM Version') or _first(doc, 'version'),
        'driver_version': (_first(root, 'driver_version_detected', 'Driver Version Detected')
                           or _first(meta, 'Driver Version Detected', 'driver_version')
                           or _first(doc, 'driver_version')),
        'status': worst(t['status'] for t in tests),
        'tests': tests,
    }


_NUMBER = re.compile(r'^-?\d+(\.\d+)?([eE][-+]?\d+)?$')


def _float(token, what):
    if not _NUMBER.match(token):
        raise AcceptanceParseError('%s %r is not a number' % (what, token))
    return float(token)


def parse_nccl_tests(text):
    """nccl-tests' report -> {rows: [{size, busbw_out, busbw_in, wrong}], peak_busbw, avg_busbw,
    wrong, out_of_bounds}. `wrong` counts values that failed the test's own check (#wrong, or the
    error column of older releases); N/A (checks off, -c 0) counts as none."""
    if not isinstance(text, str):
        raise AcceptanceParseError('no output')
    header = None
    rows, avg, out_of_bounds = [], None, None
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith('#'):
            tokens = stripped.lstrip('#').split()
            if header is None and tokens[:2] == ['size', 'count'] and 'busbw' in tokens:
                header = tokens
            match = re.match(r'#\s*Avg bus bandwidth\s*:\s*(\S+)', stripped)
            if match:
                avg = _float(match.group(1), 'the average bus bandwidth')
            match = re.match(r'#\s*Out of bounds values\s*:\s*(\d+)', stripped)
            if match:
                out_of_bounds = int(match.group(1))
            continue
        if not stripped or header is None or not stripped.split()[0].isdigit():
            continue
        tokens = stripped.split()
        if len(tokens) != len(header):
            raise AcceptanceParseError('row %r has %d columns, the header %d' % (stripped, len(tokens), len(header)))
        busbw = [_float(tokens[i], 'busbw') for i, name in enumerate(header) if name == 'busbw']
        wrong = 0
        for i, name in enumerate(header):
            if name in ('#wrong', 'error') and tokens[i] != 'N/A':
                wrong += int(_float(tokens[i], name) > 0) if name == 'error' else int(_float(tokens[i], name))
        rows.append({'size': int(tokens[0]), 'busbw_out': busbw[0], 'busbw_in': busbw[-1], 'wrong': wrong})
    if header is None:
        raise AcceptanceParseError('no nccl-tests size table header (# size count type ... busbw)')
    if not rows:
        raise AcceptanceParseError('the nccl-tests report has no measured sizes')
    return {'rows': rows, 'peak_busbw': max(max(r['busbw_out'], r['busbw_in']) for r in rows),
            'avg_busbw': avg, 'wrong': sum(r['wrong'] for r in rows), 'out_of_bounds': out_of_bounds}


_HCCL_CHECKS = ('success', 'failed', 'NULL')


def parse_hccl_test(text):
    """hccl_test's report -> {rows: [{size, time_us, alg_bandwidth, check}], peak_alg_bandwidth,
    failed_checks}. check_result NULL (checks off, or a sum the tool cannot check) is not a failure."""
    if not isinstance(text, str):
        raise AcceptanceParseError('no output')
    seen_header, rows = False, []
    for line in text.splitlines():
        if 'data_size' in line and 'alg_bandwidth' in line:
            seen_header = True
            continue
        tokens = line.replace('|', ' ').split()
        if not seen_header or not tokens or not tokens[0].isdigit():
            continue
        if len(tokens) != 4 or tokens[3] not in _HCCL_CHECKS:
            raise AcceptanceParseError('row %r is not "data_size aveg_time alg_bandwidth check_result"' % line.strip())
        rows.append({'size': int(tokens[0]), 'time_us': _float(tokens[1], 'aveg_time'),
                     'alg_bandwidth': _float(tokens[2], 'alg_bandwidth'), 'check': tokens[3]})
    if not seen_header:
        raise AcceptanceParseError('no hccl_test header (data_size ... alg_bandwidth ... check_result)')
    if not rows:
        raise AcceptanceParseError('the hccl_test report has no measured sizes')
    return {'rows': rows, 'peak_alg_bandwidth': max(r['alg_bandwidth'] for r in rows),
            'failed_checks': sum(1 for r in rows if r['check'] == 'failed')}


def default_busbw_threshold(model, gpu_count):
    """The published all_reduce busbw floor for an 8-GPU A100 or H100 SXM node, None for others."""
    name = (model or '').upper()
    if gpu_count != 8:
        return None
    if 'A100' in name and 'SXM' in name:
        return NCCL_BUSBW_DEFAULTS['a100-sxm-8']
    if 'H100' in name and ('SXM' in name or 'HBM3' in name):  # NVML names the SXM5 part "H100 80GB HBM3"
        return NCCL_BUSBW_DEFAULTS['h100-sxm-8']
    return None


def check(name, passed, figure=None, threshold=None, *, unit='', detail=''):
    """One line of the verdict."""
    return {'name': name, 'passed': bool(passed), 'figure': figure, 'threshold': threshold, 'unit': unit,
            'detail': detail}


def at_least(name, figure, threshold, *, unit='', detail=''):
    """A figure that must reach a threshold; no figure or no threshold fails, saying which is missing."""
    if figure is None:
        return check(name, False, None, threshold, unit=unit, detail=detail or 'no figure measured')
    if threshold is None:
        return check(name, False, figure, None, unit=unit,
                     detail=detail or 'no threshold for this node (set one in the inventory)')
    below = '%s %s below the threshold %s' % (figure, unit, threshold) if figure < threshold else ''
    return check(name, figure >= threshold, figure, threshold, unit=unit, detail=detail or below)


def digest(document):
    """sha256 of the canonical JSON form of a document (sorted keys, no spaces)."""
    canonical = json.dumps(document, sort_keys=True, separators=(',', ':'))
    return 'sha256:' + hashlib.sha256(canonical.encode('utf-8')).hexdigest()


def verdict(node, checks, level=None):
    """The node's verdict: passed only when every check passed (and there is at least one)."""
    checks = list(checks)
    failed = [c['name'] for c in checks if not c['passed']]
    doc = {'node': node, 'level': level, 'passed': bool(checks) and not failed, 'failed': failed,
           'checks': checks}
    if not checks:
        doc['failed'] = ['(no checks ran)']
    doc['digest'] = digest(dict((k, v) for k, v in doc.items() if k != 'digest'))
    return doc


def _gpu_names(gpus):
    return sorted(set(g.get('name') or '?' for g in gpus))


def nvidia_hardware_checks(info, expected_count, expected_model, min_nvlinks=None):
    """The gate's reads of gpu_info's facts: GPU count and model against the inventory, NVLink, ECC and
    row remapping. `min_nvlinks`: active NVLinks each GPU must have (None: every GPU as many as the one
    with the most, so one link down on one GPU fails)."""
    gpus = info.get('gpus') or []
    count = info.get('count') or 0
    checks = [check('gpu-count', count == expected_count, count, expected_count,
                    detail='' if count == expected_count else '%d GPUs, the inventory says %d%s' % (
                        count, expected_count, (' (%s)' % info.get('reason')) if info.get('reason') else ''))]
    wrong = [g for g in gpus if (expected_model or '').lower() not in (g.get('name') or '').lower()]
    checks.append(check('gpu-model', bool(gpus) and not wrong, ', '.join(_gpu_names(gpus)), expected_model,
                        detail='' if gpus and not wrong else 'GPU %s is not a %s' % (
                            ', '.join(str(g.get('index')) for g in wrong) or '(none)', expected_model)))
    links = dict((g.get('index'), (g.get('nvlink') or {}).get('links_active', 0)) for g in gpus)
    floor = min_nvlinks if min_nvlinks is not None else max(links.values() or [0])
    short = [(i, n) for i, n in sorted(links.items()) if n < floor]
    checks.append(check('nvlink', bool(gpus) and not short, min(links.values() or [0]), floor, unit='links',
                        detail='; '.join('GPU %s has %d active NVLinks' % s for s in short)))
    ecc = [(g.get('index'), (g.get('ecc') or {}).get('dbe_volatile')) for g in gpus]
    dbe = [(i, n) for i, n in ecc if n]
    detail = '; '.join('GPU %s: %d uncorrectable ECC errors since the driver loaded' % d for d in dbe)
    checks.append(check('ecc', bool(gpus) and not dbe, sum(n for i, n in dbe), 0, unit='DBE', detail=detail))
    rows = []
    for g in gpus:
        remap = g.get('remapped_rows') or {}
        pages = g.get('retired_pages') or {}
        if remap.get('failure'):
            rows.append('GPU %s: a row remapping failed (replace the GPU)' % g.get('index'))
        elif remap.get('pending') or pages.get('pending'):
            rows.append('GPU %s: remapped rows or retired pages wait for a GPU reset' % g.get('index'))
    checks.append(check('row-remap', bool(gpus) and not rows, len(rows), 0, detail='; '.join(rows)))
    return checks


def ascend_hardware_checks(info, expected_count, expected_model, topology='hccs-fullmesh'):
    """The gate's reads of npu_info's facts: chip count and model, every chip's health and HBM ECC, and the
    HCCS topology class (`topology`; empty to skip, for nodes without HCCS)."""
    chips = info.get('chips') or []
    count = info.get('chip_count') or 0
    model = info.get('chip_model') or ''
    checks = [check('npu-count', count == expected_count, count, expected_count,
                    detail='' if count == expected_count else '%d chips, the inventory says %d%s' % (
                        count, expected_count, (' (%s)' % info.get('reason')) if info.get('reason') else '')),
              check('npu-model', bool(model) and model.lower() == (expected_model or '').lower(), model,
                    expected_model, detail='' if model.lower() == (expected_model or '').lower() else
                    'the chips are %s' % (model or 'unknown'))]
    sick = []
    for c in chips:
        if c.get('health') != 'OK':
            codes = ' ' + ','.join(c['error_codes']) if c.get('error_codes') else ''
            sick.append('NPU %s chip %s: %s%s' % (c.get('npu_id'), c.get('chip_id'), c.get('health'), codes))
    checks.append(check('npu-health', bool(chips) and not sick, len(sick), 0, detail='; '.join(sick)))
    dbe = ['NPU %s chip %s: %d HBM double-bit errors' % (c.get('npu_id'), c.get('chip_id'), c['ecc']['hbm_dbe'])
           for c in chips if (c.get('ecc') or {}).get('hbm_dbe')]
    checks.append(check('hbm-ecc', bool(chips) and not dbe, len(dbe), 0, detail='; '.join(dbe)))
    if topology:
        found = info.get('topology') or ''
        links = json.dumps(info.get('topology_links') or {}, sort_keys=True)
        checks.append(check('hccs', found == topology, found, topology,
                            detail='' if found == topology else 'device pairs by link kind %s' % links))
    return checks


def dcgm_checks(diag, level):
    """One check per DCGM test that did not pass (or one passing check for the whole run)."""
    failing = [t for t in diag['tests'] if t['status'] in FAILING]
    if not failing:
        return [check('dcgm-diag-r%d' % level, True, diag['status'], PASS)]
    return [check('dcgm-diag-r%d %s' % (level, t['name']), False, t['status'], PASS,
                  detail='; '.join(t['messages']) or 'DCGM reports %s' % t['status']) for t in failing]


def nccl_checks(report, threshold):
    """all_reduce bus bandwidth (the peak over sizes) against the threshold; values the test found wrong fail."""
    out = [at_least('nccl-allreduce-busbw', report['peak_busbw'], threshold, unit='GB/s')]
    # The summary's out-of-bounds count and the rows' #wrong count the same values, where both are printed.
    wrong = max(report['wrong'], report['out_of_bounds'] or 0)
    out.append(check('nccl-allreduce-correct', wrong == 0, wrong, 0, unit='wrong values',
                     detail='' if wrong == 0 else 'all_reduce_perf found %d wrong values' % wrong))
    return out


def hccl_checks(report, threshold):
    """hccl_test's all_reduce algorithm bandwidth (the peak over sizes) against the threshold; failed checks fail."""
    return [at_least('hccl-allreduce-bandwidth', report['peak_alg_bandwidth'], threshold, unit='GB/s'),
            check('hccl-allreduce-correct', report['failed_checks'] == 0, report['failed_checks'], 0,
                  unit='failed sizes', detail='' if report['failed_checks'] == 0 else
                  'hccl_test check_result failed at %d sizes' % report['failed_checks'])]
