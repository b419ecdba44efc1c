"""Importing a library module of bert_jax changes nothing process-wide: malloc, the garbage
collector, JAX's settings and the environment are the programs' start-up's to set
(bert_jax.runtime.startup, through bert_jax.cli), never a library import's."""
import json
import os
import subprocess
import sys

from tests.fixtures.repo import ROOT

# The command-line programs and what only they import (the start-up and its TensorFlow).
PROGRAMS = ("aot_compile", "build_vocab", "cli", "config_help", "config_reference", "convert",
            "embed", "fill_mask", "finetune", "prepare_data", "pretrain", "retrieval_eval",
            "squad_eval", "tokenize")
_SCRIPT = """
import gc, importlib, json, os, pkgutil, sys
import jax
import bert_jax
env, gc_before, frozen = dict(os.environ), gc.get_threshold(), gc.get_freeze_count()
KEYS = ("jax_platforms", "jax_cpu_enable_async_dispatch", "jax_enable_compilation_cache")
read = lambda k: jax.config.values.get(k, getattr(jax.config, k, None))
jax_before = {k: read(k) for k in KEYS}
names = [m.name for m in pkgutil.walk_packages(bert_jax.__path__, "bert_jax.")
         if m.name.split(".")[1] not in PROGRAMS
         and m.name not in ("bert_jax.runtime.startup", "bert_jax.runtime.cpu_tensorflow")]
for name in names:
  importlib.import_module(name)
print(json.dumps({
    "modules": len(names),
    "start_up": sorted(m for m in ("bert_jax.runtime.startup", "bert_jax.cli") if m in sys.modules),
    "env": sorted(k for k in ("JAX_PLATFORMS", "XLA_FLAGS", "TF_ENABLE_ONEDNN_OPTS")
                  if os.environ.get(k) != env.get(k)),
    "gc": [list(gc_before), list(gc.get_threshold()), frozen, gc.get_freeze_count()],
    "jax": [k for k, v in jax_before.items() if read(k) != v]}))
"""


def test_importing_every_library_module_changes_nothing_process_wide():
  env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "XLA_FLAGS")}
  done = subprocess.run([sys.executable, "-c", f"PROGRAMS = {PROGRAMS!r}\n" + _SCRIPT], cwd=ROOT,
                        env=dict(env, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
                        timeout=600, check=True)
  report = json.loads(done.stdout.strip().splitlines()[-1])
  assert report["modules"] > 90
  assert report["start_up"] == []
  assert report["env"] == []
  before, after, frozen_before, frozen_after = report["gc"]
  assert before == after and frozen_before == frozen_after == 0
  assert report["jax"] == []
