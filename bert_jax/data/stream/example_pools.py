"""Examples of a shard (NSP / SOP pairs or full sentences) and pools of them: the examples
of consecutive shards, shuffled, laid out as rows a chunk at a time."""
from typing import Callable, Optional

import numpy as np

from bert_jax.data.stream import segments
from bert_jax.data.stream import stateless_random


class ExamplePool:
  """Examples of consecutive shards, shuffled, laid out as rows."""

  def __init__(self, tokens: np.ndarray, ex: segments.Examples,
               pack_splits: Optional[np.ndarray]):
    self.tokens = tokens
    self.ex = ex
    self.pack_splits = pack_splits
    self.num_rows = len(ex) if pack_splits is None else len(pack_splits) - 1

  def rows(self, lo: int, hi: int, build_rows: Callable) -> dict[str, np.ndarray]:
    """Rows lo..hi, laid out by build_rows(tokens, examples, pack_splits)."""
    if self.pack_splits is None:
      return build_rows(self.tokens, self.ex.take(np.arange(lo, hi)), None)
    e_lo, e_hi = self.pack_splits[lo], self.pack_splits[hi]
    return build_rows(self.tokens, self.ex.take(np.arange(e_lo, e_hi)),
                      self.pack_splits[lo:hi + 1] - e_lo)


def empty_pool(packing: bool) -> ExamplePool:
  return ExamplePool(np.zeros(0, np.int32), segments.Examples.empty(),
                     np.zeros(1, np.int64) if packing else None)


def shard_examples(ts: segments.TokenizedShard, *, mode: str, seq_len: int, key,
                   short_seq_prob: float, sep_id: int, packing: bool
                   ) -> tuple[np.ndarray, segments.Examples]:
  """(tokens, examples) of a tokenized shard: NSP / SOP pairs drawn with `key`, else full
  sentences (across documents unless packing)."""
  if mode in ("nsp", "sop"):
    pairs = segments.nsp_examples if mode == "nsp" else segments.sop_examples
    return ts.tokens, pairs(ts, key=key, max_num_tokens=seq_len - 3,
                            short_seq_prob=short_seq_prob)
  return segments.sentence_examples(ts, max_len=seq_len, sep_id=sep_id,
                                    cross_documents=not packing)


def make_pool(parts, key, seq_len: int, packing: bool) -> ExamplePool:
  """The pool of `parts` ((tokens, examples) per shard), shuffled with `key` (None: in order)."""
  offsets = np.cumsum([0] + [len(t) for t, _ in parts])
  tokens = np.concatenate([t for t, _ in parts])
  ex = segments.Examples.concatenate([e.shift(o) for (_, e), o in zip(parts, offsets)])
  if key is not None:
    ex = ex.take(stateless_random.permutation(key, len(ex)))
  pack = segments.pack_rows(ex.row_len, seq_len) if packing else None
  return ExamplePool(tokens, ex, pack)
