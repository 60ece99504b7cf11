#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: npu_info
short_description: Discover Huawei Ascend NPUs with npu-smi and the Ascend version files
version_added: "0.1.0"
description:
  - Runs C(npu-smi info), C(npu-smi info -l), C(npu-smi info -m), C(npu-smi info -t topo) and,
    for every NPU, C(npu-smi info -t board|ecc|usages -i N); for every chip whose health is not
    C(OK) it also runs C(npu-smi info -t health -i N -c C) to read the error codes.
  - Reads the driver, firmware, CANN toolkit and Ascend Docker Runtime versions from the version
    files under O(ascend_root) (RV(npu_info.installed)); with O(versions_only=true) it reads only
    those and runs no npu-smi, which works on a node whose driver is missing or broken.
  - Reports chip model, NPU and chip counts, HBM per chip, health and error codes, ECC counters
    and the HCCS topology class of the node.
  - On a node without C(npu-smi) it returns RV(npu_info.present=false) with a reason instead of
    failing, so one play can run on every node. When C(npu-smi) exists but fails or prints
    something it cannot parse, the module fails and names the command.
  - Never changes anything.
options:
  npu_smi_path:
    description:
      - The npu-smi executable, a name looked up in E(PATH) and the usual sbin directories, or a path.
    type: str
    default: npu-smi
  ascend_root:
    description:
      - Install root of the Ascend driver, firmware and toolkit.
    type: path
    default: /usr/local/Ascend
  timeout:
    description:
      - Seconds one npu-smi command may take before the module gives up on it.
    type: int
    default: 60
  versions_only:
    description:
      - Read only the version files (RV(npu_info.installed)) and run no npu-smi. RV(npu_info.present)
        is then false with the reason saying so, and the device facts are empty.
      - For an installer's preflight, where npu-smi may be missing, or present but failing because
        the driver is half-installed.
    type: bool
    default: false
extends_documentation_fragment:
  - ai_platform.l1.attributes.info_module
notes:
  - "Topology classes (RV(npu_info.topology)), from the link kinds of C(npu-smi info -t topo):
    C(hccs-fullmesh) every device pair on a direct HCCS link (8x910B);
    C(hccs-switch) every pair over HCCS through the HCCS switch or SIO (Atlas A3);
    C(hccs-partial) HCCS inside groups and PCIe/SMP between them (910A, two groups of four);
    C(pcie) no HCCS; C(single) one device; C(unknown) any NA relationship.
    The label computation maps C(hccs-fullmesh) to the seed's label value C(hccs-ring)."
seealso:
  - module: ai_platform.l1.node_hw_info
author:
  - ai_platform L1 contributors (@ai-platform-l1)
'''

EXAMPLES = r'''
- name: Discover Ascend NPUs
  ai_platform.l1.npu_info:
  register: npu

- name: Fail when an NPU is unhealthy
  ansible.builtin.assert:
    that: npu.npu_info.health.ok
    fail_msg: "{{ npu.npu_info.health.problems | join('; ') }}"
  when: npu.npu_info.present

- name: Read the installed Ascend versions only (no npu-smi)
  ai_platform.l1.npu_info:
    versions_only: true
  register: npu_versions

- name: Decide whether the driver installer runs with --full or --upgrade
  ansible.builtin.debug:
    msg: "{{ '--upgrade' if npu_versions.npu_info.installed.driver else '--full' }}"
'''

RETURN = r'''
npu_info:
  description: What the node has. All keys are always present; when RV(npu_info.present) is false
    the lists are empty, counts 0 and strings empty.
  returned: always
  type: dict
  contains:
    present:
      description: Whether npu-smi was found and reported at least one chip.
      type: bool
      sample: true
    reason:
      description: Why RV(npu_info.present) is false; empty when present.
      type: str
      sample: "npu-smi not found in PATH or /usr/local/bin, /usr/local/sbin, /usr/bin, /usr/sbin"
    npu_smi_version:
      description: Version npu-smi prints in its table header.
      type: str
      sample: "23.0.rc1"
    installed:
      description:
        - The versions in the version files under O(ascend_root) alone, without falling back on what
          npu-smi reports; an empty string when a file or its key is missing (the package is not
          installed). Read also when npu-smi is missing or not run (O(versions_only=true)).
      type: dict
      contains:
        arch:
          description: The machine architecture (C(uname -m)) the installers are chosen for.
          type: str
          sample: "aarch64"
        firmware:
          description: C(Version=) of C(firmware/version.info).
          type: str
          sample: "7.0.0.5.242"
        driver:
          description: C(Version=) of C(driver/version.info).
          type: str
          sample: "23.0.rc1"
        cann:
          description: C(version=) of the CANN toolkit's C(ascend_toolkit_install.info), found as for
            RV(npu_info.cann_version).
          type: str
          sample: "7.0.0"
        docker_runtime:
          description: C(Version=) of C(Ascend-Docker-Runtime/version.info).
          type: str
          sample: "5.0.RC3"
    driver_version:
      description: C(Version=) of C(driver/version.info); the npu-smi header version when the file is missing.
      type: str
      sample: "23.0.rc1"
    firmware_version:
      description: C(Version=) of C(firmware/version.info), else the board's firmware version.
      type: str
      sample: "7.0.0.5.242"
    cann_version:
      description: C(version=) of the CANN toolkit's C(ascend_toolkit_install.info); empty when not installed.
      type: str
      sample: "7.0.0"
    chip_name:
      description: Chip name from C(npu-smi info -m).
      type: str
      sample: "Ascend 910B3"
    chip_model:
      description: Model family (910A, 910B, 910C, 310P, ...), see the module_utils npu_smi.chip_family.
        C(910) is a first-generation 910 (PCI device id C(d801)), also when npu-smi names it C(910B).
      type: str
      sample: "910B"
    npu_count:
      description: Number of NPUs (cards or modules).
      type: int
      sample: 8
    chip_count:
      description: Number of compute chips (devices the device plugin schedules).
      type: int
      sample: 8
    chips_per_npu:
      description: Compute chips per NPU (2 on Atlas A3).
      type: int
      sample: 1
    hbm_total_mb:
      description: HBM per chip in MB (the smallest across chips); 0 on chips without HBM
        (310P inference cards such as the Atlas 300I Duo have DDR only).
      type: int
      sample: 65536
    topology:
      description: Topology class, see the notes.
      type: str
      sample: "hccs-fullmesh"
    topology_links:
      description: Device pairs per link kind.
      type: dict
      sample: {"HCCS": 28}
    chips:
      description: One entry per compute chip, in logic id order. C(error_information) holds the
        information of every error code, joined by C(; ); C(hbm_used_mb) is null on chips without HBM.
      type: list
      elements: dict
      sample:
        - npu_id: 0
          chip_id: 0
          logic_id: 0
          phy_id: null
          name: "910B3"
          bus_id: "0000:C1:00.0"
          health: "OK"
          error_codes: []
          error_information: ""
          hbm_total_mb: 65536
          hbm_used_mb: 3314
          temperature_c: 43.0
          power_w: 98.6
          cpu_affinity: "144-167"
          ecc: {"hbm_sbe": 0, "hbm_dbe": 0, "hbm_sbe_aggregate": 0, "hbm_dbe_aggregate": 0}
    npus:
      description: One entry per NPU with its board facts.
      type: list
      elements: dict
      sample: [{"npu_id": 0, "chip_count": 1, "firmware_version": "7.0.0.5.242",
                "software_version": "23.0.rc1", "pci_device_id": "0xd802"}]
    health:
      description: C(ok) is false when a chip is not C(OK) or has HBM/DDR double-bit ECC errors;
        C(problems) says which and why.
      type: dict
      sample: {"ok": false, "problems": ["NPU 3 chip 0: health Alarm, error 80E18005"]}
'''

import glob
import os
import platform

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ai_platform.l1.plugins.module_utils import device_io, npu_smi
from ansible_collections.ai_platform.l1.plugins.module_utils.accelerator_health import HealthView, npu_chip_view

SEARCH_DIRS = ['/usr/local/bin', '/usr/local/sbin', '/usr/bin', '/usr/sbin']


def empty_result(reason, installed=None):
    return {
        'present': False, 'reason': reason, 'npu_smi_version': '', 'driver_version': '',
        'firmware_version': '', 'cann_version': '', 'chip_name': '', 'chip_model': '',
        'npu_count': 0, 'chip_count': 0, 'chips_per_npu': 0, 'hbm_total_mb': 0,
        'topology': '', 'topology_links': {}, 'chips': [], 'npus': [],
        'health': {'ok': True, 'problems': []},
        'installed': installed or {'arch': '', 'firmware': '', 'driver': '', 'cann': '', 'docker_runtime': ''},
    }


def read_key(path, key):
    """Value of `key=value` in an Ascend .info file; '' when the file or key is missing.

    A value that is not UTF-8 text counts as missing (callers fall back to what npu-smi
    says); other lines may hold anything.
    """
    try:
        with open(path, encoding='utf-8', errors='replace') as handle:
            for line in handle:
                name, sep, value = line.partition('=')
                if sep and name.strip() == key:
                    value = value.strip()
                    return '' if '\ufffd' in value else value
    except (OSError, IOError):
        pass
    return ''


def cann_version(root):
    arch = platform.machine()
    candidates = [os.path.join(root, 'ascend-toolkit', 'latest', '%s-linux' % arch, 'ascend_toolkit_install.info')]
    candidates += sorted(glob.glob(os.path.join(root, 'ascend-toolkit', 'latest', '*-linux',
                                                'ascend_toolkit_install.info')))
    # CANN 8.5 and later install under <root>/cann/<arch>-linux.
    candidates.append(os.path.join(root, 'cann', '%s-linux' % arch, 'ascend_toolkit_install.info'))
    candidates += sorted(glob.glob(os.path.join(root, 'cann', '*-linux', 'ascend_toolkit_install.info')))
    for path in candidates:
        version = read_key(path, 'version')
        if version:
            return version
    return ''


def installed_versions(root):
    """What the version files under root say is installed, with no npu-smi fallback."""
    return {
        'arch': platform.machine(),
        'firmware': read_key(os.path.join(root, 'firmware', 'version.info'), 'Version'),
        'driver': read_key(os.path.join(root, 'driver', 'version.info'), 'Version'),
        'cann': cann_version(root),
        'docker_runtime': read_key(os.path.join(root, 'Ascend-Docker-Runtime', 'version.info'), 'Version'),
    }


class NpuSmi(object):
    """npu-smi through the collection's CLI runner (LC_ALL=C, the module's timeout)."""

    def __init__(self, module, path, timeout):
        self.module = module
        self.runner = device_io.CliRunner(module, path, name='npu-smi', timeout=timeout,
                                          arg_formats=npu_smi.ARG_FORMATS)

    def run(self, args, parser):
        """Run npu-smi with args and parse; fail naming the command on any error."""
        try:
            out = self.runner.run(args)
        except device_io.CliError as exc:
            if exc.timed_out or exc.rc is None:
                self.module.fail_json(msg=str(exc))
            self.module.fail_json(msg=str(exc), **exc.result())
        try:
            return parser(out)
        except npu_smi.NpuSmiParseError as exc:
            excerpt = '\n'.join(out.splitlines()[:6])
            self.module.fail_json(msg='could not parse the output of `%s`: %s' % (self.runner.display(args), exc),
                                  stdout_excerpt=excerpt)

    def info(self, parser, **values):
        """`npu-smi info [-l] [-m] [-t type] [-i npu] [-c chip]` (npu_smi.ARG_FORMATS), parsed."""
        return self.run(['info'] + self.runner.args(npu_smi.INFO_ARGS, **values), parser)


def per_npu_facts(smi, listing):
    """Board facts per NPU, ECC counters and usages per (npu, chip)."""
    npus = []
    ecc = {}
    usages = {}
    for entry in listing['npus']:
        npu_id = entry['npu_id']
        board = smi.info(npu_smi.parse_board, type='board', npu=npu_id)
        board['chip_count'] = entry['chip_count']
        npus.append(board)
        for chip_id, counters in smi.info(npu_smi.parse_ecc, type='ecc', npu=npu_id).items():
            ecc[(npu_id, chip_id)] = counters
        for chip_id, usage in smi.info(npu_smi.parse_usages, type='usages', npu=npu_id).items():
            usages[(npu_id, chip_id)] = usage
    return npus, ecc, usages


def discover(module, smi, ascend_root, installed):
    table = smi.info(npu_smi.parse_info_table)
    listing = smi.info(npu_smi.parse_list, list=True)
    mapping = smi.info(npu_smi.parse_map, map=True)
    topo = smi.info(npu_smi.parse_topo, type='topo')

    compute = sorted((c for c in mapping if c['logic_id'] is not None), key=lambda c: c['logic_id'])
    if not compute:
        module.fail_json(msg='`npu-smi info -m` lists no compute chip (only MCUs)')
    by_id = dict(((c['npu_id'], c['chip_id']), c) for c in table['chips'])
    missing = [c for c in compute if (c['npu_id'], c['chip_id']) not in by_id]
    if missing:
        module.fail_json(msg='`npu-smi info -m` lists chips that `npu-smi info` does not show: %s'
                         % ', '.join('NPU %d chip %d' % (c['npu_id'], c['chip_id']) for c in missing))
    if len(topo['labels']) != len(compute):
        module.fail_json(msg='`npu-smi info -t topo` has %d devices, `npu-smi info -m` %d compute chips'
                         % (len(topo['labels']), len(compute)))

    npus, ecc, usages = per_npu_facts(smi, listing)
    chips = []
    view = HealthView()
    labels = topo['labels']
    for position, chip in enumerate(compute):
        key = (chip['npu_id'], chip['chip_id'])
        row = by_id[key]
        detail = {'health': row['health'], 'error_codes': [], 'error_information': ''}
        if row['health'] != 'OK':
            # Only unhealthy chips: each npu-smi call costs a round trip to the device.
            detail = smi.info(npu_smi.parse_health, type='health', npu=chip['npu_id'], chip=chip['chip_id'])
        hbm_total = usages.get(key, {}).get('hbm_capacity_mb') or row['hbm_total_mb'] or 0
        counters = ecc.get(key, {})
        entry = {
            'npu_id': chip['npu_id'],
            'chip_id': chip['chip_id'],
            'logic_id': chip['logic_id'],
            'phy_id': chip['phy_id'] if chip['phy_id'] is not None else row['phy_id'],
            'name': row['name'],
            'bus_id': row['bus_id'],
            'health': detail['health'],
            'error_codes': detail['error_codes'],
            'error_information': detail['error_information'],
            'hbm_total_mb': hbm_total,
            'hbm_used_mb': row['hbm_used_mb'],
            'temperature_c': row['temperature_c'],
            'power_w': row['power_w'],
            'cpu_affinity': topo['cpu_affinity'].get(labels[position], ''),
            'ecc': counters,
        }
        chips.append(entry)
        view.extend(npu_chip_view(entry))

    node_hbm = min(c['hbm_total_mb'] for c in chips)
    chips_per_npu = max(len([c for c in compute if c['npu_id'] == n['npu_id']]) for n in listing['npus'])
    result = empty_result('', installed)
    result.update({
        'present': True,
        'npu_smi_version': table['npu_smi_version'],
        'driver_version': installed['driver'] or table['version'],
        'firmware_version': installed['firmware'] or (npus[0]['firmware_version'] if npus else ''),
        'cann_version': installed['cann'],
        'chip_name': compute[0]['chip_name'],
        # The device id and HBM size tell a first-generation 910 from a 910B of the same name.
        'chip_model': npu_smi.chip_family(compute[0]['chip_name'], chips_per_npu,
                                          npus[0]['pci_device_id'] if npus else None, node_hbm),
        'npu_count': len(listing['npus']),
        'chip_count': len(compute),
        'chips_per_npu': chips_per_npu,
        'hbm_total_mb': node_hbm,
        'topology': npu_smi.classify_topology(topo),
        'topology_links': npu_smi.link_counts(topo),
        'chips': chips,
        'npus': npus,
        'health': view.legacy(),
    })
    return result


def main():
    module = AnsibleModule(
        argument_spec=dict(
            npu_smi_path=dict(type='str', default='npu-smi'),
            ascend_root=dict(type='path', default='/usr/local/Ascend'),
            timeout=dict(type='int', default=60),
            versions_only=dict(type='bool', default=False),
        ),
        supports_check_mode=True,
    )
    installed = installed_versions(module.params['ascend_root'])
    if module.params['versions_only']:
        module.exit_json(changed=False, npu_info=empty_result('npu-smi not run (versions_only)', installed))
    name = module.params['npu_smi_path']
    if '/' in name:
        path = name if os.path.isfile(name) and os.access(name, os.X_OK) else None
        where = name
    else:
        path = device_io.which(module, name, SEARCH_DIRS)
        where = '%s in PATH or %s' % (name, ', '.join(SEARCH_DIRS))
    if not path:
        module.exit_json(changed=False, npu_info=empty_result('npu-smi not found: %s' % where, installed))
    smi = NpuSmi(module, path, module.params['timeout'])
    module.exit_json(changed=False, npu_info=discover(module, smi, module.params['ascend_root'], installed))


if __name__ == '__main__':
    main()
