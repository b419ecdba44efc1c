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


def _imported_modules(args: list[str]) -> tuple[set[str], subprocess.CompletedProcess]:
  """The top-level packages a `python -X importtime ARGS` run imported, and the run."""
  done = subprocess.run([sys.executable, "-X", "importtime"] + args, cwd=ROOT,
                        env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True,
                        text=True, timeout=600, check=False)
  names = {line.split("|")[-1].strip().split(".")[0] for line in done.stderr.splitlines()
           if line.startswith("import time:")}
  return names, done


# What a program's start-up must not pay for before it can answer a mistake: the model and
# training stack (seconds of imports on a small machine) and TensorFlow.
_HEAVY = {"flax", "optax", "orbax", "tensorflow", "tensorboardX", "transformers", "torch"}


def test_a_config_typo_is_answered_before_the_training_code_loads(tmp_path):
  for program, config in (("finetune", "configs/glue.py:task=cola"),
                          ("pretrain", "configs/pretrain.py:tiny")):
    names, done = _imported_modules(["-m", f"bert_jax.{program}", "--config", config,
                                     "--workdir", str(tmp_path / program),
                                     "--config.batch_sizee=3"])
    assert done.returncode == 1, done.stderr[-2000:]
    assert "unknown config key 'batch_sizee'" in done.stderr
    assert names & _HEAVY == set(), program


def test_the_python_api_imports_no_training_logs_or_tensorflow():
  names, done = _imported_modules(["-c", "from bert_jax import Encoder"])
  assert done.returncode == 0, done.stderr[-2000:]
  assert "flax" in names  # the model: what the API needs
  assert names & {"tensorflow", "tensorboardX", "optax", "torch", "transformers"} == set()
