"""The interface between fine-tuning and its tasks.

A task module declares the config keys it reads (`OPTIONS`) and gets their values alone (a
bert_jax.configuration.options.Options, never the whole config). It gives
`model(options, model_cfg) -> TaskModel` (cheap, reads no data, so checks against a checkpoint
run first), `build(options, tokenizer, model_cfg) -> Task` (every split read and encoded up
front, so bad data fails before training), and optionally `check_config(options)`, run before
anything loads. Adding a task is one module, its config and its tests, named in
registry.FAMILIES or registered (`registry.register`).
"""
import dataclasses
from typing import Any, Callable, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.training import train_core

# Arrays the model consumes; everything else in a feature dict is labels or metadata.
MODEL_INPUTS = ("input_ids", "input_mask", "segment_ids")
# What packed batches add (bert_jax.batching.packing), passed to the model by keyword.
PACKED_INPUTS = ("position_ids", "cls_index")
# Key of an EvalSet score's list of warnings (e.g. predictions at the majority-class
# baseline); fine-tuning prints them and records them in eval_results.json.
WARNINGS = "warnings"
# Result keys that score a baseline rather than the run (the same for every seed; fine-tuning
# prints them beside the primary metric): GLUE's majority class, NER's every word `O`,
# a sentence-embedding model's scores before training (zero-shot).
BASELINE_KEYS = ("majority_baseline", "all_o_baseline", "zero_shot_")


def refuse_shaped_batches(options, why: str) -> None:
  """For a task whose batches keep one shape: length_bucketing and packing are refused."""
  for key in ("length_bucketing", "packing"):
    if options[key]:
      raise ValueError(f"bad config: {key} applies to sequence-level tasks (GLUE), not "
                       f"{options.task}: {why}")


@dataclasses.dataclass(frozen=True)
class TaskModel:
  """A task's model and the name of its head.

  Attributes:
    model: called as model(input_ids, input_mask, segment_ids, deterministic).
    head: the head's top-level param group ('classifier'): fresh when training, required from
      the checkpoint when only evaluating; '' for none (sentence embeddings).
    export_info: what bundle.json records besides the task name, so that bert_jax.Encoder and
      bert_jax.embed rebuild the model.
  """
  name: str
  model: nn.Module
  head: str
  export_info: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class EvalSet:
  """One evaluation or prediction split.

  score: fn(outputs [n, ...], workdir or None) -> metrics (empty for unlabeled splits, which
  only write files; WARNINGS lists one-line warnings against constant baselines); workdir None
  computes and writes nothing (processes other than 0).
  """
  name: str
  arrays: dict
  score: Callable[[dict, Optional[str]], dict]


@dataclasses.dataclass
class Task:
  """What fine-tuning needs from a task.

  Attributes:
    loss: (model outputs, batch) -> per-example loss [b].
    loss_weight: batch -> per-example weight [b] or None: the training loss is
      sum(loss) / sum(loss_weight) over the batch (NER: a mean over labeled tokens).
    eval_sets: dev splits first.
    sort_by_length: False when the loss compares a batch's examples (CoSENT, in-batch
      negatives): length bucketing then keeps each batch's drawn rows.
    zero_shot: score the model once before training (`zero_shot_<metric>`), the baseline the
      run must beat where no majority class exists (SQuAD, STS-B, sentence embeddings).
  """
  model: TaskModel
  train_arrays: dict
  label_keys: tuple
  loss: Callable[[Any, dict], jax.Array]
  eval_sets: list
  primary_metric: str
  data_stats: dict = dataclasses.field(default_factory=dict)
  loss_weight: Optional[Callable[[dict], jax.Array]] = None
  sort_by_length: bool = True
  zero_shot: bool = False

  @property
  def name(self) -> str:
    return self.model.name


def objective(task: Task) -> train_core.Objective:
  """The task's loss as a train_core.Objective: sum(loss) / sum(loss_weight) over the batch,
  microbatched alike; batches may be packed (batching/packing.py), and examples are counted by the
  first label array (input_ids rows without labels)."""
  model = task.model.model
  count_key = task.label_keys[0] if task.label_keys else "input_ids"
  examples = lambda batch: jnp.asarray(batch[count_key].shape[0], jnp.float32)  # noqa: E731

  def sums(params, batch, rng, deterministic):
    packed = {k: batch[k] for k in PACKED_INPUTS if k in batch}
    out = model.apply({"params": params}, batch["input_ids"], batch["input_mask"],
                      batch["segment_ids"], deterministic=deterministic,
                      rngs=None if deterministic else {"dropout": rng}, **packed)
    return {"loss_sum": jnp.sum(task.loss(out, batch)), "examples": examples(batch)}

  def denominators(batch):
    count = examples(batch)
    weight = (count if task.loss_weight is None
              else jnp.maximum(jnp.sum(task.loss_weight(batch)), 1.0))
    return {"examples": count, "loss_weight": weight}

  return train_core.Objective(sums=sums, denominators=denominators,
                              loss=lambda s, d: s["loss_sum"] / d["loss_weight"])


def init_fn(task_model: TaskModel, seq_len: int) -> Callable[[jax.Array], Any]:
  """rng -> boxed params of the task model for sequences of `seq_len`."""
  def init(rng):
    ids = jnp.zeros((1, seq_len), jnp.int32)
    return task_model.model.init({"params": rng}, ids, jnp.ones_like(ids), ids)["params"]
  return init


def predict_fn(task_model: TaskModel) -> Callable[[Any, dict], dict]:
  """(params, batch) -> {'logits': model outputs} without dropout; jit it."""
  def predict(params, batch):
    return {"logits": task_model.model.apply(
        {"params": params}, batch["input_ids"], batch["input_mask"], batch["segment_ids"],
        deterministic=True)}
  return predict


def is_baseline(key: str) -> bool:
  """Whether an eval_results key scores a baseline (BASELINE_KEYS), split prefix aside."""
  return any(b in key for b in BASELINE_KEYS)


def _baselined_metric(key: str) -> str:
  """The metric a baseline's key scores: 'dev_all_o_baseline_accuracy' -> 'dev_accuracy',
  'zero_shot_f1' -> 'f1'; '' when the key names none ('majority_baseline')."""
  for marker in BASELINE_KEYS:
    if marker in key:
      before, after = key.split(marker, 1)
      return before + after.lstrip("_") if after.strip("_") else ""
  return ""


def baseline_line(results: dict, primary_metric: str) -> str:
  """`f1 0.6900, accuracy 0.9490 against the baseline: all_o_baseline_accuracy 0.8330`, or ''
  without baselines: each baseline stands against its own metric."""
  baselines = {k: v for k, v in results.items()
               if is_baseline(k) and not k.endswith("_std") and isinstance(v, (int, float))}
  if not baselines or not isinstance(results.get(primary_metric), (int, float)):
    return ""
  others = sorted({m for m in map(_baselined_metric, baselines)
                   if m != primary_metric and isinstance(results.get(m), (int, float))})
  return (", ".join(f"{m} {results[m]:.4f}" for m in [primary_metric] + others)
          + f" against the baseline{'s' if len(baselines) > 1 else ''}: "
          + ", ".join(f"{k} {v:.4f}" for k, v in sorted(baselines.items())))
