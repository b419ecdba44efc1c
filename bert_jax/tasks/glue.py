"""GLUE: the task registry, readers (GLUE TSV files or TFDS), encoding, submissions.

Every GLUE task is in `TASKS` (cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte,
wnli, ax): its columns, labels (or regression), metrics, splits and GLUE
submission file names. `get_task(name)` looks one up and lists the known names
when it fails.

Data comes from either
  * the original GLUE TSV layout, `data_dir/<dir_name>/<split>.tsv` (for
    example `glue/MRPC/dev.tsv`, `glue/MNLI/dev_matched.tsv`; AX is read from
    `AX/test.tsv`, `diagnostic/diagnostic.tsv` or `AX.tsv`), read by
    `read_tsv`; or
  * a prepared TFDS `glue/<task>` (never downloaded), read by `read_tfds`.
`read_split` picks one. Splits are named train, dev, test (MNLI: dev_matched,
dev_mismatched, test_matched, test_mismatched; AX: test only, predicted with an
MNLI model).

TSV files are read as GLUE's own loaders read them: tab-separated, no quoting
(MRPC and MNLI sentences contain bare `"`), UTF-8 with an optional BOM (MRPC),
CoLA's train/dev files have no header (columns: source, label, original
label, sentence). Malformed rows: a row whose column count differs from the
header, or whose label is not one of the task's labels (or not a number for
STS-B), raises `GlueFormatError` naming the file and line. QQP is the one
exception: the reference loaders (Hugging Face's QqpProcessor, TFDS) skip
QQP rows with missing columns, so `read_tsv` skips them too, and logs how many
and on which lines. Blank lines are ignored.

`encode_examples` turns examples into BERT inputs as Google's run_classifier
does: `[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]`, pairs truncated longest
first, single texts cut to max_seq_length - 2.
"""
import dataclasses
import logging
import os
from typing import Optional, Sequence, Union

from etils import epath
import numpy as np

from bert_jax.runtime import atomic_files
from bert_jax.runtime import text_file

Label = Union[int, float, None]


class GlueFormatError(ValueError):
  """A GLUE data file that cannot be read as its task expects."""


@dataclasses.dataclass(frozen=True)
class GlueTask:
  """One GLUE task.

  Attributes:
    name: registry key, e.g. 'mrpc'.
    dir_name: folder of the GLUE TSV layout and submission name, e.g. 'MRPC'.
    text_a: TSV column of the first text.
    text_b: TSV column of the second text, None for single-sentence tasks.
    label_column: TSV column of the label in train/dev files.
    labels: label strings as written in the TSV files (label id = position),
      or None for a regression task (STS-B).
    metrics: metric names (bert_jax.tasks.metrics.METRICS) for dev splits.
    train_split: the training split, None when the task has none (AX).
    dev_splits: evaluation splits with labels.
    test_splits: unlabeled splits predicted for the GLUE server.
    submission_files: test split -> file name the GLUE server expects.
    tfds_name: TFDS dataset name.
    tfds_text_a: TFDS feature of the first text.
    tfds_text_b: TFDS feature of the second text, or None.
    tfds_labels: TFDS ClassLabel names, in TFDS order (None for regression).
    headerless_columns: column names of the TSV files that have no header
      (CoLA train/dev), or None when every file has a header.
    skip_malformed: skip (and count) rows with a wrong column count instead of
      raising (the reference loaders' convention for QQP).
    model_task: the task whose fine-tuned model makes the predictions (AX is
      predicted by an MNLI model); equal to `name` otherwise.
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
    """Key of `metric` on `split` in eval_results.json.

    MNLI's keys carry `_matched` / `_mismatched`; other tasks use the bare name.

    Args:
      metric: a name from `self.metrics`.
      split: one of `self.dev_splits`.

    Returns:
      e.g. 'accuracy_matched' for ('accuracy', 'dev_matched'), 'f1' for MRPC.
    """
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
  """Returns the task called `name` ('MRPC', 'sts-b' and 'sst_2' are accepted too).

  Args:
    name: a GLUE task name.

  Returns:
    The registry entry.

  Raises:
    ValueError: for an unknown name, listing the known ones.
  """
  key = name.lower().replace("-", "").replace("_", "")
  if key not in TASKS:
    raise ValueError(f"unknown GLUE task {name!r}; known tasks: {sorted(TASKS)}")
  return TASKS[key]


@dataclasses.dataclass
class GlueExample:
  """One example.

  Attributes:
    guid: where it came from, 'FILE:LINE' for TSV rows, 'glue/task/split:idx' for TFDS.
    text_a: the first text.
    text_b: the second text, or None.
    label: class id (position in task.labels), float score (STS-B), or None (test).
    index: the row's index for GLUE submissions (the file's index/id column, or
      the 0-based row number when the file has none; TFDS `idx`).
  """
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
  """Path of `split` of `task` in the GLUE TSV layout under `data_dir`.

  Args:
    task: the task.
    data_dir: the GLUE folder holding CoLA/, MRPC/, ...
    split: a split of the task.

  Returns:
    The file path (for AX, the first existing candidate).

  Raises:
    FileNotFoundError: naming every path tried.
  """
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
  text = text_file.read_utf8(path, "GLUE file")
  for number, line in enumerate(text.split("\n"), start=1):
    if line.endswith("\r"):
      line = line[:-1]
    if line.strip():
      yield number, line


def read_tsv(task: GlueTask, data_dir: str, split: str,
             skip_malformed: Optional[bool] = None) -> list:
  """Reads one split from the GLUE TSV layout.

  Args:
    task: the task (from `get_task`).
    data_dir: the GLUE folder holding <dir_name>/<split>.tsv.
    split: a split of the task ('train', 'dev', 'test', 'dev_matched', ...).
    skip_malformed: skip rows with a wrong column count (logged with their
      line numbers) instead of raising; default: the task's convention (QQP only).

  Returns:
    A list of GlueExample in file order; labels are None on test splits.

  Raises:
    GlueFormatError: a missing column, a malformed row or a bad label, with the
      file and line.
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
  """Maps one TFDS `glue/<task>` example (numpy) to a GlueExample.

  TFDS labels are ClassLabel ids in TFDS order (MNLI: entailment, neutral,
  contradiction; CoLA: unacceptable, acceptable, ...); they are mapped by name to
  the TSV labels (names that are not TSV labels stand for '0' / '1' by their
  TFDS id, as TFDS builds them from the TSV files). Test splits carry -1 in
  TFDS and get label None.

  Args:
    task: the task.
    split: our split name (decides whether a label is expected).
    features: a dict with the TFDS features ('idx', 'label', text features).

  Returns:
    The example.
  """
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
  """Reads one split from a prepared TFDS `glue/<task>` (no download).

  Args:
    task: the task.
    tfds_data_dir: the TFDS data_dir where glue/<task> was prepared.
    split: our split name ('dev' reads TFDS 'validation', etc.).

  Returns:
    A list of GlueExample sorted by TFDS `idx` (the row order of the TSV files).
  """
  _check_split(task, split)
  from bert_jax.runtime import cpu_tensorflow  # pylint: disable=g-import-not-at-top
  tfds = cpu_tensorflow.import_tfds()
  tfds_split = _TFDS_SPLITS[split]
  try:
    ds = tfds.load(task.tfds_name, split=tfds_split, data_dir=tfds_data_dir or None,
                   download=False)
  except Exception as e:  # TFDS raises several types for missing data.
    raise FileNotFoundError(
        f"TFDS {task.tfds_name} split {tfds_split!r} is not prepared in data_dir "
        f"{tfds_data_dir!r} (nothing is downloaded at run time): {e}") from e
  examples = [example_from_tfds(task, split, ex) for ex in tfds.as_numpy(ds)]
  examples.sort(key=lambda ex: ex.index)
  logging.info("GLUE %s %s: %d examples from TFDS %s", task.name, split, len(examples),
               task.tfds_name)
  return examples


def read_split(task: GlueTask, split: str, *, source: str, data_dir: str = "",
               tfds_data_dir: str = "") -> list:
  """Reads a split from the TSV layout (source='tsv') or TFDS (source='tfds').

  Args:
    task: the task.
    split: a split of the task.
    source: 'tsv' or 'tfds'.
    data_dir: GLUE TSV folder (source='tsv').
    tfds_data_dir: TFDS data_dir (source='tfds').

  Returns:
    A list of GlueExample.
  """
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
  """Encodes examples as BERT classifier inputs (Google run_classifier layout).

  `[CLS] a [SEP]` (segment 0) `b [SEP]` (segment 1), padded; pairs are
  truncated longest-first to max_seq_length - 3 pieces, single texts to
  max_seq_length - 2 (the tokenizer's `build_inputs` layout: RoBERTa's
  `<s> a </s></s> b </s>`, one segment, takes 4).

  Args:
    tokenizer: a bert_jax.data.tokenizers.tokenizer tokenizer.
    examples: GlueExample list (labels None are encoded as 0).
    max_seq_length: tokens per row, including special tokens.
    is_regression: float labels (STS-B) under 'labels' instead of class ids.

  Returns:
    A dict of numpy arrays:
      input_ids, input_mask, segment_ids: int32 [n, max_seq_length]
      label_ids: int32 [n] (classification) or labels: float32 [n] (regression)
      weights: float32 [n], 1 for every example (padding added later gets 0)
      example_index: int32 [n], position of the example in `examples`
      truncated: bool [n], whether word pieces were cut
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
  """Writes test predictions in the GLUE server's format.

  One file per test split (CoLA.tsv, SST-2.tsv, MRPC.tsv, STS-B.tsv, QQP.tsv,
  MNLI-m.tsv, MNLI-mm.tsv, QNLI.tsv, RTE.tsv, WNLI.tsv, AX.tsv) with a header
  `index<TAB>prediction` and one row per example: the example's index and the
  predicted label as written in the task's TSV files (0/1, entailment, ...),
  or for STS-B the score clipped to [0, 5] with 3 decimals.

  Args:
    task: the task (use the AX task with an MNLI model's predictions for AX).
    split: a test split of the task.
    examples: the split's examples, as read.
    predictions: [n] class ids (or scores for STS-B), aligned with `examples`.
    output_dir: folder to write into (created if needed).

  Returns:
    The path written.
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
