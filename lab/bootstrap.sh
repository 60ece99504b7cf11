#!/usr/bin/env bash
# One idempotent set-up step for development, CI and the lab:
#   1. the Debian packages the lab needs (installed only when missing),
#   2. podman configured for this kernel (runc: crun refuses hybrid cgroup v1),
#   3. the Python virtualenv .venv from the pinned requirements.txt (rebuilt only when
#      requirements.txt changes).
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(podman runc debootstrap uidmap slirp4netns fuse-overlayfs openssh-client
              gcc make python3-venv jq docker-registry openssl
              prometheus prometheus-alertmanager)  # promtool/amtool for the rule tests

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "bootstrap: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

conf=/etc/containers/containers.conf.d/ai-l1-lab.conf
want='[engine]
runtime = "runc"'
if [[ ! -f $conf ]] || [[ "$(cat "$conf")" != "$want" ]]; then
  mkdir -p "$(dirname "$conf")"
  printf '%s\n' "$want" > "$conf"
  echo "bootstrap: podman runtime set to runc ($conf)"
fi

# Six lab nodes' kubelets, containerds and kube-proxies share the host's per-user inotify
# limits (128 instances by default): raise them, never lower them.
for kv in fs.inotify.max_user_instances=8192 fs.inotify.max_user_watches=524288; do
  key=${kv%%=*} want=${kv#*=}
  have=$(sysctl -n "$key")
  if ((have < want)); then
    sysctl -qw "$key=$want"
    echo "bootstrap: $key raised from $have to $want"
  fi
done

PY=${PYTHON:-python3}
stamp=.venv/.requirements.sha256
# The day-2 tool (day2/, editable) is part of the venv: its pyproject counts in the stamp.
sum=$(cat requirements.txt day2/pyproject.toml | sha256sum | cut -d' ' -f1)
if [[ ! -x .venv/bin/python ]] || [[ "$(cat "$stamp" 2>/dev/null)" != "$sum" ]]; then
  echo "bootstrap: creating .venv from requirements.txt"
  rm -rf .venv
  "$PY" -m venv .venv
  .venv/bin/pip install -q --upgrade pip
  .venv/bin/pip install -q -r requirements.txt
  .venv/bin/pip install -q -e day2
  echo "$sum" > "$stamp"
fi
echo "bootstrap: ok"
