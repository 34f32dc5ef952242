#!/bin/bash
#SBATCH --job-name=pre_hook_megatron_bridge_qwen_30b_h100___TIMESTAMP__
#SBATCH --output=__OUTPUT_DIR__/megatron_bridge_qwen_30b/0/pre_hook/stdout.txt
#SBATCH --error=__OUTPUT_DIR__/megatron_bridge_qwen_30b/0/pre_hook/stderr.txt
#SBATCH --partition=partition_1
#SBATCH -N 2
#SBATCH --gpus-per-node=8
#SBATCH --gres=gpu:8
#SBATCH --ntasks-per-node=8

# nccl_test_all_gather
mkdir -p __OUTPUT_DIR__/megatron_bridge_qwen_30b/0/pre_test/nccl_test_all_gather
for _node in $(scontrol show hostnames $SLURM_JOB_NODELIST); do
    srun --nodelist=$_node --output=__OUTPUT_DIR__/megatron_bridge_qwen_30b/0/pre_test/nccl_test_all_gather/stdout_$_node.txt --error=__OUTPUT_DIR__/megatron_bridge_qwen_30b/0/pre_test/nccl_test_all_gather/stderr_$_node.txt --export=ALL --mpi=pmix -N1 --container-image=nvcr.io#nvidia/pytorch:25.06-py3 --container-mounts=__OUTPUT_DIR__/megatron_bridge_qwen_30b/0/pre_test/nccl_test_all_gather:/cloudai_run_results,__INSTALL_DIR__:/cloudai_install,__OUTPUT_DIR__/megatron_bridge_qwen_30b/0/pre_test/nccl_test_all_gather --no-container-mount-home bash -c "source __OUTPUT_DIR__/megatron_bridge_qwen_30b/0/pre_test/nccl_test_all_gather/env_vars.sh; all_gather_perf_mpi --nthreads 1 --ngpus 1 --minbytes 128 --maxbytes 4G --stepbytes 1M --op sum --datatype float --root 0 --iters 100 --warmup_iters 50 --agg_iters 1 --average 1 --parallel_init 0 --check 1 --blocking 0 --cudagraph 0 --stepfactor 2" &
done
wait
SUCCESS_0=1
for _node in $(scontrol show hostnames $SLURM_JOB_NODELIST); do
    if ! grep -q "Avg bus bandwidth" __OUTPUT_DIR__/megatron_bridge_qwen_30b/0/pre_test/nccl_test_all_gather/stdout_$_node.txt 2>/dev/null; then
        SUCCESS_0=0
    fi
done

PRE_TEST_SUCCESS=$( [ $SUCCESS_0 -eq 1 ] && echo 1 || echo 0 )
if [ "$PRE_TEST_SUCCESS" -ne 1 ]; then
  echo "Pre-hook tests failed. Blocking training job." >&2
  exit 1
fi