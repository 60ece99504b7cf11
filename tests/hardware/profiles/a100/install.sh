#!/usr/bin/env bash
# Simulated 8xA100-SXM4-80GB NVSwitch node with MIG (the seed's NVIDIA example node):
# the fake libnvidia-ml.so.1 and nvidia-smi with the A100 scenario, and a fake sysfs tree
# for the RDMA NIC (mlx5_0, 100000 Mb/s) and NVMe (3.5 TiB).
#   install.sh CONTAINER        (hook contract: tests/hardware/profiles/README.md)
# AI_L1_NVML_SCENARIO picks another scenario file (default: nvml/scenarios/a100-8x-nvswitch-mig.conf).
set -euo pipefail
container=${1:?usage: install.sh CONTAINER}
here=$(cd "$(dirname "$0")" && pwd)
hw=$(cd "$here/../.." && pwd)
scenario=${AI_L1_NVML_SCENARIO:-$hw/nvml/scenarios/a100-8x-nvswitch-mig.conf}
[[ -f $scenario ]] || { echo "a100: scenario $scenario is missing" >&2; exit 1; }
podman container exists "$container" || { echo "a100: no container $container" >&2; exit 1; }

# The library is compiled here, on the host: it must match the node's architecture.
arch=$(podman exec "$container" uname -m)
[[ $arch == "$(uname -m)" ]] \
  || { echo "a100: node is $arch but the fake NVML is built for $(uname -m) on this host" >&2; exit 1; }
build=$("$hw/nvml/build.sh")   # cached under /var/cache/ai-l1/build/nvml-<source hash>
driver=$(sed -n 's/^driver_version=//p' "$scenario" | tail -n1)
driver=${driver:-550.54.15}
libdir=/usr/lib/$arch-linux-gnu

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# Laid out as the driver package does: the versioned file, with ldconfig making the
# libnvidia-ml.so.1 SONAME link.
install -D -m 0755 "$build/libnvidia-ml.so.1" "$stage$libdir/libnvidia-ml.so.$driver"
install -D -m 0755 "$build/nvidia-smi" "$stage/usr/bin/nvidia-smi"
install -D -m 0644 "$scenario" "$stage/etc/ai-l1-fake/nvml-scenario"
if [[ -f $hw/sysfs/build_sysfs.py ]]; then
  python3 "$hw/sysfs/build_sysfs.py" "$stage/etc/ai-l1-lab/sysfs" --profile a100
else
  echo "a100: tests/hardware/sysfs/build_sysfs.py not found; no fake NIC/NVMe sysfs installed" >&2
fi
echo a100 > "$stage/etc/ai-l1-lab/profile"

# Replace, not merge: a re-run with another scenario or driver version leaves nothing stale.
podman exec "$container" sh -c "rm -rf /etc/ai-l1-lab/sysfs /etc/ai-l1-fake/nvml-scenario $libdir/libnvidia-ml.so*"
# --no-overwrite-dir: existing /usr, /etc keep their owner and mode.
tar -C "$stage" -cf - usr etc | podman exec -i "$container" tar -xf - -C / --no-same-owner --no-overwrite-dir
podman exec "$container" ldconfig
podman exec "$container" nvidia-smi -L >/dev/null \
  || { echo "a100: the fake nvidia-smi does not run in $container" >&2; exit 1; }
bash "$hw/nic/install.sh" "$container"   # RoCE NIC: fake mlnx_qos, ECN/GID sysfs (rdma_network)
