"""Pretraining examples from tokenized documents, vectorised over a shard.

  nsp             Google's create_pretraining_data on the fly. One deliberate difference: a
                  one-sentence chunk that draws IsNext takes the next sentence as B (Google
                  always makes it random, which lowers the IsNext rate).
  full_sentences  RoBERTa's FULL-SENTENCES, across documents with [SEP] at each end.
  doc_sentences   (for packing) the same, never crossing a document.

Google's loop is sequential; here each chunk's end is a function of its first sentence alone,
and the chunks used are the orbit of sentence 0 under that map (pointer doubling, O(log n)
vectorised steps). Draws are keyed by (key, sentence index): the examples are a pure
function of the shard and the key.
"""
import dataclasses

import numpy as np

from bert_jax.data.sources import source_base
from bert_jax.data.stream import stateless_random


@dataclasses.dataclass
class Examples:
  """Examples as spans of a token array: A (a_start, a_len), B (length 0 when none), label
  (1 = random next), final_sep (False when A already ends with a document's [SEP])."""
  a_start: np.ndarray
  a_len: np.ndarray
  b_start: np.ndarray
  b_len: np.ndarray
  label: np.ndarray
  final_sep: np.ndarray

  def __len__(self):
    return len(self.a_start)

  @property
  def row_len(self) -> np.ndarray:
    """Tokens of each example's row: [CLS] A [SEP] (B [SEP])."""
    return 1 + self.a_len + self.final_sep + self.b_len + (self.b_len > 0)

  def take(self, index: np.ndarray) -> "Examples":
    return Examples(*(getattr(self, f.name)[index] for f in dataclasses.fields(self)))

  def shift(self, offset: int) -> "Examples":
    return dataclasses.replace(self, a_start=self.a_start + offset, b_start=self.b_start + offset)

  @staticmethod
  def concatenate(parts: list["Examples"]) -> "Examples":
    return Examples(*(np.concatenate([getattr(p, f.name) for p in parts])
                      for f in dataclasses.fields(Examples)))

  @staticmethod
  def empty() -> "Examples":
    z = np.zeros(0, np.int64)
    return Examples(z, z, z, z, np.zeros(0, np.int32), np.zeros(0, bool))


@dataclasses.dataclass
class TokenizedShard(source_base.Documents):
  """A shard's token ids; sent_splits int64 [S + 1] bound each sentence."""
  sent_splits: np.ndarray = dataclasses.field(kw_only=True)

  @property
  def num_sentences(self) -> int:
    return len(self.sent_splits) - 1

  @property
  def nbytes(self) -> int:
    return self.tokens.nbytes + self.sent_splits.nbytes + self.doc_splits.nbytes


def split_long_sentences(shard: TokenizedShard, max_len: int) -> TokenizedShard:
  """Splits every sentence longer than max_len (>= 1) tokens into consecutive pieces."""
  lengths = np.diff(shard.sent_splits)
  pieces = np.maximum(1, -(-lengths // max_len))  # ceil, at least 1
  if np.all(pieces == 1):
    return shard
  first = np.repeat(np.cumsum(pieces) - pieces, pieces)
  within = np.arange(pieces.sum()) - first
  starts = np.repeat(shard.sent_splits[:-1], pieces) + within * max_len
  sent_splits = np.append(starts, shard.sent_splits[-1]).astype(np.int64)
  new_index = np.append(0, np.cumsum(pieces))  # old sentence -> new first piece
  return TokenizedShard(shard.tokens, new_index[shard.doc_splits].astype(np.int64),
                        sent_splits=sent_splits)


def chain_starts(nxt: np.ndarray) -> np.ndarray:
  """The orbit of 0 under `nxt` (nxt[i] > i, n ends it): sorted int64 indices, all < n."""
  n = len(nxt)
  if n == 0:
    return np.zeros(0, np.int64)
  jump = np.append(nxt, n).astype(np.int64)  # [n + 1], n is absorbing
  reached = np.zeros(n + 1, bool)
  reached[0] = True
  # After round r, `reached` holds every node within 2**r steps of 0.
  for _ in range(int(np.ceil(np.log2(n + 1))) + 1):
    reached[jump[np.flatnonzero(reached)]] = True
    jump = jump[jump]
  return np.flatnonzero(reached[:n]).astype(np.int64)


def nsp_examples(shard: TokenizedShard, *, key, max_num_tokens: int,
                 short_seq_prob: float) -> Examples:
  """Google BERT's sentence-pair instances of every document (label 1 = random B).

  Sentences longer than max_num_tokens // 2 (= (seq_len - 3) // 2) must be split first; derive
  `key` from seed, epoch and shard.
  """
  return _pair_examples(shard, key, max_num_tokens, short_seq_prob, sentence_order=False)


def sop_examples(shard: TokenizedShard, *, key, max_num_tokens: int,
                 short_seq_prob: float) -> Examples:
  """ALBERT's sentence-order pairs: B is always the rest of A's chunk, A and B swapped with
  probability 1/2 before truncation (label 1 = swapped)."""
  return _pair_examples(shard, key, max_num_tokens, short_seq_prob, sentence_order=True)


def _pair_examples(shard: TokenizedShard, key, max_num_tokens: int, short_seq_prob: float,
                   sentence_order: bool) -> Examples:
  """NSP pairs (sentence_order=False) or SOP pairs (True); see nsp_examples / sop_examples."""
  num_sent, num_docs = shard.num_sentences, shard.num_docs
  if num_sent == 0:
    return Examples.empty()
  cum = shard.sent_splits  # [S + 1] token offsets
  doc_sizes = np.diff(shard.doc_splits)
  doc_of = np.repeat(np.arange(num_docs), doc_sizes)  # [S]
  doc_end = shard.doc_splits[1:][doc_of]  # [S] first sentence after the document
  sent = np.arange(num_sent)

  # Per document target length, as Google (one draw per document).
  docs = np.arange(num_docs)
  short = stateless_random.uniform(stateless_random.derive(key, 1), docs) < short_seq_prob
  short_target = stateless_random.randint(stateless_random.derive(key, 2), docs, 2,
                                          max_num_tokens + 1)
  target_doc = np.where(short, short_target, max_num_tokens)
  target = target_doc[doc_of]  # [S]

  # The chunk that would start at each sentence: sentences [i, end).
  end = np.minimum(np.searchsorted(cum, cum[:-1] + target, side="left"), doc_end)
  draw_random = stateless_random.uniform(stateless_random.derive(key, 4), sent) < 0.5
  if sentence_order:  # B always continues A: never a random document.
    draw_random = np.zeros(num_sent, bool)
  # A one-sentence chunk that draws IsNext takes the next sentence as B (Google
  # forces a random B there, which pulls IsNext well below 50%).
  end = np.where((end == sent + 1) & ~draw_random & (sent + 1 < doc_end), sent + 2, end)
  size = end - sent
  a_end = stateless_random.randint(stateless_random.derive(key, 3), sent, 1, np.maximum(size, 2))
  a_end = np.where(size >= 2, a_end, 1)
  is_random = (size == 1) | draw_random
  nxt = np.where(is_random, sent + a_end, end)  # Unused sentences are put back.
  starts = chain_starts(nxt)
  if sentence_order:  # A lone last sentence of a document has no order to predict.
    starts = starts[size[starts] >= 2]

  a_end, is_random, end, target = a_end[starts], is_random[starts], end[starts], target[starts]
  a_start = cum[starts]
  a_len = cum[starts + a_end] - a_start
  # B continues A ...
  b_start = cum[starts + a_end]
  b_len = cum[end] - b_start
  # ... or comes from a random other document, from a random sentence on.
  doc = doc_of[starts]
  other = stateless_random.randint(stateless_random.derive(key, 5), starts, 0, max(num_docs - 1, 1))
  other = np.where(num_docs > 1, other + (other >= doc), doc)
  r_first = shard.doc_splits[other]
  r_start = r_first + stateless_random.randint(stateless_random.derive(key, 6), starts, 0,
                                               doc_sizes[other])
  r_end = np.searchsorted(cum, cum[r_start] + (target - a_len), side="left")
  r_end = np.clip(r_end, r_start + 1, shard.doc_splits[other + 1])
  b_start = np.where(is_random, cum[r_start], b_start)
  b_len = np.where(is_random, cum[r_end] - cum[r_start], b_len)
  label = is_random
  if sentence_order:  # Swapped with probability 1/2, before truncation (ALBERT).
    label = stateless_random.uniform(stateless_random.derive(key, 9), starts) < 0.5
    a_start, a_len, b_start, b_len = (np.where(label, b_start, a_start), np.where(label, b_len, a_len),
                                      np.where(label, a_start, b_start), np.where(label, a_len, b_len))

  # truncate_seq_pair: drop from the longer side (ties: B) until it fits.
  excess = np.maximum(a_len + b_len - max_num_tokens, 0)
  gap = np.abs(a_len - b_len)
  shared = np.maximum(excess - gap, 0)  # removed after both sides are equal
  from_a = np.where(a_len > b_len, np.minimum(excess, gap), 0) + shared // 2
  from_b = excess - from_a
  max_n = int(max(from_a.max(initial=0), from_b.max(initial=0)))
  front_a = stateless_random.binomial_half(stateless_random.derive(key, 7), starts, from_a, max_n)
  front_b = stateless_random.binomial_half(stateless_random.derive(key, 8), starts, from_b, max_n)
  return Examples(
      a_start=a_start + front_a, a_len=a_len - from_a,
      b_start=b_start + front_b, b_len=b_len - from_b,
      label=label.astype(np.int32), final_sep=np.ones(len(starts), bool))


def sentence_examples(shard: TokenizedShard, *, max_len: int, sep_id: int,
                      cross_documents: bool) -> tuple[np.ndarray, Examples]:
  """Rows of contiguous whole sentences (RoBERTa FULL-SENTENCES, or DOC-SENTENCES when not
  cross_documents): (tokens with the document [SEP]s inserted, one example per row)."""
  num_sent = shard.num_sentences
  if num_sent == 0:
    return shard.tokens, Examples.empty()
  lengths = np.diff(shard.sent_splits)
  doc_last = np.zeros(num_sent, np.int64)
  doc_last[shard.doc_splits[1:] - 1] = 1
  cost = lengths + doc_last if cross_documents else lengths
  cum = np.append(0, np.cumsum(cost))  # [S + 1]
  nxt = np.searchsorted(cum, cum[:-1] + (max_len - 2), side="right") - 1
  if not cross_documents:
    doc_end = np.repeat(shard.doc_splits[1:], np.diff(shard.doc_splits))
    nxt = np.minimum(nxt, doc_end)
  nxt = np.maximum(nxt, np.arange(1, num_sent + 1))  # Always progress.
  starts = chain_starts(nxt)
  tokens = shard.tokens
  if cross_documents:
    tokens = np.insert(tokens, shard.sent_splits[shard.doc_splits[1:]], sep_id).astype(np.int32)
  a_start = cum[starts]
  a_len = np.minimum(cum[nxt[starts]] - a_start, max_len - 2)
  zeros = np.zeros(len(starts), np.int64)
  if cross_documents:
    final_sep = tokens[a_start + a_len - 1] != sep_id
  else:
    final_sep = np.ones(len(starts), bool)
  return tokens, Examples(a_start=a_start, a_len=a_len, b_start=zeros, b_len=zeros,
                          label=np.zeros(len(starts), np.int32), final_sep=final_sep)


def pack_rows(row_len: np.ndarray, max_len: int) -> np.ndarray:
  """Greedy packing of consecutive examples into rows: int64 [rows + 1] splits."""
  n = len(row_len)
  if n == 0:
    return np.zeros(1, np.int64)
  cum = np.append(0, np.cumsum(row_len))
  nxt = np.searchsorted(cum, cum[:-1] + max_len, side="right") - 1
  nxt = np.maximum(nxt, np.arange(1, n + 1))
  return np.append(chain_starts(nxt), n).astype(np.int64)
