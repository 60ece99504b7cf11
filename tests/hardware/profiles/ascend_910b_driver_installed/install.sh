#!/usr/bin/env bash
# Profile ascend_910b plus what the driver, firmware and CANN installers leave (the fake
# npu-smi, the version files under /usr/local/Ascend at the scenario's versions), for molecule
# scenarios of the layers that run after the driver (node_labels). The lab itself uses the
# fresh ascend_910b profile and gets these files from the .run installers.
#   install.sh CONTAINER        (hook contract: tests/hardware/profiles/README.md)
set -euo pipefail
container=${1:?usage: install.sh CONTAINER}
here=$(cd "$(dirname "$0")" && pwd)
hw=$(cd "$here/../.." && pwd)
bash "$hw/profiles/ascend_910b/install.sh" "$container"
podman exec "$container" sh -c 'command -v python3 >/dev/null' \
  || { echo "ascend_910b_driver_installed: $container has no python3 (the fake npu-smi needs it)" >&2; exit 1; }
scenario=${AI_L1_NPU_SCENARIO:-$hw/npu/scenarios/910b.json}

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
arch=$(podman exec "$container" uname -m)
install -D -m 0755 "$hw/npu/npu_smi_fake.py" "$stage/usr/local/bin/npu-smi"
python3 "$hw/npu/ascend_tree.py" "$stage/usr/local/Ascend" --scenario "$scenario" --arch "$arch"
podman exec "$container" rm -rf /usr/local/Ascend
tar -C "$stage" -cf - usr | podman exec -i "$container" tar -xf - -C / --no-same-owner --no-overwrite-dir
podman exec "$container" npu-smi info -l >/dev/null \
  || { echo "ascend_910b_driver_installed: npu-smi does not run in $container" >&2; exit 1; }
