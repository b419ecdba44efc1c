# Sourced by the GPU scripts from the repository root: wheels the device image lacks
# (ml-collections, tensorboardX), carried in .whl/ (benchmarks/README.md says how), are
# installed into /tmp/bert_jax_site; the repository is on PYTHONPATH (nothing is pip-installed).
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  "${PYTHON:-python3}" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --upgrade --target /tmp/bert_jax_site .whl/*.whl
  export PYTHONPATH="/tmp/bert_jax_site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
