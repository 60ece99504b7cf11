#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2026, ai_platform L1 contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: accelerator_acceptance
short_description: The acceptance gate of a GPU or NPU node - prove the hardware before the node takes work
version_added: "0.1.0"
description:
  - Judges a node from the accelerator facts the collection's discovery modules gathered (O(facts), the
    C(gpu_info) result of M(ai_platform.l1.gpu_info) or the C(npu_info) result of M(ai_platform.l1.npu_info)) and
    from the vendor's own tests, run here, each within its time budget.
  - NVIDIA - GPU count and model against the inventory, active NVLinks (every GPU as many as O(min_nvlinks), or as
    the GPU with the most), uncorrectable ECC errors, row remapping; C(dcgmi diag -r LEVEL -j) at O(dcgm_level);
    a single-node C(all_reduce_perf) (nccl-tests) whose peak bus bandwidth must reach O(bandwidth_threshold)
    (by default the published floor of an 8-GPU A100 or H100 SXM node) with no wrong values.
  - Ascend - chip count and model, every chip's health and HBM double-bit ECC errors, the HCCS topology class;
    Huawei's HCCL performance tester (C(all_reduce_test) under C(mpirun)) whose peak algorithm bandwidth must reach
    O(bandwidth_threshold) (no published default) with no failed result check.
  - Returns one verdict document (RV(acceptance)) with every check, its figure, threshold and pass or fail, and
    a digest of it. The module never fails because the node does - a failed gate is RV(acceptance.passed=false);
    it fails only on arguments it cannot use.
options:
  node:
    description: The node's name, written into the verdict.
    type: str
    required: true
  vendor:
    description: Which accelerators the node has.
    type: str
    required: true
    choices: [nvidia, ascend]
  facts:
    description: The node's accelerator facts, the C(gpu_info) result of M(ai_platform.l1.gpu_info) or the
      C(npu_info) result of M(ai_platform.l1.npu_info).
    type: dict
    required: true
  expected_count:
    description: GPUs (NVIDIA) or compute chips (Ascend) the inventory says the node has.
    type: int
    required: true
  expected_model:
    description: The model the inventory says, matched case-insensitively - a part of every GPU's NVML name
      (C(A100-SXM4), C(H100 80GB HBM3)) or the Ascend chip model (C(910B)).
    type: str
    required: true
  min_nvlinks:
    description: Active NVLinks each GPU must have (12 on A100 SXM4, 18 on H100 SXM5). When not given every
      GPU must have as many as the GPU with the most, so one link down on one GPU fails the gate.
    type: int
  hccs_topology:
    description: The HCCS topology class an Ascend node must report (the C(topology) of
      M(ai_platform.l1.npu_info)); empty for nodes without HCCS.
    type: str
    default: hccs-fullmesh
  dcgm_level:
    description: C(dcgmi diag) run level, 1 (seconds, deployment checks) to 3 (about half an hour, stress);
      0 runs no DCGM diagnostic. NVIDIA only.
    type: int
    default: 1
    choices: [0, 1, 2, 3]
  dcgm_timeout:
    description: Seconds the DCGM diagnostic may take before it counts as failed; by default 120, 900 and 3600
      for levels 1, 2 and 3.
    type: int
  dcgmi_path:
    description: The dcgmi executable.
    type: str
    default: dcgmi
  bandwidth_test:
    description: Whether to run the collective bandwidth test (C(all_reduce_perf) or HCCL's C(all_reduce_test)).
    type: bool
    default: true
  bandwidth_threshold:
    description: Bus bandwidth (NVIDIA, GB/s) or algorithm bandwidth (Ascend, GB/s) the test's peak must reach.
      NVIDIA's default is the published floor for an 8-GPU A100 SXM (184) or H100 SXM (368) node; other nodes
      need one, or the check fails saying so.
    type: float
  bandwidth_timeout:
    description: Seconds the bandwidth test may take before it counts as failed.
    type: int
    default: 600
  nccl_tests_path:
    description: nccl-tests' C(all_reduce_perf) executable.
    type: str
    default: all_reduce_perf
  nccl_max_bytes:
    description: The largest message of the C(all_reduce_perf) sweep (C(-e)); it starts at 1M and doubles.
    type: str
    default: 8G
  hccl_test_path:
    description: The HCCL performance tester's C(all_reduce_test).
    type: str
    default: /usr/local/Ascend/ascend-toolkit/latest/tools/hccl_test/bin/all_reduce_test
  mpirun_path:
    description: The C(mpirun) that starts one HCCL test process per chip.
    type: str
    default: mpirun
extends_documentation_fragment:
  - ai_platform.l1.attributes.info_module
notes:
  - The tests load every GPU or NPU of the node; run the gate only on a node that takes no work (the
    C(ai-platform.io/acceptance=pending:NoSchedule) taint of the node lifecycle).
seealso:
  - module: ai_platform.l1.gpu_info
  - module: ai_platform.l1.npu_info
author:
  - ai_platform L1 contributors (@ai-platform-l1)
'''

EXAMPLES = r'''
- name: Read the GPUs
  ai_platform.l1.gpu_info:
  register: gpus

- name: Run the acceptance gate, DCGM level 2
  ai_platform.l1.accelerator_acceptance:
    node: "{{ inventory_hostname }}"
    vendor: nvidia
    facts: "{{ gpus.gpu_info }}"
    expected_count: 8
    expected_model: A100-SXM4
    min_nvlinks: 12
    dcgm_level: 2
  register: gate

- name: Say why the node stays out
  ansible.builtin.debug:
    msg: "{{ gate.acceptance.checks | rejectattr('passed') | map(attribute='detail') | list }}"
  when: not gate.acceptance.passed
'''

RETURN = r'''
acceptance:
  description: The node's verdict.
  returned: always
  type: dict
  contains:
    node:
      description: O(node).
      type: str
      sample: gpu-a100-01
    level:
      description: O(dcgm_level) (NVIDIA), 0 on Ascend.
      type: int
      sample: 1
    passed:
      description: Whether every check passed.
      type: bool
      sample: false
    failed:
      description: The names of the checks that failed.
      type: list
      elements: str
      sample: ["nccl-allreduce-busbw"]
    checks:
      description: Every check - C(name), C(passed), C(figure) (what was measured), C(threshold), C(unit), C(detail)
        (why it failed, in the tool's words where it gave some).
      type: list
      elements: dict
      sample:
        - {"name": "nccl-allreduce-busbw", "passed": false, "figure": 17.21, "threshold": 184.0, "unit": "GB/s",
           "detail": "17.21 GB/s below the threshold 184.0"}
    digest:
      description: sha256 of the verdict's canonical JSON without this key, short enough for a Node annotation.
      type: str
      sample: "sha256:3f0c5a..."
    durations:
      description: Seconds each step took (C(hardware), C(dcgm), C(bandwidth)), not part of the digest.
      type: dict
      sample: {"hardware": 0.0, "dcgm": 41.2, "bandwidth": 95.7}
'''

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ai_platform.l1.plugins.module_utils import acceptance as acc
from ansible_collections.ai_platform.l1.plugins.module_utils import device_io

DCGM_TIMEOUTS = {1: 120, 2: 900, 3: 3600}


def run_tool(module, name, argv, timeout, parse):
    """(report, failing check): the tool's parsed report, or a failing check saying why there is none."""
    result = device_io.execute(module, argv, timeout=timeout, environ=device_io.CLI_ENVIRON)
    command = device_io.command_line(argv)
    if result.timed_out:
        return None, acc.check(name, False, detail='`%s` did not finish within %d seconds' % (command, timeout))
    if not result.started:
        return None, acc.check(name, False, detail='`%s` could not be run: %s' % (command, result.stderr.strip()))
    try:
        return parse(result.stdout), None
    except acc.AcceptanceParseError as exc:
        detail = (result.stderr.strip() or result.stdout.strip())[-device_io.DETAIL_CHARS:] or 'no output'
        return None, acc.check(name, False, detail='`%s` exited %d without a report (%s): %s'
                               % (command, result.rc, exc, detail))


def timed(durations, step, work):
    """work()'s checks, the seconds it took recorded under durations[step]."""
    started = time.monotonic()
    checks = work()
    durations[step] = round(time.monotonic() - started, 1)
    return checks


def tool_checks(module, name, argv, timeout, *, parse, judge):
    """judge(report) for the tool's report, or the one failing check saying why there is none."""
    report, failure = run_tool(module, name, argv, timeout, parse)
    return [failure] if failure else judge(report)


def nvidia_gate(module, p, durations):
    checks = timed(durations, 'hardware', lambda: acc.nvidia_hardware_checks(
        p['facts'], p['expected_count'], p['expected_model'], p['min_nvlinks']))
    level = p['dcgm_level']
    if level:
        checks += timed(durations, 'dcgm', lambda: tool_checks(
            module, 'dcgm-diag-r%d' % level, [p['dcgmi_path'], 'diag', '-r', level, '-j'],
            p['dcgm_timeout'] or DCGM_TIMEOUTS[level], parse=acc.parse_dcgmi_diag,
            judge=lambda diag: acc.dcgm_checks(diag, level)))
    if p['bandwidth_test']:
        threshold = p['bandwidth_threshold']
        if threshold is None:
            gpus = p['facts'].get('gpus') or [{}]
            threshold = acc.default_busbw_threshold(gpus[0].get('name'), p['expected_count'])
        argv = [p['nccl_tests_path'], '-b', '1M', '-e', p['nccl_max_bytes'], '-f', '2', '-g', p['expected_count']]
        checks += timed(durations, 'bandwidth', lambda: tool_checks(
            module, 'nccl-allreduce-busbw', argv, p['bandwidth_timeout'], parse=acc.parse_nccl_tests,
            judge=lambda report: acc.nccl_checks(report, threshold)))
    return checks


def ascend_gate(module, p, durations):
    checks = timed(durations, 'hardware', lambda: acc.ascend_hardware_checks(
        p['facts'], p['expected_count'], p['expected_model'], p['hccs_topology']))
    if p['bandwidth_test']:
        n = p['expected_count']
        argv = [p['mpirun_path'], '-n', n, p['hccl_test_path'], '-b', '8K', '-e', '1G', '-f', '2', '-p', n]
        checks += timed(durations, 'bandwidth', lambda: tool_checks(
            module, 'hccl-allreduce-bandwidth', argv, p['bandwidth_timeout'], parse=acc.parse_hccl_test,
            judge=lambda report: acc.hccl_checks(report, p['bandwidth_threshold'])))
    return checks


def main():
    module = AnsibleModule(
        argument_spec=dict(
            node=dict(type='str', required=True),
            vendor=dict(type='str', required=True, choices=['nvidia', 'ascend']),
            facts=dict(type='dict', required=True),
            expected_count=dict(type='int', required=True),
            expected_model=dict(type='str', required=True),
            min_nvlinks=dict(type='int'),
            hccs_topology=dict(type='str', default='hccs-fullmesh'),
            dcgm_level=dict(type='int', default=1, choices=[0, 1, 2, 3]),
            dcgm_timeout=dict(type='int'),
            dcgmi_path=dict(type='str', default='dcgmi'),
            bandwidth_test=dict(type='bool', default=True),
            bandwidth_threshold=dict(type='float'),
            bandwidth_timeout=dict(type='int', default=600),
            nccl_tests_path=dict(type='str', default='all_reduce_perf'),
            nccl_max_bytes=dict(type='str', default='8G'),
            hccl_test_path=dict(type='str', default='/usr/local/Ascend/ascend-toolkit/latest/tools/hccl_test/bin/'
                                                    'all_reduce_test'),
            mpirun_path=dict(type='str', default='mpirun'),
        ),
        supports_check_mode=True,
    )
    p = module.params
    if p['expected_count'] < 1:
        module.fail_json(msg='expected_count must be at least 1, got %d' % p['expected_count'])
    for name in ('dcgm_timeout', 'bandwidth_timeout'):
        if p[name] is not None and p[name] < 1:
            module.fail_json(msg='%s must be at least 1 second, got %d' % (name, p[name]))
    durations = {}
    checks = nvidia_gate(module, p, durations) if p['vendor'] == 'nvidia' else ascend_gate(module, p, durations)
    verdict = acc.verdict(p['node'], checks, level=p['dcgm_level'] if p['vendor'] == 'nvidia' else 0)
    verdict['durations'] = durations
    module.exit_json(changed=False, acceptance=verdict)


if __name__ == '__main__':
    main()
