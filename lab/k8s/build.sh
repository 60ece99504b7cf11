#!/usr/bin/env bash
# The lab's supply chain, step 1 of 2: build every pinned artifact in artifacts/manifest.yml
# from Go modules (Kubernetes, etcd, CoreDNS, CNI plugins), pause from C, and the
# control-plane images with podman. Cached under /var/cache/ai-l1/k8s: a warm run does
# nothing. Step 2 publishes them: python lab/mirror/mirror.py up
set -euo pipefail
cd "$(dirname "$0")/../.."
py=python3
[[ -x .venv/bin/python ]] && py=.venv/bin/python
exec "$py" lab/k8s/build.py "$@"
