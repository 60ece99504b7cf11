#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r'''
---
module: gpu_info
short_description: Discover NVIDIA GPUs through NVML, with health from ECC, row remapping and XID errors
version_added: "0.1.0"
description:
  - Asks NVML (through C(pynvml) from the nvidia-ml-py package) for the driver and CUDA driver
    versions and, per GPU, name, UUID, PCI bus id, memory, temperature, power, persistence mode,
    compute capability, MIG mode (current and pending), supported MIG profiles and current GPU
    instances, NVLink state, ECC double- and single-bit counters, remapped rows and retired pages.
  - Classifies the node's GPU interconnect (RV(gpu_info.topology)) from NVML
    (C(nvmlDeviceGetNvLinkRemoteDeviceType) and C(nvmlDeviceGetP2PStatus) with the NVLink index).
  - "Reads recent XID errors from the kernel log (C(NVRM: Xid) lines), because NVML events
    cannot look back in time, and the NVIDIA fabric manager's systemd state where NVSwitch is present."
  - "A C(NVRM:) line saying a GPU has fallen off the bus without an Xid token
    (C(NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.)) counts as XID 79, once per event
    when the driver also printed the Xid 79 line. NVSwitch errors
    (C(nvidia-nvswitch0: SXid (PCI:0000:c5:00.0): 24007, Fatal, ...)) are health problems of the NVSwitch;
    their detail lines (C(Severity ...), C(Data {...})) are not counted again."
  - On a node without the NVML library or with the kernel driver not loaded it returns
    RV(gpu_info.present=false) with a reason, unless O(required=true).
  - Never changes anything.
options:
  required:
    description:
      - Fail instead of returning RV(gpu_info.present=false) when NVML cannot be used or lists no GPU.
    type: bool
    default: false
  xid_source:
    description:
      - Where to read kernel messages for XID errors.
      - C(auto) reads the systemd journal's kernel messages and falls back to C(dmesg).
      - C(file) reads O(xid_log_path) (for example C(/var/log/kern.log)).
      - C(none) skips XID errors.
    type: str
    choices: [auto, journal, dmesg, file, none]
    default: auto
  xid_log_path:
    description:
      - Kernel log file to read when O(xid_source=file). Lines in ISO 8601, traditional syslog,
        dmesg C([uptime]) or C(dmesg -T) C([Tue Dec  1 10:00:00 2026]) form are understood, also
        after a C(<4>) priority, the C(kern  :warn  :) of C(dmesg --decode) or a bare C(kernel:) tag.
    type: path
  xid_window:
    description:
      - Only XID errors from the last this many seconds count. C(0) reads the whole log.
      - Lines without a readable time (none, or one outside 1970..9999) are always kept.
    type: int
    default: 86400
  xid_ignore:
    description:
      - XID codes listed in RV(gpu_info.gpus[].xid_errors) but not counted as a health problem.
        NVSwitch SXid codes listed here are not counted either.
      - The default is the set of application-caused XIDs the NVIDIA device plugin ignores.
    type: list
    elements: int
    default: [13, 31, 43, 45, 68, 109]
  fabric_manager_service:
    description:
      - systemd unit of the NVIDIA fabric manager, checked when a GPU has an NVLink to an NVSwitch.
    type: str
    default: nvidia-fabricmanager
extends_documentation_fragment:
  - ai_platform.l1.attributes.info_module
requirements:
  - nvidia-ml-py (the C(pynvml) module) importable by the managed node's Python (this project's C(python_wheels)
    role unpacks the artifact manifest's wheel into its site-packages)
  - the NVIDIA driver's C(libnvidia-ml.so.1) for RV(gpu_info.present=true)
notes:
  - "Topology classes: C(single) one GPU; C(nvswitch) an active NVLink ends at an NVSwitch;
    C(nvlink-fullmesh) every GPU pair reports NVLink P2P OK; C(nvlink-partial) some pairs do;
    C(pcie) none do; empty when there is no GPU. The label computation maps C(nvswitch) and
    C(nvlink-fullmesh) to the label value C(nvlink-fullmesh)."
  - Values a GPU does not support (NVML C(NOT_SUPPORTED)) are C(null); other query failures are
    listed in RV(gpu_info.gpus[].errors) and RV(gpu_info.health.problems), never as a traceback.
  - The XID policy (O(xid_ignore)'s default, the critical list) and the health view behind
    RV(gpu_info.health) are the collection's C(accelerator_health) module_utils, which the Node
    Problem Detector GPU plugin and the remediation receiver read too.
seealso:
  - module: ai_platform.l1.node_hw_info
author:
  - ai_platform L1 contributors (@ai-platform-l1)
'''

EXAMPLES = r'''
- name: Discover NVIDIA GPUs
  ai_platform.l1.gpu_info:
  register: gpu

- name: Fail on a GPU node whose GPUs are unhealthy
  ansible.builtin.assert:
    that: gpu.gpu_info.health.ok
    fail_msg: "{{ gpu.gpu_info.health.problems | join('; ') }}"
  when: gpu.gpu_info.present

- name: Require GPUs, and read XIDs of the last hour from kern.log
  ai_platform.l1.gpu_info:
    required: true
    xid_source: file
    xid_log_path: /var/log/kern.log
    xid_window: 3600
'''

RETURN = r'''
gpu_info:
  description: What the node has. All keys are always present; when RV(gpu_info.present) is false
    the lists are empty, counts 0 and strings empty.
  returned: always
  type: dict
  contains:
    present:
      description: Whether NVML works and lists at least one GPU.
      type: bool
      sample: true
    reason:
      description: Why RV(gpu_info.present) is false; empty when present.
      type: str
      sample: "NVIDIA kernel driver is not loaded (NVML: Driver Not Loaded)"
    driver_version:
      description: NVIDIA driver version.
      type: str
      sample: "550.54.15"
    cuda_driver_version:
      description: Highest CUDA version the driver supports, C(major.minor).
      type: str
      sample: "12.4"
    count:
      description: Number of GPUs NVML lists.
      type: int
      sample: 8
    topology:
      description: C(single), C(nvswitch), C(nvlink-fullmesh), C(nvlink-partial), C(pcie), or empty.
      type: str
      sample: nvswitch
    fabric_manager:
      description: NVIDIA fabric manager.
      type: dict
      contains:
        required:
          description: Whether a GPU has an NVLink to an NVSwitch.
          type: bool
        state:
          description: C(running), C(inactive), C(failed), C(activating), C(not-installed),
            C(unknown) (systemd not reachable), or C(n/a) when not required.
          type: str
      sample: {"required": true, "state": "running"}
    gpus:
      description: One entry per GPU, in NVML index order.
      type: list
      elements: dict
      contains:
        index:
          description: NVML index.
          type: int
        name:
          description: Name as NVML reports it.
          type: str
          sample: NVIDIA A100-SXM4-80GB
        uuid:
          description: GPU UUID.
          type: str
        vbios_version:
          description: The GPU's video BIOS version; empty when NVML does not answer.
          type: str
          sample: "92.00.45.00.03"
        pci_bus_id:
          description: PCI address, NVML form.
          type: str
          sample: "00000000:07:00.0"
        memory_total_mib:
          description: Framebuffer size in MiB.
          type: int
          sample: 81920
        memory_used_mib:
          description: Framebuffer in use, MiB.
          type: int
        temperature_c:
          description: GPU temperature in Celsius; null when not supported.
          type: int
        power_draw_w:
          description: Power draw in watts; null when not supported.
          type: float
        power_limit_w:
          description: Enforced power limit in watts; null when not supported.
          type: float
        persistence_mode:
          description: Whether persistence mode is on; null when not supported.
          type: bool
        compute_capability:
          description: CUDA compute capability.
          type: str
          sample: "8.0"
        mig:
          description: MIG state. C(profiles) lists the GPU instance profiles the GPU supports, by
            slice count; C(instances) the current GPU instances (C(profile), C(profile_id),
            C(gi_id), C(placement_start), C(placement_size)) when MIG is on.
          type: dict
          sample: {"capable": true, "current": true, "pending": true,
                   "profiles": ["1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"], "instances": []}
        nvlink:
          description: Active NVLink count and whether any active link ends at an NVSwitch.
          type: dict
          sample: {"links_active": 12, "remote_nvswitch": true}
        ecc:
          description: ECC counters (C(dbe_volatile), C(dbe_aggregate), C(sbe_volatile),
            C(sbe_aggregate)); null values when ECC is not supported or disabled.
          type: dict
        remapped_rows:
          description: C(correctable), C(uncorrectable), C(pending), C(failure); null when the
            GPU has no row remapping.
          type: dict
        retired_pages:
          description: C(sbe), C(dbe) page counts and C(pending); null when the GPU has no page
            retirement (row-remapping GPUs).
          type: dict
        xid_errors:
          description: XID errors of this GPU in the window, oldest first, at most 100
            (C(xid), C(pci_bus_id), C(message), C(timestamp) in ISO 8601 or empty). A fallen-off-the-bus
            line without an Xid is listed as C(xid) 79 with the line's text as C(message).
          type: list
          elements: dict
        errors:
          description: NVML queries that failed for another reason than not being supported.
          type: list
          elements: str
    health:
      description: C(ok) is false when C(problems) is not empty. Problems are volatile double-bit
        ECC errors, row-remapping failure or pending, pending page retirement, XID errors not in
        O(xid_ignore) (also on devices NVML no longer lists), NVSwitch SXid errors not in
        O(xid_ignore) (fatal and non-fatal), failed NVML queries, and a fabric manager that is not
        running where NVSwitch is present.
      type: dict
      contains:
        ok:
          description: No problem found.
          type: bool
        problems:
          description: One sentence per problem, naming the GPU by index and PCI address.
          type: list
          elements: str
      sample: {"ok": false, "problems": ["GPU 0 (00000000:07:00.0): row remapping failed (replace the GPU)"]}
'''

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.ai_platform.l1.plugins.module_utils.device_io import tool_runner
from ansible_collections.ai_platform.l1.plugins.module_utils.nvml import (
    DEFAULT_XID_IGNORE,
    DEFAULT_XID_WINDOW,
    HAS_PYNVML,
    PYNVML_IMPORT_ERROR,
    SYSTEM_TOOL_TIMEOUT,
    gpu_info,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            required=dict(type='bool', default=False),
            xid_source=dict(type='str', default='auto', choices=['auto', 'journal', 'dmesg', 'file', 'none']),
            xid_log_path=dict(type='path'),
            xid_window=dict(type='int', default=DEFAULT_XID_WINDOW),
            xid_ignore=dict(type='list', elements='int', default=list(DEFAULT_XID_IGNORE)),
            fabric_manager_service=dict(type='str', default='nvidia-fabricmanager'),
        ),
        required_if=[('xid_source', 'file', ('xid_log_path',))],
        supports_check_mode=True,
    )
    if not HAS_PYNVML:
        module.fail_json(msg=missing_required_lib('nvidia-ml-py'), exception=PYNVML_IMPORT_ERROR)
    if module.params['xid_window'] < 0:
        module.fail_json(msg='xid_window must be 0 (no limit) or a positive number of seconds')

    # A missing or hanging journalctl/dmesg/systemctl is an answer ("not available"), not a failure.
    runner = tool_runner(module, timeout=SYSTEM_TOOL_TIMEOUT)
    result, warnings = gpu_info(
        xid_source=module.params['xid_source'],
        xid_log_path=module.params['xid_log_path'],
        xid_window=module.params['xid_window'],
        xid_ignore=module.params['xid_ignore'],
        fabric_manager_service=module.params['fabric_manager_service'],
        runner=runner,
    )
    for warning in warnings:
        module.warn(warning)
    if module.params['required'] and not result['present']:
        module.fail_json(msg='NVIDIA GPUs required but not usable: %s' % result['reason'], gpu_info=result)
    module.exit_json(changed=False, gpu_info=result)


if __name__ == '__main__':
    main()
