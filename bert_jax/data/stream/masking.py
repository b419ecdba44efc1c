"""Dynamic MLM masking of whole batches, vectorised, stateless (Google BERT's rules).

Per row, round(n * mask_prob) of the maskable tokens (stochastic rounding, so the expected rate
is exactly mask_prob; at least 1, at most max_predictions) are selected; 80% become [MASK],
10% a random token, 10% stay. `unit`: 'token'; 'whole_word' (a word's `##` pieces together,
added greedily while they fit); 'ngram' (ALBERT: spans of n whole words, P(n) ~ 1/n, as
create_pretraining_data). Every draw is keyed by the row's key, not by its batch.
"""
import dataclasses

import numpy as np

from bert_jax.data.stream import stateless_random

UNITS = ("token", "whole_word", "ngram")


@dataclasses.dataclass(frozen=True)
class MaskingSpec:
  """What masking needs to know about the vocab and the config."""
  mask_prob: float
  max_predictions: int
  unit: str  # one of UNITS
  mask_id: int
  special_ids: np.ndarray  # ids never selected ([CLS], [SEP], [PAD], ...)
  regular_ids: np.ndarray  # ids a random replacement is drawn from
  is_continuation: np.ndarray  # bool [vocab], pieces that continue a word
  max_ngram: int = 3  # the longest n-gram (in words) with unit='ngram'

  def __post_init__(self):
    if self.unit not in UNITS:
      raise ValueError(f"config.data.masking={self.unit!r}; expected one of {list(UNITS)}")
    if self.max_ngram < 1:
      raise ValueError(f"max_ngram={self.max_ngram} must be >= 1")


def mask_batch(input_ids: np.ndarray, input_mask: np.ndarray, row_keys: np.ndarray,
               spec: MaskingSpec) -> dict[str, np.ndarray]:
  """Masks a batch: input_ids [b, L], input_mask [b, L] (> 0 real), row_keys uint64 [b].

  Returns input_ids (masked) [b, L], masked_lm_positions, masked_lm_ids int32 [b, P] and
  masked_lm_weights float32 [b, P].
  """
  length = input_ids.shape[1]
  p = spec.max_predictions
  pos = np.arange(length)
  cand = (input_mask > 0) & ~np.isin(input_ids, spec.special_ids)  # [b, L]
  n_cand = cand.sum(axis=1)
  rounding = stateless_random.uniform(stateless_random.derive(row_keys, 0), 0)  # [b]
  num = np.floor(n_cand * spec.mask_prob + rounding).astype(np.int64)
  num = np.where(n_cand > 0, np.clip(num, 1, min(p, length)), 0)  # [b]

  scores = stateless_random.uniform(stateless_random.derive(row_keys, 1)[:, None],
                                    pos[None, :])  # [b, L]
  if spec.unit == "whole_word":
    selected = _whole_word_select(input_ids, cand, scores, num, spec.is_continuation)
  elif spec.unit == "ngram":
    selected = _ngram_select(input_ids, cand, num, spec.is_continuation, row_keys, spec.max_ngram)
  else:
    selected = _lowest(np.where(cand, scores, 2.0), cand, num)

  # Positions ascending, padded with 0 (weight 0), as Google BERT.
  sel_pos = np.where(selected, pos[None, :], length)
  sel_pos = np.sort(sel_pos, axis=1)[:, :p]  # [b, P]
  weights = sel_pos < length
  sel_pos = np.where(weights, sel_pos, 0)
  labels = np.where(weights, np.take_along_axis(input_ids, sel_pos, axis=1), 0)

  # 80% [MASK], 10% random regular token, 10% unchanged.
  u = stateless_random.uniform(stateless_random.derive(row_keys, 2)[:, None],
                               pos[None, :])  # [b, L]
  rand_tok = spec.regular_ids[stateless_random.randint(
      stateless_random.derive(row_keys, 3)[:, None], pos[None, :], 0, len(spec.regular_ids))]
  replacement = np.where(u < 0.8, spec.mask_id, np.where(u < 0.9, input_ids, rand_tok))
  masked = np.where(selected, replacement, input_ids).astype(np.int32)
  return {
      "input_ids": masked,
      "masked_lm_positions": sel_pos.astype(np.int32),
      "masked_lm_ids": labels.astype(np.int32),
      "masked_lm_weights": weights.astype(np.float32),
  }


def _lowest(scores: np.ndarray, cand: np.ndarray, num: np.ndarray) -> np.ndarray:
  """bool [b, L]: the num[r] lowest-scored candidates of each row, ties to the first (a stable
  argsort's result, from a threshold per row instead of a sort)."""
  thr = np.take_along_axis(np.sort(scores, axis=1), np.maximum(num - 1, 0)[:, None], axis=1)
  below = cand & (scores < thr)
  tied = cand & (scores == thr)
  return below | (tied & (np.cumsum(tied, axis=1) <= (num - below.sum(axis=1))[:, None]))


def _whole_word_select(input_ids, cand, scores, num, is_continuation, passes: int = 4):
  """Selects whole words in random order while they fit `num` (Google's rule)."""
  b, length = input_ids.shape
  pos = np.arange(length)
  word_start = _word_starts(input_ids, cand, is_continuation)
  start_pos = np.maximum.accumulate(np.where(word_start, pos[None, :], 0), axis=1)  # [b, L]
  word_score = np.take_along_axis(scores, start_pos, axis=1)
  word_id = np.cumsum(word_start, axis=1) - 1  # [b, L], valid where cand
  word_len = np.zeros((b, length + 1), np.int64)
  rows = np.broadcast_to(np.arange(b)[:, None], (b, length))
  np.add.at(word_len, (rows[cand], word_id[cand]), 1)
  tok_wlen = np.take_along_axis(word_len, np.where(cand, word_id, length), axis=1)  # [b, L]
  # Words in random order (a word's pieces stay together, in position order).
  order = np.argsort(np.where(cand, word_score, 2.0), axis=1, kind="stable")  # [b, L]
  s_cand = np.take_along_axis(cand, order, axis=1)
  s_start = np.take_along_axis(word_start, order, axis=1)
  s_wlen = np.take_along_axis(tok_wlen, order, axis=1)
  chosen = np.zeros((b, length), bool)  # in sorted order
  remaining = num.copy()
  # Each pass takes the longest prefix of still-fitting words; later passes
  # pick up words skipped because an earlier (bigger) word did not fit.
  for _ in range(passes):
    eligible = s_cand & ~chosen & (s_wlen <= remaining[:, None])
    cum = np.cumsum(eligible, axis=1)
    # A word fits if the tokens up to its end (eligible, in order) fit.
    word_end_cum = np.where(s_start & eligible, cum - 1 + s_wlen, 0)
    word_end_cum = np.maximum.accumulate(word_end_cum, axis=1)
    take = eligible & (word_end_cum <= remaining[:, None])
    chosen |= take
    remaining = remaining - take.sum(axis=1)
  selected = np.zeros((b, length), bool)
  np.put_along_axis(selected, order, chosen, axis=1)
  return selected


def ngram_probabilities(max_ngram: int) -> np.ndarray:
  """P(n) for n = 1..max_ngram, proportional to 1/n (ALBERT)."""
  p = 1.0 / np.arange(1, max_ngram + 1)
  return p / p.sum()


def _word_starts(input_ids, cand, is_continuation):
  """bool [b, L]: candidates that begin a word (not a `##` piece after a candidate)."""
  b = input_ids.shape[0]
  prev_cand = np.concatenate([np.zeros((b, 1), bool), cand[:, :-1]], axis=1)
  return cand & ~(is_continuation[input_ids] & prev_cand)


def _ngram_select(input_ids, cand, num, is_continuation, row_keys, max_ngram):
  """ALBERT's n-gram selection, row by row (the loop stops once `num` is reached).

  An n-gram from word w spans words w..w+n-1; the start words' order (key 5) and each one's n
  (key 6, P(n) renormalised over the n that fit) are drawn.
  """
  b, length = input_ids.shape
  pos = np.arange(length)
  starts = _word_starts(input_ids, cand, is_continuation)
  order_u = stateless_random.uniform(stateless_random.derive(row_keys, 5)[:, None], pos[None, :])
  n_u = stateless_random.uniform(stateless_random.derive(row_keys, 6)[:, None], pos[None, :])
  cdfs = [np.cumsum(ngram_probabilities(k)) for k in range(1, max_ngram + 1)]
  selected = np.zeros((b, length), bool)
  for r in range(b):
    cand_pos = np.flatnonzero(cand[r])  # [C]
    first = np.append(np.flatnonzero(starts[r][cand_pos]), len(cand_pos))  # [W + 1]
    num_words = len(first) - 1
    covered = np.zeros(length, bool)
    count = 0
    for w in np.argsort(order_u[r, :num_words], kind="stable"):
      if count >= num[r]:
        break
      avail = min(max_ngram, num_words - w)
      n = 1 + int(np.searchsorted(cdfs[avail - 1], n_u[r, w], side="right"))
      n = min(n, avail)
      # Shorter n-grams while the span does not fit the remaining count.
      while n > 1 and count + first[w + n] - first[w] > num[r]:
        n -= 1
      span = cand_pos[first[w]:first[w + n]]
      if count + len(span) > num[r] or covered[span].any():
        continue
      covered[span] = True
      count += len(span)
    selected[r] = covered
  return selected
