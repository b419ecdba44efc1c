"""The surface every tokenizer gives the pipeline, the tasks and fill-mask.

Special tokens are named by role: cls (RoBERTa's `<s>`), sep, pad, unk, mask. A pair is
`cls A sep B sep` with `pair_separators` seps between the segments (RoBERTa: 2).
"""
from __future__ import annotations  # annotations naming tf are not evaluated (no TensorFlow)

from typing import Iterable, Optional, Sequence

import numpy as np

from bert_jax.runtime.optional_tensorflow import tf  # pylint: disable=unused-import


class Tokenizer:
  """Vocab maps, special ids and input building shared by every kind.

  Attributes:
    regular_ids: int32 ids a random MLM replacement is drawn from.
    is_continuation: bool [vocab_size], pieces that continue a word (whole-word masking).
    pair_segment_ids: whether the second segment gets segment id 1 (RoBERTa: 0).
  """

  kind: str
  vocab_file: Optional[str]
  lowercase: bool
  pair_separators = 1
  pair_segment_ids = True

  def _set_vocab(self, tokens: Sequence[str], specials: dict[str, str],
                 not_regular: Iterable[str] = ()):
    """Sets the vocab maps and special ids; `not_regular` tokens are never random replacements."""
    self.inv_vocab = list(tokens)
    self.vocab = {t: i for i, t in enumerate(self.inv_vocab)}
    self.vocab_size = len(self.inv_vocab)
    self.special_tokens = dict(specials)
    for role in ("pad", "unk", "cls", "sep", "mask"):
      setattr(self, f"{role}_id", self.vocab[specials[role]])
    self.special_ids = np.array([self.pad_id, self.unk_id, self.cls_id, self.sep_id,
                                 self.mask_id], np.int32)
    excluded = set(specials.values()) | set(not_regular)
    self.regular_ids = np.array([i for i, t in enumerate(self.inv_vocab) if t not in excluded],
                                np.int32)

  # -- Text to ids ------------------------------------------------------------------

  def tokenize_to_ids(self, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each text, no special tokens."""
    raise NotImplementedError

  def ids_and_lengths(self, texts: tf.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Flat int32 ids and int64 per-text counts of a [batch] string tensor (the pipeline's call)."""
    ids = self.tokenize_to_ids([t.decode("utf-8", "replace") for t in texts.numpy()])
    lengths = np.array([len(x) for x in ids], np.int64)
    flat = np.fromiter((i for x in ids for i in x), np.int32, count=int(lengths.sum()))
    return flat, lengths

  def tokenize(self, text: str) -> list[str]:
    """The pieces of one text (e.g. ['un', '##aff', '##able'])."""
    return self.convert_ids_to_tokens(self.tokenize_to_ids([text])[0])

  # -- Inputs with special tokens ------------------------------------------------------

  def num_special_tokens(self, pair: bool) -> int:
    """Special tokens `build_inputs` adds to one text (2) or a pair (3, RoBERTa 4)."""
    return 2 + self.pair_separators if pair else 2

  def build_inputs(self, ids_a: Sequence[int],
                   ids_b: Optional[Sequence[int]] = None) -> tuple[list[int], list[int]]:
    """(input ids, segment ids) of `cls A sep` or `cls A sep [sep] B sep`."""
    ids = [self.cls_id, *ids_a, self.sep_id]
    if ids_b is None:
      return ids, [0] * len(ids)
    second = [self.sep_id] * (self.pair_separators - 1) + list(ids_b) + [self.sep_id]
    return ids + second, [0] * len(ids) + [int(self.pair_segment_ids)] * len(second)

  # -- Ids and tokens -----------------------------------------------------------------

  def convert_tokens_to_ids(self, tokens: Iterable[str]) -> list[int]:
    """Ids of tokens; unknown tokens map to the unk id."""
    return [self.vocab.get(t, self.unk_id) for t in tokens]

  def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
    """Tokens of ids."""
    return [self.inv_vocab[int(i)] for i in ids]

  def token_text(self, token_id: int) -> str:
    """The text one token stands for, as transformers' `decode([id])` gives it: the piece
    itself for WordPiece (`##s` stays), BPE's bytes with `Ġ` a space, SentencePiece's piece
    without its `▁`."""
    return self.inv_vocab[int(token_id)]
