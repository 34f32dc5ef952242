#!/bin/bash
# Node facts for cloudai, one TOML document per node (metadata/node-<host>.toml): what the node is, and the GPUs
# and network devices it shows, so results can be tied to hardware and pre-flight checks can compare nodes.
q() { printf '"%s"' "$(printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g')"; }

echo "[node]"
echo "hostname = $(q "$(hostname)")"
echo "kernel = $(q "$(uname -r)")"
echo "os = $(q "$(. /etc/os-release 2>/dev/null; echo "${PRETTY_NAME:-unknown}")")"
echo "cpus = $(nproc 2>/dev/null || echo 0)"
echo "memory_kb = $(awk '/MemTotal/ {print $2}' /proc/meminfo 2>/dev/null || echo 0)"
echo
echo "[slurm]"
echo "job_id = $(q "${SLURM_JOB_ID:-}")"
echo "node_id = $(q "${SLURM_NODEID:-}")"
echo "job_nodelist = $(q "${SLURM_JOB_NODELIST:-}")"
echo "gpus_on_node = $(q "${SLURM_GPUS_ON_NODE:-}")"
echo "cuda_visible_devices = $(q "${CUDA_VISIBLE_DEVICES:-}")"
echo
echo "[gpu]"
if command -v nvidia-smi >/dev/null 2>&1; then
    echo "count = $(nvidia-smi -L 2>/dev/null | grep -c '^GPU')"
    echo "driver = $(q "$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1)")"
    echo "names = [$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | while read -r n; do printf '%s, ' "$(q "$n")"; done)]"
else
    echo "count = 0"
    echo "driver = \"\""
fi
echo
echo "[network]"
echo "ib_devices = [$(ls /sys/class/infiniband 2>/dev/null | while read -r d; do printf '%s, ' "$(q "$d")"; done)]"
