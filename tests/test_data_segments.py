"""Segments (NSP pairs, full sentences, packing) and row layout, on synthetic shards.

The vectorised builders are checked against straightforward sequential
re-implementations of Google's loops (fed the same stateless draws), and
against properties: coverage, lengths, layout.
"""
import random

import numpy as np
import pytest

from bert_jax.data.stream import rows as rows_lib
from bert_jax.data.stream import segments
from bert_jax.data.stream import stateless_random

CLS, SEP, PAD = 2, 3, 0


def _shard(doc_sentence_lengths, first_token=10):
  """A TokenizedShard whose tokens are consecutive ids (each token is unique)."""
  lengths = [n for doc in doc_sentence_lengths for n in doc]
  tokens = np.arange(first_token, first_token + sum(lengths), dtype=np.int32)
  sent_splits = np.append(0, np.cumsum(lengths)).astype(np.int64)
  doc_splits = np.append(0, np.cumsum([len(d) for d in doc_sentence_lengths])).astype(np.int64)
  return segments.TokenizedShard(tokens, doc_splits, sent_splits=sent_splits)


def _random_docs(rng, num_docs, max_sentences=12, max_len=40):
  return [[rng.randint(1, max_len) for _ in range(rng.randint(1, max_sentences))]
          for _ in range(num_docs)]


def test_chain_starts_matches_sequential_walk():
  rng = np.random.default_rng(0)
  for n in (1, 2, 7, 100, 1000):
    nxt = np.arange(1, n + 1) + rng.integers(0, 5, n)
    nxt = np.minimum(nxt, n)
    walk, i = [], 0
    while i < n:
      walk.append(i)
      i = nxt[i]
    np.testing.assert_array_equal(segments.chain_starts(nxt), walk)


def _google_truncate(la, lb, max_num_tokens):
  """Google's truncate_seq_pair, counting removals (front/back is random there)."""
  a, b = la, lb
  while a + b > max_num_tokens:
    if a > b:
      a -= 1
    else:
      b -= 1
  return la - a, lb - b


def _google_nsp(shard, key, max_num_tokens, short_seq_prob):
  """Google's create_instances_from_document loop over every document.

  Random choices are the same stateless draws the vectorised code uses (keyed
  by document / chunk-start sentence), so the instances must be identical up
  to the front/back split of truncation, which is returned separately. As in
  bert_jax, a one-sentence chunk drawing IsNext takes the next sentence as B.
  """
  cum = shard.sent_splits
  docs = shard.doc_splits
  num_docs = shard.num_docs
  out = []
  for d in range(num_docs):
    first, last = docs[d], docs[d + 1]
    target = max_num_tokens
    if stateless_random.uniform(stateless_random.derive(key, 1), d) < short_seq_prob:
      target = int(stateless_random.randint(stateless_random.derive(key, 2), d, 2, max_num_tokens + 1))
    chunk_start, i = first, first
    length = 0
    while i < last:
      length += cum[i + 1] - cum[i]
      if i == last - 1 or length >= target:
        size = i - chunk_start + 1
        s = chunk_start
        draw_random = stateless_random.uniform(stateless_random.derive(key, 4), s) < 0.5
        if size == 1 and not draw_random and i + 1 < last:
          i, size = i + 1, 2  # A lone sentence drawing IsNext takes the next as B.
        a_end = int(stateless_random.randint(stateless_random.derive(key, 3), s, 1, size)) if size >= 2 else 1
        la = cum[s + a_end] - cum[s]
        if size == 1 or draw_random:
          label = 1
          other = int(stateless_random.randint(stateless_random.derive(key, 5), s, 0, max(num_docs - 1, 1)))
          other = other + (other >= d) if num_docs > 1 else d
          nsent = docs[other + 1] - docs[other]
          rs = docs[other] + int(stateless_random.randint(stateless_random.derive(key, 6), s, 0, nsent))
          j = rs
          lb = 0
          while j < docs[other + 1]:
            lb += cum[j + 1] - cum[j]
            j += 1
            if lb >= target - la:
              break
          b0 = cum[rs]
          i = s + a_end  # Put the unused segments back.
        else:
          label = 0
          b0, lb = cum[s + a_end], cum[i + 1] - cum[s + a_end]
          i += 1
        cut_a, cut_b = _google_truncate(la, lb, max_num_tokens)
        out.append((cum[s], la, cut_a, b0, lb, cut_b, label))
        chunk_start, length = i, 0
        continue
      i += 1
  return out


@pytest.mark.parametrize("short_seq_prob", [0.1, 1.0])
def test_nsp_examples_match_googles_algorithm(short_seq_prob):
  rng = random.Random(1)
  shard = _shard(_random_docs(rng, 60))
  shard = segments.split_long_sentences(shard, 30)
  key = stateless_random.derive(stateless_random.root_key(3, "nsp"), 0)
  ex = segments.nsp_examples(shard, key=key, max_num_tokens=61, short_seq_prob=short_seq_prob)
  ref = _google_nsp(shard, key, 61, short_seq_prob)
  assert len(ex) == len(ref) > 50
  for k, (a0, la, cut_a, b0, lb, cut_b, label) in enumerate(ref):
    assert ex.label[k] == label
    assert ex.a_len[k] == la - cut_a and ex.b_len[k] == lb - cut_b
    # Truncation removed cut tokens from the two ends in some split.
    assert a0 <= ex.a_start[k] <= a0 + cut_a
    assert b0 <= ex.b_start[k] <= b0 + cut_b


def test_truncation_front_back_split_is_random():
  shard = _shard([[50, 50]] * 400)  # Every pair needs cutting at max 61.
  ex = segments.nsp_examples(shard, key=stateless_random.root_key(0, "t"), max_num_tokens=61,
                             short_seq_prob=0.0)
  doc_start = shard.sent_splits[shard.doc_splits[:-1]]
  doc = np.searchsorted(doc_start, ex.a_start, side="right") - 1
  fronts = (ex.a_start - doc_start[doc])[ex.label == 0]
  # 39 tokens cut in total from the pair, ~Binomial(n, 1/2) of A's cuts at the front.
  assert 0 < fronts.min() and fronts.max() < 50
  assert 0.35 < fronts.mean() / (50 - ex.a_len[ex.label == 0]).mean() < 0.65


def test_nsp_properties_on_long_documents():
  rng = random.Random(2)
  docs = [[rng.randint(5, 25) for _ in range(rng.randint(20, 60))] for _ in range(200)]
  shard = _shard(docs)
  doc_of_token = np.repeat(np.arange(len(docs)), [sum(d) for d in docs])
  ex = segments.nsp_examples(shard, key=stateless_random.root_key(7, "nsp"), max_num_tokens=125,
                             short_seq_prob=0.1)
  is_next = ex.label == 0
  assert abs(is_next.mean() - 0.5) < 0.04, is_next.mean()
  assert np.all(ex.a_len >= 1) and np.all(ex.b_len >= 1)
  assert np.all(ex.a_len + ex.b_len <= 125)
  assert np.all(ex.row_len <= 128)
  tok = shard.tokens - 10
  a_doc = doc_of_token[tok[ex.a_start]]
  b_doc = doc_of_token[tok[ex.b_start]]
  # IsNext: B starts after A ends in the same document, separated only by
  # tokens truncation removed; a random B comes from another document.
  assert np.all(a_doc[is_next] == b_doc[is_next])
  gap = ex.b_start - (ex.a_start + ex.a_len)
  assert np.all(gap[is_next] >= 0)
  assert np.all(a_doc[~is_next] != b_doc[~is_next])


def test_split_long_sentences_keeps_every_token():
  shard = _shard([[3, 300], [7], [130, 1, 129]])
  out = segments.split_long_sentences(shard, 50)
  lengths = np.diff(out.sent_splits)
  assert lengths.max() <= 50 and lengths.sum() == 570
  np.testing.assert_array_equal(lengths[:8], [3, 50, 50, 50, 50, 50, 50, 7])
  assert out.num_docs == 3
  np.testing.assert_array_equal(np.diff(out.doc_splits), [7, 1, 3 + 1 + 3])


@pytest.mark.parametrize("cross", [True, False])
def test_sentence_examples_cover_all_tokens_with_whole_sentences(cross):
  rng = random.Random(3)
  docs = _random_docs(rng, 50, max_len=20)
  shard = segments.split_long_sentences(_shard(docs), 29)
  tokens, ex = segments.sentence_examples(shard, max_len=32, sep_id=SEP, cross_documents=cross)
  assert np.all(ex.row_len <= 32)
  # Every sentence token exactly once, in order; [SEP] after each document when crossing.
  content = np.concatenate([tokens[s:s + n] for s, n in zip(ex.a_start, ex.a_len)])
  np.testing.assert_array_equal(content[content != SEP], shard.tokens)
  if cross:
    assert (content == SEP).sum() == shard.num_docs
  # Rows start at sentence starts, and greedily: the next sentence did not fit.
  token_pos = {t: i for i, t in enumerate(shard.tokens.tolist())}
  sent_of = {int(t): k for k, t in enumerate(shard.sent_splits[:-1])}
  lengths = np.diff(shard.sent_splits)
  doc_first = set(shard.doc_splits[:-1].tolist())
  doc_last = set((shard.doc_splits[1:] - 1).tolist())
  for k in range(len(ex)):
    assert tokens[ex.a_start[k]] != SEP and token_pos[tokens[ex.a_start[k]]] in sent_of
    if k + 1 < len(ex):
      nxt = sent_of[token_pos[tokens[ex.a_start[k + 1]]]]
      if cross:
        assert ex.a_len[k] + lengths[nxt] + (nxt in doc_last) > 30
      else:
        assert ex.a_len[k] + lengths[nxt] > 30 or nxt in doc_first


def test_rows_layout_nsp():
  tokens = np.arange(100, 200, dtype=np.int32)
  ex = segments.Examples(a_start=np.array([0, 10]), a_len=np.array([3, 1]),
                         b_start=np.array([50, 60]), b_len=np.array([2, 4]),
                         label=np.array([0, 1], np.int32), final_sep=np.array([True, True]))
  r = rows_lib.build_rows(tokens, ex, 12, cls_id=CLS, sep_id=SEP, pad_id=PAD)
  np.testing.assert_array_equal(r["input_ids"][0], [CLS, 100, 101, 102, SEP, 150, 151, SEP,
                                                    PAD, PAD, PAD, PAD])
  np.testing.assert_array_equal(r["segment_ids"][0], [0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0])
  np.testing.assert_array_equal(r["input_mask"][0], [1] * 8 + [0] * 4)
  np.testing.assert_array_equal(r["input_ids"][1], [CLS, 110, SEP, 160, 161, 162, 163, SEP,
                                                    PAD, PAD, PAD, PAD])
  np.testing.assert_array_equal(r["next_sentence_labels"], [0, 1])


def test_rows_packed_layout():
  tokens = np.array([SEP] * 5 + list(range(100, 140)), np.int32)
  ex = segments.Examples(a_start=np.array([5, 20, 30]), a_len=np.array([3, 2, 6]),
                         b_start=np.zeros(3, np.int64), b_len=np.zeros(3, np.int64),
                         label=np.zeros(3, np.int32), final_sep=np.ones(3, bool))
  splits = segments.pack_rows(ex.row_len, 10)  # lengths 5, 4, 8
  np.testing.assert_array_equal(splits, [0, 2, 3])
  r = rows_lib.build_rows(tokens, ex, 10, cls_id=CLS, sep_id=SEP, pad_id=PAD, pack_splits=splits)
  np.testing.assert_array_equal(r["input_ids"][0], [CLS, 100, 101, 102, SEP, CLS, 115, 116, SEP,
                                                    PAD])
  np.testing.assert_array_equal(r["input_mask"][0], [1, 1, 1, 1, 1, 2, 2, 2, 2, 0])
  np.testing.assert_array_equal(r["position_ids"][0], [0, 1, 2, 3, 4, 0, 1, 2, 3, 0])
  np.testing.assert_array_equal(r["input_ids"][1], [CLS, 125, 126, 127, 128, 129, 130, SEP, PAD,
                                                    PAD])
  np.testing.assert_array_equal(r["input_mask"][1], [1] * 8 + [0, 0])


def test_pack_rows_is_greedy_and_in_order():
  rng = np.random.default_rng(0)
  lengths = rng.integers(3, 40, 500)
  splits = segments.pack_rows(lengths, 64)
  sums = np.add.reduceat(lengths, splits[:-1])
  assert np.all(sums <= 64)
  # Greedy: the first example of the next row did not fit.
  assert np.all(sums[:-1] + lengths[splits[1:-1]] > 64)
  assert splits[-1] == 500


def test_stateless_random_is_pure_and_uniform():
  key = stateless_random.root_key(5, "x")
  u = stateless_random.uniform(key, np.arange(200_000))
  np.testing.assert_array_equal(u, stateless_random.uniform(key, np.arange(200_000)))
  assert abs(u.mean() - 0.5) < 0.005 and u.min() >= 0 and u.max() < 1
  assert not np.array_equal(u[:100], stateless_random.uniform(stateless_random.root_key(6, "x"), np.arange(100)))
  hist = np.bincount((u * 10).astype(int), minlength=10) / len(u)
  assert np.all(np.abs(hist - 0.1) < 0.005)
  perm = stateless_random.permutation(key, 1000)
  np.testing.assert_array_equal(np.sort(perm), np.arange(1000))
  b = stateless_random.binomial_half(key, np.arange(20000), np.full(20000, 100), 100)
  assert abs(b.mean() - 50) < 0.3 and abs(b.var() - 25) < 2
  r = stateless_random.randint(key, np.arange(50000), 3, 8)
  np.testing.assert_array_equal(np.unique(r), [3, 4, 5, 6, 7])


def test_sop_pairs_are_consecutive_segments_of_one_document_swapped_half_the_time():
  rng = random.Random(5)
  docs = [[rng.randint(5, 25) for _ in range(rng.randint(1, 40))] for _ in range(200)]
  shard = _shard(docs)
  doc_of_token = np.repeat(np.arange(len(docs)), [sum(d) for d in docs])
  ex = segments.sop_examples(shard, key=stateless_random.root_key(7, "nsp"), max_num_tokens=125,
                             short_seq_prob=0.1)
  swapped = ex.label == 1
  assert len(ex) > 500
  assert abs(swapped.mean() - 0.5) < 0.04, swapped.mean()
  assert np.all(ex.a_len >= 1) and np.all(ex.b_len >= 1)
  assert np.all(ex.a_len + ex.b_len <= 125)
  tok = shard.tokens - 10
  # Both segments always come from the same document ...
  np.testing.assert_array_equal(doc_of_token[tok[ex.a_start]], doc_of_token[tok[ex.b_start]])
  # ... in order (B after A) unless swapped (A after B), separated only by tokens truncation
  # removed: the second segment starts where the first ended, up to the cut.
  first_start = np.where(swapped, ex.b_start, ex.a_start)
  first_len = np.where(swapped, ex.b_len, ex.a_len)
  second_start = np.where(swapped, ex.a_start, ex.b_start)
  assert np.all(second_start >= first_start + first_len)
  # One-sentence documents give no pair; the NSP examples of the same shard use them.
  lone = [d for d, sizes in enumerate(docs) if len(sizes) == 1]
  assert lone and not np.isin(doc_of_token[tok[ex.a_start]], lone).any()
  # A pure function of the shard and the key.
  again = segments.sop_examples(shard, key=stateless_random.root_key(7, "nsp"), max_num_tokens=125,
                                short_seq_prob=0.1)
  np.testing.assert_array_equal(again.a_start, ex.a_start)
  np.testing.assert_array_equal(again.label, ex.label)
