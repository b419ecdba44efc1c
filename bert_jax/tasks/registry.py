"""Which task module serves a fine-tuning config: `config.task` -> module.

Built-in families are in FAMILIES; any other name is a GLUE task. An outside module calls
`register(name, module)`. Task modules import tasks/task.py, never this module.
"""
import types

from bert_jax.tasks.glue import task as glue_task
from bert_jax.tasks.ner import task as ner_task
from bert_jax.tasks.sentence_embeddings import task as sentence_embedding_task
from bert_jax.tasks.squad import task as squad_task
from bert_jax.tasks import task as task_lib

# config.task -> the module giving model(config, model_cfg) and build(config, tokenizer,
# model_cfg) (bert_jax.tasks.task); a name not here is a GLUE task.
FAMILIES = {"squad": squad_task, "ner": ner_task,
            sentence_embedding_task.NAME: sentence_embedding_task}


def register(name: str, module: types.ModuleType) -> None:
  """Serves configs whose `task` is `name` with `module` (its `model` and `build`)."""
  for fn in ("model", "build"):
    if not callable(getattr(module, fn, None)):
      raise TypeError(f"task module {module.__name__} has no function {fn}(...)")
  if FAMILIES.get(name, module) is not module:
    raise ValueError(f"task {name!r} is already served by {FAMILIES[name].__name__}")
  FAMILIES[name] = module


def family(config) -> types.ModuleType:
  """The module serving `config.task`."""
  return FAMILIES.get(config.task, glue_task)


def check_config(config) -> None:
  """The checks of the module serving `config.task`, if it has any (one line each)."""
  check = getattr(family(config), "check_config", None)
  if check is not None:
    check(config)


def task_model(config, model_cfg) -> task_lib.TaskModel:
  """The TaskModel of a fine-tuning config (reads no data)."""
  return family(config).model(config, model_cfg)


def build(config, tokenizer, model_cfg) -> task_lib.Task:
  """The Task of a fine-tuning config, every split read and encoded up front.

  ValueError: an unknown GLUE task, malformed data (file and line), or a config that does not
  apply; FileNotFoundError: a missing training or dev file (test files are optional).
  """
  return family(config).build(config, tokenizer, model_cfg)
