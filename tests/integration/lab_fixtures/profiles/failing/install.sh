#!/usr/bin/env bash
# A profile hook that fails after reaching the node, as a broken hardware profile would.
set -euo pipefail
podman exec "$1" mkdir -p /etc/ai-l1-lab
echo "simulated hardware install failure on $1" >&2
exit 3
