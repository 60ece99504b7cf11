#!/usr/bin/env bash
# Builds the fake libnvidia-ml.so.1 and nvidia-smi; prints the output directory.
# Outputs are cached under /var/cache/ai-l1/build/nvml-<hash of the sources>, so
# repeated test runs and lab profile installs compile only after a source change.
# AI_L1_BUILD_CACHE overrides the cache root (for non-root users).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v gcc >/dev/null 2>&1; then
    echo "build.sh: gcc is required to build the fake NVML library (apt-get install gcc)" >&2
    exit 127
fi
root=${AI_L1_BUILD_CACHE:-/var/cache/ai-l1/build}
hash=$(cat "$here/build.sh" "$here/fake_nvml.c" "$here/nvidia_smi.c" | sha256sum | cut -c1-16)
out="$root/nvml-$hash"
if [[ -f "$out/libnvidia-ml.so.1" && -x "$out/nvidia-smi" ]]; then
    echo "$out"
    exit 0
fi
mkdir -p "$root"
tmp=$(mktemp -d "$root/.nvml-build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cflags=(-O2 -Wall -Wextra -Werror -Wno-format-truncation -std=gnu11 -pthread)
gcc "${cflags[@]}" -fPIC -shared -fvisibility=hidden -Wl,-soname,libnvidia-ml.so.1 \
    -o "$tmp/libnvidia-ml.so.1" "$here/fake_nvml.c"
gcc "${cflags[@]}" -o "$tmp/nvidia-smi" "$here/nvidia_smi.c" -L"$tmp" -l:libnvidia-ml.so.1
# Atomic publish: concurrent builders (parallel tests, two lab nodes) never see half a tree.
chmod 755 "$tmp"
mv -T "$tmp" "$out" 2>/dev/null || true
trap - EXIT
rm -rf "$tmp"
echo "$out"
