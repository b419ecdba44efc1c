#!/usr/bin/env bash
#SBATCH --job-name=bert_jax
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=12
#SBATCH --time=24:00:00
#SBATCH --output=bert_jax-%j.out
# Runs bert_jax on SLURM GPU nodes: one process per GPU, all nodes, one JAX job.
#
# Usage: sbatch [SBATCH OPTIONS] launch/gpu_slurm.sh CMD [ARGS...]
#    or, inside an allocation (salloc): launch/gpu_slurm.sh CMD [ARGS...]
#
# The #SBATCH lines above are defaults (2 nodes x 8 GPUs); override them on the
# sbatch command line, keeping --ntasks-per-node equal to --gpus-per-node.
# srun starts one task per GPU; every task sees all GPUs of its node and
# bert_jax.runtime.distributed.initialize() lets jax.distributed read the SLURM
# environment (coordinator = first node, process id = SLURM_PROCID, local GPU =
# SLURM_LOCALID). If one task fails, srun stops the others (--kill-on-bad-exit).
#
# Environment:
#   BERT_JAX_VENV   a virtualenv to activate on every node (with '.[gpu]' installed)
#   BERT_JAX_DIR    where to run (default: the directory sbatch was called from)
#
# Example (BERT-base on 4 nodes x 8 GPUs, FSDP inside a node, data parallel across):
#   BERT_JAX_VENV=$HOME/venvs/bert_jax sbatch --nodes=4 launch/gpu_slurm.sh \
#     python -m bert_jax.pretrain --config configs/pretrain.py:base \
#       --workdir /shared/runs/bert_base --config.mesh.shape='(4,8,1)' \
#       --config.mesh.preset=fsdp --config.model.dtype=bfloat16
set -euo pipefail

usage() {
  sed -n '9,30s/^# \{0,1\}//p' "$0" >&2
  exit 2
}

[[ $# -ge 1 ]] || usage
[[ $1 != -h && $1 != --help ]] || usage
if [[ -z ${SLURM_JOB_ID:-} ]]; then
  echo "gpu_slurm: not inside a SLURM job; submit with: sbatch launch/gpu_slurm.sh CMD..." >&2
  exit 2
fi
command -v srun >/dev/null || { echo "gpu_slurm: srun not found" >&2; exit 2; }

cd "${BERT_JAX_DIR:-${SLURM_SUBMIT_DIR:-.}}"
if [[ -n ${BERT_JAX_VENV:-} ]]; then
  # shellcheck disable=SC1091
  source "$BERT_JAX_VENV/bin/activate"
fi
export PYTHONUNBUFFERED=1
# TensorFlow (tf.data) must not take GPU memory; bert_jax hides GPUs from it too.
export TF_FORCE_GPU_ALLOW_GROWTH=true

echo "gpu_slurm: job $SLURM_JOB_ID on ${SLURM_JOB_NUM_NODES:-?} node(s) ($SLURM_JOB_NODELIST):" \
  "${SLURM_NTASKS:-?} tasks: $*"
exec srun --kill-on-bad-exit=1 --label "$@"
