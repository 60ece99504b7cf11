#!/usr/bin/env python3
"""Fake Huawei `npu-smi` for the lab and the unit tests (installed as /usr/local/bin/npu-smi).

It prints the layouts of the real tool (see captured/README.md for where each one comes
from) for the hardware a scenario file describes. The scenario is JSON, read from
$AI_L1_FAKE_NPU_SCENARIO or /etc/ai-l1-fake/npu-scenario. Supported commands:

  npu-smi info                      device table (910A, 910B or A3 layout)
  npu-smi info -l                   NPU ids and chip counts
  npu-smi info -m                   chip mapping (logic ids, MCU rows)
  npu-smi info -t topo              link matrix with CPU affinity and legend
  npu-smi info -t board|health|ecc|usages -i N [-c C]
  npu-smi -v

Scenario keys (see scenarios/*.json): npu_smi_version, table_style (910a|910b|a3),
npu_count, chips_per_npu, chip {name, map_name, hbm_mb, hbm_used_mb, ddr_mb, ddr_used_mb,
power_w, temp_c, pci_device_id}, bus_ids, cpu_affinity, topology
(hccs-fullmesh|hccs-2x4|a3-switch|pcie), versions {driver, firmware, cann},
faults [{npu, chip, health, error_codes, error_info, ecc{...}}], garble {"<args>": text}.
Standard library only: lab nodes have nothing else.
"""

import json
import os
import sys

DEFAULT_SCENARIO = '/etc/ai-l1-fake/npu-scenario'

ECC_KEYS = (
    ('DDR Single Bit Error Count', 'ddr_sbe'),
    ('DDR Double Bit Error Count', 'ddr_dbe'),
    ('DDR Single Bit Aggregate Total Err Cnt', 'ddr_sbe_aggregate'),
    ('DDR Double Bit Aggregate Total Err Cnt', 'ddr_dbe_aggregate'),
    ('DDR Single Bit Isolated Pages Count', 'ddr_sbe_isolated_pages'),
    ('DDR Double Bit Isolated Pages Count', 'ddr_dbe_isolated_pages'),
    ('HBM Single Bit Error Count', 'hbm_sbe'),
    ('HBM Double Bit Error Count', 'hbm_dbe'),
    ('HBM Single Bit Aggregate Total Err Cnt', 'hbm_sbe_aggregate'),
    ('HBM Double Bit Aggregate Total Err Cnt', 'hbm_dbe_aggregate'),
    ('HBM Single Bit Isolated Pages Count', 'hbm_sbe_isolated_pages'),
    ('HBM Double Bit Isolated Pages Count', 'hbm_dbe_isolated_pages'),
)

LEGEND = """
Legend:

  X    = Self
  SYS  = Path traversing PCIe and NUMA nodes. Nodes are connected through SMP, such as QPI, UPI.
  PHB  = Path traversing PCIe and the PCIe host bridge of a CPU.
  PIX  = Path traversing a single PCIe switch
  PXB  = Path traversing multiple PCIe switches
  HCCS = Connection traversing HCCS.
  NA   = Unknown relationship.
"""
# Reconstructed (not captured verbatim): the A3 legend lines for its two extra link kinds.
A3_LEGEND_EXTRA = """  SIO  = Connection traversing SIO (between the two dies of an NPU).
  HCCS_SW = Connection traversing HCCS switch.
"""


class Usage(Exception):
    pass


def load_scenario():
    path = os.environ.get('AI_L1_FAKE_NPU_SCENARIO', DEFAULT_SCENARIO)
    try:
        with open(path) as handle:
            return json.load(handle)
    except OSError as exc:
        # What the real tool says when the driver is not loaded, plus why.
        sys.stderr.write('dcmi model initialized failed, because the device is used. ret is -8005\n')
        sys.stderr.write('(fake npu-smi: cannot read scenario %s: %s)\n' % (path, exc.strerror))
        sys.exit(255)


class Node:
    """The scenario expanded into one record per chip."""

    def __init__(self, sc):
        self.sc = sc
        self.version = sc.get('npu_smi_version', '23.0.rc1')
        self.style = sc.get('table_style', '910b')
        self.npu_ids = sc.get('npu_ids') or list(range(sc.get('npu_count', 8)))
        self.per_npu = sc.get('chips_per_npu', 1)
        base = sc.get('chip', {})
        faults = {(f['npu'], f['chip']): f for f in sc.get('faults', [])}
        bus_ids = sc.get('bus_ids', [])
        affinity = sc.get('cpu_affinity', [])
        self.chips = []
        logic = 0
        for npu in self.npu_ids:
            for chip in range(self.per_npu):
                fault = faults.get((npu, chip), {})
                rec = dict(base)
                rec.update({
                    'npu': npu, 'chip': chip, 'logic': logic, 'phy': logic,
                    'bus_id': bus_ids[logic] if logic < len(bus_ids) else '0000:%02X:00.0' % (0x10 + logic),
                    'affinity': affinity[logic] if logic < len(affinity) else '0-23',
                    'health': fault.get('health', 'OK'),
                    'error_codes': fault.get('error_codes', []),
                    'error_info': fault.get('error_info', ''),
                    'ecc': fault.get('ecc', {}),
                })
                self.chips.append(rec)
                logic += 1

    def npu_chips(self, npu):
        chips = [c for c in self.chips if c['npu'] == npu]
        if not chips:
            raise Usage('The NPU ID %s is invalid.' % npu)
        return chips


def _row(widths, cells, last_fill=True):
    out = '|'
    for i, (width, cell) in enumerate(zip(widths, cells, strict=True)):
        if i == len(widths) - 1:
            out += ' ' + cell.ljust(width - 1) + '|'
        else:
            out += ' ' + cell.ljust(width - 2) + ' |'
    return out


def _usage(used, total):
    return '%-5s/ %s' % (used, total)


def info_table(node):
    # Column widths of the real layouts, including the spaces around each cell.
    first = 22 if node.style == '910a' else 27
    widths = (first, 15, 52)
    total = sum(widths) + len(widths) + 1
    dash = '+' + '+'.join('-' * w for w in widths) + '+'
    equal = '+' + '+'.join('=' * w for w in widths) + '+'
    full_dash = '+' + '-' * (total - 2) + '+'
    out = [full_dash]
    head = ('npu-smi %s' % node.version).ljust(33) + 'Version: %s' % node.version
    out.append('| ' + head.ljust(total - 3) + '|')
    out.append(dash)
    out.append(_row(widths, ('NPU   Name', 'Health', 'Power(W)    Temp(C)           Hugepages-Usage(page)')))
    chip_head = 'Chip  Phy-ID' if node.style == 'a3' else 'Chip'
    out.append(_row(widths, (chip_head, 'Bus-Id', 'AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)')))
    out.append(equal)
    for npu in node.npu_ids:
        chips = node.npu_chips(npu)
        for i, c in enumerate(chips):
            power = '%.1f' % c.get('power_w', 90.0) if i == 0 else '-'
            third = power.ljust(12) + str(c.get('temp_c', 40)).ljust(18) + _usage(0, 0)
            name = c.get('name', '910B3')
            out.append(_row(widths, ('%-5s %s' % (npu, name), c['health'], third)))
            chip_cell = '%-5s %s' % (c['chip'], c['phy']) if node.style == 'a3' else str(c['chip'])
            mem = _usage(c.get('ddr_used_mb', 0), c.get('ddr_mb', 0))
            hbm = _usage(c.get('hbm_used_mb', 3314), c.get('hbm_mb', 65536))
            out.append(_row(widths, (chip_cell, c['bus_id'], '0'.ljust(12) + mem.ljust(18) + hbm)))
            out.append(full_dash if i < len(chips) - 1 else equal)
    out.append(dash)
    out.append(_row(widths, ('NPU     Chip', 'Process id', 'Process name             | Process memory(MB)')))
    out.append(equal)
    for npu in node.npu_ids:
        out.append('| ' + ('No running processes found in NPU %s' % npu).ljust(total - 3) + '|')
        out.append(equal)
    return '\n'.join(out) + '\n'


def kv(key, value, width=30):
    return '\t%s : %s\n' % (key.ljust(width), value)


def info_list(node):
    out = kv('Total Count', len(node.npu_ids)) + '\n'
    for npu in node.npu_ids:
        out += kv('NPU ID', npu) + kv('Chip Count', len(node.npu_chips(npu))) + '\n'
    return out


def info_map(node):
    a3 = node.style == 'a3'
    cols = ['NPU ID', 'Chip ID', 'Chip Logic ID'] + (['Chip Phy-ID'] if a3 else []) + ['Chip Name']
    out = '\t' + ''.join(c.ljust(31) for c in cols[:-1]) + cols[-1].ljust(30) + '\n'
    for npu in node.npu_ids:
        chips = node.npu_chips(npu)
        for c in chips:
            ids = [npu, c['chip'], c['logic']] + ([c['phy']] if a3 else [])
            out += '\t' + ''.join(str(v).ljust(31) for v in ids) + c.get('map_name', 'Ascend 910B3') + '\n'
        mcu = [npu, len(chips), '-'] + (['-'] if a3 else [])
        out += '\t' + ''.join(str(v).ljust(31) for v in mcu) + 'Mcu'.ljust(30) + '\n'
    return out


def topo_kind(node, a, b):
    kind = node.sc.get('topology', 'hccs-fullmesh')
    if kind == 'hccs-fullmesh':
        return 'HCCS'
    if kind == 'hccs-2x4':  # 910A Atlas 800 (9000): HCCS inside each group of four
        return 'HCCS' if a['logic'] // 4 == b['logic'] // 4 else 'SYS'
    if kind == 'a3-switch':
        return 'SIO' if a['npu'] == b['npu'] else 'HCCS_SW'
    if kind == 'pcie':
        return 'PIX' if a['logic'] // 4 == b['logic'] // 4 else 'SYS'
    raise Usage('fake npu-smi: unknown topology %r in the scenario' % kind)


def info_topo(node):
    prefix = 'Phy-ID' if node.style == 'a3' else 'NPU'
    labels = ['%s%d' % (prefix, c['phy'] if node.style == 'a3' else c['logic']) for c in node.chips]
    out = '\t   ' + ''.join(label.ljust(11) for label in labels) + 'CPU Affinity\n'
    for a, label in zip(node.chips, labels, strict=True):
        cells = ['X' if a is b else topo_kind(node, a, b) for b in node.chips]
        out += label.ljust(11) + ''.join(c.ljust(11) for c in cells) + a['affinity'] + '\n'
    legend = LEGEND if node.style != 'a3' else LEGEND.rstrip('\n') + '\n' + A3_LEGEND_EXTRA
    return out + legend


def chip_select(node, npu, chip):
    chips = node.npu_chips(npu)
    if chip is None:
        return chips
    selected = [c for c in chips if c['chip'] == chip]
    if not selected:
        raise Usage('The chip ID %s is invalid.' % chip)
    return selected


def info_board(node, npu, chip):
    versions = node.sc.get('versions', {})
    chips = node.npu_chips(npu)
    first = chips[0]
    if chip is not None:
        c = chip_select(node, npu, chip)[0]
        return (kv('NPU ID', npu) + kv('Chip ID', chip) + kv('Chip Type', 'Ascend')
                + kv('Chip Name', c.get('map_name', 'Ascend 910B3').replace('Ascend ', ''))
                + kv('Chip Version', 'V1') + kv('Board ID', '0x02') + kv('PCB ID', 'NA') + kv('BOM ID', '1')
                + kv('Chip Position ID', chip) + kv('PCIe Bus Info', c['bus_id'])
                + kv('Firmware Version', versions.get('firmware', '7.0.0.5.242')))
    return (kv('NPU ID', npu) + kv('Software Version', versions.get('driver', node.version))
            + kv('Firmware Version', versions.get('firmware', '7.0.0.5.242')) + kv('Compatibility', 'OK')
            + kv('Board ID', '0x02') + kv('PCB ID', 'A') + kv('BOM ID', '1')
            + kv('PCIe Bus Info', first['bus_id']) + kv('Slot ID', npu) + kv('Class ID', 'NA')
            + kv('PCI Vendor ID', '0x19e5') + kv('PCI Device ID', first.get('pci_device_id', '0xD802'))
            + kv('Subsystem Vendor ID', '0x0200') + kv('Subsystem Device ID', '0x0100')
            + kv('Chip Count', len(chips)))


def info_health(node, npu, chip):
    def codes(c):
        return ' '.join(c['error_codes']) or 'NA'

    if chip is not None:
        c = chip_select(node, npu, chip)[0]
        return (kv('Health Status', c['health']) + kv('Error Code', codes(c))
                + kv('Error Information', c['error_info'] or 'NA'))
    chips = node.npu_chips(npu)
    if len(chips) == 1:
        c = chips[0]
        return (kv('NPU ID', npu) + kv('Health', c['health']) + kv('Error Code', codes(c))
                + kv('Error Information', c['error_info'] or 'NA'))
    out = kv('NPU ID', npu) + kv('Chip Count', len(chips)) + '\n'
    for c in chips:
        out += (kv('Health', c['health']) + kv('Error Code', codes(c))
                + kv('Error Information', c['error_info'] or 'NA') + kv('Chip ID', c['chip']) + '\n')
    return out


def info_ecc(node, npu, chip):
    chips = chip_select(node, npu, chip)
    out = kv('NPU ID', npu, 40) + kv('Chip Count', len(node.npu_chips(npu)), 40) + '\n'
    for c in chips:
        for key, name in ECC_KEYS:
            if key.startswith('DDR') and node.style == 'a3':
                continue  # A3 dies report HBM counters only
            out += kv(key, c['ecc'].get(name, 0), 40)
        out += kv('Chip ID', c['chip'], 40) + '\n'
    return out


def info_usages(node, npu, chip):
    chips = chip_select(node, npu, chip)
    out = kv('NPU ID', npu) + kv('Chip Count', len(node.npu_chips(npu))) + '\n'
    for c in chips:
        hbm = c.get('hbm_mb', 65536)
        out += (kv('DDR Capacity(MB)', c.get('ddr_mb', 0)) + kv('DDR Usage Rate(%)', 0)
                + kv('DDR Hugepages Total(page)', 0) + kv('DDR Hugepages Usage Rate(%)', 0)
                + kv('HBM Capacity(MB)', hbm)
                + kv('HBM Usage Rate(%)', int(round(100.0 * c.get('hbm_used_mb', 3314) / hbm)))
                + kv('Aicore Usage Rate(%)', 0) + kv('Aicpu Usage Rate(%)', 0) + kv('Ctrlcpu Usage Rate(%)', 0)
                + kv('DDR Bandwidth Usage Rate(%)', 0) + kv('HBM Bandwidth Usage Rate(%)', 0)
                + kv('Chip ID', c['chip']) + '\n')
    return out


def parse_args(args):
    opts = {'-t': None, '-i': None, '-c': None}
    flags = set()
    it = iter(args)
    for arg in it:
        if arg in opts:
            value = next(it, None)
            if value is None:
                raise Usage('Option %s needs a value.' % arg)
            opts[arg] = value
        elif arg in ('-l', '-m'):
            flags.add(arg)
        else:
            raise Usage('Unknown option %s.' % arg)
    for key in ('-i', '-c'):
        if opts[key] is not None:
            try:
                opts[key] = int(opts[key])
            except ValueError:
                raise Usage('The value of %s must be a number.' % key) from None
    return opts, flags


def main(argv):
    if argv in (['-v'], ['--version']):
        sc = load_scenario()
        sys.stdout.write('npu-smi version: %s\n' % sc.get('npu_smi_version', '23.0.rc1'))
        return 0
    if not argv or argv[0] != 'info':
        sys.stderr.write('Usage: npu-smi info [-l | -m | -t type [-i id [-c chip_id]]]\n')
        return 1
    sc = load_scenario()
    garbled = sc.get('garble', {}).get(' '.join(argv))
    if garbled is not None:
        sys.stdout.write(garbled)
        return 0
    node = Node(sc)
    try:
        opts, flags = parse_args(argv[1:])
        if '-l' in flags:
            text = info_list(node)
        elif '-m' in flags:
            text = info_map(node)
        elif opts['-t'] is None:
            text = info_table(node)
        elif opts['-t'] == 'topo':
            text = info_topo(node)
        else:
            handlers = {'board': info_board, 'health': info_health, 'ecc': info_ecc, 'usages': info_usages}
            handler = handlers.get(opts['-t'])
            if handler is None:
                raise Usage('fake npu-smi: type %s is not simulated.' % opts['-t'])
            if opts['-i'] is None:
                raise Usage('The -i option is required for type %s.' % opts['-t'])
            text = handler(node, opts['-i'], opts['-c'])
    except Usage as exc:
        sys.stdout.write('%s\n' % exc)
        return 2
    sys.stdout.write(text)
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
