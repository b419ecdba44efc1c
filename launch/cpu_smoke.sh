#!/usr/bin/env bash
# The quick start on a CPU: pretrain the tiny variant on the built-in corpus (no
# download), save checkpoints, export a bundle and print a fill-mask example.
usage="usage: launch/cpu_smoke.sh [WORKDIR] [--config.KEY=VALUE ...]
  Pretrains configs/pretrain.py:tiny into WORKDIR (default /tmp/bert_jax_tiny; a
  workdir holding a checkpoint is resumed). The overrides go to bert_jax.pretrain;
  python -m bert_jax.config_help configs/pretrain.py:tiny lists every key."
set -euo pipefail
cd "$(dirname "$0")/.."
workdir=/tmp/bert_jax_tiny
case "${1:-}" in
  -h|--help|-help) echo "$usage"; exit 0 ;;
  --config.*|"") ;;  # no WORKDIR: the default
  -*) echo "launch/cpu_smoke.sh: unknown option $1" >&2; echo "$usage" >&2; exit 2 ;;
  *) workdir=$1; shift ;;
esac
exec python -m bert_jax.pretrain --config configs/pretrain.py:tiny --workdir "$workdir" "$@"
