#!/usr/bin/env bash
# Simulated Ascend 910B node (the seed's 8x910B example), fresh as it leaves the factory: the
# NPUs (the scenario the fake npu-smi will read, their /dev/davinci* device files) and a fake
# sysfs tree for the NIC and NVMe facts. No driver: npu-smi and the version files arrive only
# with the lab's .run installers (role ascend_driver), as on a real fresh server. Profile
# ascend_910b_driver_installed adds them for scenarios of later layers.
#   install.sh CONTAINER        (hook contract: tests/hardware/profiles/README.md)
# AI_L1_NPU_SCENARIO picks another scenario file (default: npu/scenarios/910b.json).
set -euo pipefail
container=${1:?usage: install.sh CONTAINER}
here=$(cd "$(dirname "$0")" && pwd)
hw=$(cd "$here/../.." && pwd)
scenario=${AI_L1_NPU_SCENARIO:-$hw/npu/scenarios/910b.json}
[[ -f $scenario ]] || { echo "ascend_910b: scenario $scenario is missing" >&2; exit 1; }
podman container exists "$container" || { echo "ascend_910b: no container $container" >&2; exit 1; }

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
install -D -m 0644 "$scenario" "$stage/etc/ai-l1-fake/npu-scenario"
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

# Replace, not merge: a re-run with another scenario must not leave stale files behind. What
# the installers put under /usr/local/Ascend is theirs and stays.
podman exec "$container" sh -c 'rm -rf /etc/ai-l1-lab/sysfs /etc/ai-l1-fake/npu-scenario /etc/tmpfiles.d/ai-l1-lab-npu.conf /dev/davinci[0-9]* /dev/davinci_manager /dev/devmm_svm /dev/hisi_hdc'
# --no-overwrite-dir: existing /etc keeps its owner and mode.
tar -C "$stage" -cf - etc | podman exec -i "$container" tar -xf - -C / --no-same-owner --no-overwrite-dir
podman exec "$container" systemd-tmpfiles --create /etc/tmpfiles.d/ai-l1-lab-npu.conf
