"""Length-bucketed batching: the fixed lengths, seeded epochs, eval order, equal outputs."""
import jax
import numpy as np
import pytest

from bert_jax.batching import length_buckets
from bert_jax import config_help
from bert_jax.finetuning import evaluation
from bert_jax.finetuning import setup as finetune_setup
from bert_jax.modeling import model as model_lib
from bert_jax.modeling.model_config import BertConfig
from bert_jax.training import sharding


def _mask(lengths, seq_len):
  return (np.arange(seq_len)[None, :] < np.asarray(lengths)[:, None]).astype(np.int32)


def test_bucket_lengths_are_few_and_end_at_the_max():
  assert length_buckets.bucket_lengths(128) == (8, 12, 16, 24, 32, 48, 64, 96, 128)
  assert length_buckets.bucket_lengths(100) == (8, 12, 16, 24, 32, 48, 64, 96, 100)
  assert length_buckets.bucket_lengths(8) == (8,)
  buckets = length_buckets.bucket_lengths(128)
  assert [length_buckets.bucket_of(n, buckets) for n in (1, 8, 9, 13, 33, 97, 128)] == [
      8, 8, 12, 16, 48, 128, 128]
  every = length_buckets.bucket_lengths(2048)
  assert all(b <= 1.5 * a for a, b in zip(every, every[1:]))  # padding to at most 1.5x
  with pytest.raises(ValueError, match="129 tokens exceeds the longest bucket 128"):
    length_buckets.bucket_of(129, buckets)


def test_row_lengths_count_to_the_last_real_token():
  mask = _mask([3, 0, 5], 6)
  mask[2, 1] = 2  # packed numbering still counts as real
  np.testing.assert_array_equal(length_buckets.row_lengths(mask), [3, 0, 5])


def test_train_batches_cover_the_epoch_reproducibly_with_less_padding():
  rng = np.random.default_rng(0)
  n, batch_size, buckets = 1000, 16, length_buckets.bucket_lengths(128)
  lengths = rng.integers(3, 129, n)
  order = np.random.default_rng([0, 0]).permutation(n)

  def epoch(seed):
    return length_buckets.train_batches(lengths, order, batch_size, buckets,
                                        np.random.default_rng([seed, 0, 1]))
  batches = epoch(0)
  assert len(batches) == n // batch_size
  rows = np.concatenate([b.rows for b in batches])
  # Exactly the rows unbucketed batching uses (the remainder of the permutation dropped).
  assert sorted(rows) == sorted(order[:n // batch_size * batch_size])
  for b in batches:
    assert len(b.rows) == batch_size
    assert b.length == length_buckets.bucket_of(int(lengths[b.rows].max()), buckets)
  again = epoch(0)
  assert all((a.rows == b.rows).all() and a.length == b.length for a, b in zip(batches, again))
  other = epoch(1)
  assert any((a.rows != b.rows).any() for a, b in zip(batches, other))
  padded = sum(b.length * batch_size for b in batches)
  assert padded < 0.75 * len(rows) * 128  # uniform lengths: about 2x fewer tokens
  assert len({b.length for b in batches}) <= len(buckets)


def test_unsorted_train_batches_keep_the_drawn_rows_and_rows_of_several_sequences():
  rng = np.random.default_rng(0)
  lengths = rng.integers(1, 100, 50)
  order = rng.permutation(50)
  batches = length_buckets.train_batches(lengths, order, 8, length_buckets.bucket_lengths(128),
                                         np.random.default_rng(1), window_batches=1)
  drawn = {frozenset(order[i:i + 8].tolist()) for i in range(0, 48, 8)}
  assert {frozenset(b.rows.tolist()) for b in batches} == drawn  # same rows, batch order shuffled
  for b in batches:
    assert b.length == length_buckets.bucket_of(int(lengths[b.rows].max()),
                                                length_buckets.bucket_lengths(128))
  # Rows of several sequences ([n, 2, L]): the longest counts; cut keeps the middle axis.
  mask = np.zeros((2, 2, 16), np.int32)
  mask[0, 0, :3], mask[0, 1, :9], mask[1, 1, :5] = 1, 1, 1
  assert length_buckets.row_lengths(mask).tolist() == [9, 5]
  cut = length_buckets.cut({"input_mask": mask}, length_buckets.Batch(np.array([1, -1]), 8),
                           ("input_mask",))
  assert cut["input_mask"].shape == (2, 2, 8) and cut["input_mask"].sum((1, 2)).tolist() == [5, 0]


def test_eval_batches_score_every_row_once_in_row_order():
  lengths = np.array([5, 30, 2, 17, 9, 64, 3])
  batches = length_buckets.eval_batches(lengths, 3, length_buckets.bucket_lengths(64))
  assert [b.length for b in batches] == [8, 32, 64]  # sorted: (2,3,5) (9,17,30) (64,-,-)
  rows = np.concatenate([b.rows for b in batches])
  assert sorted(rows[rows >= 0]) == list(range(7)) and (rows < 0).sum() == 2
  arrays = {"input_ids": np.arange(7 * 64).reshape(7, 64), "label_ids": np.arange(7)}
  chunks = []
  for b in batches:
    cut = length_buckets.cut(arrays, b, ("input_ids", "label_ids"))
    assert cut["input_ids"].shape == (3, b.length)
    chunks.append({"first": cut["input_ids"][:, 0], "label": cut["label_ids"]})
  out = length_buckets.scatter_outputs(chunks, batches, 7)
  np.testing.assert_array_equal(out["first"], arrays["input_ids"][:, 0])
  np.testing.assert_array_equal(out["label"], arrays["label_ids"])


def test_sequential_batches_pad_eval_and_drop_the_training_remainder():
  evals = length_buckets.sequential_batches(np.arange(5), 4, 16, pad_last=True)
  assert [b.rows.tolist() for b in evals] == [[0, 1, 2, 3], [4, -1, -1, -1]]
  assert [b.length for b in evals] == [16, 16]
  assert len(length_buckets.sequential_batches(np.arange(0), 4, 16, pad_last=True)) == 1
  train = length_buckets.sequential_batches(np.array([3, 1, 4, 0, 2]), 2, 16, pad_last=False)
  assert [b.rows.tolist() for b in train] == [[3, 1], [4, 0]]
  cut = length_buckets.cut({"input_mask": np.ones((5, 16), np.int32), "weights": np.ones(5)},
                           evals[1], ("input_mask", "weights"))
  assert cut["weights"].tolist() == [1, 0, 0, 0] and cut["input_mask"][1:].sum() == 0


def test_bucketed_predictions_equal_the_padded_ones():
  """The same model on rows cut to their bucket gives the padded path's logits."""
  cfg = BertConfig(vocab_size=50, hidden_size=32, num_layers=2, num_heads=2,
                   intermediate_size=64, max_position_embeddings=32)
  model = model_lib.BertForSequenceClassification(cfg, num_labels=3)
  params = jax.jit(lambda r: model_lib.init_params(model, r))(jax.random.PRNGKey(0))
  rng = np.random.default_rng(1)
  # Sorted in 8s: 8 rows of <= 8 tokens, 8 of <= 16, one of 30 (bucket 32).
  lengths = np.array([3, 30, 5, 7, 12, 4, 2, 6, 14, 8, 16, 9, 10, 11, 13, 15, 2])
  n = len(lengths)
  mask = _mask(lengths, 32)
  arrays = {"input_ids": rng.integers(1, 50, (n, 32)).astype(np.int32) * mask,
            "input_mask": mask, "segment_ids": (rng.random((n, 32)) < 0.5).astype(np.int32) * mask}
  step = jax.jit(lambda p, b: {"logits": model.apply({"params": p}, b["input_ids"],
                                                     b["input_mask"], b["segment_ids"])})
  mesh = sharding.make_mesh((-1, 1, 1))
  padded = evaluation.predict(step, params, arrays, 8, mesh)
  bucketed = evaluation.predict(step, params, arrays, 8, mesh, bucketing=True)
  assert step._cache_size() == 3  # lengths 32 (padded path and last batch), 8 and 16
  np.testing.assert_allclose(bucketed["logits"], padded["logits"], atol=1e-5)
  np.testing.assert_array_equal(np.argmax(bucketed["logits"], -1), np.argmax(padded["logits"], -1))


def test_squad_and_accumulation_refuse_what_they_cannot_use():
  import pathlib  # pylint: disable=g-import-not-at-top
  root = pathlib.Path(__file__).resolve().parents[1]

  def config(name, arg, **overrides):
    c = config_help.load_module(root / "configs" / f"{name}.py").get_config(arg)
    c.init_checkpoint, c.data_dir = "ckpt", "data"
    for k, v in overrides.items():
      c[k] = v
    return c
  mesh = sharding.make_mesh((-1, 1, 1))
  glue_config = config("glue", "task=mrpc")
  assert glue_config.length_bucketing and not glue_config.packing
  finetune_setup.check_config(glue_config, mesh)
  assert not config("squad", "version=1.1").length_bucketing
  for c, message in ((config("squad", "version=1.1", length_bucketing=True),
                      "length_bucketing applies to sequence-level tasks"),
                     (config("squad", "version=1.1", packing=True), "packing applies to"),
                     (config("ner", "", packing=True), "packing applies to .* not ner"),
                     (config("ner", "", length_bucketing=True), "length_bucketing .* not ner"),
                     (config("glue", "task=mrpc", packing=True), "packing needs optimizer"),
                     (config("glue", "task=mrpc", length_buckets="16,32"),
                      "bad config: length_buckets '16,32': give 'auto', 'all'")):
    if message.startswith("packing needs"):
      c.optimizer.grad_accum_steps = 2
    with pytest.raises(ValueError, match=message):
      finetune_setup.check_config(c, mesh)


def _padded_cost(groups, buckets, shape_cost):
  total = 0.0
  for lengths, w in groups:
    total += w * sum(length_buckets.bucket_of(int(x), buckets) for x in lengths)
  return total + shape_cost * len(buckets)


def test_chosen_buckets_are_the_cheapest_subset():
  """choose_buckets is exact: no subset of the fixed lengths (ending where the
  longest row fits) costs less in padded row-tokens plus shapes x cost."""
  import itertools  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  candidates = length_buckets.bucket_lengths(64)  # 8 12 16 24 32 48 64
  for trial in range(30):
    groups = [(rng.integers(1, 65 if trial % 3 else 30, size=rng.integers(1, 60)), 2.0),
              (rng.integers(1, 40, size=rng.integers(0, 20)), 1 / 3)]
    longest = max(int(g[0].max()) for g in groups if len(g[0]))
    cost = float(rng.choice([0.0, 10.0, 100.0, 1000.0, 1e6]))
    got = length_buckets.choose_buckets(groups, 64, cost)
    best = min(_padded_cost(groups, s, cost)
               for k in range(1, len(candidates) + 1)
               for s in itertools.combinations(candidates, k) if s[-1] >= longest)
    assert got[-1] >= longest
    assert _padded_cost(groups, got, cost) == pytest.approx(best), (trial, got, cost)


def test_no_shape_cost_keeps_every_needed_length_and_a_large_one_keeps_one():
  lengths = np.array([3, 9, 9, 17, 30, 41])
  assert length_buckets.choose_buckets([(lengths, 1.0)], 64, 0.0) == (8, 12, 24, 32, 48)
  assert length_buckets.choose_buckets([(lengths, 1.0)], 64, 1e9) == (48,)  # not 64
  assert length_buckets.choose_buckets([(np.zeros(0, int), 1.0)], 64, 5.0) == (8,)
  with pytest.raises(ValueError, match="a row of 70 tokens exceeds the max length 64"):
    length_buckets.choose_buckets([(np.array([70]), 1.0)], 64, 0.0)


def test_a_cpu_run_keeps_several_lengths_where_a_gpu_run_keeps_one():
  """The cost of a shape is compile time in row-tokens: seconds on a CPU are few tokens, on a
  GPU millions, so a short fine-tune there compiles one length."""
  from bert_jax.batching import bucket_cost  # pylint: disable=g-import-not-at-top
  minilm = BertConfig(num_layers=6, hidden_size=384, num_heads=12, intermediate_size=1536)
  rng = np.random.default_rng(1)
  cola_like = np.clip(rng.lognormal(2.3, 0.4, size=4000).astype(int) + 2, 3, 64)
  groups = [(cola_like, 1.0), (cola_like[:1000], 1 / 3)]
  cost = bucket_cost.shape_cost_row_tokens
  cpu = length_buckets.choose_buckets(groups, 64, cost(minilm, "cpu", 12))
  gpu = length_buckets.choose_buckets(groups, 64, cost(minilm, "gpu", 12))
  assert len(cpu) >= 3 and cpu[-1] >= cola_like.max()
  assert gpu == (length_buckets.bucket_of(int(cola_like.max()), length_buckets.bucket_lengths(64)),)


def test_the_length_buckets_key():
  assert length_buckets.parse_buckets("auto", 64) == "auto"
  assert length_buckets.parse_buckets("all", 64) == (8, 12, 16, 24, 32, 48, 64)
  assert length_buckets.parse_buckets("16, 32,64", 64) == (16, 32, 64)
  for bad in ("16,8,64", "16,32", "0,64", "x", "", "16,32,128"):
    with pytest.raises(ValueError, match="give 'auto', 'all', or ascending lengths ending at "
                                         "max_seq_length, such as '16,32,64'"):
      length_buckets.parse_buckets(bad, 64)
