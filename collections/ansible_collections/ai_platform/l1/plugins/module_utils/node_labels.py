# -*- coding: utf-8 -*-
# Copyright: (c) 2025, ai_platform L1 authors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The standard accelerator node labels (seed design, section 4.1.2), computed in one place.

compute_labels() is pure: it takes the results of ai_platform.l1.gpu_info, npu_info and
node_hw_info and returns {label key: label value}. The filter plugin
ai_platform.l1.accelerator_labels and any role that labels nodes call it; nothing else
computes label values.

Value forms (and how they are rounded):
  accelerator               "nvidia" | "huawei-ascend"
  accelerator-model         NVIDIA: "<base>-<form factor>-<memory>GB" (normalize_gpu_model);
                            Ascend: "Ascend-<family>" ("Ascend-910B")
  accelerator-memory        per device, GiB rounded to the nearest integer + "Gi":
                            81920 MiB -> "80Gi"; 65536 MB HBM -> "64Gi"
  accelerator-count         devices the device plugin schedules (GPUs; Ascend chips, so
                            an Atlas A3 with 8 NPUs x 2 dies says "16")
  accelerator-topology      NVIDIA: nvswitch/nvlink-fullmesh -> "nvlink-fullmesh",
                            nvlink-partial, pcie, single. Ascend: see ASCEND_TOPOLOGY_LABELS
  accelerator-mig-enabled   "true"/"false" (NVIDIA only: any GPU with MIG mode on)
  accelerator-mig-profiles  MIG profiles of the first MIG-capable GPU, ordered by slice count,
                            joined with "_" (NVIDIA, MIG-capable GPUs only). The seed writes
                            "1g.10gb,2g.20gb,…" but a comma is not allowed in a Kubernetes label
                            value (the API server rejects the Node update), so "_" separates them.
                            Profiles that would push the value past 63 characters are left off
                            (whole profiles, never a cut one).
  accelerator-driver-version  driver version as reported
  accelerator-cuda-version / accelerator-cann-version
  node-type                 the node_type argument
  network.bandwidth         primary NIC speed in Gb/s + "Gbps": 100000 Mb/s -> "100Gbps",
                            2500 Mb/s -> "2.5Gbps"
  network.interface         RDMA device of the primary NIC ("mlx5_0"); absent without one
  storage.local-nvme        total local NVMe in binary units: >= 1 TiB one decimal + "Ti"
                            (3.49 TiB -> "3.5Ti", 1.82 TiB -> "1.8Ti", 4.0 -> "4Ti"),
                            below that whole GiB + "Gi"; absent when the node has no NVMe
Every value goes through sanitize_label_value, so it is a valid Kubernetes label value.
"""

from __future__ import annotations

import re

LABEL_VALUE_MAX = 63
_LABEL_VALUE_RE = re.compile(r'^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$')

MIG_PROFILE_SEPARATOR = '_'

# Keys this module owns (a labelling role removes its stale ones and no others).
STANDARD_KEYS = (
    'accelerator', 'accelerator-model', 'accelerator-memory', 'accelerator-count',
    'accelerator-topology', 'accelerator-mig-enabled', 'accelerator-mig-profiles',
    'accelerator-driver-version', 'accelerator-cuda-version', 'accelerator-cann-version',
    'node-type', 'network.bandwidth', 'network.interface', 'storage.local-nvme',
)
GFD_KEYS = (
    'nvidia.com/gpu.present', 'nvidia.com/gpu.product', 'nvidia.com/gpu.memory', 'nvidia.com/gpu.count',
    'nvidia.com/gpu.family', 'nvidia.com/gpu.compute.major', 'nvidia.com/gpu.compute.minor',
    'nvidia.com/cuda.driver-version.major', 'nvidia.com/cuda.driver-version.minor',
    'nvidia.com/cuda.driver-version.revision', 'nvidia.com/cuda.driver-version.full',
    'nvidia.com/cuda.runtime-version.major', 'nvidia.com/cuda.runtime-version.minor',
    'nvidia.com/cuda.runtime-version.full', 'nvidia.com/mig.capable', 'nvidia.com/mig.strategy',
)

# gpu_info topology classes -> label values (contract with gpu_info): NVSwitch gives every
# GPU pair an NVLink path, so the seed labels its 8xA100 NVSwitch node "nvlink-fullmesh".
NVIDIA_TOPOLOGY_LABELS = {
    'nvswitch': 'nvlink-fullmesh',
    'nvlink-fullmesh': 'nvlink-fullmesh',
    'nvlink-partial': 'nvlink-partial',
    'pcie': 'pcie',
    'single': 'single',
}

# npu_info topology classes -> label values. The seed labels its 8x910B node, where every
# chip pair has a direct HCCS link and HCCL runs its collectives as rings over them,
# "hccs-ring"; the other classes keep their npu_info names.
ASCEND_TOPOLOGY_LABELS = {
    'hccs-fullmesh': 'hccs-ring',
    'hccs-switch': 'hccs-switch',
    'hccs-partial': 'hccs-partial',
    'pcie': 'pcie',
    'single': 'single',
}

# Form factor and marketed memory (GB) for GPUs whose NVML name does not say them.
_NVIDIA_KNOWN = {
    'A100': ('SXM', None),
    'A800': ('SXM', None),
    'H100': ('SXM', 80),
    'H800': ('SXM', 80),
    'H200': ('SXM', 141),
    'H20': ('SXM', 96),
    'B200': ('SXM', 180),
    'L40S': ('PCIE', 48),
    'L40': ('PCIE', 48),
    'L20': ('PCIE', 48),
    'L4': ('PCIE', 24),
    'A40': ('PCIE', 48),
    'A30': ('PCIE', 24),
    'A10': ('PCIE', 24),
    'A16': ('PCIE', 16),
    'A2': ('PCIE', 16),
    'T4': ('PCIE', 16),
}
_FAMILIES = {(7, 0): 'volta', (7, 2): 'volta', (7, 5): 'turing', (8, 0): 'ampere', (8, 6): 'ampere',
             (8, 7): 'ampere', (8, 9): 'ada-lovelace', (9, 0): 'hopper', (10, 0): 'blackwell'}


def is_valid_label_value(value):
    """Kubernetes label value: <= 63 chars, alphanumeric at both ends, [-_.A-Za-z0-9] inside."""
    return isinstance(value, str) and len(value) <= LABEL_VALUE_MAX and bool(_LABEL_VALUE_RE.match(value))


def sanitize_label_value(value):
    """Make any value a valid Kubernetes label value.

    Characters outside [-_.A-Za-z0-9] become "-", runs of "-" collapse, the result is cut
    to 63 characters and trimmed until it starts and ends with a letter or digit. None and
    values with nothing usable become "".
    """
    if value is None:
        return ''
    if isinstance(value, bool):
        return 'true' if value else 'false'
    text = re.sub(r'[^-A-Za-z0-9_.]', '-', str(value))
    text = re.sub(r'-{2,}', '-', text)
    text = re.sub(r'^[^A-Za-z0-9]+', '', text)[:LABEL_VALUE_MAX]
    return re.sub(r'[^A-Za-z0-9]+$', '', text)


def normalize_gpu_model(name, memory_total_mib=None):
    """NVML name -> the seed's model form "<base>-<form factor>-<memory>GB".

    "NVIDIA A100-SXM4-80GB" -> "A100-SXM-80GB", "NVIDIA H100 80GB HBM3" -> "H100-SXM-80GB",
    "NVIDIA L40S" -> "L40S-PCIE-48GB", "NVIDIA A100 80GB PCIe" -> "A100-PCIE-80GB".
    Form factor: SXM<n> -> SXM, PCIe -> PCIE, NVL, HBM3 (SXM-only parts) -> SXM, else the
    known-GPU table. Memory: "<n>GB" in the name, else the table (unless the name names a
    form-factor variant), else memory_total_mib rounded to GiB. Unknown names keep their
    words joined by "-" ("NVIDIA GeForce RTX 4090" with 24564 MiB -> "GeForce-RTX-4090-24GB");
    no form factor is invented for them.
    """
    text = re.sub(r'^(NVIDIA|Tesla)\s+', '', (name or '').strip())
    tokens = [t for t in re.split(r'[\s\-]+', text) if t]
    form = None
    named_form = False
    memory = None
    rest = []
    for token in tokens:
        upper = token.upper()
        if re.match(r'^SXM\d*$', upper):
            form, named_form = 'SXM', True
        elif upper == 'PCIE':
            form, named_form = 'PCIE', True
        elif upper == 'NVL':
            form, named_form = 'NVL', True
        elif re.match(r'^HBM\d+E?$', upper):
            form = form or 'SXM'
        elif re.match(r'^\d+GB$', upper):
            memory = int(upper[:-2])
        else:
            rest.append(token)
    if not rest:
        return sanitize_label_value(name)
    base = rest[0] if rest[0].upper() in _NVIDIA_KNOWN else '-'.join(rest)
    known_form, known_memory = _NVIDIA_KNOWN.get(base.upper(), (None, None))
    form = form or known_form
    # A variant named by its form factor ("H100 NVL", 94 GB) may differ from the table's
    # default part: trust the measured memory for it.
    if memory is None and not (named_form and memory_total_mib):
        memory = known_memory
    if memory is None and memory_total_mib:
        memory = int(round(memory_total_mib / 1024.0))
    parts = [base] + ([form] if form else []) + (['%dGB' % memory] if memory else [])
    return sanitize_label_value('-'.join(parts))


def format_bandwidth(speed_mbps):
    """Link speed in Mb/s -> "100Gbps" (whole Gb/s) or "2.5Gbps"."""
    gbps = speed_mbps / 1000.0
    text = ('%d' % gbps) if gbps == int(gbps) else ('%.1f' % gbps).rstrip('0').rstrip('.')
    return text + 'Gbps'


def format_storage(total_bytes):
    """Bytes -> "3.5Ti" (>= 1 TiB, one decimal, ".0" dropped) or "894Gi" (whole GiB)."""
    text = '%.1f' % (total_bytes / float(1 << 40))
    if float(text) >= 1:
        return (text[:-2] if text.endswith('.0') else text) + 'Ti'
    return '%dGi' % int(round(total_bytes / float(1 << 30)))


def _mig_profile_key(profile):
    """Order MIG profiles by slice count, then memory: 1g.10gb < 1g.20gb < 2g.20gb < 7g.80gb."""
    match = re.match(r'^(\d+)g\.(\d+)gb', profile)
    if not match:
        return (999, 999, profile)
    return (int(match.group(1)), int(match.group(2)), profile)


def _unwrap(result, key):
    """Accept either the module's inner dict or the whole registered result."""
    if isinstance(result, dict) and key in result and isinstance(result[key], dict):
        return result[key]
    return result


def _nvidia_labels(gpu_info, gfd_labels):
    gpus = gpu_info.get('gpus') or []
    if not gpus:
        raise ValueError('gpu_info says present but lists no GPU')
    first = gpus[0]
    memory_mib = first.get('memory_total_mib') or 0
    topology = gpu_info.get('topology')
    if topology not in NVIDIA_TOPOLOGY_LABELS:
        raise ValueError('gpu_info topology %r is not one of %s'
                         % (topology, ', '.join(sorted(NVIDIA_TOPOLOGY_LABELS))))
    mig_capable = [g for g in gpus if (g.get('mig') or {}).get('capable')]
    mig_enabled = any((g.get('mig') or {}).get('current') for g in gpus)
    labels = {
        'accelerator': 'nvidia',
        'accelerator-model': normalize_gpu_model(first.get('name'), memory_mib),
        'accelerator-memory': '%dGi' % int(round(memory_mib / 1024.0)),
        'accelerator-count': str(gpu_info.get('count', len(gpus))),
        'accelerator-topology': NVIDIA_TOPOLOGY_LABELS[topology],
        'accelerator-mig-enabled': 'true' if mig_enabled else 'false',
        'accelerator-driver-version': gpu_info.get('driver_version'),
        'accelerator-cuda-version': gpu_info.get('cuda_driver_version'),
    }
    if mig_capable:
        profiles = sorted(set(mig_capable[0]['mig'].get('profiles') or []), key=_mig_profile_key)
        # Whole profiles only: a value cut at 63 characters would name a profile that does not exist.
        value = ''
        for profile in (sanitize_label_value(p) for p in profiles):
            candidate = value + MIG_PROFILE_SEPARATOR + profile if value else profile
            if len(candidate) > LABEL_VALUE_MAX:
                break
            value = candidate
        if value:
            labels['accelerator-mig-profiles'] = value
    if gfd_labels:
        labels.update(_gfd_labels(gpu_info, first, bool(mig_capable), mig_enabled))
    return labels


def _gfd_labels(gpu_info, first, mig_capable, mig_enabled):
    """The keys NVIDIA GPU feature discovery sets, for tools that select on them."""
    labels = {
        'nvidia.com/gpu.present': 'true',
        'nvidia.com/gpu.product': re.sub(r'\s+', '-', (first.get('name') or '').strip()),
        'nvidia.com/gpu.memory': str(first.get('memory_total_mib') or 0),
        'nvidia.com/gpu.count': str(gpu_info.get('count', len(gpu_info.get('gpus') or []))),
        'nvidia.com/mig.capable': 'true' if mig_capable else 'false',
        # GFD reports the device plugin's strategy; ours exposes whole MIG-partitioned GPUs
        # with one profile set ("single") and plain GPUs otherwise.
        'nvidia.com/mig.strategy': 'single' if mig_enabled else 'none',
    }
    driver = (gpu_info.get('driver_version') or '').split('.')
    if len(driver) >= 2:
        labels['nvidia.com/cuda.driver-version.major'] = driver[0]
        labels['nvidia.com/cuda.driver-version.minor'] = driver[1]
        labels['nvidia.com/cuda.driver-version.revision'] = driver[2] if len(driver) > 2 else '0'
        labels['nvidia.com/cuda.driver-version.full'] = gpu_info.get('driver_version')
    cuda = (gpu_info.get('cuda_driver_version') or '').split('.')
    if len(cuda) >= 2:
        labels['nvidia.com/cuda.runtime-version.major'] = cuda[0]
        labels['nvidia.com/cuda.runtime-version.minor'] = cuda[1]
        labels['nvidia.com/cuda.runtime-version.full'] = gpu_info.get('cuda_driver_version')
    capability = (first.get('compute_capability') or '').split('.')
    if len(capability) == 2 and all(p.isdigit() for p in capability):
        major, minor = int(capability[0]), int(capability[1])
        labels['nvidia.com/gpu.compute.major'] = str(major)
        labels['nvidia.com/gpu.compute.minor'] = str(minor)
        family = _FAMILIES.get((major, minor))
        if family:
            labels['nvidia.com/gpu.family'] = family
    return labels


def _ascend_labels(npu_info):
    topology = npu_info.get('topology')
    if topology not in ASCEND_TOPOLOGY_LABELS:
        raise ValueError('npu_info topology %r is not one of %s'
                         % (topology, ', '.join(sorted(ASCEND_TOPOLOGY_LABELS))))
    hbm_mb = npu_info.get('hbm_total_mb') or 0
    labels = {
        'accelerator': 'huawei-ascend',
        'accelerator-model': 'Ascend-%s' % npu_info.get('chip_model'),
        # npu-smi's "MB" are MiB (65536 MB on a 64 GB part).
        'accelerator-memory': '%dGi' % int(round(hbm_mb / 1024.0)),
        'accelerator-count': str(npu_info.get('chip_count')),
        'accelerator-topology': ASCEND_TOPOLOGY_LABELS[topology],
        'accelerator-driver-version': npu_info.get('driver_version'),
    }
    if npu_info.get('cann_version'):
        labels['accelerator-cann-version'] = npu_info['cann_version']
    return labels


def _hw_labels(hw_info):
    labels = {}
    network = hw_info.get('network') or {}
    if (network.get('speed_mbps') or 0) > 0:
        labels['network.bandwidth'] = format_bandwidth(network['speed_mbps'])
    if network.get('interface'):
        labels['network.interface'] = network['interface']
    total = (hw_info.get('nvme') or {}).get('total_bytes') or 0
    if total > 0:
        labels['storage.local-nvme'] = format_storage(total)
    return labels


def compute_labels(gpu_info=None, npu_info=None, hw_info=None, node_type='gpu-compute', gfd_labels=False):
    """The node's standard labels from the discovery results (see the module docstring).

    Each argument may be the inner dict (result.gpu_info) or the registered result. A
    vendor whose info is missing or not present contributes no labels; a node reporting
    both NVIDIA GPUs and Ascend NPUs is refused (ValueError), as no label set describes it.
    Keys with no value (a missing version) are left out rather than set empty.
    """
    gpu_info = _unwrap(gpu_info, 'gpu_info') or {}
    npu_info = _unwrap(npu_info, 'npu_info') or {}
    hw_info = _unwrap(hw_info, 'hw_info') or {}
    has_gpu = bool(gpu_info.get('present'))
    has_npu = bool(npu_info.get('present'))
    if has_gpu and has_npu:
        raise ValueError('the node reports both NVIDIA GPUs and Ascend NPUs; '
                         'one accelerator label set cannot describe it')
    labels = {}
    if has_gpu:
        labels.update(_nvidia_labels(gpu_info, gfd_labels))
    elif has_npu:
        labels.update(_ascend_labels(npu_info))
    if node_type:
        labels['node-type'] = node_type
    labels.update(_hw_labels(hw_info))
    result = {}
    for key, value in labels.items():
        clean = sanitize_label_value(value)
        if clean:
            result[key] = clean
    return result
