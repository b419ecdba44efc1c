#!/usr/bin/env bash
# The GPU benchmark suite in one command: profile, base seq 128 and large seq 512 against
# transformers' PyTorch BERT, base with cuDNN attention, embedding speed against
# sentence-transformers; within --budget_s (570 s: one device call). --parts picks some. Writes suite.json, suite.md and suite.log to --out (default $OUT, else
# ./gpu_suite_out). --dry_run: the same chain, tiny, on the CPU. See benchmarks/gpu_suite.py.
set -eu
cd "$(dirname "$0")/.."
. benchmarks/device_env.sh
exec "${PYTHON:-python3}" benchmarks/gpu_suite.py "$@"
