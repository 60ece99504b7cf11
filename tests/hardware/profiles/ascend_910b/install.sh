#!/usr/bin/env bash
# Simulated Ascend 910B node (the seed's 8x910B example): fake npu-smi with its scenario,
# the Ascend version files and a fake sysfs tree for the NIC and NVMe facts.
#   install.sh CONTAINER        (hook contract: tests/hardware/profiles/README.md)
# AI_L1_NPU_SCENARIO picks another scenario file (default: npu/scenarios/910b.json).
set -euo pipefail
container=${1:?usage: install.sh CONTAINER}
here=$(cd "$(dirname "$0")" && pwd)
hw=$(cd "$here/../.." && pwd)
scenario=${AI_L1_NPU_SCENARIO:-$hw/npu/scenarios/910b.json}
[[ -f $scenario ]] || { echo "ascend_910b: scenario $scenario is missing" >&2; exit 1; }
podman container exists "$container" || { echo "ascend_910b: no container $container" >&2; exit 1; }
podman exec "$container" sh -c 'command -v python3 >/dev/null' \
  || { echo "ascend_910b: $container has no python3 (the fake npu-smi needs it)" >&2; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
arch=$(podman exec "$container" uname -m)
install -D -m 0755 "$hw/npu/npu_smi_fake.py" "$stage/usr/local/bin/npu-smi"
install -D -m 0644 "$scenario" "$stage/etc/ai-l1-fake/npu-scenario"
python3 "$hw/npu/ascend_tree.py" "$stage/usr/local/Ascend" --scenario "$scenario" --arch "$arch"
python3 "$hw/sysfs/build_sysfs.py" "$stage/etc/ai-l1-lab/sysfs" --profile ascend_910b
echo ascend_910b > "$stage/etc/ai-l1-lab/profile"
# The NPUs' device files, as the driver's kernel modules make them: /dev/davinci<N> per chip and
# the three management devices. Character devices 1:3 (null's numbers) stand in; the tmpfiles
# entry recreates them when the node restarts (a container's /dev is rebuilt then).
chips=$(python3 -c 'import json, sys; d = json.load(open(sys.argv[1])); print(d["npu_count"] * d.get("chips_per_npu", 1))' "$scenario")
mkdir -p "$stage/etc/tmpfiles.d"
{
  for ((n = 0; n < chips; n++)); do echo "c /dev/davinci$n 0660 root root - 1:3"; done
  for f in davinci_manager devmm_svm hisi_hdc; do echo "c /dev/$f 0660 root root - 1:3"; done
} > "$stage/etc/tmpfiles.d/ai-l1-lab-npu.conf"

# Replace, not merge: a re-run with another scenario must not leave stale files behind.
podman exec "$container" sh -c 'rm -rf /usr/local/Ascend /etc/ai-l1-lab/sysfs /etc/ai-l1-fake /etc/tmpfiles.d/ai-l1-lab-npu.conf /dev/davinci[0-9]* /dev/davinci_manager /dev/devmm_svm /dev/hisi_hdc'
# --no-overwrite-dir: existing /usr, /etc keep their owner and mode.
tar -C "$stage" -cf - usr etc | podman exec -i "$container" tar -xf - -C / --no-same-owner --no-overwrite-dir
podman exec "$container" systemd-tmpfiles --create /etc/tmpfiles.d/ai-l1-lab-npu.conf
podman exec "$container" npu-smi info -l >/dev/null \
  || { echo "ascend_910b: npu-smi does not run in $container" >&2; exit 1; }
