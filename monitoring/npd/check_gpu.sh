#!/bin/sh
# Node Problem Detector runs custom plugins inside its own container, whose image has no
# python3, no NVML library and no view of the node's kernel log. So the GPU check runs in
# the node's root filesystem (the DaemonSet mounts / at /host, read-only) with the node's
# python3; the script itself comes from the same ConfigMap, on stdin.
# GPU_CHECK_KERNEL_LOG (DaemonSet env, roles/monitoring_k8s): a kernel log file to read
# instead of the journal or dmesg; empty: the journal, then dmesg.
set -eu
if [ -n "${GPU_CHECK_KERNEL_LOG:-}" ]; then
  set -- "$@" --kernel-log "$GPU_CHECK_KERNEL_LOG"
fi
# The Node condition GPUHealthy is written with this Pod's ServiceAccount, whose files the chroot
# cannot see: handed over in the environment.
sa=/var/run/secrets/kubernetes.io/serviceaccount
if [ -r "$sa/token" ]; then
  GPU_CHECK_API_TOKEN=$(cat "$sa/token") GPU_CHECK_API_CA=$(cat "$sa/ca.crt")
  export GPU_CHECK_API_TOKEN GPU_CHECK_API_CA
fi
exec chroot /host /usr/bin/python3 - "$@" < /config/plugin/check_gpu.py
