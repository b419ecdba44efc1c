#!/usr/bin/env bash
# ELECTRA-small against MLM at equal compute on a machine with an NVIDIA GPU, one --part per
# run of at most 9 minutes, from the corpus that `python benchmarks/gpu_end_to_end.py
# --prepare` wrote to .e2e/. See benchmarks/gpu_electra.py.
# Writes <part>.json and electra.log to --out DIR (default ./gpu_electra_out).
# --dry_run: the same chain, tiny, on the CPU. Wheels of packages the machine lacks
# (ml-collections, tensorboardX) are installed from .whl/ when it is there.
set -eu
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
. "$ROOT/benchmarks/device_env.sh"
exec "${PYTHON:-python3}" "$ROOT/benchmarks/gpu_electra.py" "$@"
