#!/usr/bin/env bash
# Profile a100 plus the driver's user-space side as an installed driver leaves it (the fake
# libnvidia-ml.so.<version> with its SONAME link, nvidia-smi), for molecule scenarios of the
# layers that run after the driver (node_labels, nvidia_mig, monitoring). The lab itself uses
# the fresh a100 profile and gets these files from the driver packages.
#   install.sh CONTAINER        (hook contract: tests/hardware/profiles/README.md)
set -euo pipefail
container=${1:?usage: install.sh CONTAINER}
here=$(cd "$(dirname "$0")" && pwd)
hw=$(cd "$here/../.." && pwd)
bash "$hw/profiles/a100/install.sh" "$container"

# The library is compiled here, on the host: it must match the node's architecture.
arch=$(podman exec "$container" uname -m)
[[ $arch == "$(uname -m)" ]] \
  || { echo "a100_driver_installed: node is $arch but the fake NVML is built for $(uname -m) here" >&2; exit 1; }
build=$("$hw/nvml/build.sh")   # cached under /var/cache/ai-l1/build/nvml-<source hash>
scenario=${AI_L1_NVML_SCENARIO:-$hw/nvml/scenarios/a100-8x-nvswitch-mig.conf}
driver=$(sed -n 's/^driver_version=//p' "$scenario" | tail -n1)
driver=${driver:-550.54.15}
libdir=/usr/lib/$arch-linux-gnu

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
install -D -m 0755 "$build/libnvidia-ml.so.1" "$stage$libdir/libnvidia-ml.so.$driver"
install -D -m 0755 "$build/nvidia-smi" "$stage/usr/bin/nvidia-smi"
podman exec "$container" sh -c "rm -f $libdir/libnvidia-ml.so*"
tar -C "$stage" -cf - usr | podman exec -i "$container" tar -xf - -C / --no-same-owner --no-overwrite-dir
podman exec "$container" ldconfig
podman exec "$container" nvidia-smi -L >/dev/null \
  || { echo "a100_driver_installed: the fake nvidia-smi does not run in $container" >&2; exit 1; }
