"""What an input-source module declares (its `SOURCE`); the pipeline and entry points call
these fields and name no source."""
import dataclasses
from typing import Any, Callable, Optional

import numpy as np

from bert_jax.data.sources import shard_spec


# What a tokenized source reads (prepared_data.Part); the stream's TokenizedShard extends it.
# It lives with the sources so that no source imports the stream.
@dataclasses.dataclass
class Documents:
  """Token ids of documents: tokens int32 [T], sentences back to back; doc_splits int64 [D + 1]."""
  tokens: np.ndarray
  doc_splits: np.ndarray

  @property
  def num_docs(self) -> int:
    return len(self.doc_splits) - 1


def _nothing(*args) -> None:
  del args


@dataclasses.dataclass(frozen=True)
class Source:
  """An input-source module's declaration.

  Attributes:
    list_shards: config.data -> shards in a fixed order (the same on every host), validated:
      a ValueError / FileNotFoundError naming the key, glob or file.
    read: (shard, config.data) -> raw_docs.RawDocs for a text source; None for a tokenized one.
    read_tokens: shard -> Documents with `select(docs)` (prepared_data.Part), for a source
      whose shards are already tokenized (read without TensorFlow); None for a text source.
    check_early: cheap checks run before TensorFlow loads (a local glob matching nothing).
    check_tokenizer: refuses a tokenizer the shards do not fit (prepared: another vocab).
    sized_shards: ShardSpec.size counts bytes of text, so shuffle pools fill by size.
    list_shards_unread / check_shards: the listing without reading contents, and the content
      checks each host then makes on its own shards (so no host opens every file).
  """
  name: str
  shard_kind: str
  list_shards: Callable[[Any], list[shard_spec.ShardSpec]]
  describe: Callable[[Any], str]
  read: Optional[Callable[[shard_spec.ShardSpec, Any], Any]] = None
  read_tokens: Optional[Callable[[shard_spec.ShardSpec], Any]] = None
  describe_shard: Callable[[shard_spec.ShardSpec], str] = lambda shard: shard.name
  check_early: Callable[[Any], None] = _nothing
  check_tokenizer: Callable[[Any, Any], None] = _nothing
  sized_shards: bool = False
  list_shards_unread: Optional[Callable[[Any], list[shard_spec.ShardSpec]]] = None
  check_shards: Callable[[list[shard_spec.ShardSpec], Any], None] = _nothing

  def __post_init__(self):
    if (self.read is None) == (self.read_tokens is None):
      raise ValueError(f"source {self.name!r} needs exactly one of read (text) and "
                       "read_tokens (tokenized)")

  @property
  def tokenized(self) -> bool:
    """Its shards are token ids already: no tokenizing, no TensorFlow."""
    return self.read_tokens is not None
