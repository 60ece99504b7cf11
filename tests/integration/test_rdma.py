"""The RDMA layer on the lab's GPU nodes after site.yml: roles/rdma_network,
run inside playbooks/nvidia.yml right after the driver, on the simulated RoCE NIC (a sysfs tree in
files, tests/hardware/nic) and the fake nvidia-smi's `topo -m` (a DGX A100-like capture,
tests/hardware/nvml/topology).

- the seed's ECN marking thresholds (ecn/redp 24/24/100) are written, and the boot script puts them
  back after they are lost;
- GPUDirect RDMA: nvidia-peermem is persisted in modules-load.d and its load recorded as skipped
  (a container shares the host's kernel), with the reason;
- /etc/nccl.conf keeps the seed's NCCL_NET_GDR_LEVEL=3 and an NCCL_IB_HCA the topology allows.

That a second run changes nothing is test_kubernetes.py's second site.yml run (nvidia.yml runs the
role on every GPU node).
"""

from __future__ import annotations

import json

from conftest import on

NODE = "gpu1"
IFACE_SYSFS = "/etc/ai-l1-lab/sysfs/class/net/ens1f0"
RED = {"red_min_threshold": "24", "red_max_threshold": "24", "red_probability": "100"}


def red_values() -> dict[str, str]:
    proc = on(NODE, f"cd {IFACE_SYSFS}/ecn/redp && for f in {' '.join(RED)}; do echo $f=$(cat $f); done")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return dict(line.split("=", 1) for line in proc.stdout.split())


def test_the_seeds_ecn_thresholds_are_written_and_restored_at_boot(k8s_cluster):  # noqa: ARG001
    assert red_values() == RED
    lost = on(NODE, f"for f in {' '.join(RED)}; do echo 0 > {IFACE_SYSFS}/ecn/redp/$f; done")
    assert lost.returncode == 0 and red_values() == dict.fromkeys(RED, "0")
    boot = on(NODE, "/usr/local/sbin/ai-platform-roce")
    assert boot.returncode == 0, boot.stdout + boot.stderr
    assert red_values() == RED


def test_gpudirect_rdma_is_persisted_and_its_load_skipped_in_a_container(k8s_cluster):  # noqa: ARG001
    conf = on(NODE, "cat /etc/modules-load.d/90-ai-platform-gpudirect.conf")
    assert conf.returncode == 0 and "nvidia-peermem" in conf.stdout.split(), conf.stdout + conf.stderr
    status = json.loads(on(NODE, "cat /var/lib/ai-platform/rdma-network-status.json").stdout)
    assert status["container"] is True
    assert {"step": "kernel_modules", "items": ["nvidia_peermem"],
            "reason": "kernel modules belong to the host kernel in a container"} in status["skipped"]


def test_nccl_conf_follows_the_gpu_nic_topology(k8s_cluster):  # noqa: ARG001
    topo = on(NODE, "nvidia-smi topo -m")
    assert topo.returncode == 0 and "NIC Legend" in topo.stdout, topo.stdout + topo.stderr
    conf = dict(line.split("=", 1) for line in on(NODE, "cat /etc/nccl.conf").stdout.split() if "=" in line)
    assert conf["NCCL_NET_GDR_LEVEL"] == "3"
    assert conf["NCCL_IB_HCA"], conf
