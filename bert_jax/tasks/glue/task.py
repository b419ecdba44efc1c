"""GLUE as a fine-tuning task: sentence(-pair) classification and regression, scored on the
dev splits, with GLUE submission files for the test splits (MNLI also predicts AX)."""
import os

import jax.numpy as jnp
import numpy as np
import optax

from bert_jax.modeling import model as model_lib
from bert_jax.modeling.model_config import BertConfig
from bert_jax.tasks.glue import data as glue
from bert_jax.tasks.glue import metrics as metrics_lib
from bert_jax.tasks import task as task_lib


# The config keys this task reads; fine-tuning hands it their values alone.
OPTIONS = ("task", "data_source", "data_dir", "tfds_data_dir", "head", "head_layers",
           "max_seq_length", "max_train_examples", "eval_only", "predict_test", "predict_ax")


def sequence_model(model_cfg: BertConfig, num_labels: int, head: str = "cls",
                   head_layers: int = 4) -> model_lib.BertForSequenceClassification:
  """BertForSequenceClassification with `head`; ValueError for an unknown head, or head_layers
  outside 1..num_layers."""
  if head not in model_lib.SEQUENCE_HEADS:
    raise ValueError(f"bad config: head {head!r} is not one of {model_lib.SEQUENCE_HEADS}")
  if head == "layers_attention" and not 1 <= head_layers <= model_cfg.num_layers:
    raise ValueError(f"bad config: head_layers must be in 1..{model_cfg.num_layers} (the "
                     f"checkpoint's layers), got {head_layers}")
  return model_lib.BertForSequenceClassification(model_cfg, num_labels=num_labels, head=head,
                                                 head_layers=head_layers)


def check_config(options) -> None:
  if options.data_source == "tsv" and not options.data_dir:
    raise ValueError("bad config: data_dir is required with data_source='tsv' (the GLUE "
                     "folder holding MRPC/, RTE/, ...)")


def model(options, model_cfg: BertConfig) -> task_lib.TaskModel:
  """BertForSequenceClassification with the task's number of labels (1: regression) and
  the config's head; the export records the head."""
  task = glue.get_task(options.task)
  return task_lib.TaskModel(
      task.name, sequence_model(model_cfg, task.num_labels, options.head, options.head_layers),
      "classifier", export_info={"head": options.head, "head_layers": options.head_layers,
                                 "labels": list(task.labels or ())})  # (none: a regression)


def build(options, tokenizer, model_cfg: BertConfig) -> task_lib.Task:
  """A GLUE task from the TSV layout or TFDS."""
  task = glue.get_task(options.task)
  if options.predict_ax and task.name != "mnli":
    raise ValueError(f"bad config: predict_ax applies to task mnli only (AX is predicted by an "
                     f"MNLI model), not {task.name}")
  read = lambda split: glue.read_split(  # noqa: E731
      task, split, source=options.data_source, data_dir=options.data_dir,
      tfds_data_dir=options.tfds_data_dir)
  train_arrays = {}
  if not options.eval_only:
    if task.train_split is None:
      raise ValueError(f"GLUE task {task.name} has no training data; use eval_only with a "
                       "fine-tuned checkpoint (AX: an MNLI model)")
    examples = read(task.train_split)
    if options.max_train_examples:
      examples = examples[:options.max_train_examples]
    if not examples:
      raise ValueError(f"GLUE {task.name}: the training split is empty")
    train_arrays = glue.encode_examples(tokenizer, examples, options.max_seq_length,
                                        task.is_regression)
  label_key = "labels" if task.is_regression else "label_ids"

  def loss(logits, batch):
    if task.is_regression:
      return jnp.square(logits[:, 0] - batch["labels"])
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch["label_ids"])

  def predictions_of(logits):
    return logits[:, 0] if task.is_regression else np.argmax(logits, -1)

  eval_sets = []
  for split in task.dev_splits:
    examples = read(split)
    arrays = glue.encode_examples(tokenizer, examples, options.max_seq_length, task.is_regression)

    def score(outputs, workdir, split=split, arrays=arrays):
      preds = predictions_of(outputs["logits"])
      values = metrics_lib.compute(task.metrics, preds, arrays[label_key])
      if not task.is_regression:
        values["majority_baseline"] = metrics_lib.majority_rate(arrays[label_key])
      results = {task.result_name(m, split): v for m, v in values.items()}
      warning = metrics_lib.constant_prediction_warning(preds, arrays[label_key],
                                                        task.is_regression)
      results[task_lib.WARNINGS] = [f"{task.name} {split}: {warning}"] if warning else []
      return results
    eval_sets.append(task_lib.EvalSet(split, arrays, score))

  stats = {"train_examples": len(train_arrays.get("input_ids", ()))}
  stats.update({f"{es.name}_examples": len(es.arrays["input_ids"]) for es in eval_sets})
  predicted = []
  if options.predict_test:
    predicted += [(task, split) for split in task.test_splits]
  if options.predict_ax:
    predicted.append((glue.TASKS["ax"], "test"))
  for pred_task, split in predicted:
    try:
      examples = glue.read_split(pred_task, split, source=options.data_source,
                                 data_dir=options.data_dir, tfds_data_dir=options.tfds_data_dir)
    except FileNotFoundError as e:
      print(f"GLUE {pred_task.name} {split}: not predicted, no data ({e})", flush=True)
      continue
    arrays = glue.encode_examples(tokenizer, examples, options.max_seq_length, task.is_regression)

    def write_test_predictions(outputs, workdir, pred_task=pred_task, split=split, examples=examples):
      if workdir is not None:
        path = glue.write_submission(pred_task, split, examples,
                                     predictions_of(outputs["logits"]),
                                     os.path.join(workdir, "predictions"))
        print(f"wrote {len(examples)} {pred_task.name} {split} predictions to {path}", flush=True)
      return {}
    name = split if pred_task is task else f"{pred_task.name}_{split}"
    eval_sets.append(task_lib.EvalSet(name, arrays, write_test_predictions))
    stats[f"{name}_examples"] = len(examples)

  primary = task.result_name(task.metrics[0], task.dev_splits[0]) if task.dev_splits else ""
  # A regression task (STS-B) has no majority class: its baseline is the untrained head's
  # scores, taken before the first step.
  return task_lib.Task(model(options, model_cfg), train_arrays, (label_key,), loss, eval_sets,
                       primary, data_stats=stats, zero_shot=task.is_regression)
