#!/usr/bin/env bash
# The GPU benchmark suite in one command: profile, base seq 128 and large seq 512 against
# transformers' PyTorch BERT, embedding speed against sentence-transformers; under 9 minutes
# on one H100. Writes suite.json, suite.md and suite.log to --out (default $OUT, else
# ./gpu_suite_out). --dry_run: the same chain, tiny, on the CPU. See benchmarks/gpu_suite.py.
set -eu
cd "$(dirname "$0")/.."
. benchmarks/device_env.sh
exec "${PYTHON:-python3}" benchmarks/gpu_suite.py "$@"
