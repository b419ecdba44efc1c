"""model.prng_impl: the dropout PRNG. 'unsafe_rbg', the accelerators' default,
resumes exactly; threefry, the CPU's, is every earlier run's."""
import os

import pytest

from bert_jax.modeling import compute_policy
from bert_jax import pretrain
from tests.fixtures.pretraining import logged_losses
from tests.fixtures.pretraining import small_config


@pytest.mark.slow
def test_unsafe_rbg_dropout_resumes_exactly_and_is_not_threefry(corpus, tmp_path):
  rbg = {"model.prng_impl": "unsafe_rbg", "model.dropout_rate": 0.1}
  straight = str(tmp_path / "straight")
  pretrain.train(small_config(corpus, **rbg), straight)
  resumed = str(tmp_path / "resumed")
  assert pretrain.train(small_config(corpus, **rbg), resumed, preempt_at_step=4)["step"] == 4
  pretrain.train(small_config(corpus, **rbg), resumed)
  a, b = logged_losses(straight), logged_losses(resumed)
  assert [a[s] for s in (5, 6)] == [b[s] for s in (5, 6)]
  threefry = str(tmp_path / "threefry")
  pretrain.train(small_config(corpus, **{"model.prng_impl": "threefry2x32",
                                         "model.dropout_rate": 0.1}), threefry)
  assert logged_losses(threefry)[1] != a[1]  # another dropout draw from the same initial params


def test_auto_is_threefry_on_the_cpu_and_rbg_on_accelerators():
  class Model(dict):
    prng_impl = "auto"
  assert compute_policy.prng_impl(Model(), "cpu") == "threefry2x32"
  assert (compute_policy.prng_impl(Model(), "gpu") == compute_policy.prng_impl(Model(), "tpu")
          == "unsafe_rbg")


def test_an_unknown_prng_impl_is_a_config_error(corpus, tmp_path):
  with pytest.raises(ValueError, match=r"^bad config: model.prng_impl 'philox' not in"):
    pretrain.train(small_config(corpus, **{"model.prng_impl": "philox"}), str(tmp_path))
  assert not os.path.exists(tmp_path / "checkpoints")


def test_dropout_masks_keep_flax_with_threefry_and_draw_16_bits_with_rbg():
  import flax.linen as nn
  import jax
  import jax.numpy as jnp
  from bert_jax.modeling import layers
  x = jax.random.normal(jax.random.PRNGKey(1), (4, 9, 16), jnp.bfloat16)
  for key in (jax.random.PRNGKey(3), jax.random.key(3)):  # raw and typed threefry keys
    flax_out = nn.Dropout(0.1).apply({}, x, deterministic=False, rngs={"dropout": key})
    ours = layers.Dropout(0.1).apply({}, x, deterministic=False, rngs={"dropout": key})
    assert (flax_out == ours).all()
  ones = jnp.ones((999, 1001))  # odd size: the last word's second draw is unused
  for impl in ("rbg", "unsafe_rbg"):
    key = jax.random.key(3, impl=impl)
    mask, keep_prob = jax.jit(lambda k: layers.keep_mask(k, 0.1, ones.shape))(key)
    assert keep_prob == 1 - 6554 / 65536
    assert abs(float(mask.mean()) - keep_prob) < 1e-3  # 1M draws: sd 3e-4
    out = layers.Dropout(0.1).apply({}, ones, deterministic=False, rngs={"dropout": key})
    assert abs(float(out.mean()) - 1.0) < 2e-3 and float(out.max()) == pytest.approx(1 / keep_prob)
    hlo = jax.jit(lambda k: layers.keep_mask(k, 0.1, ones.shape)[0]).lower(key).as_text()
    assert "tensor<500000xui32>" in hlo  # half as many words as elements (rounded up)
    # a rate 65536ths cannot give to within 0.1% keeps flax's 32-bit draw
    assert layers.keep_mask(key, 1e-4, (8,))[1] == 1 - 1e-4
