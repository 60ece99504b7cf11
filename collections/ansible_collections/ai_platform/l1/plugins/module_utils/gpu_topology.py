# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""`nvidia-smi topo -m` as data: the GPU/NIC connection matrix, the affinity columns and the NIC legend.

Pure Python (no NVML): nccl_config uses it to keep HCAs that are far from every GPU out of
NCCL_IB_HCA and to check NCCL_NET_GDR_LEVEL against the GPU-NIC distances.

The output has a header row (tab separated, the column names underlined with ANSI escapes on
recent drivers), one row per GPU and per NIC, a `Legend:` section and, since the R515 drivers,
a `NIC Legend:` section mapping the NICn columns to RDMA device names (older drivers name the
column after the device, `mlx5_0`). GPU rows end with `CPU Affinity`, `NUMA Affinity` and, on
newer drivers, `GPU NUMA ID`; NIC rows have the matrix cells only.
"""

from __future__ import annotations

import re

# NCCL_NET_GDR_LEVEL's names in NCCL's order, nearest first; the legacy integers are their index
# (4 and 5 both SYS).
GDR_LEVELS = ('LOC', 'PIX', 'PXB', 'PHB', 'SYS')

# nvidia-smi connection types as NCCL ranks them. NCCL's topology has one CPU node per NUMA node, so a
# path through two host bridges of one NUMA node (nvidia-smi's NODE) is PHB for NCCL. SOC is the
# pre-R384 name of SYS. NV# between a GPU and a NIC does not occur; it ranks as the nearest PCIe level.
_CONNECTION_RANK = {'X': 0, 'PIX': 1, 'PXB': 2, 'PHB': 3, 'NODE': 3, 'SYS': 4, 'SOC': 4}

_ANSI = re.compile(r'\x1b\[[0-9;]*m')
_NIC_LEGEND = re.compile(r'^\s*(NIC\d+)\s*:\s*(\S+)\s*$')
_MATRIX_COLUMN = re.compile(r'^(GPU\d+|NIC\d+|mlx\d+_\d+|[a-z][a-z0-9]*_\d+)$')


def _cells(line):
    """The cells of a row: tab separated as nvidia-smi prints it, or runs of 2+ blanks in a pasted copy."""
    line = _ANSI.sub('', line).rstrip('\n')
    parts = line.split('\t') if '\t' in line else re.split(r' {2,}', line)
    return [c.strip() for c in parts if c.strip()]


def connection_rank(cell):
    """NCCL rank (0 LOC .. 4 SYS) of a matrix cell, or None for a type not known here."""
    cell = cell.strip()
    if cell.startswith('NV') and cell[2:].isdigit():
        return 1
    return _CONNECTION_RANK.get(cell)


def gdr_level_rank(value):
    """Rank (0..4) of an NCCL_NET_GDR_LEVEL value: a name of GDR_LEVELS or a legacy integer 0..5."""
    text = str(value).strip().upper()
    if text in GDR_LEVELS:
        return GDR_LEVELS.index(text)
    if text.isdigit() and int(text) <= 5:
        return min(int(text), 4)
    raise ValueError('NCCL_NET_GDR_LEVEL %r is none of %s or 0..5' % (value, ', '.join(GDR_LEVELS)))


def _header(lines):
    """(index of the header line, matrix column names, affinity labels)."""
    for n, line in enumerate(lines):
        cells = _cells(line)
        # the header's first cell is GPU0 too, but GPU0's own row has X next to it
        if len(cells) > 1 and cells[0] == 'GPU0' and cells[1] != 'X':
            at = n
            break
    else:
        raise ValueError('no nvidia-smi topo -m header (a line of GPU0 GPU1 ... columns) found')
    columns = []
    for cell in cells:
        if not _MATRIX_COLUMN.match(cell):
            break
        columns.append(cell)
    labels = []
    for cell in cells[len(columns):]:
        # a copy pasted with widened blanks splits `CPU Affinity`; rejoin it
        if labels and cell == 'Affinity' and labels[-1] in ('CPU', 'NUMA'):
            labels[-1] += ' Affinity'
        else:
            labels.append(cell)
    return at, columns, labels


def _legend(lines):
    """{NICn: device} from the NIC Legend section."""
    legend = {}
    for line in lines:
        m = _NIC_LEGEND.match(_ANSI.sub('', line))
        if m:
            legend[m.group(1)] = m.group(2)
    return legend


def parse(text):
    """Parse `nvidia-smi topo -m` output.

    Returns dict(gpus=[GPU0, ...], nics=[mlx5_0, ...] (device names, in column order),
    links={row: {column: cell}} over device names, affinity={GPU0: {'CPU Affinity': ..., ...}}).
    Raises ValueError when there is no header with GPU columns or a row does not fit it.
    """
    lines = text.splitlines()
    at, columns, labels = _header(lines)
    legend = _legend(lines[at + 1:])

    def name(column):
        if column.startswith('NIC'):
            if column not in legend:
                raise ValueError('%s has no entry in the NIC Legend' % column)
            return legend[column]
        return column

    names = [name(c) for c in columns]
    links, affinity = {}, {}
    for line in lines[at + 1:]:
        cells = _cells(line)
        if cells and cells[0].rstrip(':') in ('Legend', 'NIC Legend'):
            break
        if not cells or cells[0] not in columns:
            continue
        values = cells[1:1 + len(columns)]
        if len(values) < len(columns):
            raise ValueError('row %s has %d matrix cells, the header %d columns'
                             % (cells[0], len(values), len(columns)))
        bad = [(c, v) for c, v in zip(names, values) if connection_rank(v) is None  # noqa: B905 (same length)
               and not re.match(r'^[A-Z0-9#]+$', v)]
        if bad:
            raise ValueError('row %s, column %s: %r is not a connection type' % (cells[0], bad[0][0], bad[0][1]))
        row = name(cells[0])
        links[row] = dict(zip(names, values))  # noqa: B905 (same length, checked above)
        if row.startswith('GPU'):
            # NIC rows have no affinity cells; GPU rows may lack trailing ones (older drivers)
            affinity[row] = dict(zip(labels, cells[1 + len(columns):]))  # noqa: B905
    missing = [n for n in names if n not in links]
    if missing:
        raise ValueError('no row for %s' % ', '.join(missing))
    return dict(gpus=[n for n in names if n.startswith('GPU')], nics=[n for n in names if not n.startswith('GPU')],
                links=links, affinity=affinity)


def nic_affinity(topology):
    """Per NIC: its nearest connection to any GPU (the cell, e.g. PXB), its NCCL rank and those GPUs.

    {nic: dict(connection=cell, rank=0..4 (unknown types rank as SYS), gpus=[GPU names at that rank])}.
    """
    out = {}
    for nic in topology['nics']:
        ranked = []
        for gpu in topology['gpus']:
            cell = topology['links'][gpu][nic]
            rank = connection_rank(cell)
            ranked.append((4 if rank is None else rank, cell, gpu))
        if not ranked:
            continue
        best = min(r for r, _c, _g in ranked)
        cells = [c for r, c, _g in ranked if r == best]
        out[nic] = dict(connection=cells[0], rank=best, level=GDR_LEVELS[best],
                        gpus=[g for r, _c, g in ranked if r == best])
    return out


def gpu_nearest(topology, nics):
    """Per GPU: the rank of its nearest NIC among nics and those NICs ({gpu: (rank, [nic, ...])})."""
    out = {}
    for gpu in topology['gpus']:
        ranked = []
        for nic in nics:
            rank = connection_rank(topology['links'][gpu].get(nic, 'SYS'))
            ranked.append((4 if rank is None else rank, nic))
        if ranked:
            best = min(r for r, _n in ranked)
            out[gpu] = (best, [n for r, n in ranked if r == best])
    return out
