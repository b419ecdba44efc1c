"""ELECTRA's objective: shared embeddings, gradients through the sample, the AUC from histograms;
a vocab that does not fit the corpus refused in one line."""
import re
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from bert_jax.modeling import model_config
from bert_jax.objectives import electra
from tests.fixtures.repo import ROOT
from tests.fixtures.repo import child_env
from tests.objective_batches import LEN, P, VOCAB, masked_batch


def _models(layers=None):
  config = model_config.variant("tiny", VOCAB, model_type="electra")
  if layers:  # fewer layers: a quicker compile where only the wiring is tested
    config = config.replace(num_layers=layers)
  return electra.Models(config, 0.25)


def test_generator_config_follows_electras_get_generator_config():
  m = _models()
  g, d = m.generator_config, m.discriminator_config
  assert (g.hidden_size, g.num_heads, g.intermediate_size) == (32, 1, 128)
  assert g.embed_dim == d.embed_dim == 128 and g.num_layers == d.num_layers


@pytest.mark.slow
def test_embeddings_are_shared_and_no_gradient_flows_through_the_sample():
  m = _models(layers=1)
  params = nn.unbox(electra.init_fn(m, LEN, P)(jax.random.PRNGKey(0)))
  # Stored once: the generator keeps only its projection to its hidden size.
  assert set(params["generator"]["bert"]["embeddings"]) == {"project"}
  objective = electra.objective(m, disc_weight=50.0)
  batch = jax.tree.map(jnp.asarray, masked_batch(mask_id=4))
  rng = jax.random.PRNGKey(1)

  def rtd_of_generator(g, p):
    return objective.sums({**p, "generator": g}, batch, rng, True)["rtd_xent"]

  @jax.jit
  def grads(p):
    return (jax.grad(lambda q: objective.sums(q, batch, rng, True)["mlm_xent"])(p),
            jax.grad(rtd_of_generator)(p["generator"], p))

  def norm(tree):
    return float(sum(jnp.sum(jnp.abs(x)) for x in jax.tree.leaves(tree)))

  g_mlm, g_rtd_generator = grads(params)
  shared = ("discriminator", "bert", "embeddings", "word_embeddings")
  pick = lambda tree, path: tree[path[0]][path[1]][path[2]][path[3]]  # noqa: E731
  # The generator's MLM loss trains the shared table, never the discriminator's encoder ...
  assert norm(pick(g_mlm, shared)) > 0
  assert norm(g_mlm["discriminator"]["bert"]["encoder"]) == 0
  assert norm(g_mlm["discriminator"]["discriminator"]) == 0
  # ... and the discriminator's loss reaches none of the generator's own parameters: the
  # sampled tokens are integers drawn from stop_gradient(logits).
  assert norm(g_rtd_generator) == 0


@pytest.mark.slow
def test_replaced_tokens_are_the_samples_that_differ_from_the_original():
  m = _models()
  params = nn.unbox(electra.init_fn(m, LEN, P)(jax.random.PRNGKey(0)))
  batch = masked_batch(mask_id=4)
  sums = jax.jit(lambda p, b: electra.objective(m, 50.0).sums(p, b, jax.random.PRNGKey(2), True))(
      params, batch)
  real = batch["input_mask"].sum()
  assert float(sums["real_tokens"]) == real
  # At most the weighted predictions can be replaced; an untrained generator over 64 tokens
  # rarely samples the original.
  assert 0.5 * batch["masked_lm_weights"].sum() <= float(sums["rtd_replaced"]) <= (
      batch["masked_lm_weights"].sum())
  hist = np.asarray(sums["rtd_hist_replaced"]) + np.asarray(sums["rtd_hist_original"])
  assert hist.sum() == real and hist.shape == (electra.AUC_BINS,)
  assert float(sums["rtd_hist_replaced"].sum()) == float(sums["rtd_replaced"])


def test_scatter_predictions_writes_only_weighted_positions():
  ids = jnp.arange(12).reshape(2, 6)
  pos = jnp.array([[1, 3, 0], [2, 5, 0]])
  out = electra.scatter_predictions(ids, pos, jnp.full((2, 3), 99),
                                    jnp.array([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]]))
  np.testing.assert_array_equal(out, [[0, 99, 2, 99, 4, 5], [6, 7, 99, 9, 10, 99]])


def test_auc_from_histograms_is_the_binned_mann_whitney_statistic():
  rng = np.random.default_rng(0)
  pos_scores, neg_scores = rng.normal(1.0, 1.5, 3000), rng.normal(-1.0, 1.5, 20000)
  bins = lambda s: np.clip(((s + 8) / 16 * 128).astype(int), 0, 127)  # noqa: E731
  hp = np.bincount(bins(pos_scores), minlength=128)
  hn = np.bincount(bins(neg_scores), minlength=128)
  bp, bn = bins(pos_scores)[:, None], bins(neg_scores)[None, :]
  pairwise = np.mean((bp > bn) + 0.5 * (bp == bn))  # the definition, ties half
  assert abs(electra.auc_from_histograms(hp, hn) - pairwise) < 1e-12
  exact = np.mean(pos_scores[:, None] > neg_scores[None, :])  # unbinned
  assert abs(electra.auc_from_histograms(hp, hn) - exact) < 2e-3
  assert abs(electra.auc_from_histograms(hn, hp) - (1 - exact)) < 2e-3
  assert np.isnan(electra.auc_from_histograms(np.zeros(4), np.ones(4)))


@pytest.mark.slow  # runs pretrain (its imports alone are seconds)
def test_a_vocab_that_does_not_fit_the_corpus_is_one_line_before_the_pipeline_starts(tmp_path):
  # 110 tokens (the specials, some words): three quarters of the built-in corpus is [UNK]. The
  # refusal comes before tf.data's threads start, so none of them prints a traceback.
  words = "the a of and to in is was it that for on with as at by an be this from".split()
  tokens = (["[PAD]"] + [f"[unused{i}]" for i in range(5)] + ["[UNK]", "[CLS]", "[SEP]",
            "[MASK]"] + words)
  tokens += [f"w{i}" for i in range(110 - len(tokens))]
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(tokens) + "\n", encoding="utf-8")
  done = subprocess.run(
      [sys.executable, "-m", "bert_jax.pretrain", "--config",
       str(ROOT / "configs" / "pretrain.py") + ":tiny,recipe=electra",
       "--workdir", str(tmp_path / "run"), f"--config.data.vocab_file={vocab}",
       "--config.seq_len=32", "--config.batch_size=8", "--config.total_steps=2"],
      cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=300)
  assert done.returncode == 1, done.stderr[-3000:]  # docs/troubleshooting.md: an error, one line
  lines = done.stderr.splitlines()
  assert len(lines) == 1 and re.fullmatch(
      r"bert_jax\.pretrain: error: builtin \(first 2,000 sentences\): \d+% of its \d+ tokens "
      r"are \[UNK\] with the 110-token vocab " + re.escape(str(vocab)) + r": the vocab does "
      r"not fit this corpus \(build one with python -m bert_jax\.build_vocab, or check "
      r"config\.data\.lowercase\)", lines[0]), done.stderr


def _repeating_batch(rng: np.random.Generator, b: int, mask_id: int = 4) -> dict:
  """Text a model can predict from its context (each row one id, 5..VOCAB-1, repeated), with P
  masked positions a row."""
  ids = np.repeat(rng.integers(5, VOCAB, (b, 1)), LEN, axis=1).astype(np.int32)
  pos = np.stack([np.sort(rng.choice(np.arange(1, LEN), P, replace=False))
                  for _ in range(b)]).astype(np.int32)
  inputs = ids.copy()
  np.put_along_axis(inputs, pos, mask_id, 1)
  return dict(input_ids=inputs, input_mask=np.ones_like(ids), segment_ids=np.zeros_like(ids),
              masked_lm_positions=pos, masked_lm_ids=np.take_along_axis(ids, pos, 1),
              masked_lm_weights=np.ones((b, P), np.float32))


@pytest.mark.slow
def test_the_discriminator_learns_to_find_tokens_that_break_the_text(monkeypatch):
  # A control for the replaced-token objective's wiring (corrupted input, labels, positions,
  # loss): with samples drawn uniformly instead of from the generator, every replacement breaks
  # text the discriminator can predict, so its held-out AUC must climb far above chance. With
  # the real generator, how fast it climbs depends on how plausible the samples become.
  monkeypatch.setattr(jax.random, "categorical", lambda key, logits, axis=-1: (
      jax.random.randint(key, logits.shape[:-1], 5, VOCAB)))
  m = _models(layers=1)
  params = nn.unbox(electra.init_fn(m, LEN, P)(jax.random.PRNGKey(0)))
  objective = electra.objective(m, disc_weight=50.0)
  tx = optax.adam(3e-3)

  @jax.jit
  def step(p, opt_state, batch, rng):
    def loss(q):
      return objective.loss(objective.sums(q, batch, rng, False), objective.denominators(batch))
    grads = jax.grad(loss)(p)
    updates, opt_state = tx.update(grads, opt_state, p)
    return optax.apply_updates(p, updates), opt_state

  @jax.jit
  def held_out(p, batch):
    return objective.sums(p, batch, None, True)

  def auc(p):
    sums = held_out(p, _repeating_batch(np.random.default_rng(999), 64))
    return electra.auc_from_histograms(np.asarray(sums["rtd_hist_replaced"]),
                                       np.asarray(sums["rtd_hist_original"]))
  rng, opt_state = np.random.default_rng(0), tx.init(params)
  before = auc(params)
  for i in range(300):
    params, opt_state = step(params, opt_state, _repeating_batch(rng, 16),
                             jax.random.PRNGKey(i))
  after = auc(params)
  assert abs(before - 0.5) < 0.15, before
  assert after > 0.9, (before, after)
