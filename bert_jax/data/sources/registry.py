"""config.data.source -> its source module's SOURCE (source_base.Source).

A source is a list of shards, each at most about `block_mb` of text and read whole, so
memory stays bounded however large the corpus. Built in: files (source_files.py), prepared
(prepared_data.py), tfds (source_tfds.py), builtin (source_builtin.py). A source from
outside the package calls `register`; source modules import source_base, never this module.
"""
from bert_jax.data.sources import prepared_data
from bert_jax.data.sources import raw_docs
from bert_jax.data.sources import shard_spec
from bert_jax.data.sources import source_base
from bert_jax.data.sources import source_builtin
from bert_jax.data.sources import source_files
from bert_jax.data.sources import source_tfds

# config.data.source -> the Source serving it.
SOURCES: dict[str, source_base.Source] = {}


def register(source: source_base.Source) -> None:
  """Serves config.data.source=`source.name` (and shards of `source.shard_kind`)."""
  taken = [s.name for s in SOURCES.values()
           if s is not source and (s.name == source.name or s.shard_kind == source.shard_kind)]
  if taken:
    raise ValueError(f"source {source.name!r} (shard kind {source.shard_kind!r}) clashes with "
                     f"the registered {taken}")
  SOURCES[source.name] = source


for _module in (source_builtin, source_files, source_tfds, prepared_data):
  register(_module.SOURCE)


def names() -> list[str]:
  """Every registered source name."""
  return list(SOURCES)


def get(name: str) -> source_base.Source:
  """The Source serving config.data.source=`name` (one line naming the known ones if none)."""
  if name not in SOURCES:
    raise ValueError(f"config.data.source={name!r}; expected one of {names()}")
  return SOURCES[name]


def of_shard(shard: shard_spec.ShardSpec) -> source_base.Source:
  """The Source whose shards are of `shard.kind`."""
  return next(s for s in SOURCES.values() if s.shard_kind == shard.kind)


def list_shards(source: source_base.Source, data_config, read: bool = True
                ) -> list[shard_spec.ShardSpec]:
  """The configured source's validated shards, in the same fixed order on every host.

  With read=False the checks that read contents are left to each host on its own shards
  (`check_shards`), where the source has `list_shards_unread`. Raises ValueError /
  FileNotFoundError naming the offending key, glob or file.
  """
  if data_config.format not in raw_docs.FORMATS:
    raise ValueError(f"config.data.format={data_config.format!r}; expected one of "
                     f"{list(raw_docs.FORMATS)}")
  if not read and source.list_shards_unread is not None:
    return source.list_shards_unread(data_config)
  return source.list_shards(data_config)


def check_shards(source: source_base.Source, shards: list[shard_spec.ShardSpec],
                 data_config) -> None:
  """The content checks `list_shards(..., read=False)` skipped, on this host's shards."""
  if source.list_shards_unread is not None:
    source.check_shards(shards, data_config)


def read_documents(spec: shard_spec.ShardSpec, data_config) -> raw_docs.RawDocs:
  """Reads one shard of a text source into documents of sentences (may hold none)."""
  return of_shard(spec).read(spec, data_config)


def describe(spec: shard_spec.ShardSpec) -> str:
  """A shard's name in logs and errors."""
  return of_shard(spec).describe_shard(spec)
