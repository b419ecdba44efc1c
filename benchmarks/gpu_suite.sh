#!/usr/bin/env bash
# The GPU benchmark suite in one command, on a machine with an NVIDIA GPU: profile, base at
# seq 128 and large at seq 512 against transformers' PyTorch BERT, embedding speed against
# sentence-transformers, within --budget_s (default 570 s). --parts picks some.
# Writes suite.json, suite.md and suite.log to --out DIR (default ./gpu_suite_out).
# --dry_run: the same chain, tiny, on the CPU. See benchmarks/gpu_suite.py.
set -eu
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
. "$ROOT/benchmarks/device_env.sh"
exec "${PYTHON:-python3}" "$ROOT/benchmarks/gpu_suite.py" "$@"
