# Sourced by the GPU scripts, with ROOT set to the repository root. A GPU machine's Python may
# lack ml-collections and tensorboardX and have no package index to install them from: put
# their wheels in $ROOT/.whl/ (benchmarks/README.md says how) and they are installed into a
# scratch directory on PYTHONPATH. The repository goes on PYTHONPATH too (nothing is
# pip-installed), so the scripts run from a plain checkout.
if [ -d "$ROOT/.whl" ] && ls "$ROOT"/.whl/*.whl >/dev/null 2>&1; then
  site="${TMPDIR:-/tmp}/bert_jax_site"
  "${PYTHON:-python3}" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target "$site" "$ROOT"/.whl/*.whl
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
