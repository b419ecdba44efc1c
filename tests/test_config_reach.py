"""The whole run config stops at the programs and their run packages.

Below `finetuning/` and `pretraining/` every room takes the values it uses: a task family its
own options, modeling a BertConfig, batching lengths, training an optimizer section. A room
may take the one section it describes (`data` by the data wing, `optimizer` by the
optimizer, `mesh` by sharding); the whole ConfigDict reaching any of them is what this test
catches, by watching every call into those rooms during real runs.
"""
import contextlib
import sys
import threading

import ml_collections
import numpy as np
import pytest

from bert_jax import finetune
from bert_jax import pretrain
from tests.fixtures.finetuning import conll
from tests.fixtures.finetuning import glue_config
from tests.fixtures.finetuning import random_bundle
from tests.fixtures.finetuning import squad_config
from tests.fixtures.repo import load_config

# The rooms below the programs and their run packages (finetuning/, pretraining/); the
# configuration package is the config's own room.
ROOMS = tuple(f"bert_jax.{room}." for room in (
    "runtime", "data", "members", "modeling", "batching", "training", "checkpoints",
    "conversion", "inference", "objectives", "tasks"))


def _is_whole(value, config) -> bool:
  """`value` is the run config itself, or a copy of it (the same top-level keys)."""
  if value is config:
    return True
  return (isinstance(value, (ml_collections.ConfigDict, ml_collections.FrozenConfigDict))
          and set(value.keys()) == set(config.keys()))


@contextlib.contextmanager
def whole_config_calls(config):
  """Yields a list that fills with 'module.function(argument)' for each call into ROOMS that
  receives the whole `config` as an argument, in any thread."""
  found = []

  def profile(frame, event, arg):
    del arg
    if event != "call" or not frame.f_globals.get("__name__", "").startswith(ROOMS):
      return
    code = frame.f_code
    count = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 0x04) + bool(
        code.co_flags & 0x08)
    local = frame.f_locals
    for name in code.co_varnames[:count]:
      value = local.get(name)
      values = (value.values() if isinstance(value, dict) and not isinstance(
          value, ml_collections.ConfigDict) else value if isinstance(value, tuple) else [value])
      if any(_is_whole(v, config) for v in values):
        found.append(f"{frame.f_globals['__name__']}.{code.co_qualname}({name})")

  previous = sys.getprofile()
  sys.setprofile(profile)
  threading.setprofile(profile)
  try:
    yield found
  finally:
    sys.setprofile(previous)
    threading.setprofile(None)


def test_a_whole_config_call_is_caught():
  config = load_config("glue", "task=mrpc")
  room = {"__name__": "bert_jax.tasks.some_family"}
  exec("def check(options, *rest, **named):\n  return options\n", room)  # pylint: disable=exec-used
  with whole_config_calls(config) as found:
    room["check"](config.optimizer)  # a section is fine
    room["check"](1, config)
    room["check"](1, extra=config.copy_and_resolve_references())
  assert found == ["bert_jax.tasks.some_family.check(rest)",
                   "bert_jax.tasks.some_family.check(named)"]


def _run_keeps_the_config_above_the_rooms(run, config, workdir) -> None:
  with whole_config_calls(config) as found:
    run(config, str(workdir))
  assert not found, "the whole config reached: " + ", ".join(sorted(set(found)))


@pytest.mark.slow
def test_glue_and_squad_fine_tuning_keep_the_config_above_the_rooms(glue_dir, squad_dir,
                                                                    pretrained, tmp_path):
  _run_keeps_the_config_above_the_rooms(
      finetune.finetune, glue_config(glue_dir, pretrained, max_train_examples=16),
      tmp_path / "glue")
  _run_keeps_the_config_above_the_rooms(
      finetune.finetune, squad_config(squad_dir, pretrained, num_epochs=1.0), tmp_path / "squad")


@pytest.mark.slow
def test_pretraining_keeps_the_config_above_the_rooms(tmp_path):
  config = load_config("pretrain", "tiny")
  config.seq_len, config.batch_size, config.total_steps, config.warmup_steps = 32, 8, 2, 1
  config.fill_mask_example = ""
  _run_keeps_the_config_above_the_rooms(pretrain.train, config, tmp_path / "run")


@pytest.mark.slow
def test_ner_and_sentence_embeddings_keep_the_config_above_the_rooms(tmp_path):
  init = random_bundle(tmp_path / "init")
  data = tmp_path / "conll"
  data.mkdir()
  rng = np.random.default_rng(1)
  for name, n in (("train.txt", 16), ("valid.txt", 4), ("test.txt", 4)):
    (data / name).write_text(conll(rng, n), encoding="utf-8")
  ner = load_config("ner", None)
  ner.data_dir, ner.init_checkpoint, ner.max_seq_length = str(data), init, 8
  ner.batch_size, ner.eval_batch_size, ner.num_epochs = 8, 8, 1.0
  pairs = load_config("sentence_embeddings", None)
  pairs.data_source, pairs.init_checkpoint, pairs.max_train_examples = "builtin", init, 16
  pairs.batch_size, pairs.eval_batch_size, pairs.max_seq_length = 8, 64, 16
  pairs.num_epochs, pairs.length_bucketing = 1.0, False
  for config in (ner, pairs):
    _run_keeps_the_config_above_the_rooms(finetune.finetune, config, tmp_path / config.task)
