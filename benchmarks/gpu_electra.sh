#!/usr/bin/env bash
# ELECTRA-small against MLM at equal compute on one GPU (issues 14 and 30), one --part per
# device run of at most 9 minutes, from the corpus that `python benchmarks/gpu_end_to_end.py
# --prepare` wrote to .e2e/. See benchmarks/gpu_electra.py.
# Writes <part>.json and electra.log to --out (default $OUT, else ./gpu_electra_out).
# --dry_run: the same chain, tiny, on the CPU. Wheels the image lacks (ml-collections,
# tensorboardX: see benchmarks/README.md) are installed from .whl/ when it is there.
set -eu
cd "$(dirname "$0")/.."
. benchmarks/device_env.sh
exec "${PYTHON:-python3}" benchmarks/gpu_electra.py "$@"
