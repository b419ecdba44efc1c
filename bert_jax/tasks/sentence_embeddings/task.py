"""Sentence-embedding training (Sentence-BERT) as a fine-tuning task.

A siamese encoder (modeling.pooling.SentenceEncoder) trained with a loss of
sentence_pairs.LOSSES and scored by the Spearman correlation of cosine similarities with gold
scores. Pooling and normalisation are the config's, else the init checkpoint's, else mean and
normalised; the export records them for `bert_jax.embed`. data_source='builtin' uses pairs
shipped in bert_jax/assets/sentence_pairs/, so a fine-tune needs no download.
"""
import os

from etils import epath
import numpy as np

from bert_jax.inference import embedding
from bert_jax.modeling.model_config import BertConfig
from bert_jax.modeling import pooling
from bert_jax.runtime import atomic_files
from bert_jax.tasks.glue import metrics as metrics_lib
from bert_jax.tasks.sentence_embeddings import pairs as sentence_pairs
from bert_jax.tasks import task as task_lib


# The config keys this task reads; fine-tuning hands it their values alone.
OPTIONS = ("task", "data_source", "data_dir", "train_file", "eval_file", "init_checkpoint",
           "loss", "pooling", "normalize", "scale", "score_max", "triplet_margin",
           "max_seq_length", "max_train_examples", "eval_only", "packing", "optimizer")


NAME = "sentence_embeddings"
DATA_SOURCES = ("tsv", "builtin")
# The built-in sample's files, in the package beside the bundled vocab.
BUILTIN_DIR = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                            "..", "assets", "sentence_pairs"))
BUILTIN_FILES = {"train_file": "train.tsv", "eval_file": "eval.tsv"}


def data_file(options, key: str) -> str:
  """The file `key` ('train_file' or 'eval_file') names: the built-in sample's, or the
  config's, absolute or under data_dir."""
  if options.data_source == "builtin":
    return os.path.join(BUILTIN_DIR, BUILTIN_FILES[key])
  name = options[key]
  if not name:
    raise ValueError("bad config: train_file and eval_file are required for sentence embeddings "
                     "(or data_source='builtin', the built-in sample)")
  if "://" in name or os.path.isabs(name) or not options.data_dir:
    return name
  return str(epath.Path(options.data_dir) / name)


def _bad(msg):
  raise ValueError(f"bad config: {msg}")


def _check_options(options) -> None:
  """Fails fast, naming the key, on options a sentence-embedding run cannot take."""
  if options.loss not in sentence_pairs.LOSSES:
    _bad(f"loss {options.loss!r} not in {sentence_pairs.LOSSES}")
  if options.pooling and options.pooling not in pooling.TRAIN_POOLINGS:
    _bad(f"pooling {options.pooling!r} not in {pooling.TRAIN_POOLINGS} (or '': the init "
         "checkpoint's)")
  if options.data_source not in DATA_SOURCES:
    _bad(f"sentence embeddings read TSV files (data_source='tsv') or the built-in sample "
         f"('builtin'), not {options.data_source!r}")
  if options.data_source == "builtin" and options.loss not in sentence_pairs.SCORED_LOSSES:
    _bad(f"the built-in sample is scored pairs: loss {' or '.join(sentence_pairs.SCORED_LOSSES)}, "
         f"not {options.loss}")
  if options.packing:
    _bad("packing applies to GLUE's sequence heads, not to sentence embeddings")
  if options.loss in sentence_pairs.IN_BATCH_LOSSES and options.optimizer.grad_accum_steps != 1:
    _bad(f"loss {options.loss} compares the examples of a whole batch; microbatches "
         f"(optimizer.grad_accum_steps {options.optimizer.grad_accum_steps}) would change it: "
         "use 1")
  if options.score_max <= 0:
    _bad(f"score_max must be positive (the top of the score scale, 5 for STS), got "
         f"{options.score_max}")


def check_config(options) -> None:
  """The options, then the data files: run before the checkpoint loads."""
  _check_options(options)
  # The training file first: a path built from an unset variable ('/sts-train.tsv') fails
  # in one line, naming the first missing file, before the checkpoint is read.
  for key in ("eval_file",) if options.eval_only else ("train_file", "eval_file"):
    path = data_file(options, key)
    if not epath.Path(path).is_file():
      _bad(f"{key} {path} does not exist")


def settings(options) -> tuple[dict, str]:
  """(the embedding this run trains and exports (bundle.json's `embedding`), a line saying
  where each setting came from)."""
  recorded = embedding.recorded_at(options.init_checkpoint)
  out, said = {}, []
  for key, given, fallback in (("pooling", options.pooling or None, "mean"),
                               ("normalize", options.normalize, True)):
    if given is not None:
      out[key], origin = given, f"from --config.{key}"
    elif key in recorded["recorded"]:
      out[key], origin = recorded[key], "from the checkpoint"
    else:
      out[key], origin = fallback, "the default"
    said.append(f"{key} {out[key]} ({origin})")
  if out["pooling"] not in pooling.TRAIN_POOLINGS:
    _bad(f"the init checkpoint embeds with pooling {out['pooling']!r}, which training does not "
         f"compute: set --config.pooling to one of {pooling.TRAIN_POOLINGS}")
  for key in ("max_seq_length", "prompts", "default_prompt_name", "include_prompt"):
    if key in recorded["recorded"]:
      out[key] = recorded[key]
  if recorded["dense"]:
    out["dense"] = pooling.dense_record(recorded["dense"])
    said.append("Dense " + " -> ".join(f"{f} {a}" for f, _, a in recorded["dense"])
                + " (from the checkpoint, trained)")
  return out, ", ".join(said)


def model(options, model_cfg: BertConfig) -> task_lib.TaskModel:
  """The siamese encoder; beside it only the init checkpoint's Dense layers, if any."""
  _check_options(options)
  record, _ = settings(options)
  dense = _dense_layers(record)
  return task_lib.TaskModel(
      NAME, pooling.SentenceEncoder(model_cfg, record["pooling"], record["normalize"], dense),
      head="", export_info={"embedding": record})


def _dense_layers(record: dict) -> tuple:
  """The record's Dense layers as pooling.SentenceDense.layers."""
  return tuple((d["features"], d["bias"], d["activation"]) for d in record.get("dense", ()))


def _train_arrays(options, tokenizer) -> tuple[dict, dict]:
  path = data_file(options, "train_file")
  if options.loss in sentence_pairs.SCORED_LOSSES:
    rows = sentence_pairs.read_scored_pairs(path)
    scaled = rows.scores / options.score_max
    outside = np.flatnonzero((scaled < 0) | (scaled > 1))
    if len(outside):
      raise ValueError(f"{path}: {len(outside)} score(s) outside "
                       f"[0, score_max {options.score_max:g}] (first: pair {outside[0] + 1}, {rows.scores[outside[0]]:g}); set "
                       "--config.score_max to the top of the file's scale")
    rows.scores = scaled
  else:
    rows = sentence_pairs.read_tuples(path, need_negative=options.loss == "triplet")
  if options.max_train_examples:
    rows.texts = rows.texts[:options.max_train_examples]
    if rows.scores is not None:
      rows.scores = rows.scores[:options.max_train_examples]
  arrays, truncated = sentence_pairs.encode(tokenizer, rows, options.max_seq_length)
  stats = {"train_file": path, "train_examples": len(rows.texts),
           "train_truncated_sentences": truncated}
  if options.loss in sentence_pairs.IN_BATCH_LOSSES and len(rows.texts) < 2:
    raise ValueError(f"{path}: loss {options.loss} needs at least 2 examples (it compares them)")
  return arrays, stats


def build(options, tokenizer, model_cfg: BertConfig) -> task_lib.Task:
  """Sentence-embedding training from train_file, scored on the STS pairs of eval_file."""
  task_model = model(options, model_cfg)
  eval_path = data_file(options, "eval_file")
  eval_rows = sentence_pairs.read_scored_pairs(eval_path)  # read first: bad data fails fast
  train_arrays, stats = ({}, {}) if options.eval_only else _train_arrays(options, tokenizer)
  eval_arrays, truncated = sentence_pairs.encode(tokenizer, eval_rows, options.max_seq_length)
  stats.update(eval_file=eval_path, eval_pairs=len(eval_rows.texts),
               eval_truncated_sentences=truncated, embedding=settings(options)[1])
  gold = eval_rows.scores

  def score(outputs, workdir):
    emb = np.asarray(outputs["logits"], np.float64)  # [n, 2, dim]
    norms = np.maximum(np.linalg.norm(emb, axis=-1), 1e-12)
    cos = np.sum(emb[:, 0] * emb[:, 1], axis=-1) / (norms[:, 0] * norms[:, 1])
    if workdir is not None:
      out = epath.Path(workdir) / "predictions" / "eval_cosine.txt"
      out.parent.mkdir(parents=True, exist_ok=True)
      atomic_files.write_text(out, "".join(f"{c:.6f}\n" for c in cos))
    return {"spearman": metrics_lib.spearman(cos, gold), "pearson": metrics_lib.pearson(cos, gold)}

  label_keys = ("scores",) if "scores" in train_arrays else ()
  return task_lib.Task(
      task_model, train_arrays, label_keys,
      sentence_pairs.loss_fn(options.loss, options.scale, options.triplet_margin),
      [task_lib.EvalSet("eval", eval_arrays, score)], "spearman", data_stats=stats,
      sort_by_length=options.loss not in sentence_pairs.IN_BATCH_LOSSES, zero_shot=True)
