#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r'''
---
module: nvidia_mig
short_description: Apply a declarative MIG layout (mig-parted config format) to the GPUs of a host
version_added: "0.1.0"
description:
  - Reads the MIG mode and GPU instances of every GPU with C(nvidia-smi) and compares them with
    the layout that config O(config_name) of O(config) (the mig-parted C(version=v1) format) wants.
  - Changes only GPUs whose layout differs; a GPU no entry of the config selects is left alone.
  - Before changing anything it checks that every wanted profile exists on the GPU and
    that no process runs on a GPU it would change (unless O(allow_processes)); it fails
    without touching a GPU otherwise.
  - A GPU is changed by destroying its compute and GPU instances, switching the MIG mode,
    and creating the wanted GPU instances with their default compute instance, largest first.
    The result is read back and compared; a difference fails the module.
  - A MIG mode change that stays pending (the GPU needs a reset, for example because a
    client holds it) fails with the GPU named.
options:
  config:
    description: The mig-parted config (C(version), C(mig-configs)).
    type: dict
    required: true
  config_name:
    description: Key of C(mig-configs) to apply.
    type: str
    required: true
  allow_processes:
    description: Change GPUs even while processes run on them (they lose their GPU).
    type: bool
    default: false
  nvidia_smi:
    description: The nvidia-smi command.
    type: str
    default: nvidia-smi
  timeout:
    description:
      - Seconds one nvidia-smi command may take before the module fails naming it (nvidia-smi
        can hang on a GPU that fell off the bus). A MIG mode change can take tens of seconds.
      - C(0) waits without a limit.
    type: int
    default: 300
attributes:
  check_mode:
    support: full
    description: Reads the state and reports the steps it would run; changes nothing.
  diff_mode:
    support: full
    description: One line per GPU it would change, before and after.
requirements:
  - nvidia-smi of an NVIDIA driver with MIG support (R450 or later).
author:
  - ai_platform L1 contributors (@ai-platform-l1)
'''

EXAMPLES = r'''
- name: Seven 1g.10gb instances on every GPU
  ai_platform.l1.nvidia_mig:
    config:
      version: v1
      mig-configs:
        all-1g.10gb:
          - devices: all
            mig-enabled: true
            mig-devices: {"1g.10gb": 7}
    config_name: all-1g.10gb
'''

RETURN = r'''
before:
  description: Layout per GPU index before the run (mig_enabled, devices as profile to count).
  returned: always
  type: dict
  sample: {"0": {"mig_enabled": true, "devices": {"3g.40gb": 1, "2g.20gb": 2}}}
after:
  description: Layout per GPU index after the run (in check mode, what it would be).
  returned: always
  type: dict
  sample: {"0": {"mig_enabled": true, "devices": {"1g.10gb": 7}}}
wanted:
  description: The layout the config wants, for the GPUs it selects.
  returned: always
  type: dict
steps:
  description: What was done (or would be done), one line per step.
  returned: always
  type: list
  elements: str
  sample: ["GPU 0: destroy compute and GPU instances", "GPU 0: create 1g.10gb x7"]
processes:
  description: Processes on the GPUs it would change (pid, name, gpu index).
  returned: always
  type: list
  elements: dict
'''

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ai_platform.l1.plugins.module_utils import device_io
from ansible_collections.ai_platform.l1.plugins.module_utils import mig_layout as ml


class Smi:
    """nvidia-smi through the collection's CLI runner (LC_ALL=C, the module's timeout)."""

    def __init__(self, module):
        self.module = module
        cmd = module.get_bin_path(module.params['nvidia_smi'], required=True) \
            if '/' not in module.params['nvidia_smi'] else module.params['nvidia_smi']
        self.runner = device_io.CliRunner(module, cmd, name='nvidia-smi', timeout=module.params['timeout'])

    def run(self, *args, ok=(0,)):
        try:
            return self.runner.run(args, ok=ok)
        except device_io.CliError as exc:
            self.module.fail_json(msg=str(exc), rc=exc.rc)

    def state(self):
        modes = ml.parse_mig_modes(self.run(
            '--query-gpu=index,uuid,pci.device_id,mig.mode.current,mig.mode.pending', '--format=csv,noheader'))
        enabled = any(g['mig_current'] for g in modes.values())
        instances = ml.parse_lgi(self.run('mig', '-lgi', ok=(0, 6))) if enabled else {}
        profiles = ml.parse_lgip(self.run('mig', '-lgip', ok=(0, 6))) if enabled else {}
        return modes, instances, profiles

    def processes(self, modes):
        by_uuid = {g['uuid']: idx for idx, g in modes.items()}
        out = []
        for line in self.run('--query-compute-apps=pid,process_name,gpu_uuid', '--format=csv,noheader').splitlines():
            parts = [p.strip() for p in line.split(',')]
            if len(parts) == 3 and parts[0].isdigit():
                out.append({'pid': int(parts[0]), 'name': parts[1], 'gpu': by_uuid.get(parts[2], -1)})
        return out


def step_text(idx, step):
    if step[0] == 'destroy':
        return 'GPU %d: destroy compute and GPU instances' % idx
    if step[0] == 'mode':
        return 'GPU %d: %s MIG mode' % (idx, 'enable' if step[1] else 'disable')
    counts = {}
    for p in step[1]:
        counts[p] = counts.get(p, 0) + 1
    return 'GPU %d: create %s' % (idx, ', '.join('%s x%d' % (p, counts[p]) for p in dict.fromkeys(step[1])))


def apply(module, smi, todo, result):
    for idx, steps in sorted(todo.items()):
        for step in steps:
            if step[0] == 'destroy':
                smi.run('mig', '-dci', '-i', str(idx), ok=(0, 6))
                smi.run('mig', '-dgi', '-i', str(idx), ok=(0, 6))
            elif step[0] == 'mode':
                smi.run('-i', str(idx), '-mig', '1' if step[1] else '0')
                mode = ml.parse_mig_modes(smi.run('--query-gpu=index,uuid,pci.device_id,mig.mode.current,'
                                                  'mig.mode.pending', '--format=csv,noheader', '-i', str(idx)))
                if mode[idx]['mig_current'] != step[1]:
                    module.fail_json(msg='GPU %d: MIG mode change is pending; the GPU needs a reset (stop its '
                                         'clients, nvidia-smi -r -i %d, or reboot) before the layout can be '
                                         'applied' % (idx, idx), **result)
            else:
                smi.run('mig', '-cgi', ','.join(step[1]), '-C', '-i', str(idx))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            config=dict(type='dict', required=True),
            config_name=dict(type='str', required=True),
            allow_processes=dict(type='bool', default=False),
            nvidia_smi=dict(type='str', default='nvidia-smi'),
            timeout=dict(type='int', default=300),
        ),
        supports_check_mode=True,
    )
    try:
        entries = ml.select_config(module.params['config'], module.params['config_name'])
    except ml.MigLayoutError as exc:
        module.fail_json(msg=str(exc))
    smi = Smi(module)
    try:
        modes, instances, profiles = smi.state()
        want = ml.desired_layout(entries, modes)
    except ml.MigLayoutError as exc:
        module.fail_json(msg=str(exc))
    before = ml.current_layout(modes, instances)
    result = dict(changed=False, before=before, after=before, wanted=want, steps=[], processes=[])
    errors = ml.check_supported(want, modes, profiles)
    if errors:
        module.fail_json(msg='MIG config %s cannot be applied: %s' % (module.params['config_name'], '; '.join(errors)),
                         **result)
    todo = ml.plan(before, want)
    result['steps'] = [step_text(idx, s) for idx, steps in sorted(todo.items()) for s in steps]
    if not todo:
        module.exit_json(**result)
    result['processes'] = [p for p in smi.processes(modes) if p['gpu'] in todo or p['gpu'] == -1]
    if result['processes'] and not module.params['allow_processes']:
        module.fail_json(msg='refusing to change the MIG layout of GPU %s while processes use them: %s'
                         % (', '.join(map(str, sorted(todo))),
                            ', '.join('%s (pid %d, GPU %d)' % (p['name'], p['pid'], p['gpu'])
                                      for p in result['processes'])), **result)
    after = dict(before)
    after.update({idx: want[idx] for idx in todo})
    result.update(changed=True, after=after,
                  diff=dict(before=ml.render({i: before[i] for i in todo}),
                            after=ml.render({i: want[i] for i in todo})))
    if module.check_mode:
        module.exit_json(**result)
    apply(module, smi, todo, result)
    modes, instances, _profiles = smi.state()
    result['after'] = ml.current_layout(modes, instances)
    wrong = [idx for idx in todo if result['after'].get(idx) != want[idx]]
    if wrong:
        what = '; '.join('GPU %d has %s, wanted %s' % (i, ml.describe(result['after'][i]), ml.describe(want[i]))
                         for i in wrong)
        module.fail_json(msg='MIG layout not as wanted after applying: %s' % what, **result)
    module.exit_json(**result)


if __name__ == '__main__':
    main()
