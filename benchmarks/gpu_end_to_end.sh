#!/usr/bin/env bash
# The whole chain on one GPU in one command (issue 30): step-only speed, pretraining from data
# prepared elsewhere (.e2e/, written on a CPU machine by `python benchmarks/gpu_end_to_end.py
# --prepare`), SIGKILL and resume, export, STS-B fine-tuning; one device call (under 10 minutes).
# Writes e2e.json, e2e.md and e2e.log to --out (default $OUT, else ./gpu_e2e_out).
# --dry_run: the same chain, tiny, on the CPU. Wheels the image lacks (ml-collections,
# tensorboardX: see benchmarks/README.md) are installed from .whl/ when it is there.
set -eu
cd "$(dirname "$0")/.."
. benchmarks/device_env.sh
exec "${PYTHON:-python3}" benchmarks/gpu_end_to_end.py "$@"
