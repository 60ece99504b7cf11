#!/usr/bin/env bash
# Simulated 8xA100-SXM4-80GB NVSwitch node with MIG (the seed's NVIDIA example node), fresh as
# it leaves the factory: the GPUs (the NVML scenario the fake library will read) and a fake
# sysfs tree for the RDMA NIC (mlx5_0, 100000 Mb/s) and NVMe (3.5 TiB). No driver: the NVML
# library and nvidia-smi arrive only with the lab's driver packages (role nvidia_driver), as on
# a real fresh server. Profile a100_driver_installed adds them for scenarios of later layers.
#   install.sh CONTAINER        (hook contract: tests/hardware/profiles/README.md)
# AI_L1_NVML_SCENARIO picks another scenario file (default: nvml/scenarios/a100-8x-nvswitch-mig.conf).
# AI_L1_TOPO_CAPTURE picks the `nvidia-smi topo -m` output the fake prints (default: the DGX A100-like
# nvml/topology/dgx-a100-8gpu-10nic.txt, 8 GPUs like the default scenario; rdma_network reads it).
set -euo pipefail
container=${1:?usage: install.sh CONTAINER}
here=$(cd "$(dirname "$0")" && pwd)
hw=$(cd "$here/../.." && pwd)
scenario=${AI_L1_NVML_SCENARIO:-$hw/nvml/scenarios/a100-8x-nvswitch-mig.conf}
[[ -f $scenario ]] || { echo "a100: scenario $scenario is missing" >&2; exit 1; }
topo=${AI_L1_TOPO_CAPTURE:-$hw/nvml/topology/dgx-a100-8gpu-10nic.txt}
[[ -f $topo ]] || { echo "a100: topology capture $topo is missing" >&2; exit 1; }
podman container exists "$container" || { echo "a100: no container $container" >&2; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
install -D -m 0644 "$scenario" "$stage/etc/ai-l1-fake/nvml-scenario"
install -D -m 0644 "$topo" "$stage/etc/ai-l1-fake/nvidia-smi-topo-m.txt"
python3 "$hw/sysfs/build_sysfs.py" "$stage/etc/ai-l1-lab/sysfs" --profile a100
echo a100 > "$stage/etc/ai-l1-lab/profile"

# Replace, not merge: a re-run with another scenario leaves nothing stale. What the driver
# packages installed is theirs (dpkg owns it) and stays.
podman exec "$container" sh -c "rm -rf /etc/ai-l1-lab/sysfs /etc/ai-l1-fake/nvml-scenario /etc/ai-l1-fake/nvidia-smi-topo-m.txt"
# --no-overwrite-dir: existing /etc keeps its owner and mode.
tar -C "$stage" -cf - etc | podman exec -i "$container" tar -xf - -C / --no-same-owner --no-overwrite-dir
# The simulated kernel log: a lab node's journal gets no kernel messages, so XIDs are injected
# by appending NVRM lines here (the fake dcgm-exporter and the NPD GPU plugin read it).
podman exec "$container" sh -c 'touch /var/log/kern.log && chmod 0640 /var/log/kern.log'
bash "$hw/nic/install.sh" "$container"   # RoCE NIC: fake mlnx_qos, ECN/GID sysfs (rdma_network)
