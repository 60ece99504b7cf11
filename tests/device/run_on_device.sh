#!/usr/bin/env bash
# The prepared GPU check for a real NVIDIA machine (run there from the repo root).
# 1. nvidia-smi's own view, for comparison;
# 2. tests/device/gpu_check.py: gpu_info's collector + the label computation on real NVML;
# 3. the module itself through Ansible (ansible-core must be importable: a venv, or wheels
#    unpacked into $PYTHONPATH), i.e. exactly what a rollout runs on a GPU node.
# Outputs go to ${OUT:-./device-out}.
set -uo pipefail
out=${OUT:-./device-out}
mkdir -p "$out"
py=$(command -v python3)
{
  echo "== nvidia-smi"
  nvidia-smi -L
  nvidia-smi --query-gpu=name,uuid,pci.bus_id,driver_version,memory.total,temperature.gpu,power.draw,persistence_mode,mig.mode.current,mig.mode.pending --format=csv
  nvidia-smi topo -m || true
} 2>&1 | tee "$out/nvidia-smi.txt"

echo "== gpu_check.py"
"$py" tests/device/gpu_check.py --repeat 5 | tee "$out/gpu_check.json"

echo "== ansible localhost -m ai_platform.l1.gpu_info"
ansible_bin=$(command -v ansible || echo "${PYTHONPATH%%:*}/bin/ansible")
start=$(date +%s.%N)
ANSIBLE_CONFIG=$PWD/ansible.cfg ANSIBLE_LOAD_CALLBACK_PLUGINS=0 \
  "$py" "$ansible_bin" localhost -c local -i localhost, -m ai_platform.l1.gpu_info \
  -e ansible_python_interpreter="$py" 2>&1 | tee "$out/gpu_info_module.txt"
rc=${PIPESTATUS[0]}
end=$(date +%s.%N)
echo "module run (ansible CLI start to finish): $("$py" -c "print(round($end - $start, 3))") s" | tee -a "$out/gpu_info_module.txt"
exit "$rc"
