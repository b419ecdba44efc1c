"""Which task module serves a fine-tuning config: `config.task` -> module.

Built-in families are in FAMILIES; any other name is a GLUE task. An outside module calls
`register(name, module)`. Task modules import tasks/task.py, never this module. A task module
declares the config keys it reads (`OPTIONS`); fine-tuning hands it those values alone.
"""
import types

from bert_jax.tasks.glue import task as glue_task
from bert_jax.tasks.ner import task as ner_task
from bert_jax.tasks.sentence_embeddings import task as sentence_embedding_task
from bert_jax.tasks.squad import task as squad_task

# config.task -> the module giving OPTIONS, model(options, model_cfg) and build(options,
# tokenizer, model_cfg) (bert_jax.tasks.task); a name not here is a GLUE task.
FAMILIES = {"squad": squad_task, "ner": ner_task,
            sentence_embedding_task.NAME: sentence_embedding_task}


def register(name: str, module: types.ModuleType) -> None:
  """Serves configs whose `task` is `name` with `module` (its `model` and `build`)."""
  for fn in ("model", "build"):
    if not callable(getattr(module, fn, None)):
      raise TypeError(f"task module {module.__name__} has no function {fn}(...)")
  if not isinstance(getattr(module, "OPTIONS", None), tuple):
    raise TypeError(f"task module {module.__name__} declares no OPTIONS (the config keys it "
                    "reads)")
  if FAMILIES.get(name, module) is not module:
    raise ValueError(f"task {name!r} is already served by {FAMILIES[name].__name__}")
  FAMILIES[name] = module


def family(task: str) -> types.ModuleType:
  """The module serving a fine-tuning config whose `task` is `task`."""
  return FAMILIES.get(task, glue_task)
