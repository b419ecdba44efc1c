"""GLUE: the task registry, readers (GLUE TSV files or TFDS), encoding, submissions.

TSV files are read as GLUE's own loaders read them: tab-separated with no quoting (MRPC and
MNLI hold bare `"`), an optional BOM, CoLA's train/dev without a header. A row with a wrong
column count or a bad label raises GlueFormatError naming the file and line, except in QQP,
whose malformed rows are skipped and counted as the reference loaders do. TFDS `glue/<task>`
must be prepared (never downloaded).
"""
import dataclasses
import logging
import os
from typing import Optional, Sequence, Union

from etils import epath
import numpy as np

from bert_jax.runtime import atomic_files
from bert_jax.runtime import text_files

Label = Union[int, float, None]


class GlueFormatError(ValueError):
  """A GLUE data file that cannot be read as its task expects."""


@dataclasses.dataclass(frozen=True)
class GlueTask:
  """One GLUE task.

  Attributes:
    labels: label strings as written in the TSV files (id = position); None for regression.
    test_splits: unlabeled splits predicted for the GLUE server (submission_files names them).
    tfds_labels: TFDS ClassLabel names, in TFDS order.
    headerless_columns: column names of TSV files without a header (CoLA train/dev).
    skip_malformed: skip rows with a wrong column count (the reference loaders' QQP rule).
    model_task: the task whose model predicts (AX: an MNLI model); else `name`.
  """
  name: str
  dir_name: str
  text_a: str
  text_b: Optional[str]
  label_column: Optional[str]
  labels: Optional[tuple]
  metrics: tuple
  train_split: Optional[str]
  dev_splits: tuple
  test_splits: tuple
  submission_files: dict
  tfds_name: str
  tfds_text_a: str
  tfds_text_b: Optional[str]
  tfds_labels: Optional[tuple]
  headerless_columns: Optional[tuple] = None
  skip_malformed: bool = False
  model_task: str = ""

  @property
  def is_regression(self) -> bool:
    """True for STS-B (a float score, one output)."""
    return self.labels is None

  @property
  def num_labels(self) -> int:
    """Outputs of the classification head (1 for regression)."""
    return 1 if self.labels is None else len(self.labels)

  @property
  def label_key(self) -> str:
    """Name of the label array from `encode_examples`."""
    return "labels" if self.is_regression else "label_ids"

  @property
  def splits(self) -> tuple:
    """Every split of the task, train first."""
    train = (self.train_split,) if self.train_split else ()
    return train + self.dev_splits + self.test_splits

  def result_name(self, metric: str, split: str) -> str:
    """Key of `metric` on `split` in eval_results.json: MNLI's carry `_matched` /
    `_mismatched` ('accuracy_matched'), other tasks' are the bare name."""
    if split.startswith("dev_"):
      return f"{metric}_{split[len('dev_'):]}"
    return metric


_BINARY = ("0", "1")
_MNLI_LABELS = ("contradiction", "entailment", "neutral")  # Google run_classifier order.
_NLI2 = ("entailment", "not_entailment")


def _task(name, dir_name, columns, labels, metrics, tfds, *, dev=("dev",), test=("test",),
          train="train", files=None, **kwargs):
  """A row of the table below: `columns` the TSV's (text_a, text_b, label) columns, `tfds`
  the TFDS dataset's (text features, label names)."""
  (text_a, text_b, label_column), (tfds_text, tfds_labels) = columns, tfds
  return GlueTask(
      name=name, dir_name=dir_name, text_a=text_a, text_b=text_b,
      label_column=label_column, labels=labels, metrics=metrics, train_split=train,
      dev_splits=dev, test_splits=test,
      submission_files=files or {"test": f"{dir_name}.tsv"},
      tfds_name=f"glue/{name}", tfds_text_a=tfds_text[0],
      tfds_text_b=tfds_text[1] if len(tfds_text) > 1 else None,
      tfds_labels=tfds_labels, model_task=kwargs.pop("model_task", name), **kwargs)


TASKS = {
    t.name: t for t in [
        _task("cola", "CoLA", ("sentence", None, "label"), _BINARY, ("matthews_corrcoef",),
              (("sentence",), ("unacceptable", "acceptable")),
              headerless_columns=("source", "label", "original_label", "sentence")),
        _task("sst2", "SST-2", ("sentence", None, "label"), _BINARY, ("accuracy",),
              (("sentence",), ("negative", "positive"))),
        _task("mrpc", "MRPC", ("#1 String", "#2 String", "Quality"), _BINARY,
              ("accuracy", "f1", "accuracy_and_f1"),
              (("sentence1", "sentence2"), ("not_equivalent", "equivalent"))),
        _task("stsb", "STS-B", ("sentence1", "sentence2", "score"), None,
              ("pearson", "spearman", "pearson_and_spearman"), (("sentence1", "sentence2"), None)),
        _task("qqp", "QQP", ("question1", "question2", "is_duplicate"), _BINARY,
              ("accuracy", "f1", "accuracy_and_f1"),
              (("question1", "question2"), ("not_duplicate", "duplicate")), skip_malformed=True),
        _task("mnli", "MNLI", ("sentence1", "sentence2", "gold_label"), _MNLI_LABELS,
              ("accuracy",),
              (("premise", "hypothesis"), ("entailment", "neutral", "contradiction")),
              dev=("dev_matched", "dev_mismatched"),
              test=("test_matched", "test_mismatched"),
              files={"test_matched": "MNLI-m.tsv", "test_mismatched": "MNLI-mm.tsv"}),
        _task("qnli", "QNLI", ("question", "sentence", "label"), _NLI2, ("accuracy",),
              (("question", "sentence"), _NLI2)),
        _task("rte", "RTE", ("sentence1", "sentence2", "label"), _NLI2, ("accuracy",),
              (("sentence1", "sentence2"), _NLI2)),
        _task("wnli", "WNLI", ("sentence1", "sentence2", "label"), _BINARY, ("accuracy",),
              (("sentence1", "sentence2"), ("not_entailment", "entailment"))),
        # The diagnostic set: test only, labels of MNLI, predicted by an MNLI model.
        _task("ax", "AX", ("sentence1", "sentence2", None), _MNLI_LABELS, (),
              (("premise", "hypothesis"), ("entailment", "neutral", "contradiction")),
              train=None, dev=(), model_task="mnli"),
    ]
}

# Where AX may live in a GLUE download, in order of preference.
_AX_FILES = (os.path.join("AX", "test.tsv"), os.path.join("diagnostic", "diagnostic.tsv"),
             "AX.tsv")

# Our split names -> TFDS split names.
_TFDS_SPLITS = {
    "train": "train", "dev": "validation", "test": "test",
    "dev_matched": "validation_matched", "dev_mismatched": "validation_mismatched",
    "test_matched": "test_matched", "test_mismatched": "test_mismatched",
}


def get_task(name: str) -> GlueTask:
  """The task called `name` ('MRPC', 'sts-b', 'sst_2' too); ValueError lists the known ones."""
  key = name.lower().replace("-", "").replace("_", "")
  if key not in TASKS:
    raise ValueError(f"unknown GLUE task {name!r}; known tasks: {sorted(TASKS)}")
  return TASKS[key]


@dataclasses.dataclass
class GlueExample:
  """One example: guid 'FILE:LINE' or 'glue/task/split:idx'; label a class id, an STS-B score,
  or None (test); index the row's GLUE submission index."""
  guid: str
  text_a: str
  text_b: Optional[str]
  label: Label
  index: int


def _check_split(task: GlueTask, split: str):
  if split not in task.splits:
    raise ValueError(f"GLUE task {task.name!r} has no split {split!r}; its splits: "
                     f"{list(task.splits)}")


def tsv_path(task: GlueTask, data_dir: str, split: str) -> str:
  """Path of `split` in the GLUE TSV layout (AX: the first existing candidate);
  FileNotFoundError names every path tried."""
  _check_split(task, split)
  if task.name == "ax":
    candidates = [str(epath.Path(data_dir) / f) for f in _AX_FILES]
  else:
    candidates = [str(epath.Path(data_dir) / task.dir_name / f"{split}.tsv")]
  for path in candidates:
    if epath.Path(path).is_file():
      return path
  raise FileNotFoundError(
      f"GLUE {task.name} {split}: no file at {' or '.join(candidates)} "
      f"(expected the GLUE TSV layout data_dir/{task.dir_name}/{split}.tsv)")


def read_lines(path):
  """Yields (1-based line number, text) of the non-blank lines, split on '\\n' only."""
  # Split on '\n' only: a stray '\r' inside a sentence does not end the row.
  text = text_files.read_utf8(path, "GLUE file")
  for number, line in enumerate(text.split("\n"), start=1):
    if line.endswith("\r"):
      line = line[:-1]
    if line.strip():
      yield number, line


def read_tsv(task: GlueTask, data_dir: str, split: str,
             skip_malformed: Optional[bool] = None) -> list:
  """One split from the GLUE TSV layout, in file order (test labels None).

  skip_malformed (default: the task's) skips and logs rows with a wrong column count;
  otherwise GlueFormatError names the file and line of a malformed row or bad label.
  """
  path = tsv_path(task, data_dir, split)
  skip = task.skip_malformed if skip_malformed is None else skip_malformed
  labeled = split not in task.test_splits
  lines = read_lines(path)
  if task.headerless_columns and labeled:
    header = list(task.headerless_columns)
  else:
    first = next(lines, None)
    if first is None:
      raise GlueFormatError(f"{path}: empty file, expected a header line")
    header = first[1].split("\t")
  wanted = [task.text_a] + ([task.text_b] if task.text_b else [])
  if labeled:
    wanted.append(task.label_column)
  missing = [c for c in wanted if c not in header]
  if missing:
    raise GlueFormatError(
        f"{path}: header lacks columns {missing} needed for GLUE {task.name} {split}; "
        f"header: {header}")
  col = {name: header.index(name) for name in header}
  index_col = next((col[c] for c in ("index", "id") if c in col), None)

  examples, skipped = [], []
  for number, line in lines:
    fields = line.split("\t")
    where = f"{path}:{number}"
    if len(fields) != len(header):
      if skip:
        skipped.append(number)
        continue
      raise GlueFormatError(
          f"{where}: expected {len(header)} tab-separated columns ({header}), "
          f"found {len(fields)}")
    label = _parse_label(task, fields[col[task.label_column]], where) if labeled else None
    if index_col is not None:
      try:
        index = int(fields[index_col])
      except ValueError:
        raise GlueFormatError(
            f"{where}: index column {header[index_col]!r} is not an integer: "
            f"{fields[index_col]!r}") from None
    else:
      index = len(examples) + len(skipped)
    examples.append(GlueExample(
        guid=where, text_a=fields[col[task.text_a]],
        text_b=fields[col[task.text_b]] if task.text_b else None,
        label=label, index=index))
  if not examples:  # was: "cannot reshape array of size 0" after the training
    raise GlueFormatError(f"{path}: no rows after the header (GLUE {task.name} {split})"
                          + (f"; {len(skipped)} malformed rows skipped" if skipped else ""))
  if skipped:
    shown = ", ".join(map(str, skipped[:20])) + (" ..." if len(skipped) > 20 else "")
    logging.warning("%s: skipped %d malformed rows (wrong column count) on lines %s",
                    path, len(skipped), shown)
  logging.info("GLUE %s %s: %d examples from %s", task.name, split, len(examples), path)
  return examples


def _parse_label(task: GlueTask, value: str, where: str) -> Label:
  if task.is_regression:
    try:
      score = float(value)
    except ValueError:
      score = float("nan")
    if not np.isfinite(score):
      raise GlueFormatError(f"{where}: label {value!r} is not a finite number")
    if not 0.0 <= score <= 5.0:  # STS-B, the one regression task: similarity 0..5
      raise GlueFormatError(f"{where}: STS-B score {value!r} is outside 0..5")
    return score
  if value not in task.labels:
    raise GlueFormatError(
        f"{where}: label {value!r} is not one of {list(task.labels)} for GLUE {task.name}")
  return task.labels.index(value)


def example_from_tfds(task: GlueTask, split: str, features: dict) -> GlueExample:
  """One TFDS `glue/<task>` example as a GlueExample; TFDS's ClassLabel ids are mapped by name
  to the TSV labels, and test splits' -1 becomes None."""
  def text(key):
    value = features[key]
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)

  index = int(features["idx"])
  guid = f"{task.tfds_name}/{_TFDS_SPLITS[split]}:{index}"
  label = None
  if split not in task.test_splits:
    raw = features["label"]
    if task.is_regression:
      label = float(raw)
    else:
      tfds_id = int(raw)
      if not 0 <= tfds_id < len(task.tfds_labels):
        raise GlueFormatError(f"{guid}: TFDS label id {tfds_id} out of range "
                              f"{list(task.tfds_labels)}")
      name = task.tfds_labels[tfds_id]
      label = task.labels.index(name if name in task.labels else str(tfds_id))
  return GlueExample(guid=guid, text_a=text(task.tfds_text_a),
                     text_b=text(task.tfds_text_b) if task.tfds_text_b else None,
                     label=label, index=index)


def read_tfds(task: GlueTask, tfds_data_dir: str, split: str) -> list:
  """One split of a prepared TFDS `glue/<task>`, sorted by `idx` (the TSV files' row order)."""
  _check_split(task, split)
  from bert_jax.runtime import cpu_tensorflow  # pylint: disable=g-import-not-at-top
  tfds = cpu_tensorflow.import_tfds()
  tfds_split = _TFDS_SPLITS[split]
  try:
    ds = tfds.load(task.tfds_name, split=tfds_split, data_dir=tfds_data_dir or None,
                   download=False)
  except Exception as e:  # TFDS raises several types for missing data.
    raise FileNotFoundError(cpu_tensorflow.not_prepared(
        f"{task.tfds_name} (split {tfds_split!r})", tfds_data_dir, "tfds_data_dir")) from e
  examples = [example_from_tfds(task, split, ex) for ex in tfds.as_numpy(ds)]
  examples.sort(key=lambda ex: ex.index)
  logging.info("GLUE %s %s: %d examples from TFDS %s", task.name, split, len(examples),
               task.tfds_name)
  return examples


def read_split(task: GlueTask, split: str, *, source: str, data_dir: str = "",
               tfds_data_dir: str = "") -> list:
  """A split from the TSV layout (source='tsv') or TFDS (source='tfds')."""
  if source == "tsv":
    return read_tsv(task, data_dir, split)
  if source == "tfds":
    return read_tfds(task, tfds_data_dir, split)
  raise ValueError(f"unknown GLUE data source {source!r}; known: ['tfds', 'tsv']")


def _truncate_pair_lengths(len_a: int, len_b: int, max_length: int):
  """Lengths after Google's _truncate_seq_pair: pop from the longer, b on ties."""
  while len_a + len_b > max_length:
    if len_a > len_b:
      len_a -= 1
    else:
      len_b -= 1
  return len_a, len_b


def encode_examples(tokenizer, examples: Sequence[GlueExample], max_seq_length: int,
                    is_regression: bool = False) -> dict:
  """Encodes examples as Google's run_classifier: `[CLS] a [SEP] b [SEP]`, padded.

  Pairs are truncated longest-first to fit the tokenizer's `build_inputs` layout, single texts
  likewise. Returns int32 input_ids, input_mask, segment_ids [n, max_seq_length]; label_ids
  int32 [n] (or float32 `labels` with is_regression; None labels become 0); weights (1 each),
  example_index, and `truncated` bool [n].
  """
  if max_seq_length < 4:
    raise ValueError(f"max_seq_length must be at least 4, got {max_seq_length}")
  n = len(examples)
  ids_a = tokenizer.tokenize_to_ids([ex.text_a for ex in examples])
  pair_rows = [i for i, ex in enumerate(examples) if ex.text_b is not None]
  ids_b = dict(zip(pair_rows, tokenizer.tokenize_to_ids(
      [examples[i].text_b for i in pair_rows]))) if pair_rows else {}

  input_ids = np.full((n, max_seq_length), tokenizer.pad_id, np.int32)  # [n, len]
  input_mask = np.zeros((n, max_seq_length), np.int32)  # [n, len]
  segment_ids = np.zeros((n, max_seq_length), np.int32)  # [n, len]
  truncated = np.zeros((n,), bool)
  for i in range(n):
    a = list(ids_a[i])
    b = ids_b.get(i)
    if b is None:
      keep_a = min(len(a), max_seq_length - tokenizer.num_special_tokens(pair=False))
      truncated[i] = keep_a < len(a)
      row, segments = tokenizer.build_inputs(a[:keep_a])
    else:
      b = list(b)
      keep_a, keep_b = _truncate_pair_lengths(
          len(a), len(b), max_seq_length - tokenizer.num_special_tokens(pair=True))
      truncated[i] = keep_a < len(a) or keep_b < len(b)
      row, segments = tokenizer.build_inputs(a[:keep_a], b[:keep_b])
    input_ids[i, :len(row)] = row
    input_mask[i, :len(row)] = 1
    segment_ids[i, :len(row)] = segments

  features = {
      "input_ids": input_ids,
      "input_mask": input_mask,
      "segment_ids": segment_ids,
      "weights": np.ones((n,), np.float32),
      "example_index": np.arange(n, dtype=np.int32),
      "truncated": truncated,
  }
  if is_regression:
    features["labels"] = np.array(
        [0.0 if ex.label is None else float(ex.label) for ex in examples], np.float32)
  else:
    features["label_ids"] = np.array(
        [0 if ex.label is None else int(ex.label) for ex in examples], np.int32)
  if truncated.any():
    logging.info("encode_examples: %d of %d examples truncated to %d tokens",
                 int(truncated.sum()), n, max_seq_length)
  return features


def write_submission(task: GlueTask, split: str, examples: Sequence[GlueExample],
                     predictions, output_dir: str) -> str:
  """Writes test predictions in the GLUE server's format and returns the path.

  One file per test split (CoLA.tsv, MNLI-m.tsv, ...) with `index<TAB>prediction` rows, labels
  as in the TSV files, STS-B scores clipped to [0, 5] with 3 decimals. For AX, pass the AX task
  with an MNLI model's predictions.
  """
  if split not in task.test_splits:
    raise ValueError(f"GLUE task {task.name!r}: {split!r} is not a test split; test "
                     f"splits: {list(task.test_splits)}")
  predictions = np.asarray(predictions).reshape(-1)
  if predictions.shape[0] != len(examples):
    raise ValueError(f"{len(examples)} examples but {predictions.shape[0]} predictions")
  rows = ["index\tprediction\n"]
  for ex, pred in zip(examples, predictions):
    if task.is_regression:
      value = f"{min(max(float(pred), 0.0), 5.0):.3f}"
    else:
      value = task.labels[int(pred)]
    rows.append(f"{ex.index}\t{value}\n")
  epath.Path(output_dir).mkdir(parents=True, exist_ok=True)
  path = epath.Path(output_dir) / task.submission_files[split]
  atomic_files.write_text(path, "".join(rows))
  return str(path)
