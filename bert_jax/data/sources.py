"""Where pretraining text comes from: shards of raw documents.

A source is a list of shards, each read whole into a `RawDocs` (sentences as
a string tensor plus document splits); a shard is at most about `block_mb` of
text, so memory stays bounded however large the corpus:

  files     a glob (comma-separated globs allowed) of .txt / .gz files;
            `sentence_per_line` (Google BERT: one sentence per line, a blank
            line between documents) or `document_per_line` (sentences found at
            ., ! and ? followed by a capital or digit). A plain file larger
            than `block_mb` is read as blocks: block i holds the documents
            that start in bytes [i * B, (i + 1) * B), found by seeking to i * B
            and reading on to the next document start (a blank line; a newline
            for document_per_line), so a block is addressable from the file's
            size alone, with no index and no scan. A .gz file is one shard.
  prepared  pre-tokenized numpy parts written by `python -m
            bert_jax.prepare_data` (prepared_data.py), one per shard of the
            source they were made from, read without tokenizing (and without
            TensorFlow: every other source needs it, optional_tensorflow.py)
  tfds      a prepared TFDS dataset's text feature; one document per example
            (split into sentences like document_per_line, and at newlines);
            shards are fixed ranges of examples
  builtin   the standard-library corpus of builtin_corpus.py, one shard

Invalid UTF-8 is replaced by U+FFFD and counted (with a warning naming the
file), blank lines and empty documents are skipped. Listing shards validates
the source up front: a glob that matches nothing, a missing or unreadable
file, a binary file, a truncated .gz, a corpus whose files are all empty, an
unknown TFDS dataset.
"""
from __future__ import annotations  # annotations naming tf are not evaluated (no TensorFlow)

import concurrent.futures
import dataclasses
import glob
import gzip
import logging
import os
import zlib

import numpy as np

from bert_jax.data import prepared_data
from bert_jax.data import shard_spec
from bert_jax.optional_tensorflow import tf

FORMATS = ("sentence_per_line", "document_per_line")
SOURCES = ("builtin", "files", "tfds", "prepared")
# A sentence ends at . ! or ? (and closing quotes / brackets) before a capital or digit.
_SENTENCE_END = r"([.!?][\"')\]]*)\s+([\"'(\[]?[\p{Lu}\p{N}])"


@dataclasses.dataclass
class RawDocs:
  """Documents of a shard before tokenization.

  Attributes:
    sentences: tf.string [S], stripped, non-empty.
    doc_splits: int64 [D + 1], document d is sentences doc_splits[d]:doc_splits[d + 1].
    invalid_utf8: invalid UTF-8 sequences replaced while reading.
  """
  sentences: tf.Tensor
  doc_splits: np.ndarray
  invalid_utf8: int = 0

  @property
  def num_docs(self) -> int:
    return len(self.doc_splits) - 1

  def select(self, docs: np.ndarray) -> "RawDocs":
    """The documents `docs` (sorted indices), in order."""
    sizes = np.diff(self.doc_splits)[docs]
    first = np.repeat(self.doc_splits[docs] - np.append(0, np.cumsum(sizes))[:-1], sizes)
    index = first + np.arange(sizes.sum())
    return RawDocs(tf.gather(self.sentences, index), np.append(0, np.cumsum(sizes)),
                   self.invalid_utf8)


def _expand_globs(pattern: str) -> list[str]:
  files = []
  for one in (p.strip() for p in pattern.split(",")):
    if not one:
      continue
    matches = tf.io.gfile.glob(one)
    if not matches:
      raise _no_match(one)
    files += [m for m in matches if not tf.io.gfile.isdir(m)]
  return sorted(set(files))


def check_local_globs(pattern: str) -> None:
  """A local glob or file of config.data.files that matches nothing fails here, in a
  fraction of a second, before the input pipeline and TensorFlow load; list_shards says it
  again for every glob, gs:// too."""
  for one in (p.strip() for p in pattern.split(",")):
    if one and "://" not in one and not glob.glob(one):
      raise _no_match(one)


def _no_match(pattern: str) -> FileNotFoundError:
  if not any(c in pattern for c in "*?["):
    return FileNotFoundError(f"config.data.files: file {pattern!r} does not exist")
  return FileNotFoundError(f"config.data.files: glob {pattern!r} matches no file")


# .gz shards are decompressed whole before training (~1 s per 100 MB here) when they
# total at most this; larger corpora have their first block checked up front, the rest as read.
MAX_GZ_CHECK_BYTES = 2 << 30
_SNIFF_BYTES = 1 << 16


def check_text_file(path: str, whole_gz: bool = True) -> bool:
  """Refuses a shard that is unreadable, truncated (.gz) or not text.

  Text is judged on the first 64 KiB (decompressed for .gz): a NUL byte, or more
  than 1% invalid UTF-8, is a binary file (an image, a TFRecord, a model).

  Returns:
    True when the whole file is shorter than 64 KiB and holds only whitespace
    (no document: skipped like an empty file).

  Raises:
    ValueError: naming the file and what is wrong with it.
  """
  try:
    with tf.io.gfile.GFile(path, "rb") as f:
      if path.endswith(".gz"):
        with gzip.GzipFile(fileobj=f) as z:
          head = z.read(_SNIFF_BYTES)
          while whole_gz and z.read(1 << 24):
            pass
      else:
        head = f.read(_SNIFF_BYTES)
  except (OSError, EOFError, zlib.error, tf.errors.OpError) as e:
    raise ValueError(f"config.data.files: cannot read {path}: {type(e).__name__}: "
                     f"{str(e).splitlines()[0] if str(e) else 'truncated or corrupt'}") from None
  if b"\0" in head:
    raise ValueError(f"config.data.files: {path} is not a text file (NUL bytes in its first "
                     f"64 KiB); pretraining reads UTF-8 text")
  text = head.decode("utf-8", "replace")
  bad = text.count("\ufffd") - head.count("\ufffd".encode("utf-8"))
  if bad > 4 and bad > 0.01 * len(text):
    raise ValueError(f"config.data.files: {path} is not UTF-8 text ({bad} invalid sequences in "
                     f"its first 64 KiB); pretraining reads UTF-8 text")
  return len(head) < _SNIFF_BYTES and not head.strip()


def list_shards(data_config) -> list[shard_spec.ShardSpec]:
  """Lists and validates the shards of the configured source.

  Args:
    data_config: the `config.data` ConfigDict.

  Returns:
    Shards in a fixed order (the same on every host).

  Raises:
    ValueError / FileNotFoundError with the offending key, glob or file.
  """
  source = data_config.source
  if source not in SOURCES:
    raise ValueError(f"config.data.source={source!r}; expected one of {list(SOURCES)}")
  if data_config.format not in FORMATS:
    raise ValueError(f"config.data.format={data_config.format!r}; expected one of {list(FORMATS)}")
  if source == "builtin":
    return [shard_spec.ShardSpec(0, "builtin", "builtin", 0)]
  if source == "files":
    if not data_config.files:
      raise ValueError("config.data.source='files' needs config.data.files (a glob)")
    block = block_bytes(data_config)
    shards, files = [], []
    for path in _expand_globs(data_config.files):
      size = tf.io.gfile.stat(path).length
      if size == 0:
        logging.warning("skipping empty file %s", path)
        continue
      files.append((path, size))
      n = 1 if path.endswith(".gz") else -(-size // block)
      for i in range(n):
        shards.append(shard_spec.ShardSpec(len(shards), path, "file", size if n == 1 else
                                min(block, size - i * block), block=(i, block, n) if n > 1 else ()))
    if not shards:
      raise ValueError(f"config.data.files={data_config.files!r}: every matched file is empty")
    gz_bytes = sum(size for path, size in files if path.endswith(".gz"))
    with concurrent.futures.ThreadPoolExecutor(4) as pool:  # zlib and file reads drop the GIL
      blank = [f[0] for f, b in zip(files, pool.map(
          lambda f: check_text_file(f[0], whole_gz=gz_bytes <= MAX_GZ_CHECK_BYTES), files)) if b]
    if len(blank) == len(files):  # was: a TensorFlow traceback from the input pipeline
      raise ValueError(f"config.data.files={data_config.files!r}: every matched file is empty or "
                       "only whitespace")
    for path in blank:
      logging.warning("skipping %s: only whitespace", path)
    kept = [sh for sh in shards if sh.name not in blank]
    return [dataclasses.replace(sh, index=i) for i, sh in enumerate(kept)] if blank else shards
  if source == "prepared":
    return prepared_data.list_shards(data_config)
  return _tfds_shards(data_config)


# config.data.block_mb of configs/pretrain.py, and of readers with no pretraining config
# (build_vocab).
DEFAULT_BLOCK_MB = 4.0


def block_bytes(data_config) -> int:
  """config.data.block_mb in bytes (validated)."""
  block = int(float(data_config.block_mb) * (1 << 20))
  if block < 64:
    raise ValueError(f"config.data.block_mb={data_config.block_mb} must be >= 64 bytes' worth")
  return block


def _tfds_shards(data_config) -> list[shard_spec.ShardSpec]:
  from bert_jax import cpu_tensorflow  # pylint: disable=g-import-not-at-top
  tfds = cpu_tensorflow.import_tfds()
  if not data_config.tfds_name:
    raise ValueError("config.data.source='tfds' needs config.data.tfds_name")
  try:
    builder = tfds.builder(data_config.tfds_name, data_dir=data_config.tfds_data_dir or None)
  except Exception as e:  # pylint: disable=broad-except
    raise ValueError(f"config.data.tfds_name={data_config.tfds_name!r}: {e}") from None
  if not builder.is_prepared():
    raise ValueError(
        f"TFDS dataset {data_config.tfds_name!r} is not prepared in data_dir "
        f"{builder.data_dir!r} (config.data.tfds_data_dir); nothing is downloaded at run time")
  splits = builder.info.splits
  split = data_config.tfds_split
  if split not in splits:
    raise ValueError(f"config.data.tfds_split={split!r}; {data_config.tfds_name} has "
                     f"{sorted(splits.keys())}")
  features = builder.info.features
  if data_config.tfds_text_key not in features:
    raise ValueError(f"config.data.tfds_text_key={data_config.tfds_text_key!r}; "
                     f"{data_config.tfds_name} features are {sorted(features.keys())}")
  n = splits[split].num_examples
  if n == 0:
    raise ValueError(f"TFDS {data_config.tfds_name} split {split!r} is empty")
  per = max(1, int(data_config.tfds_docs_per_shard))
  return [shard_spec.ShardSpec(i, f"tfds:{data_config.tfds_name}/{split}[{a}:{min(a + per, n)}]", "tfds",
                    min(a + per, n) - a, f"{split}[{a}:{min(a + per, n)}]")
          for i, a in enumerate(range(0, n, per))]


def _decode(data: bytes, name: str) -> tuple[bytes, int]:
  """Valid UTF-8 bytes of `data` (invalid sequences -> U+FFFD) and the count replaced."""
  try:
    data.decode("utf-8")
    return data, 0
  except UnicodeDecodeError:
    pass
  text = data.decode("utf-8", "replace")
  bad = text.count("\ufffd") - data.count("\ufffd".encode("utf-8"))
  _warn_invalid_utf8(name, bad)
  return text.encode("utf-8"), bad


# Shards whose invalid UTF-8 was reported: each is reported once per process, not again on
# every later read (a block re-read each epoch).
_REPORTED_UTF8 = set()


def _warn_invalid_utf8(name: str, bad: int) -> None:
  if bad and name not in _REPORTED_UTF8:
    _REPORTED_UTF8.add(name)
    logging.warning("%s: %d invalid UTF-8 sequence(s) replaced with U+FFFD (reported once; "
                    "every read replaces them)", name, bad)


def _lines_to_docs(text: tf.Tensor) -> tuple[tf.Tensor, np.ndarray]:
  """Google layout: stripped non-blank lines, documents separated by blank lines."""
  lines = tf.strings.strip(tf.strings.split(text, "\n"))  # [lines]
  nonempty = (tf.strings.length(lines) > 0).numpy()
  prev_empty = np.concatenate([[True], ~nonempty[:-1]])
  new_doc = (nonempty & prev_empty)[nonempty]  # per kept line
  sentences = tf.boolean_mask(lines, nonempty)
  return sentences, np.append(np.flatnonzero(new_doc), len(new_doc)).astype(np.int64)


def split_sentences(docs: tf.Tensor) -> tuple[tf.Tensor, np.ndarray]:
  """Documents (one string each) -> sentences, at sentence ends and newlines.

  Args:
    docs: tf.string [D].

  Returns:
    (sentences [S], doc_splits [D' + 1]) with empty documents dropped.
  """
  marked = tf.strings.regex_replace(docs, _SENTENCE_END, "\\1\n\\2")
  parts = tf.strings.split(marked, "\n")  # ragged [D, (parts)]
  flat = tf.strings.strip(parts.flat_values)
  keep = (tf.strings.length(flat) > 0).numpy()
  rows = parts.value_rowids().numpy()[keep]
  counts = np.bincount(rows, minlength=int(parts.nrows()))
  counts = counts[counts > 0]
  return tf.boolean_mask(flat, keep), np.append(0, np.cumsum(counts)).astype(np.int64)


def read_documents(spec: shard_spec.ShardSpec, data_config) -> RawDocs:
  """Reads one shard into documents of sentences.

  Args:
    spec: the shard.
    data_config: the `config.data` ConfigDict (format, TFDS keys).

  Returns:
    RawDocs (may hold no documents: an empty shard).
  """
  if spec.kind == "tfds":
    return _read_tfds(spec, data_config)
  if spec.kind == "builtin":
    from bert_jax.data import builtin_corpus  # pylint: disable=g-import-not-at-top
    data, bad, fmt = builtin_corpus.load_text().encode("utf-8"), 0, "sentence_per_line"
  else:
    try:
      with tf.io.gfile.GFile(spec.name, "rb") as f:
        data = _read_block(f, spec, data_config.format) if spec.block else f.read()
      if spec.name.endswith(".gz"):
        data = gzip.decompress(data)
    except (OSError, tf.errors.OpError, EOFError) as e:
      raise OSError(f"cannot read {spec.name}: {e}") from None
    data, bad = _decode(data, spec.name)
    fmt = data_config.format
  text = tf.constant(data, tf.string)
  if fmt == "sentence_per_line":
    sentences, doc_splits = _lines_to_docs(text)
  else:
    lines = tf.strings.strip(tf.strings.split(text, "\n"))
    sentences, doc_splits = split_sentences(
        tf.boolean_mask(lines, tf.strings.length(lines) > 0))
  return RawDocs(sentences, doc_splits, bad)


def _document_start(f, pos: int, file_size: int, fmt: str, limit: int) -> int:
  """The first document start after byte pos - 1, searched within `limit` bytes.

  A document starts after a blank line (sentence_per_line) or a newline
  (document_per_line). Without a blank line in reach (one huge document) a
  line start is used, without a newline `pos` itself.
  """
  if pos >= file_size:
    return file_size
  f.seek(pos - 1)
  window = f.read(limit)
  for sep in ((b"\n\n", b"\n") if fmt == "sentence_per_line" else (b"\n",)):
    j = window.find(sep)
    if j >= 0:
      return pos - 1 + j + len(sep)
  return pos


def _read_block(f, spec: shard_spec.ShardSpec, fmt: str) -> bytes:
  """The documents that start in block i of a file: bytes [start(i), start(i + 1))."""
  i, block, n = spec.block
  size = f.size()
  # Searches stay within block - 2 bytes, so start(i) < start(i + 1).
  limit = block - 2
  start = 0 if i == 0 else _document_start(f, i * block, size, fmt, limit)
  end = size if i == n - 1 else _document_start(f, (i + 1) * block, size, fmt, limit)
  f.seek(start)
  return f.read(max(0, end - start))


def _read_tfds(spec: shard_spec.ShardSpec, data_config) -> RawDocs:
  from bert_jax import cpu_tensorflow  # pylint: disable=g-import-not-at-top
  tfds = cpu_tensorflow.import_tfds()
  builder = tfds.builder(data_config.tfds_name, data_dir=data_config.tfds_data_dir or None)
  ds = builder.as_dataset(split=spec.split, shuffle_files=False)
  key = data_config.tfds_text_key
  texts = list(ds.map(tf.autograph.experimental.do_not_convert(lambda ex: ex[key]))
               .batch(4096).as_numpy_iterator())
  docs = tf.constant(np.concatenate(texts) if texts else np.zeros(0, object), tf.string)
  fixed = tf.strings.unicode_transcode(docs, "UTF-8", "UTF-8", errors="replace",
                                       replacement_char=0xFFFD)
  replacement = "\ufffd".encode("utf-8")
  def count(x):
    return int(tf.reduce_sum(tf.strings.split(x, replacement).row_lengths() - 1))
  bad = count(fixed) - count(docs)
  _warn_invalid_utf8(spec.name, bad)
  sentences, doc_splits = split_sentences(fixed)
  return RawDocs(sentences, doc_splits, bad)


def describe(spec: shard_spec.ShardSpec) -> str:
  if spec.kind not in ("file", "prepared"):
    return spec.name
  name = os.path.basename(spec.name)
  return f"{name} (block {spec.block[0] + 1} of {spec.block[2]})" if spec.block else name
