"""A prepared TFDS dataset's text feature, one document per example; shards are fixed ranges
of examples. Nothing is downloaded: the dataset must be in config.data.tfds_data_dir."""
import numpy as np

from bert_jax.data.sources import raw_docs
from bert_jax.data.sources import shard_spec
from bert_jax.data.sources import source_base
from bert_jax.runtime.optional_tensorflow import tf


def list_shards(data_config) -> list[shard_spec.ShardSpec]:
  """Fixed ranges of tfds_docs_per_shard examples of the split (the dataset validated)."""
  from bert_jax.runtime import cpu_tensorflow  # pylint: disable=g-import-not-at-top
  tfds = cpu_tensorflow.import_tfds()
  if not data_config.tfds_name:
    raise ValueError("config.data.source='tfds' needs config.data.tfds_name")
  try:
    builder = tfds.builder(data_config.tfds_name, data_dir=data_config.tfds_data_dir or None)
  except Exception as e:  # pylint: disable=broad-except
    raise ValueError(f"config.data.tfds_name={data_config.tfds_name!r}: {e}") from None
  if not builder.is_prepared():
    raise ValueError(cpu_tensorflow.not_prepared(
        data_config.tfds_name, data_config.tfds_data_dir, "config.data.tfds_data_dir"))
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


def read(spec: shard_spec.ShardSpec, data_config) -> raw_docs.RawDocs:
  from bert_jax.runtime import cpu_tensorflow  # pylint: disable=g-import-not-at-top
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
  raw_docs.warn_invalid_utf8(spec.name, bad)
  sentences, doc_splits = raw_docs.split_sentences(fixed)
  return raw_docs.RawDocs(sentences, doc_splits, bad)


SOURCE = source_base.Source(
    name="tfds", shard_kind="tfds", list_shards=list_shards,
    describe=lambda d: f"TFDS {d.tfds_name} ({d.tfds_split})", read=read)
