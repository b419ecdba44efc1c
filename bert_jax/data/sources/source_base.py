"""What an input-source module declares (its `SOURCE`): where pretraining text comes from.

registry.py finds a Source by config.data.source (and a shard's reader by its kind); the
input pipeline, prepare_data and the pretraining entry point call these fields and name no
source. This module imports nothing of bert_jax but the shard spec.
"""
import dataclasses
from typing import Any, Callable, Optional

import numpy as np

from bert_jax.data.sources import shard_spec


# What a tokenized source reads (prepared_data.Part); the stream's TokenizedShard extends it.
# It lives with the sources so that no source imports the stream.
@dataclasses.dataclass
class Documents:
  """Token ids of documents of sentences (a subclass says where each sentence is).

  Attributes:
    tokens: int32 [T], every sentence back to back.
    doc_splits: int64 [D + 1], document d is sentences doc_splits[d]:doc_splits[d + 1].
  """
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
    name: its config.data.source value.
    shard_kind: the ShardSpec.kind of its shards.
    list_shards: config.data -> its shards in a fixed order (the same on every host),
      validated: a ValueError / FileNotFoundError naming the key, glob or file.
    describe: config.data -> what the run's header says it reads ('files GLOB').
    read: (shard, config.data) -> raw_docs.RawDocs, the shard's documents as text (a text
      source: tokenized by the pipeline, with TensorFlow's ops); None for a tokenized source.
    read_tokens: shard -> Documents with `select(docs)` -> (tokens, sentence lengths, doc
      splits) (prepared_data.Part), for a source whose shards are already
      tokenized (read without TensorFlow); None for a text source.
    describe_shard: shard -> its name in logs and errors (default: shard.name).
    check_early: config.data -> None; checks cheap enough to run before TensorFlow and the
      pipeline load (a local glob that matches nothing), raising one line.
    check_tokenizer: (config.data, tokenizer) -> None; refuses a tokenizer the shards do not
      fit (prepared: another vocab or casing than they were made with).
    sized_shards: ShardSpec.size counts bytes of text, so shuffle pools fill by size
      (else each shard fills a pool).
    list_shards_unread: config.data -> the shards from the listing alone (names and sizes),
      no shard's contents read; None where list_shards reads none. Used where several hosts
      each read a share: each then checks its own shards with check_shards instead of every
      host opening every file.
    check_shards: (shards, config.data) -> None; list_shards' checks of contents, on these
      shards only (with list_shards_unread).
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
