#!/usr/bin/env bash
set -o pipefail

export NEMORUN_HOME="__OUTPUT_DIR__/megatron_bridge_qwen_30b/0"
mkdir -p "$NEMORUN_HOME"
LOG="__OUTPUT_DIR__/megatron_bridge_qwen_30b/0/cloudai_megatron_bridge_launcher.log"
WRAPPER_STDOUT="__OUTPUT_DIR__/megatron_bridge_qwen_30b/0/cloudai_megatron_bridge_wrapper.stdout"
WRAPPER_STDERR="__OUTPUT_DIR__/megatron_bridge_qwen_30b/0/cloudai_megatron_bridge_wrapper.stderr"
exec > >(tee -a "$WRAPPER_STDOUT") 2> >(tee -a "$WRAPPER_STDERR" >&2)

export MELLANOX_VISIBLE_DEVICES=0,3,4,5,6,9,10,11

PRE_HOOK_SBATCH="__OUTPUT_DIR__/megatron_bridge_qwen_30b/0/pre_hook_sbatch_script.sh"
PRE_HOOK_OUTPUT=$(sbatch "$PRE_HOOK_SBATCH" 2>&1)
PRE_HOOK_JOB_ID=$(echo "$PRE_HOOK_OUTPUT" | grep -Eo "Submitted batch job [0-9]+" | grep -Eo "[0-9]+" | tail -n1 || true)
if [ -z "$PRE_HOOK_JOB_ID" ]; then
  echo "Failed to submit pre-hook job: $PRE_HOOK_OUTPUT" >&2
  exit 1
fi
echo "Submitted pre-hook batch job $PRE_HOOK_JOB_ID"
ADDITIONAL_SLURM_PARAMS="gpus-per-node=8;gres=gpu:8"
ADDITIONAL_SLURM_PARAMS="${ADDITIONAL_SLURM_PARAMS};dependency=afterok:${PRE_HOOK_JOB_ID}"

# Wait for pre-hook to reach RUNNING; exit on terminal state or timeout (1 h)
PRE_HOOK_NODES=''
_NODELIST_WAIT=0
_NODELIST_TIMEOUT=3600
while true; do
    _state=$(squeue -j "$PRE_HOOK_JOB_ID" -h -o "%T" 2>/dev/null || true)
    if [ "$_state" = "RUNNING" ]; then
        PRE_HOOK_NODES=$(squeue -j "$PRE_HOOK_JOB_ID" -h -o "%N" 2>/dev/null | head -1 || true)
        break
    elif [ -z "$_state" ] || [ "$_state" = "FAILED" ] || [ "$_state" = "CANCELLED" ] || [ "$_state" = "COMPLETED" ] || [ "$_state" = "TIMEOUT" ]; then
        echo "Pre-hook job $PRE_HOOK_JOB_ID ended in state '${_state:-gone}' before reaching RUNNING." >&2
        exit 1
    elif [ "$_NODELIST_WAIT" -ge "$_NODELIST_TIMEOUT" ]; then
        echo "Timed out after ${_NODELIST_TIMEOUT}s waiting for pre-hook job $PRE_HOOK_JOB_ID to reach RUNNING (last state: ${_state})." >&2
        exit 1
    fi
    sleep 10
    _NODELIST_WAIT=$((_NODELIST_WAIT + 10))
done
ADDITIONAL_SLURM_PARAMS="${ADDITIONAL_SLURM_PARAMS};nodelist=${PRE_HOOK_NODES}"

: >"$LOG"
WANDB_INSTALL_RC=0
__INSTALL_DIR__/Run__main-venv/bin/python -m pip install wandb numpy==1.26.4 >>"$LOG" 2>&1 || WANDB_INSTALL_RC=$?
if [ "${WANDB_INSTALL_RC}" -ne 0 ]; then
  echo "Failed to install runtime deps (wandb, numpy==1.26.4) in launcher venv (exit ${WANDB_INSTALL_RC})." >&2
  tail -n 40 "$LOG" >&2 || true
  exit "${WANDB_INSTALL_RC}"
fi

LAUNCH_RC=0
NEMORUN_HOME="__OUTPUT_DIR__/megatron_bridge_qwen_30b/0" __INSTALL_DIR__/Run__main-venv/bin/python __INSTALL_DIR__/Megatron-Bridge__v0.3.0/scripts/performance/setup_experiment.py -p partition_1 -g h100 -i __CONF_ROOT__/nvcr.io#nvidia/nemo:26.02.00 -c fp8_cs --task pretrain -hf hf_dummy_token_for_dry_run --max_retries 1 -ng 16 -gn 8 -cb 'export CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7' -cb 'export MELLANOX_VISIBLE_DEVICES=0,3,4,5,6,9,10,11' -cb 'export NCCL_IB_GID_INDEX=3' -cb 'export NCCL_IB_QPS_PER_CONNECTION=4' -cb 'export NCCL_IB_TIMEOUT=20' --domain llm -vb true -m qwen -mr qwen3_30b_a3b --moe_a2a_overlap false -ms 10 --detach false --save_config_filepath /nemo_run/configs/ConfigContainer.yaml logger.tensorboard_dir=/nemo_run/tb_logs logger.log_timers_to_tensorboard=true logger.log_throughput_to_tensorboard=true logger.log_memory_to_tensorboard=true --additional_slurm_params "$ADDITIONAL_SLURM_PARAMS" >>"$LOG" 2>&1 || LAUNCH_RC=$?


JOB_ID=""
JOB_ID=$(grep -Eio "(Submitted batch job[ ]+[0-9]+|Job id[: ]+[0-9]+|-[ ]*Job id[: ]+[0-9]+|Job ID[: ]+[0-9]+)" "$LOG" | tail -n1 | grep -Eo "[0-9]+" | tail -n1 || true)


if [ -n "${JOB_ID}" ]; then
  if [ "${LAUNCH_RC}" -ne 0 ]; then
    echo "Megatron-Bridge launcher exited non-zero (${LAUNCH_RC}) after submitting job ${JOB_ID}." >&2
    tail -n 40 "$LOG" >&2 || true
  fi
  echo "Submitted batch job ${JOB_ID}"
else
  echo "Failed to retrieve job ID." >&2
  if [ "${LAUNCH_RC}" -ne 0 ]; then
    echo "Launcher exit code: ${LAUNCH_RC}" >&2
  fi
  tail -n 40 "$LOG" >&2 || true
  exit 1
fi
