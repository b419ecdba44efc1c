#!/usr/bin/env bash
# The whole chain on one GPU in one command (issue 30): step-only speed, pretraining from data
# prepared elsewhere (.e2e/, written on a CPU machine by `python benchmarks/gpu_end_to_end.py
# --prepare`), SIGKILL and resume, export, STS-B fine-tuning; under 9 minutes on one H100.
# Writes e2e.json, e2e.md and e2e.log to --out (default $OUT, else ./gpu_e2e_out).
# --dry_run: the same chain, tiny, on the CPU. Wheels the image lacks (ml-collections,
# tensorboardX: see benchmarks/README.md) are installed from .whl/ when it is there.
set -eu
cd "$(dirname "$0")/.."
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  "${PYTHON:-python3}" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target /tmp/bert_jax_site .whl/*.whl
  export PYTHONPATH="/tmp/bert_jax_site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python3}" benchmarks/gpu_end_to_end.py "$@"
