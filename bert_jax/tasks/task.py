"""The interface between fine-tuning and its tasks.

A task module (glue_task, squad_task, ...) gives two functions, which
bert_jax.tasks.registry finds by `config.task`:
  model(config, model_cfg) -> TaskModel     cheap, reads no data: the model with its head,
                                            so checks against a checkpoint run first
  build(config, tokenizer, model_cfg) -> Task
                                            every split read and encoded up front, so bad
                                            data fails before training
and may give a third, run with fine-tuning's config checks before anything loads:
  check_config(config)                      one line naming a key the task cannot run with
and fine-tuning (bert_jax.finetune) does the rest with the shared training core:
the task's per-example loss becomes a train_core.Objective (`objective`), eval
sets turn gathered model outputs into metrics and prediction files.

Adding a task is one module, its config and its tests; the module is named in
registry.FAMILIES (built in) or registers itself (`registry.register`).
"""
import dataclasses
from typing import Any, Callable, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.training import train_core

# Arrays the model consumes; everything else in a feature dict is labels or metadata.
MODEL_INPUTS = ("input_ids", "input_mask", "segment_ids")
# What packed batches add (bert_jax.tasks.packing), passed to the model by keyword.
PACKED_INPUTS = ("position_ids", "cls_index")
# Key of an EvalSet score's list of warnings (e.g. predictions at the majority-class
# baseline); fine-tuning prints them and records them in eval_results.json.
WARNINGS = "warnings"
# Result keys that score a baseline rather than the run (the same for every seed; fine-tuning
# prints them beside the primary metric): GLUE's majority class, NER's every word `O`,
# a sentence-embedding model's scores before training (zero-shot).
BASELINE_KEYS = ("majority_baseline", "all_o_baseline", "zero_shot_")


def refuse_shaped_batches(config, why: str) -> None:
  """For a task whose batches keep one shape: length_bucketing and packing are refused."""
  for key in ("length_bucketing", "packing"):
    if config[key]:
      raise ValueError(f"bad config: {key} applies to sequence-level tasks (GLUE), not "
                       f"{config.task}: {why}")


@dataclasses.dataclass(frozen=True)
class TaskModel:
  """A task's model and the name of its head.

  Attributes:
    name: 'mrpc', 'mnli', 'squad1.1', ...
    model: the encoder with the task head; called as
      model(input_ids, input_mask, segment_ids, deterministic).
    head: the top-level param group of the head ('classifier', 'qa_outputs'):
      fresh when training, required from the checkpoint when only evaluating;
      '' for a model without one (sentence embeddings: the pooled encoder).
    export_info: what the fine-tuned bundle's bundle.json records besides the task
      name, so that bert_jax.Encoder and bert_jax.embed rebuild the model (GLUE: head,
      head_layers; NER: labels; sentence embeddings: pooling, normalize).
  """
  name: str
  model: nn.Module
  head: str
  export_info: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class EvalSet:
  """One evaluation or prediction split.

  Attributes:
    name: split name (dev, dev_matched, test, ...).
    arrays: feature arrays (unpadded; prediction pads with rows it drops again).
    score: fn(outputs: dict of numpy [n, ...], workdir or None) -> metrics dict
      (empty for unlabeled prediction splits, which only write files); a task
      that checks its predictions against constant baselines adds WARNINGS, a
      list of one-line warnings (empty when the model beats them); workdir
      None: compute, write nothing (processes other than 0).
  """
  name: str
  arrays: dict
  score: Callable[[dict, Optional[str]], dict]


@dataclasses.dataclass
class Task:
  """What fine-tuning needs from a task.

  Attributes:
    model: the TaskModel.
    train_arrays: feature arrays of the training rows ({} in eval-only mode).
    label_keys: arrays of the training targets.
    loss: (model outputs, batch) -> per-example loss [b].
    loss_weight: batch -> per-example weight [b] of `loss`, or None (1 each): the
      training loss is sum(loss) / sum(loss_weight) over the whole batch (NER:
      summed token losses over labeled tokens, the mean over the batch's tokens).
    eval_sets: EvalSets, dev splits first.
    primary_metric: the eval_results key that ranks runs.
    data_stats: counts for the log (examples, windows, skipped questions).
    sort_by_length: length bucketing may group training rows of like length into
      batches; False when the loss compares a batch's examples (CoSENT, in-batch
      negatives): each batch keeps the random draw's rows, only cut to its bucket.
    zero_shot: fine-tuning scores the model once before training and records the
      results as `zero_shot_<metric>`, the baseline the run must beat: the init checkpoint
      as it is (sentence embeddings: no fresh head), or with its fresh head untrained
      (SQuAD and GLUE's regression task STS-B, where no majority class exists: exact match
      and F1, or the correlations, near zero).
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
  """The task's loss as a train_core.Objective: sum(loss) / sum(loss_weight) over the batch
  (the mean per-example loss without loss_weight), the same with microbatches.

  Batches are one example per row, or packed (bert_jax.tasks.packing: with
  position_ids and cls_index, the model's outputs are per example); either way
  the examples are counted by the first label array (by input_ids rows for a
  task without labels: sentence embeddings' anchor / positive tuples).
  """
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
  when the results name no baseline: the primary metric, then each other metric a baseline
  scores, so that every baseline stands against its own metric."""
  baselines = {k: v for k, v in results.items()
               if is_baseline(k) and not k.endswith("_std") and isinstance(v, (int, float))}
  if not baselines or not isinstance(results.get(primary_metric), (int, float)):
    return ""
  others = sorted({m for m in map(_baselined_metric, baselines)
                   if m != primary_metric and isinstance(results.get(m), (int, float))})
  return (", ".join(f"{m} {results[m]:.4f}" for m in [primary_metric] + others)
          + f" against the baseline{'s' if len(baselines) > 1 else ''}: "
          + ", ".join(f"{k} {v:.4f}" for k, v in sorted(baselines.items())))
