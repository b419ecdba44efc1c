"""Pre-tokenized TFRecord shards: the form of a corpus read for many epochs.

`python -m bert_jax.prepare_data` (prepare_data.py) tokenizes each shard of a
source (files, in blocks of block_mb; TFDS; builtin) once and writes

  DIR/part-00000.tfrecord ...   one per source shard, in the source's shard order
  DIR/prepared.json             the tokenizer's identity, the text layout, and per
                                part its source shard, text bytes and counts

A part holds every document of its shard (held-out ones too: the split is made
when reading, as for text) as tf.train.Examples of up to _DOCS_PER_RECORD
documents: `input_ids` (int64, the tokens of the documents back to back),
`sentence_lengths` (tokens per sentence, empty sentences kept) and
`document_sentences` (sentences per document). Training reads them with
`config.data.source='prepared'`, `config.data.prepared_dir=DIR`: the same shard
indices and sizes as the text, so the same stream, without tokenizing (and
resumes skip without tokenizing).
"""
import dataclasses
import hashlib
import json
import os

import numpy as np

from bert_jax.cpu_tensorflow import tf
from bert_jax.data import sources

INFO_FILE = "prepared.json"
_VERSION = 1
_DOCS_PER_RECORD = 1000
_FEATURES = ("input_ids", "sentence_lengths", "document_sentences")


def tokenizer_identity(tokenizer) -> dict:
  """What must match between preparing and training: kind, casing, vocab (hashed)."""
  digest = hashlib.sha256("\n".join(tokenizer.inv_vocab).encode("utf-8")).hexdigest()
  return {"kind": tokenizer.kind, "lowercase": bool(tokenizer.lowercase),
          "vocab_size": int(tokenizer.vocab_size), "vocab_sha256": digest}


def part_file(index: int) -> str:
  return f"part-{index:05d}.tfrecord"


@dataclasses.dataclass
class Part:
  """The tokenized documents of one prepared shard.

  Attributes:
    tokens: int32 [T], every sentence back to back.
    lengths: int64 [S], tokens per sentence (0 for a sentence without tokens).
    doc_splits: int64 [D + 1], document d is sentences doc_splits[d]:doc_splits[d + 1].
  """
  tokens: np.ndarray
  lengths: np.ndarray
  doc_splits: np.ndarray

  @property
  def num_docs(self) -> int:
    return len(self.doc_splits) - 1

  def select(self, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tokens, sentence lengths, doc splits) of the documents `docs` (sorted), in order."""
    sent_splits = np.append(0, np.cumsum(self.lengths))
    first, last = self.doc_splits[docs], self.doc_splits[docs + 1]
    sizes = last - first
    sents = np.repeat(first - (np.cumsum(sizes) - sizes), sizes) + np.arange(sizes.sum())
    lengths = self.lengths[sents]
    starts = np.repeat(sent_splits[sents], lengths)
    within = np.arange(lengths.sum()) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    tokens = self.tokens[(starts + within).astype(np.int64)]
    return tokens, lengths, np.append(0, np.cumsum(last - first)).astype(np.int64)


def _int64_feature(values: np.ndarray) -> tf.train.Feature:
  return tf.train.Feature(int64_list=tf.train.Int64List(value=np.asarray(values).tolist()))


def write_part(path: str, part: Part) -> None:
  """Writes a part as tf.train.Examples of up to _DOCS_PER_RECORD documents."""
  sent_splits = np.append(0, np.cumsum(part.lengths))
  with tf.io.TFRecordWriter(path) as w:
    for d0 in range(0, part.num_docs, _DOCS_PER_RECORD):
      d1 = min(d0 + _DOCS_PER_RECORD, part.num_docs)
      s0, s1 = part.doc_splits[d0], part.doc_splits[d1]
      example = tf.train.Example(features=tf.train.Features(feature={
          "input_ids": _int64_feature(part.tokens[sent_splits[s0]:sent_splits[s1]]),
          "sentence_lengths": _int64_feature(part.lengths[s0:s1]),
          "document_sentences": _int64_feature(np.diff(part.doc_splits[d0:d1 + 1]))}))
      w.write(example.SerializeToString())


def read_part(shard: sources.ShardSpec) -> Part:
  """Reads one prepared part (a shard of source='prepared')."""
  spec = {k: tf.io.RaggedFeature(tf.int64) for k in _FEATURES}
  cols = {k: [] for k in _FEATURES}
  try:
    # Parsed eagerly, batch by batch: a dataset.map would trace a new graph per part (2x the
    # read time of a 4 MB part).
    for records in tf.data.TFRecordDataset(shard.name).batch(256):
      batch = tf.io.parse_example(records, spec)
      for k in _FEATURES:
        cols[k].append(batch[k].flat_values.numpy())
  except tf.errors.OpError as e:
    raise ValueError(f"cannot read prepared part {shard.name}: {e.message.splitlines()[0]}"
                     ) from None
  flat = {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in cols.items()}
  doc_splits = np.append(0, np.cumsum(flat["document_sentences"])).astype(np.int64)
  return Part(flat["input_ids"].astype(np.int32), flat["sentence_lengths"].astype(np.int64),
              doc_splits)


def read_info(prepared_dir: str) -> dict:
  path = os.path.join(prepared_dir, INFO_FILE)
  if not tf.io.gfile.exists(path):
    raise FileNotFoundError(f"config.data.prepared_dir={prepared_dir!r} holds no {INFO_FILE}; "
                            f"write it with python -m bert_jax.prepare_data")
  with tf.io.gfile.GFile(path, "r") as f:
    info = json.load(f)
  if info.get("version") != _VERSION:
    raise ValueError(f"{path}: version {info.get('version')}, this bert_jax reads {_VERSION}")
  return info


def list_shards(data_config) -> list[sources.ShardSpec]:
  """The parts of config.data.prepared_dir as shards (validated: every part present)."""
  d = data_config.prepared_dir
  if not d:
    raise ValueError("config.data.source='prepared' needs config.data.prepared_dir")
  info = read_info(d)
  shards = []
  for i, part in enumerate(info["parts"]):
    path = os.path.join(d, part["file"])
    if not tf.io.gfile.exists(path):
      raise FileNotFoundError(f"config.data.prepared_dir: {path} is missing ({INFO_FILE} "
                              f"lists {len(info['parts'])} parts)")
    shards.append(sources.ShardSpec(i, path, "prepared", int(part["size"])))
  if not shards:
    raise ValueError(f"config.data.prepared_dir={d!r}: {INFO_FILE} lists no parts")
  return shards


def check_tokenizer(data_config, tokenizer) -> None:
  """Refuses prepared shards made with another tokenizer, vocab or casing.

  Raises:
    ValueError: naming what differs.
  """
  info = read_info(data_config.prepared_dir)
  made, now = info["tokenizer"], tokenizer_identity(tokenizer)
  diff = [k for k in now if made.get(k) != now[k]]
  if diff:
    raise ValueError(
        f"config.data.prepared_dir={data_config.prepared_dir!r} was tokenized with another "
        f"tokenizer ({', '.join(f'{k}: {made.get(k)} vs {now[k]} now' for k in diff)}); use the "
        f"tokenizer settings it was prepared with, or prepare it again")
