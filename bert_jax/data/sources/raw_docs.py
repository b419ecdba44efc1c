"""Documents of a shard before tokenization, and the text helpers every text source uses.

Invalid UTF-8 is replaced by U+FFFD and counted (one warning per shard); blank lines and
empty documents are skipped.
"""
from __future__ import annotations  # annotations naming tf are not evaluated (no TensorFlow)

import dataclasses
import logging

import numpy as np

from bert_jax.runtime.optional_tensorflow import tf

# How a text holds documents: Google BERT's one sentence per line with a blank line between
# documents, or one document per line (sentences found at ., ! and ? followed by a capital
# or digit, and at newlines).
FORMATS = ("sentence_per_line", "document_per_line")
# config.data.block_mb of configs/pretrain.py, and of readers with no pretraining config
# (build_vocab).
DEFAULT_BLOCK_MB = 4.0


def block_bytes(data_config) -> int:
  """config.data.block_mb in bytes (validated)."""
  block = int(float(data_config.block_mb) * (1 << 20))
  if block < 64:
    raise ValueError(f"config.data.block_mb={data_config.block_mb} must be >= 64 bytes' worth")
  return block


# A sentence ends at . ! or ? (and closing quotes / brackets) before a capital or digit.
_SENTENCE_END = r"([.!?][\"')\]]*)\s+([\"'(\[]?[\p{Lu}\p{N}])"


@dataclasses.dataclass
class RawDocs:
  """Documents of a shard before tokenization.

  sentences: tf.string [S], stripped, non-empty; doc_splits: int64 [D + 1], document d is
  sentences doc_splits[d]:doc_splits[d + 1]; invalid_utf8: sequences replaced while reading.
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


def decode(data: bytes, name: str) -> tuple[bytes, int]:
  """Valid UTF-8 bytes of `data` (invalid sequences -> U+FFFD) and the count replaced."""
  try:
    data.decode("utf-8")
    return data, 0
  except UnicodeDecodeError:
    pass
  text = data.decode("utf-8", "replace")
  bad = text.count("\ufffd") - data.count("\ufffd".encode("utf-8"))
  warn_invalid_utf8(name, bad)
  return text.encode("utf-8"), bad


# Shards whose invalid UTF-8 was reported: each is reported once per process, not again on
# every later read (a block re-read each epoch).
_REPORTED_UTF8 = set()


def warn_invalid_utf8(name: str, bad: int) -> None:
  if bad and name not in _REPORTED_UTF8:
    _REPORTED_UTF8.add(name)
    logging.warning("%s: %d invalid UTF-8 sequence(s) replaced with U+FFFD (reported once; "
                    "every read replaces them)", name, bad)


def lines_to_docs(text: tf.Tensor) -> tuple[tf.Tensor, np.ndarray]:
  """Google layout: stripped non-blank lines, documents separated by blank lines."""
  lines = tf.strings.strip(tf.strings.split(text, "\n"))  # [lines]
  nonempty = (tf.strings.length(lines) > 0).numpy()
  prev_empty = np.concatenate([[True], ~nonempty[:-1]])
  new_doc = (nonempty & prev_empty)[nonempty]  # per kept line
  sentences = tf.boolean_mask(lines, nonempty)
  return sentences, np.append(np.flatnonzero(new_doc), len(new_doc)).astype(np.int64)


def split_sentences(docs: tf.Tensor) -> tuple[tf.Tensor, np.ndarray]:
  """Documents tf.string [D] -> (sentences [S], doc_splits), split at sentence ends and
  newlines, empty documents dropped."""
  marked = tf.strings.regex_replace(docs, _SENTENCE_END, "\\1\n\\2")
  parts = tf.strings.split(marked, "\n")  # ragged [D, (parts)]
  flat = tf.strings.strip(parts.flat_values)
  keep = (tf.strings.length(flat) > 0).numpy()
  rows = parts.value_rowids().numpy()[keep]
  counts = np.bincount(rows, minlength=int(parts.nrows()))
  counts = counts[counts > 0]
  return tf.boolean_mask(flat, keep), np.append(0, np.cumsum(counts)).astype(np.int64)


def text_docs(data: bytes, fmt: str) -> tuple[tf.Tensor, np.ndarray]:
  """UTF-8 text in format `fmt` (FORMATS) -> (sentences, doc_splits)."""
  text = tf.constant(data, tf.string)
  if fmt == "sentence_per_line":
    return lines_to_docs(text)
  lines = tf.strings.strip(tf.strings.split(text, "\n"))
  return split_sentences(tf.boolean_mask(lines, tf.strings.length(lines) > 0))
