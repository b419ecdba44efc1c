#!/usr/bin/env bash
# The whole chain on a machine with an NVIDIA GPU, in one command: step-only speed, pretraining
# from prepared data (.e2e/, written on a machine with TensorFlow by `python
# benchmarks/gpu_end_to_end.py --prepare --glue_dir $GLUE_DIR`), SIGKILL and resume, export,
# STS-B fine-tuning; under 10 minutes on one GPU.
# Writes e2e.json, e2e.md and e2e.log to --out DIR (default ./gpu_e2e_out).
# --dry_run: the same chain, tiny, on the CPU, from the built-in corpus (no download).
# Wheels of packages the machine lacks (ml-collections, tensorboardX) are installed from .whl/
# when it is there (benchmarks/device_env.sh).
set -eu
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
. "$ROOT/benchmarks/device_env.sh"
exec "${PYTHON:-python3}" "$ROOT/benchmarks/gpu_end_to_end.py" "$@"
