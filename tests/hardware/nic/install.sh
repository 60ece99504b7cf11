#!/usr/bin/env bash
# RoCE NIC parts of a lab node: the fake mlnx_qos (as /usr/local/sbin/mlnx_qos, port state in
# /etc/ai-l1-fake/mlnx_qos.json) and the ECN / GID / traffic-class / rdma_cm entries added to
# the fake sysfs tree at /etc/ai-l1-lab/sysfs (built first by the profile's own install.sh).
#   install.sh CONTAINER        (called at the end of tests/hardware/profiles/a100/install.sh)
set -euo pipefail
container=${1:?usage: install.sh CONTAINER}
here=$(cd "$(dirname "$0")" && pwd)
podman container exists "$container" || { echo "nic: no container $container" >&2; exit 1; }
# The RoCE v2 GID carries the node's address, as the mlx5 driver derives it from the netdev.
ip=$(podman inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}' "$container" | awk '{print $1}')
ports="mlx5_0=ens1f0:up:${ip:-10.89.100.21},mlx5_1=ens1f1:down:"

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
python3 "$here/build_roce_sysfs.py" "$stage/etc/ai-l1-lab/sysfs" --ports "$ports"
install -D -m 0755 "$here/mlnx_qos_fake.py" "$stage/usr/local/sbin/mlnx_qos"
AI_L1_FAKE_MLNX_QOS_STATE=$stage/etc/ai-l1-fake/mlnx_qos.json python3 "$here/mlnx_qos_fake.py" --init ens1f0 ens1f1

podman exec "$container" rm -f /etc/ai-l1-fake/mlnx_qos.json
tar -C "$stage" -cf - usr etc | podman exec -i "$container" tar -xf - -C / --no-same-owner --no-overwrite-dir
podman exec "$container" mlnx_qos -i ens1f0 >/dev/null \
  || { echo "nic: the fake mlnx_qos does not run in $container" >&2; exit 1; }
