#!/usr/bin/env bash
# Control-plane nodes have no accelerator to simulate: record the profile so a test can
# tell which profile a node was given.
set -euo pipefail
container=${1:?usage: install.sh CONTAINER}
podman exec "$container" sh -c 'mkdir -p /etc/ai-l1-lab && echo control_plane > /etc/ai-l1-lab/profile'
