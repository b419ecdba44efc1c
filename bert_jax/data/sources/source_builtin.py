"""The built-in corpus (builtin_corpus.py), one shard."""
from bert_jax.data.sources import raw_docs
from bert_jax.data.sources import shard_spec
from bert_jax.data.sources import source_base


def read(spec: shard_spec.ShardSpec, data_config) -> raw_docs.RawDocs:
  del spec, data_config
  from bert_jax.data.sources import builtin_corpus  # pylint: disable=g-import-not-at-top
  return raw_docs.RawDocs(*raw_docs.text_docs(builtin_corpus.load_text().encode("utf-8"),
                                              "sentence_per_line"), 0)


SOURCE = source_base.Source(
    name="builtin", shard_kind="builtin",
    list_shards=lambda d: [shard_spec.ShardSpec(0, "builtin", "builtin", 0)],
    describe=lambda d: "the built-in corpus (Python standard-library docstrings)", read=read)
