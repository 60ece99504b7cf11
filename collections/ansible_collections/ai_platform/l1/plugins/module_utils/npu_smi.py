# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Parsers for Huawei ``npu-smi`` text output.

npu-smi has no machine-readable output mode, so every parser here reads the text layouts
captured under tests/hardware/npu/captured/ (910B, 910A, Atlas A3). Parsers are pure: they
take the text and return plain data, or raise NpuSmiParseError saying what was expected.
They never guess silently: a table without device rows, a key/value block without the key
a caller needs, or a topology matrix that is not square is an error.
"""

from __future__ import annotations

import re

from ansible_collections.ai_platform.l1.plugins.module_utils.device_io import Arg

# `npu-smi info` options, for the collection's CLI runner (device_io.CliRunner): named values
# in INFO_ARGS order, e.g. type='health', npu=3, chip=0 -> `info -t health -i 3 -c 0`.
ARG_FORMATS = {
    'list': Arg.flag('-l'),
    'map': Arg.flag('-m'),
    'type': Arg.opt_val('-t'),
    'npu': Arg.opt_val('-i'),
    'chip': Arg.opt_val('-c'),
}
INFO_ARGS = ('list', 'map', 'type', 'npu', 'chip')

# Health states npu-smi documents: OK (normal), Warning (minor), Alarm (major),
# Critical (critical), UNKNOWN (device absent or not started).
HEALTH_STATES = ('OK', 'Warning', 'Alarm', 'Critical', 'UNKNOWN')

# Link kinds in `npu-smi info -t topo` (legend of the command; SIO and HCCS_SW from
# aclrtGetDevicesTopo on Atlas A3).
HCCS_LINKS = ('HCCS', 'HCCS_SW', 'SIO')
PCIE_LINKS = ('PIX', 'PXB', 'PHB', 'SYS')

# Topology classes npu_info reports. The label computation maps them to label values
# (node_labels.ASCEND_TOPOLOGY_LABELS).
TOPOLOGY_CLASSES = ('hccs-fullmesh', 'hccs-switch', 'hccs-partial', 'pcie', 'single', 'unknown')

_SEP_RE = re.compile(r'^\+[-=+]+\+$')
_VERSION_RE = re.compile(r'npu-smi\s+(\S+)\s+Version:\s+(\S+)')
_USAGE_RE = re.compile(r'^(\d+)\s*/\s*(\d+)$')


class NpuSmiParseError(ValueError):
    """The text does not have the layout the parser expects."""


def _int(value, what):
    try:
        return int(value)
    except (TypeError, ValueError):
        raise NpuSmiParseError('%s: expected an integer, got %r' % (what, value)) from None


def _float_or_none(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return None  # npu-smi prints "-" or "NA" where a value does not apply


def _usage(value, what):
    """'3318 / 65536' or '30710/ 32768' -> (3318, 65536)."""
    match = _USAGE_RE.match(value.strip())
    if not match:
        raise NpuSmiParseError('%s: expected "used / total", got %r' % (what, value.strip()))
    return int(match.group(1)), int(match.group(2))


def _split_columns(text, counts):
    """Split a cell on runs of 2+ spaces into columns (values never hold 2 spaces)."""
    parts = [p for p in re.split(r'\s{2,}', text.strip()) if p != '']
    # '0    / 0' is one value: re-join the "/ total" halves split off above.
    merged = []
    for part in parts:
        if part.startswith('/') and merged:
            merged[-1] = merged[-1] + ' ' + part
        else:
            merged.append(part)
    if len(merged) not in counts:
        raise NpuSmiParseError('expected %s columns in %r, found %d'
                               % (' or '.join(str(c) for c in counts), text.strip(), len(merged)))
    return merged


def _table_rows(lines):
    """The device rows of the `npu-smi info` table, and whether the chip row has a Phy-ID."""
    header_seen = False
    has_phy_id = False
    rows = []
    for line in lines:
        stripped = line.strip()
        if not stripped.startswith('|') or _SEP_RE.match(stripped):
            continue
        cells = [c.strip() for c in stripped.strip('|').split('|')]
        if cells[0].startswith('NPU') and 'Chip' in cells[0] and 'Process' in stripped:
            break  # start of the process table
        if cells[0].startswith('NPU') and len(cells) >= 3 and cells[1].startswith('Health'):
            header_seen = True
        elif cells[0].startswith('Chip') and len(cells) >= 3 and cells[1].startswith('Bus-Id'):
            has_phy_id = 'Phy-ID' in cells[0] or 'Device' in cells[0]
        elif header_seen and len(cells) == 3:
            rows.append(cells)
    if not header_seen:
        raise NpuSmiParseError('no "NPU Name | Health | ..." table header')
    if not rows:
        raise NpuSmiParseError('the device table has no rows')
    if len(rows) % 2:
        raise NpuSmiParseError('device rows come in pairs; found an odd number (%d)' % len(rows))
    return rows, has_phy_id


def _table_chip(first, second, has_phy_id):
    """One chip from its two table rows."""
    npu_part = first[0].split()
    if len(npu_part) < 2:
        raise NpuSmiParseError('expected "<NPU id> <name>" in %r' % first[0])
    npu_id = _int(npu_part[0], 'NPU id')
    health = first[1]
    if health not in HEALTH_STATES:
        raise NpuSmiParseError('NPU %d: unknown health state %r' % (npu_id, health))
    # Old drivers (npu-smi 1.x) print no Hugepages-Usage column.
    values = _split_columns(first[2], (2, 3))
    chip_part = second[0].split()
    if not chip_part:
        raise NpuSmiParseError('NPU %d: missing chip id' % npu_id)
    chip_id = _int(chip_part[0], 'chip id')
    bus_id = second[1]
    if not re.match(r'^[0-9A-Fa-fx]{4,8}:[0-9A-Fa-fx]{2}:[0-9A-Fa-fx]{2}\.[0-7]$', bus_id):
        raise NpuSmiParseError('NPU %d chip %d: %r is not a PCI bus id' % (npu_id, chip_id, bus_id))
    usage_cols = re.split(r'\s{2,}', second[2].strip(), maxsplit=1)
    usages = re.findall(r'\d+\s*/\s*\d+', usage_cols[1] if len(usage_cols) > 1 else '')
    if not usages:
        raise NpuSmiParseError('NPU %d chip %d: no memory usage in %r' % (npu_id, chip_id, second[2]))
    memory_used, memory_total = _usage(usages[0], 'Memory-Usage')
    # Inference cards (310P) have no HBM column: their memory is the device DDR.
    hbm_used, hbm_total = _usage(usages[1], 'HBM-Usage') if len(usages) > 1 else (None, None)
    return {
        'npu_id': npu_id,
        'chip_id': chip_id,
        'phy_id': _int(chip_part[1], 'chip Phy-ID') if has_phy_id and len(chip_part) > 1 else None,
        'name': ' '.join(npu_part[1:]),
        'health': health,
        'power_w': _float_or_none(values[0]),
        'temperature_c': _float_or_none(values[1]),
        'hugepages': values[2] if len(values) == 3 else None,
        'bus_id': bus_id,
        'aicore_percent': _float_or_none(usage_cols[0]),
        'memory_used_mb': memory_used,
        'memory_total_mb': memory_total,
        'hbm_used_mb': hbm_used,
        'hbm_total_mb': hbm_total,
    }


def parse_info_table(text):
    """Parse `npu-smi info`: the version header and one entry per chip.

    Each chip takes two table rows: "NPU  Name | Health | Power Temp Hugepages" and
    "Chip [Phy-ID] | Bus-Id | AICore Memory-Usage [HBM-Usage]". The process table that
    follows the device table is ignored.
    """
    lines = text.splitlines()
    version = None
    for line in lines[:5]:
        match = _VERSION_RE.search(line)
        if match:
            version = {'npu_smi_version': match.group(1), 'version': match.group(2)}
            break
    if version is None:
        raise NpuSmiParseError('no "npu-smi <version> Version: <version>" header line')
    rows, has_phy_id = _table_rows(lines)
    result = dict(version)
    # Rows alternate: first row of a chip, second row of the same chip.
    result['chips'] = [_table_chip(first, second, has_phy_id)
                       for first, second in zip(rows[0::2], rows[1::2])]  # noqa: B905 (targets predate strict=)
    return result


def parse_kv(text):
    """Every "key : value" line, in order, as (key, value) pairs."""
    pairs = [pair for pair in _kv_lines(text) if pair is not None]
    if not pairs:
        raise NpuSmiParseError('no "key : value" lines')
    return pairs


def _kv_lines(text):
    """parse_kv's pairs with None for each blank line (blank lines separate blocks)."""
    pairs = []
    for line in text.splitlines():
        if not line.strip():
            pairs.append(None)
            continue
        # str.partition, not a regex: "\s*([^:]+?)\s*:" backtracks cubically on long blank runs.
        key, sep, value = line.partition(':')
        if not sep or not key:
            raise NpuSmiParseError('expected "key : value", got %r' % line.strip())
        pairs.append((key.strip(), value.strip()))
    return pairs


def parse_blocks(text):
    """Split a per-NPU key/value listing into its header and per-chip blocks.

    Listings such as `info -t ecc|usages -i N` print "NPU ID", "Chip Count", then for each
    chip its fields followed by a "Chip ID" line; `info -t common -i N` prints the "Chip ID"
    line first and the chip's fields after it, each block ending at a blank line. Which of
    the two a listing uses is read from the first line after "Chip Count". Listings without
    "Chip Count" (board, single-chip health) are a header only. Keys after the last chip
    block (e.g. an MCU block: "Chip Name : mcu") are returned under 'trailer'.
    """
    lines = _kv_lines(text)
    pairs = [pair for pair in lines if pair is not None]
    if not pairs:
        raise NpuSmiParseError('no "key : value" lines')
    keys = [pair[0] for pair in pairs]
    if 'Chip Count' not in keys:
        return {'header': dict(pairs), 'chips': [], 'trailer': {}}
    split = keys.index('Chip Count') + 1
    header = dict(pairs[:split])
    count_at = next(i for i, pair in enumerate(lines) if pair is not None and pair[0] == 'Chip Count')
    body = lines[count_at + 1:]  # blank lines (None) kept: they end "Chip ID"-first blocks
    leading = split < len(keys) and keys[split] == 'Chip ID'
    chips = []
    current = {}
    for pair in body:
        if pair is None:
            if leading and chips and current is chips[-1]:
                current = {}  # the chip's block ends: keys that follow without a "Chip ID" are a trailer
            continue
        key, value = pair
        if key == 'Chip ID' and leading:
            current = {'Chip ID': _int(value, 'Chip ID')}
            chips.append(current)
            continue
        current[key] = value
        if key == 'Chip ID':
            current['Chip ID'] = _int(value, 'Chip ID')
            chips.append(current)
            current = {}
    if chips and current is chips[-1]:
        current = {}
    return {'header': header, 'chips': chips, 'trailer': current}


def parse_list(text):
    """`npu-smi info -l`: the NPU ids and their chip counts."""
    pairs = parse_kv(text)
    total = None
    npus = []
    for key, value in pairs:
        if key in ('Total Count', 'Card Count'):
            total = _int(value, key)
        elif key == 'NPU ID':
            npus.append({'npu_id': _int(value, 'NPU ID'), 'chip_count': None})
        elif key == 'Chip Count':
            if not npus:
                raise NpuSmiParseError('"Chip Count" before any "NPU ID"')
            npus[-1]['chip_count'] = _int(value, 'Chip Count')
    if total is None:
        raise NpuSmiParseError('no "Total Count" line')
    if total != len(npus):
        raise NpuSmiParseError('"Total Count" says %d NPUs, %d are listed' % (total, len(npus)))
    return {'total': total, 'npus': npus}


def parse_map(text):
    """`npu-smi info -m`: one entry per chip, compute chips and the MCU.

    Columns: NPU ID, Chip ID, Chip Logic ID, [Chip Phy-ID,] Chip Name. The logic id is
    "-" for chips that are not compute devices (the MCU); those get logic_id None.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].strip().startswith('NPU ID'):
        raise NpuSmiParseError('no "NPU ID  Chip ID  Chip Logic ID ... Chip Name" header')
    header = lines[0]
    has_phy = 'Chip Phy-ID' in header
    ncols = 5 if has_phy else 4
    chips = []
    for line in lines[1:]:
        parts = line.split(None, ncols - 1)
        if len(parts) != ncols:
            raise NpuSmiParseError('expected %d columns in %r' % (ncols, line.strip()))
        logic = parts[2]
        phy = parts[3] if has_phy else None
        chips.append({
            'npu_id': _int(parts[0], 'NPU ID'),
            'chip_id': _int(parts[1], 'Chip ID'),
            'logic_id': None if logic == '-' else _int(logic, 'Chip Logic ID'),
            'phy_id': None if phy in (None, '-') else _int(phy, 'Chip Phy-ID'),
            'chip_name': parts[-1].strip(),
        })
    if not chips:
        raise NpuSmiParseError('no chip rows')
    return chips


_ECC_KEYS = {
    'HBM Single Bit Error Count': 'hbm_sbe',
    'HBM Double Bit Error Count': 'hbm_dbe',
    'HBM Single Bit Aggregate Total Err Cnt': 'hbm_sbe_aggregate',
    'HBM Double Bit Aggregate Total Err Cnt': 'hbm_dbe_aggregate',
    'HBM Single Bit Isolated Pages Count': 'hbm_sbe_isolated_pages',
    'HBM Double Bit Isolated Pages Count': 'hbm_dbe_isolated_pages',
    'DDR Single Bit Error Count': 'ddr_sbe',
    'DDR Double Bit Error Count': 'ddr_dbe',
    'DDR Single Bit Aggregate Total Err Cnt': 'ddr_sbe_aggregate',
    'DDR Double Bit Aggregate Total Err Cnt': 'ddr_dbe_aggregate',
}


def _per_chip(blocks, what):
    chips = blocks['chips']
    if not chips:
        # Single-chip listings from some driver versions omit "Chip Count"/"Chip ID".
        header = dict(blocks['header'])
        header['Chip ID'] = 0
        chips = [header]
    result = {}
    for chip in chips:
        result[chip['Chip ID']] = chip
    if not result:
        raise NpuSmiParseError('no %s block' % what)
    return result


def parse_ecc(text):
    """`npu-smi info -t ecc -i N`: ECC counters per chip id (keys of _ECC_KEYS)."""
    result = {}
    for chip_id, fields in _per_chip(parse_blocks(text), 'ECC').items():
        counters = {}
        for key, name in _ECC_KEYS.items():
            if key in fields:
                counters[name] = _int(fields[key], key) if fields[key] != 'NA' else None
        if 'hbm_dbe' not in counters and 'ddr_dbe' not in counters:
            raise NpuSmiParseError('chip %d: no double-bit error counter' % chip_id)
        result[chip_id] = counters
    return result


def parse_usages(text):
    """`npu-smi info -t usages -i N`: per chip id, HBM and DDR capacity and usage rates.

    Inference cards (310P, e.g. Atlas 300I Duo) have DDR and no HBM: their HBM values are
    None. A chip with neither capacity line is an error.
    """
    result = {}
    for chip_id, fields in _per_chip(parse_blocks(text), 'usages').items():
        hbm = fields.get('HBM Capacity(MB)')
        if hbm is None and fields.get('DDR Capacity(MB)') is None:
            raise NpuSmiParseError('chip %d: no "HBM Capacity(MB)" line and no "DDR Capacity(MB)" line' % chip_id)
        result[chip_id] = {
            'hbm_capacity_mb': _int(hbm, 'HBM Capacity(MB)') if hbm is not None else None,
            'hbm_usage_percent': _float_or_none(fields.get('HBM Usage Rate(%)')),
            'aicore_usage_percent': _float_or_none(fields.get('Aicore Usage Rate(%)')),
            'ddr_capacity_mb': _float_or_none(fields.get('DDR Capacity(MB)')),
        }
    return result


def parse_board(text):
    """`npu-smi info -t board -i N`: versions and PCI identity of the NPU."""
    header = parse_blocks(text)['header']
    if 'NPU ID' not in header:
        raise NpuSmiParseError('no "NPU ID" line')
    return {
        'npu_id': _int(header['NPU ID'], 'NPU ID'),
        'software_version': header.get('Software Version', ''),
        'firmware_version': header.get('Firmware Version', ''),
        'compatibility': header.get('Compatibility', ''),
        'pci_device_id': header.get('PCI Device ID', '').lower(),
        'bus_id': header.get('PCIe Bus Info', ''),
        'chip_count': _int(header['Chip Count'], 'Chip Count') if 'Chip Count' in header else None,
    }


def _health_fields(text):
    """The key/value lines of a health listing, each key with its list of values.

    npu-smi prints the information of the second and later errors on lines of their own
    with an empty key ("<tab><30 spaces> : <information>"): such a line, like a line with no
    colon or a "Failed to get error information ..." line, continues the value above it.
    """
    fields = {}
    last = None
    for line in text.splitlines():
        if not line.strip():
            continue
        key, sep, value = line.partition(':')
        if last in ('Error Code', 'Error Information'):
            if sep and key and not key.strip():
                fields[last].append(value.strip())
                continue
            if not sep or line.strip().startswith('Failed to get error information'):
                fields[last].append(line.strip())
                continue
        if not sep or not key:
            raise NpuSmiParseError('expected "key : value", got %r' % line.strip())
        last = key.strip()
        fields[last] = [value.strip()]
    if not fields:
        raise NpuSmiParseError('no "key : value" lines')
    return fields


def parse_health(text):
    """`npu-smi info -t health -i N -c C` (key "Health Status") or `-i N` (key "Health").

    Error information of several errors comes back as one string, the errors joined by "; ".
    """
    fields = _health_fields(text)
    info_lines = [v for v in fields.pop('Error Information', []) if v and v.upper() != 'NA']
    fields = dict((key, ' '.join(values)) for key, values in fields.items())
    health = fields.get('Health Status', fields.get('Health'))
    if health is None:
        raise NpuSmiParseError('no "Health Status" line')
    if health not in HEALTH_STATES:
        raise NpuSmiParseError('unknown health state %r' % health)
    codes = [c for c in re.split(r'[\s,;]+', fields.get('Error Code', '')) if c and c.upper() != 'NA']
    return {
        'health': health,
        'error_codes': codes,
        'error_information': '; '.join(info_lines),
    }


def _topo_header(lines):
    for idx, line in enumerate(lines):
        if re.match(r'^\s*(NPU|Phy-ID)\d+\s', line):
            header = line.replace('CPU Affinity', '').split()
            if not all(re.match(r'^(NPU|Phy-ID)\d+$', h) for h in header):
                raise NpuSmiParseError('unexpected column header %r' % line.strip())
            return idx, header
    raise NpuSmiParseError('no "NPU0 NPU1 ..." column header')


def parse_topo(text):
    """`npu-smi info -t topo`: the link kind between every pair of devices.

    Returns labels (NPU0…, or Phy-ID0… on A3) in matrix order, links as a dict
    {(row_label, column_label): kind} for off-diagonal cells, and the CPU affinity per row.
    """
    lines = text.splitlines()
    header_idx, header = _topo_header(lines)
    links = {}
    affinity = {}
    rows = []
    for line in lines[header_idx + 1:]:
        if not line.strip() or line.strip().startswith('Legend'):
            break
        parts = line.split()
        label, cells = parts[0], parts[1:]
        if label not in header:
            raise NpuSmiParseError('row %r is not one of the columns' % label)
        if len(cells) not in (len(header), len(header) + 1):
            raise NpuSmiParseError('row %s has %d cells for %d columns' % (label, len(cells), len(header)))
        if len(cells) == len(header) + 1:
            affinity[label] = cells[-1]
        if cells[header.index(label)] != 'X':
            raise NpuSmiParseError('row %s: diagonal is %r, expected X' % (label, cells[header.index(label)]))
        for column, kind in zip(header, cells):  # noqa: B905 (cells may carry the affinity too)
            if column != label:
                links[(label, column)] = kind
        rows.append(label)
    if sorted(rows) != sorted(header):
        raise NpuSmiParseError('matrix is not square: rows %s, columns %s' % (rows, header))
    return {'labels': header, 'links': links, 'cpu_affinity': affinity}


def classify_topology(topo):
    """Name the interconnect of a node from its topology matrix.

    single        one device
    hccs-fullmesh every pair of devices linked directly over HCCS (8x910B: 7 HCCS links each)
    hccs-switch   every pair linked over HCCS through the HCCS switch or SIO (Atlas A3)
    hccs-partial  HCCS inside groups, PCIe/SMP between them (910A: two groups of four)
    pcie          no HCCS link at all
    unknown       any "NA" relationship
    """
    kinds = list(topo['links'].values())
    if len(topo['labels']) <= 1:
        return 'single'
    if any(k not in HCCS_LINKS + PCIE_LINKS for k in kinds):
        return 'unknown'
    if all(k == 'HCCS' for k in kinds):
        return 'hccs-fullmesh'
    if all(k in HCCS_LINKS for k in kinds):
        return 'hccs-switch'
    if any(k in HCCS_LINKS for k in kinds):
        return 'hccs-partial'
    return 'pcie'


def link_counts(topo):
    """Unordered device pairs per link kind, e.g. {'HCCS': 28} for 8x910B."""
    counts = {}
    for (row, column), kind in topo['links'].items():
        if row < column:
            counts[kind] = counts.get(kind, 0) + 1
    return counts


# PCI device id ("PCI Device ID" of the board listing) of the first-generation 910
# (Atlas 800 9000 / 300T, 32 GB HBM per chip); the Atlas A2 910B is d802, the A3 d803.
PCI_DEVICE_910 = 'd801'
FIRST_GEN_910_HBM_MB = 32768


def chip_family(chip_name, chips_per_npu=1, pci_device_id=None, hbm_mb=None):
    """Model family from the chip name npu-smi prints.

    "910B3", "Ascend 910B4", "910B4-1" -> "910B"; "910A", "Ascend 910A" -> "910A";
    "Ascend910" / "Ascend 910_9392" with two dies per NPU (Atlas A3) -> "910C";
    "310P3" -> "310P". Anything else: the name without the "Ascend" prefix.

    First-generation 910 parts come in bins some drivers name "910B" too. The PCI device
    id tells them apart (d801 first generation, d802 Atlas A2); without it, a bare "910B"
    with at most 32 GB HBM per chip is taken as first generation (the A2 910B has 64 GB;
    the 32 GB 910B4 has a suffixed name). The first generation is "910".
    """
    name = re.sub(r'^\s*Ascend\s*', '', chip_name or '').strip()
    match = re.match(r'^(910B|910A|310P|310B)', name)
    if match and match.group(1) == '910B':
        device = (pci_device_id or '').lower()
        device = device[2:] if device.startswith('0x') else device
        if device == PCI_DEVICE_910 or (not device and name == '910B' and hbm_mb
                                        and hbm_mb <= FIRST_GEN_910_HBM_MB):
            return '910'
    if match:
        return match.group(1)
    if re.match(r'^910C', name) or (re.match(r'^910(_93\d*)?$', name) and chips_per_npu == 2):
        return '910C'
    return name
