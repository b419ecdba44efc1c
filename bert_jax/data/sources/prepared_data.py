"""Pre-tokenized parts (written by `python -m bert_jax.prepare_data`), readable without TensorFlow.

  DIR/part-00000.npz ...   one per source shard, in the source's shard order
  DIR/prepared.json        version 2; the tokenizer's identity, the text layout, and
                           per part its source shard, text bytes and counts

A part is an uncompressed .npz of the arrays of `Part`, holding every document of its shard
(held-out ones too: the split is made when reading), read through etils.epath (local and gs://).
Shard indices and sizes are those of the text, so training on it gives the same stream.
Version-1 parts (`part-NNNNN.tfrecord`) are still read where TensorFlow is installed, and
refused in one line where it is not.
"""
import dataclasses
import hashlib
import io
import json
import os
import zipfile

from etils import epath
import numpy as np

from bert_jax.data.sources import shard_spec
from bert_jax.data.sources import source_base
from bert_jax.runtime import atomic_files
from bert_jax.runtime import optional_tensorflow

INFO_FILE = "prepared.json"
VERSION = 2
_READS = (1, 2)  # version 1: TFRecord parts (TensorFlow only)
_V1_FEATURES = ("input_ids", "sentence_lengths", "document_sentences")
_ARRAYS = {"tokens": np.int32, "lengths": np.int64, "doc_splits": np.int64}


def tokenizer_identity(tokenizer) -> dict:
  """What must match between preparing and training: kind, casing, vocab (hashed)."""
  digest = hashlib.sha256("\n".join(tokenizer.inv_vocab).encode("utf-8")).hexdigest()
  return {"kind": tokenizer.kind, "lowercase": bool(tokenizer.lowercase),
          "vocab_size": int(tokenizer.vocab_size), "vocab_sha256": digest}


def part_file(index: int) -> str:
  return f"part-{index:05d}.npz"


@dataclasses.dataclass
class Part(source_base.Documents):
  """The tokenized documents of one prepared shard, as stored.

  Attributes:
    lengths: int64 [S], tokens per sentence (0 for a sentence without tokens).
  """
  lengths: np.ndarray = dataclasses.field(kw_only=True)

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


def write_part(path: str, part: Part) -> None:
  """Writes a part as an uncompressed .npz of its arrays."""
  with atomic_files.replacing(path) as tmp, tmp.open("wb") as f:
    np.savez(f, **{k: np.asarray(getattr(part, k), dtype) for k, dtype in _ARRAYS.items()})


def read_part(shard: shard_spec.ShardSpec) -> Part:
  """Reads one prepared part; a ValueError names an unreadable or inconsistent one."""
  if shard.name.endswith(".tfrecord"):
    return _read_tfrecord_part(shard.name)
  try:
    # Read whole (one request on gs://), then unpacked from memory.
    with np.load(io.BytesIO(epath.Path(shard.name).read_bytes()), allow_pickle=False) as z:
      arrays = {k: z[k] for k in _ARRAYS}
  except Exception as e:  # pylint: disable=broad-except  (zip, npy, key and I/O errors alike)
    raise ValueError(f"cannot read prepared part {shard.name}: {type(e).__name__}: {e}"
                     ) from None
  part = Part(**arrays)
  bad = [k for k, dtype in _ARRAYS.items() if arrays[k].dtype != dtype or arrays[k].ndim != 1]
  if (bad or not len(part.doc_splits) or part.doc_splits[-1] != len(part.lengths)
      or part.lengths.sum() != len(part.tokens)):
    raise ValueError(f"prepared part {shard.name} is inconsistent (arrays {bad or 'sizes'}); "
                     f"prepare the corpus again")
  return part


def _read_tfrecord_part(path: str) -> Part:
  """Reads a version-1 part (tf.train.Examples of documents) with TensorFlow."""
  tf = optional_tensorflow.tf
  spec = {k: tf.io.RaggedFeature(tf.int64) for k in _V1_FEATURES}
  cols = {k: [] for k in _V1_FEATURES}
  try:
    # Parsed eagerly, batch by batch: a dataset.map would trace a new graph per part (2x the
    # read time of a 4 MB part).
    for records in tf.data.TFRecordDataset(path).batch(256):
      batch = tf.io.parse_example(records, spec)
      for k in _V1_FEATURES:
        cols[k].append(batch[k].flat_values.numpy())
  except tf.errors.OpError as e:
    raise ValueError(f"cannot read prepared part {path}: {e.message.splitlines()[0]}") from None
  flat = {k: np.concatenate(v) if v else np.zeros(0, np.int64) for k, v in cols.items()}
  doc_splits = np.append(0, np.cumsum(flat["document_sentences"])).astype(np.int64)
  return Part(flat["input_ids"].astype(np.int32), doc_splits,
              lengths=flat["sentence_lengths"].astype(np.int64))


def read_info(prepared_dir: str) -> dict:
  path = os.path.join(prepared_dir, INFO_FILE)
  if not epath.Path(path).exists():
    raise FileNotFoundError(f"config.data.prepared_dir={prepared_dir!r} holds no {INFO_FILE}; "
                            f"write it with python -m bert_jax.prepare_data")
  info = json.loads(epath.Path(path).read_text(encoding="utf-8"))
  if info.get("version") not in _READS:
    raise ValueError(f"{path}: version {info.get('version')}, this bert_jax reads "
                     f"{' and '.join(map(str, _READS))}")
  if info["version"] == 1 and not optional_tensorflow.available():
    raise ValueError(f"config.data.prepared_dir={prepared_dir!r} holds version-1 (TFRecord) "
                     f"parts, which need TensorFlow to read, and it is not installed here; "
                     f"re-run python -m bert_jax.prepare_data to write version-2 (numpy) parts")
  return info


def list_shards(data_config) -> list[shard_spec.ShardSpec]:
  """The parts of config.data.prepared_dir as shards, every part present and (local) whole."""
  shards = _listed(data_config)
  check_shards(shards, data_config)
  return shards


def check_shards(shards: list[shard_spec.ShardSpec], data_config) -> None:
  """Refuses a part of `shards` that is cut short (a local part's zip directory read)."""
  del data_config
  for shard in shards:
    _check_whole(shard.name)


def _listed(data_config) -> list[shard_spec.ShardSpec]:
  """The parts as shards (every part present), no part opened."""
  d = data_config.prepared_dir
  if not d:
    raise ValueError("config.data.source='prepared' needs config.data.prepared_dir")
  info = read_info(d)
  shards = []
  for i, part in enumerate(info["parts"]):
    path = os.path.join(d, part["file"])
    if not epath.Path(path).exists():
      raise FileNotFoundError(f"config.data.prepared_dir: {path} is missing ({INFO_FILE} "
                              f"lists {len(info['parts'])} parts)")
    shards.append(shard_spec.ShardSpec(i, path, "prepared", int(part["size"])))
  if not shards:
    raise ValueError(f"config.data.prepared_dir={d!r}: {INFO_FILE} lists no parts")
  return shards


def _check_whole(path: str) -> None:
  """Refuses a local part cut short, before the run compiles: its zip directory must fit."""
  if "://" in path or not path.endswith(".npz"):
    return
  try:
    with zipfile.ZipFile(path) as z:
      size = os.path.getsize(path)
      if any(i.header_offset + i.compress_size > size for i in z.infolist()):
        raise zipfile.BadZipFile("an array runs past the end of the file")
  except (zipfile.BadZipFile, OSError) as e:
    raise ValueError(f"prepared part {path} cannot be read ({e}): it is cut short or "
                     "damaged; prepare the corpus again (python -m bert_jax.prepare_data)"
                     ) from None


def check_tokenizer(data_config, tokenizer) -> None:
  """Refuses shards made with another tokenizer, vocab or casing (a ValueError naming it)."""
  info = read_info(data_config.prepared_dir)
  made, now = info["tokenizer"], tokenizer_identity(tokenizer)
  diff = [k for k in now if made.get(k) != now[k]]
  if diff:
    raise ValueError(
        f"config.data.prepared_dir={data_config.prepared_dir!r} was tokenized with another "
        f"tokenizer ({', '.join(f'{k}: {made.get(k)} vs {now[k]} now' for k in diff)}); use the "
        f"tokenizer settings it was prepared with, or prepare it again")


SOURCE = source_base.Source(
    name="prepared", shard_kind="prepared", list_shards=list_shards,
    describe=lambda d: f"prepared parts in {d.prepared_dir}", read_tokens=read_part,
    describe_shard=lambda shard: os.path.basename(shard.name), check_tokenizer=check_tokenizer,
    sized_shards=True, list_shards_unread=_listed, check_shards=check_shards)
