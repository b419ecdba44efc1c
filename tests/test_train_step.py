"""Train step: gradient accumulation equivalence, NaN guard, optimizer details."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.modeling import model as model_lib
from bert_jax.modeling import model_config
from bert_jax.objectives import mlm_nsp
from bert_jax.training import optimizer
from bert_jax.training import train_core
from tests.fixtures.optimizer import opt_config


def _batch(rng, b=32, L=16, P=3, vocab=64):
  ids = rng.integers(5, vocab, (b, L)).astype(np.int32)
  mask = np.ones((b, L), np.int32)
  mask[:, L - 4:] = rng.integers(0, 2, (b, 4))
  pos = np.stack([rng.choice(L - 4, P, replace=False) for _ in range(b)]).astype(np.int32)
  w = np.ones((b, P), np.float32)
  w[:, -1] = rng.integers(0, 2, b)  # uneven numbers of predictions per row
  return dict(input_ids=ids, input_mask=mask, segment_ids=(np.arange(L) >= L // 2).astype(np.int32)[None].repeat(b, 0),
              masked_lm_positions=pos, masked_lm_ids=np.take_along_axis(ids, pos, 1),
              masked_lm_weights=w, next_sentence_labels=rng.integers(0, 2, b).astype(np.int32))


def _setup(name):
  cfg = model_config.BertConfig(vocab_size=64, hidden_size=32, num_layers=2, num_heads=2,
                                intermediate_size=64, max_position_embeddings=32,
                                dropout_rate=0.0, attention_dropout_rate=0.0)
  model = model_lib.BertForPreTraining(cfg)
  tx, sched = optimizer.make_optimizer(opt_config(name), 1e-3, 0, 10)  # no warmup: lr > 0 at once
  state = jax.jit(lambda r: nn.unbox(train_core.init_state(mlm_nsp.init_fn(model, 16, 3), tx, r)))(
      jax.random.PRNGKey(0))
  return model, tx, sched, state


# The optimizer sees the same gradient either way; one optimizer (AdamW) is enough here.
@pytest.mark.slow
@pytest.mark.parametrize("name", ["adamw"])
def test_grad_accumulation_matches_full_batch(name):
  model, tx, sched, state = _setup(name)
  batch = _batch(np.random.default_rng(0))
  full = jax.jit(train_core.make_train_step(mlm_nsp.objective(model), tx, sched, 1, deterministic=True))
  accum = jax.jit(train_core.make_train_step(mlm_nsp.objective(model), tx, sched, 4, deterministic=True))
  s1, m1 = full(state, batch)
  s4, m4 = accum(state, batch)
  # The update moved the params, and both ways moved them identically.
  moved = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(
      jax.tree.leaves(s1.params), jax.tree.leaves(state.params)))
  assert moved > 1e-5
  diff = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(
      jax.tree.leaves(s1.params), jax.tree.leaves(s4.params)))
  assert diff <= 1e-5, diff
  np.testing.assert_allclose(m1["loss"], m4["loss"], rtol=1e-5)
  np.testing.assert_allclose(m1["mlm_weight"], m4["mlm_weight"])


@pytest.mark.parametrize("guard", ["cond", "select"])
def test_nonfinite_step_leaves_state_unchanged(guard):
  model, tx, sched, state = _setup("adamw")
  batch = _batch(np.random.default_rng(1))
  poisoned = state.replace(params=jax.tree.map(lambda x: x, state.params))
  poisoned.params["mlm_output_bias"] = poisoned.params["mlm_output_bias"].at[0].set(jnp.nan)
  step = jax.jit(train_core.make_train_step(mlm_nsp.objective(model), tx, sched, 1,
                                            deterministic=True, finite_guard=guard))
  new, metrics = step(poisoned, batch)
  assert float(metrics["finite"]) == 0.0
  assert int(new.nonfinite_steps) == 1 and int(new.step) == 1
  for a, b in zip(jax.tree.leaves(new.params), jax.tree.leaves(poisoned.params)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_the_guards_give_the_same_states_bitwise():
  """'select' (a GPU's guard: no host synchronisation) computes what 'cond' does."""
  model, tx, sched, state = _setup("adamw")
  states = {}
  for guard in ("cond", "select"):
    step = jax.jit(train_core.make_train_step(mlm_nsp.objective(model), tx, sched, 1,
                                              finite_guard=guard))
    s = state
    for i in range(3):
      s, _ = step(s, _batch(np.random.default_rng(i)))
    states[guard] = s
  assert int(states["select"].step) == 3 and int(states["select"].nonfinite_steps) == 0
  for a, b in zip(jax.tree.leaves(states["cond"]), jax.tree.leaves(states["select"])):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert train_core.default_finite_guard("gpu") == "select"
  assert train_core.default_finite_guard("cpu") == train_core.default_finite_guard("tpu") == "cond"


@pytest.mark.parametrize("value", [np.nan, np.inf, 1e30])
def test_host_guard_stops_on_a_nonfinite_or_diverged_state_in_either_mode(value):
  _, _, _, state = _setup("adamw")
  for on_nan in ("stop", "skip"):
    assert train_core.check_finite(state, 3, on_nan, "ckpt/2") == 0
  params = jax.tree.map(lambda x: x, state.params)
  params["mlm_output_bias"] = params["mlm_output_bias"].at[0].set(value)
  for on_nan in ("stop", "skip"):
    with pytest.raises(train_core.NonFiniteLossError, match="diverged.*not saved.*ckpt/2"):
      train_core.check_finite(state.replace(params=params), 3, on_nan, "ckpt/2")
  moments = jax.tree.map(lambda x: jnp.full_like(x, value) if x.dtype == jnp.float32 else x,
                         state.opt_state)
  with pytest.raises(train_core.NonFiniteLossError, match="optimizer moments"):
    train_core.check_finite(state.replace(opt_state=moments), 3, "skip", "ckpt/2")


def test_host_guard_counts_skipped_steps_or_stops():
  _, _, _, state = _setup("adamw")
  skipped = state.replace(nonfinite_steps=jnp.ones((), jnp.int32))
  assert train_core.check_finite(skipped, 5, "skip", "ckpt/4") == 1
  with pytest.raises(train_core.NonFiniteLossError, match="1 step.*ckpt/4"):
    train_core.check_finite(skipped, 5, "stop", "ckpt/4")


def test_loss_spike_check_names_the_checkpoint_before_the_spike():
  check = train_core.LossSpikeCheck(2.0, start_step=100)
  for step, loss in ((110, 9.0), (120, 6.0), (130, 4.0), (140, 7.9)):  # 7.9 < 2 x 4.0
    check(loss, step, [100, 120, 140], "ckpts")
  with pytest.raises(train_core.NonFiniteLossError,
                     match=r"spiked to 8.1 over steps 141-150.*lowest logged loss 4 \(step 130\)"
                           r".*before the spike: ckpts/140"):
    check(8.1, 150, [100, 120, 140, 150], "ckpts")
  off = train_core.LossSpikeCheck(0.0)
  for step, loss in ((1, 1.0), (2, 100.0)):
    off(loss, step, [], "ckpts")
  for bad in (1.0, 0.5, -2.0):
    with pytest.raises(ValueError, match="divergence_factor must be 0 \\(off\\) or > 1"):
      train_core.LossSpikeCheck(bad)


def test_decay_mask_excludes_layernorm_and_biases():
  model, tx, sched, state = _setup("adamw")
  mask = optimizer.decay_mask(state.params)
  assert mask["bert"]["embeddings"]["word_embeddings"]["embedding"] is True
  assert mask["bert"]["encoder"]["layer_0"]["attention"]["query"]["kernel"] is True
  assert mask["bert"]["encoder"]["layer_0"]["attention"]["query"]["bias"] is False
  assert mask["bert"]["encoder"]["layer_0"]["output_norm"]["scale"] is False
  assert mask["mlm_output_bias"] is False


def test_schedule_warmup_then_linear_decay():
  s = optimizer.learning_rate_schedule(1e-3, 10, 110)
  np.testing.assert_allclose([s(0), s(5), s(10), s(60), s(110)], [0, 5e-4, 1e-3, 5e-4, 0], atol=1e-9)
  with pytest.raises(ValueError, match="schedule"):
    optimizer.learning_rate_schedule(1e-3, 10, 110, kind="cosine")


def test_schedule_warmup_then_constant():
  s = optimizer.learning_rate_schedule(1e-3, 10, 110, kind="constant")
  np.testing.assert_allclose([s(0), s(5), s(10), s(60), s(109)], [0, 5e-4, 1e-3, 1e-3, 1e-3],
                             atol=1e-9)


def test_mlm_xent_and_correct_match_the_textbook_forms():
  rng = np.random.default_rng(0)
  logits = jnp.asarray(rng.normal(size=(3, 5, 50)) * 3, jnp.float32)
  ids = jnp.asarray(rng.integers(0, 50, (3, 5)), jnp.int32)
  ids = ids.at[0, 0].set(int(jnp.argmax(logits[0, 0])))  # at least one hit

  def textbook(lg):
    return -jnp.take_along_axis(jax.nn.log_softmax(lg), ids[..., None], -1)[..., 0]

  xent, correct = mlm_nsp.mlm_xent_and_correct(logits, ids)
  np.testing.assert_allclose(xent, textbook(logits), rtol=1e-6, atol=1e-6)
  np.testing.assert_array_equal(correct, (jnp.argmax(logits, -1) == ids).astype(jnp.float32))
  assert float(correct.sum()) >= 1
  w = jnp.asarray(rng.random((3, 5)), jnp.float32)
  g_ours = jax.grad(lambda lg: jnp.sum(mlm_nsp.mlm_xent_and_correct(lg, ids)[0] * w))(logits)
  g_ref = jax.grad(lambda lg: jnp.sum(textbook(lg) * w))(logits)
  np.testing.assert_allclose(g_ours, g_ref, rtol=1e-5, atol=1e-7)


def test_metric_sums_bound_the_steps_in_flight_and_sum_as_eager_adds():
  """train_core.MetricSums: the host never runs more than max_in_flight steps ahead (a full
  launch queue deadlocks XLA:CPU with several devices), and its sums are bitwise
  the eager jnp.add sums."""
  mesh = jax.sharding.Mesh(np.array(jax.devices()), ("data",))
  replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())

  @jax.jit
  def slow_step(x):  # a few ms of work per step, so that dispatch runs ahead of it
    for _ in range(20):
      x = jnp.tanh(x @ x.T) @ x
    return {"loss": jnp.sum(x), "count": jnp.float32(1.0)}

  x = jax.device_put(jax.random.normal(jax.random.PRNGKey(0), (256, 256)), replicated)
  window, eager, history = train_core.MetricSums(max_in_flight=2), None, []
  for i in range(12):
    metrics = slow_step(x + i)
    window.add(metrics)
    history.append(window._sums)  # pylint: disable=protected-access
    eager = metrics if eager is None else jax.tree.map(jnp.add, eager, metrics)
    if i >= 2:  # the sums of two steps back are computed when add returns
      assert history[i - 2]["loss"].is_ready()
  sums = window.take()
  assert sums["count"] == 12
  np.testing.assert_array_equal(sums["loss"], jax.device_get(eager["loss"]))
  assert window.take() is None  # a new window
