"""CoNLL-style named-entity recognition as a fine-tuning task: per-token labels.

The model learns its targets in `config.label_scheme` (IOB1 by default) and each file's
predictions are written and scored in that file's scheme (ner.py). The loss is the mean
cross-entropy over the batch's labeled pieces. Scores are conlleval's on the valid file
(`test_*` on a tagged test file); predictions/<split>.txt are in CoNLL format.
"""
import os

from etils import epath
import jax.numpy as jnp
import optax

from bert_jax.modeling import model as model_lib
from bert_jax.modeling.model_config import BertConfig
from bert_jax.tasks.ner import conlleval
from bert_jax.tasks.ner import data as ner
from bert_jax.tasks import task as task_lib


# The config keys this task reads; fine-tuning hands it their values alone.
OPTIONS = ("task", "data_source", "data_dir", "train_file", "valid_file", "test_file",
           "label_scheme", "max_seq_length", "max_train_examples", "eval_only",
           "length_bucketing", "packing")


def _path(options, name: str) -> str:
  if "://" in name or os.path.isabs(name):
    return name
  if not options.data_dir:
    raise ValueError("bad config: data_dir is required for NER (the folder holding "
                     f"{options.train_file}, {options.valid_file}, {options.test_file})")
  return str(epath.Path(options.data_dir) / name)


def _check(options) -> None:
  if options.label_scheme not in ner.SCHEMES:
    raise ValueError(f"bad config: label_scheme {options.label_scheme!r} not in "
                     f"{list(ner.SCHEMES)}")


def check_config(options) -> None:
  _check(options)
  for name in (options.train_file, options.valid_file):
    _path(options, name)  # a relative file needs data_dir
  task_lib.refuse_shaped_batches(options, "token-level heads are not bucketed or packed yet")


def _labels_and_scheme(sentences: list, path: str) -> tuple[list[str], str]:
  """The labels of a training file and its tagging scheme (IOB2 when it has no entity)."""
  return ner.label_list(sentences, path), ner.scheme_of(sentences) or "IOB2"


def _task_model(options, model_cfg: BertConfig, labels: list[str],
                train_scheme: str) -> task_lib.TaskModel:
  """The export records the labels, both schemes and the window length, so that
  bert_jax.Encoder.tag predicts tags from the bundle alone."""
  return task_lib.TaskModel(
      "ner", model_lib.BertForTokenClassification(model_cfg, num_labels=len(labels)),
      "token_classifier",
      export_info={"labels": list(labels), "scheme": options.label_scheme,
                   "train_scheme": train_scheme, "max_seq_length": options.max_seq_length})


def model(options, model_cfg: BertConfig) -> task_lib.TaskModel:
  """BertForTokenClassification with one output per training-file label."""
  _check(options)
  path = _path(options, options.train_file)
  return _task_model(options, model_cfg, *_labels_and_scheme(ner.read_conll(path), path))


def build(options, tokenizer, model_cfg: BertConfig) -> task_lib.Task:
  """NER from CoNLL files in data_dir (train, valid, optional test)."""
  _check(options)
  if options.data_source != "conll":
    raise ValueError(f"bad config: NER reads CoNLL files (data_source='conll'), "
                     f"not {options.data_source!r}")
  train_path = _path(options, options.train_file)
  train = ner.read_conll(train_path)
  labels, train_scheme = _labels_and_scheme(train, train_path)
  splits = [("valid", _path(options, options.valid_file))]
  test_path = _path(options, options.test_file) if options.test_file else ""
  if test_path and epath.Path(test_path).exists():
    splits.append(("test", test_path))
  elif test_path:
    print(f"NER: no test file {test_path}, only valid is scored", flush=True)
  read = {}
  for split, path in splits:  # every file read and checked before any encoding
    read[split] = ner.read_conll(path)
    ner.check_tags(read[split], labels, path)

  stats = {"labels": len(labels), "train_scheme": train_scheme}
  train_arrays = {}
  if not options.eval_only:
    if options.max_train_examples:
      train = train[:options.max_train_examples]
    train_arrays = ner.encode(tokenizer, ner.in_scheme(train, options.label_scheme), labels,
                              options.max_seq_length)
    stats.update(train_sentences=len(train), train_windows=len(train_arrays["input_ids"]))

  def loss(logits, batch):  # logits [b, len, labels]: summed cross-entropy per window [b]
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, batch["label_ids"])
    return jnp.sum(ce * batch["label_weights"], axis=-1)

  def loss_weight(batch):  # labeled pieces per window [b]: the loss is their mean
    return jnp.sum(batch["label_weights"], axis=-1)

  eval_sets = []
  for split, path in splits:
    sentences = read[split]
    arrays = ner.encode(tokenizer, ner.in_scheme(sentences, options.label_scheme), labels,
                        options.max_seq_length)
    scheme = ner.scheme_of(sentences) or train_scheme  # no entity or no tags: the training file's
    stats.update({f"{split}_sentences": len(sentences), f"{split}_scheme": scheme,
                  f"{split}_windows": len(arrays["input_ids"])})
    prefix = "" if split == "valid" else f"{split}_"

    def score(outputs, workdir, split=split, sentences=sentences, arrays=arrays, prefix=prefix,
              scheme=scheme):
      predicted = [ner.convert(tags, scheme)  # written and scored in the file's scheme
                   for tags in ner.predicted_tags(outputs["logits"], arrays, sentences, labels)]
      if workdir is not None:
        out = os.path.join(workdir, "predictions", f"{split}.txt")
        ner.write_predictions(out, sentences, predicted)
        print(f"wrote {len(sentences)} NER {split} sentences to {out}", flush=True)
      if sentences[0].tags is None:
        return {}
      gold = [s.tags for s in sentences]
      results = {prefix + k: v for k, v in conlleval.evaluate(gold, predicted).items()}
      # The baseline: every word tagged O (entity f1 0).
      results[prefix + "all_o_baseline_accuracy"] = (sum(t == "O" for g in gold for t in g)
                                                     / max(sum(len(g) for g in gold), 1))
      no_entity = not any(t != "O" for p in predicted for t in p)
      has_entity = any(t != "O" for g in gold for t in g)
      results[task_lib.WARNINGS] = ([f"ner {split}: no entity predicted (every word O)"]
                                    if no_entity and has_entity else [])
      return results
    eval_sets.append(task_lib.EvalSet(split, arrays, score))

  return task_lib.Task(_task_model(options, model_cfg, labels, train_scheme), train_arrays,
                       ("label_ids", "label_weights"),
                       loss, eval_sets, "f1", data_stats=stats, loss_weight=loss_weight)
