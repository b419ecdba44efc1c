"""Dynamic masking statistics over >= 100k tokens, whole-word masking, the cap."""
import numpy as np
import pytest

from bert_jax.data.stream import masking
from bert_jax.data.stream import stateless_random as srand

PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
VOCAB = 1000
# Ids >= 500 are '##' continuation pieces.
IS_CONT = np.arange(VOCAB) >= 500


def _spec(max_predictions=20, unit="token", mask_prob=0.15):
  return masking.MaskingSpec(
      mask_prob=mask_prob, max_predictions=max_predictions, unit=unit, mask_id=MASK,
      special_ids=np.array([PAD, CLS, SEP, MASK], np.int32),
      regular_ids=np.arange(5, VOCAB, dtype=np.int32), is_continuation=IS_CONT)


def _batch(rows, seq_len, seed, cont_prob=0.0):
  """Rows `[CLS] a [SEP] b [SEP] pad...` of random length, random regular tokens."""
  rng = np.random.default_rng(seed)
  ids = rng.integers(5, 500, (rows, seq_len))
  cont = rng.random((rows, seq_len)) < cont_prob
  ids = np.where(cont, ids + 500, ids)
  lengths = rng.integers(seq_len // 3, seq_len + 1, rows)
  mid = lengths // 2
  pos = np.arange(seq_len)[None, :]
  ids[:, 0] = CLS
  ids = np.where(pos == mid[:, None], SEP, ids)
  ids = np.where(pos == lengths[:, None] - 1, SEP, ids)
  ids = np.where(pos >= lengths[:, None], PAD, ids)
  mask = (pos < lengths[:, None]).astype(np.int32)
  return ids.astype(np.int32), mask


def _selected(out, rows, seq_len):
  sel = np.zeros((rows, seq_len), bool)
  r, k = np.nonzero(out["masked_lm_weights"] > 0)
  sel[r, out["masked_lm_positions"][r, k]] = True
  return sel


def _assert_whole_maskable_words(ids, mask, sel):
  """Only maskable tokens are selected, and a continuation piece exactly when the piece
  before it is (words are never split); returns the maskable tokens."""
  rows = ids.shape[0]
  maskable = (mask > 0) & ~np.isin(ids, [PAD, CLS, SEP])
  assert not np.any(sel & ~maskable)
  prev_maskable = np.concatenate([np.zeros((rows, 1), bool), maskable[:, :-1]], axis=1)
  cont = maskable & IS_CONT[ids] & prev_maskable
  prev_sel = np.concatenate([np.zeros((rows, 1), bool), sel[:, :-1]], axis=1)
  assert np.array_equal(sel[cont], prev_sel[cont])
  return maskable


def test_masking_statistics_over_100k_tokens():
  rows, seq_len = 1600, 128
  ids, mask = _batch(rows, seq_len, 0)
  keys = srand.derive(srand.root_key(0, "mask"), np.arange(rows))
  out = masking.mask_batch(ids, mask, keys, _spec(max_predictions=24))
  maskable = (mask > 0) & ~np.isin(ids, [PAD, CLS, SEP])
  assert maskable.sum() >= 100_000
  sel = _selected(out, rows, seq_len)
  # Never specials or padding; labels are the original ids.
  assert not np.any(sel & ~maskable)
  r, k = np.nonzero(out["masked_lm_weights"] > 0)
  np.testing.assert_array_equal(out["masked_lm_ids"][r, k], ids[r, out["masked_lm_positions"][r, k]])
  rate = sel.sum() / maskable.sum()
  assert abs(rate - 0.15) < 0.005, rate
  new = out["input_ids"][sel]
  old = ids[sel]
  as_mask = (new == MASK).mean()
  kept = (new == old).mean()
  random_tok = ((new != MASK) & (new != old)).mean()
  assert abs(as_mask - 0.8) < 0.01 and abs(kept - 0.1) < 0.01 and abs(random_tok - 0.1) < 0.01
  assert np.all(np.isin(new[(new != MASK) & (new != old)], np.arange(5, VOCAB)))
  # Unselected tokens are untouched, positions ascending then zero padding.
  np.testing.assert_array_equal(out["input_ids"][~sel], ids[~sel])
  w = out["masked_lm_weights"]
  pos = out["masked_lm_positions"]
  assert np.all(np.diff(w, axis=1) <= 0)  # real predictions first
  both = (w[:, 1:] > 0) & (w[:, :-1] > 0)
  assert np.all(np.diff(pos, axis=1)[both] > 0)
  assert np.all(pos[w == 0] == 0) and np.all(out["masked_lm_ids"][w == 0] == 0)
  assert out["masked_lm_positions"].dtype == np.int32 and w.dtype == np.float32


def test_cap_holds_and_is_reached():
  rows, seq_len = 200, 128
  ids, mask = _batch(rows, seq_len, 1)
  keys = srand.derive(srand.root_key(0, "mask"), np.arange(rows))
  out = masking.mask_batch(ids, mask, keys, _spec(max_predictions=5))
  n = (out["masked_lm_weights"] > 0).sum(axis=1)
  assert out["masked_lm_positions"].shape == (rows, 5)
  assert n.max() == 5 and np.all(n >= 1)


def test_masks_depend_on_row_key_only():
  ids, mask = _batch(64, 64, 2)
  keys = srand.derive(srand.root_key(0, "mask"), np.arange(64))
  full = masking.mask_batch(ids, mask, keys, _spec())
  half = masking.mask_batch(ids[32:], mask[32:], keys[32:], _spec())
  for k in full:
    np.testing.assert_array_equal(full[k][32:], half[k])
  other = masking.mask_batch(ids, mask, keys + np.uint64(1), _spec())
  assert not np.array_equal(other["masked_lm_positions"], full["masked_lm_positions"])


@pytest.mark.parametrize("max_predictions", [20, 6])
def test_whole_word_masking_never_splits_a_word(max_predictions):
  rows, seq_len = 800, 128
  ids, mask = _batch(rows, seq_len, 3, cont_prob=0.4)
  keys = srand.derive(srand.root_key(1, "mask"), np.arange(rows))
  out = masking.mask_batch(ids, mask, keys, _spec(max_predictions, unit="whole_word"))
  sel = _selected(out, rows, seq_len)
  maskable = _assert_whole_maskable_words(ids, mask, sel)
  n = sel.sum(axis=1)
  assert n.max() <= max_predictions
  rate = sel.sum() / maskable.sum()
  target = min(0.15, max_predictions / maskable.sum(axis=1).mean())
  assert abs(rate - target) < 0.01 or max_predictions < 10, rate
  assert n.mean() > 0.95 * np.minimum(np.floor(maskable.sum(axis=1) * 0.15), max_predictions).mean()


def test_whole_word_greedy_matches_googles_rule():
  """Words are taken in random order, skipping those that do not fit (Google's loop)."""
  rows, seq_len = 300, 64
  ids, mask = _batch(rows, seq_len, 4, cont_prob=0.5)
  spec = _spec(8, unit="whole_word")
  keys = srand.derive(srand.root_key(2, "mask"), np.arange(rows))
  out = masking.mask_batch(ids, mask, keys, spec)
  sel = _selected(out, rows, seq_len)
  for r in range(rows):
    maskable = [i for i in range(seq_len) if mask[r, i] and ids[r, i] not in (PAD, CLS, SEP)]
    words = []
    for i in maskable:
      if words and IS_CONT[ids[r, i]] and words[-1][-1] == i - 1:
        words[-1].append(i)
      else:
        words.append([i])
    n = len(maskable)
    rounding = srand.uniform(srand.derive(keys[r], 0), 0)
    num = min(max(1, int(np.floor(n * 0.15 + rounding))), 8)
    scores = srand.uniform(srand.derive(keys[r], 1), np.arange(seq_len))
    chosen = []
    for w in sorted(words, key=lambda w: scores[w[0]]):
      if len(chosen) >= num:
        break
      if len(chosen) + len(w) > num:
        continue
      chosen += w
    np.testing.assert_array_equal(np.flatnonzero(sel[r]), sorted(chosen))


def _runs(sel_row):
  """Lengths of the maximal runs of selected positions in a row."""
  padded = np.concatenate([[False], sel_row, [False]]).astype(np.int8)
  edges = np.flatnonzero(np.diff(padded))
  return edges[1::2] - edges[::2]


def test_ngram_masking_takes_whole_words_up_to_the_count():
  rows, seq_len = 400, 128
  ids, mask = _batch(rows, seq_len, 5, cont_prob=0.4)
  keys = srand.derive(srand.root_key(3, "mask"), np.arange(rows))
  out = masking.mask_batch(ids, mask, keys, _spec(20, unit="ngram"))
  sel = _selected(out, rows, seq_len)
  maskable = _assert_whole_maskable_words(ids, mask, sel)
  n = sel.sum(axis=1)
  rounding = srand.uniform(srand.derive(keys, 0), 0)
  num = np.minimum(np.maximum(1, np.floor(maskable.sum(1) * 0.15 + rounding)), 20)
  assert np.all(n <= num)
  assert n.mean() > 0.95 * num.mean()
  # A row's mask depends on its key only.
  part = masking.mask_batch(ids[7:9], mask[7:9], keys[7:9], _spec(20, unit="ngram"))
  np.testing.assert_array_equal(part["masked_lm_positions"], out["masked_lm_positions"][7:9])


def test_ngram_lengths_follow_one_over_n():
  """Sparse masks of single-piece words: each run of masked tokens is one n-gram (rarely two
  adjacent ones), so run lengths show P(n) = (1/n) / (1 + 1/2 + 1/3). Long rows (~30 n-grams
  each) keep small the share of n-grams shortened to fit the row's count."""
  rows, seq_len = 600, 1024
  ids, mask = _batch(rows, seq_len, 6)
  mask[:] = 1
  ids[:, 1:][ids[:, 1:] < 5] = 5  # no specials but [CLS]: one long run of words
  ids[:, -1] = SEP
  keys = srand.derive(srand.root_key(4, "mask"), np.arange(rows))
  out = masking.mask_batch(ids, mask, keys, _spec(40, unit="ngram", mask_prob=0.03))
  sel = _selected(out, rows, seq_len)
  runs = np.concatenate([_runs(r) for r in sel])
  observed = np.bincount(runs, minlength=4)[1:4] / len(runs)
  expected = masking.ngram_probabilities(3)
  np.testing.assert_allclose(expected, [6 / 11, 3 / 11, 2 / 11])
  assert np.max(np.abs(observed - expected)) < 0.02, observed
  # Token masking, for contrast, is mostly single tokens.
  tok = _selected(masking.mask_batch(ids, mask, keys, _spec(40, mask_prob=0.03)), rows, seq_len)
  assert np.mean(np.concatenate([_runs(r) for r in tok]) == 1) > 0.85
