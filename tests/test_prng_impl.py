"""model.prng_impl: the dropout PRNG (issue 29). 'unsafe_rbg', the accelerators' default,
resumes exactly; every key draws dropout 16 bits per element (issue 35)."""
import os

import pytest

from bert_jax import pretrain
from bert_jax.training import train_core
from tests.test_pretrain import _losses, corpus, small_config  # noqa: F401  (corpus: a fixture)


def test_unsafe_rbg_dropout_resumes_exactly_and_is_not_threefry(corpus, tmp_path):  # noqa: F811
  rbg = {"model.prng_impl": "unsafe_rbg", "model.dropout_rate": 0.1}
  straight = str(tmp_path / "straight")
  pretrain.train(small_config(corpus, **rbg), straight)
  resumed = str(tmp_path / "resumed")
  assert pretrain.train(small_config(corpus, **rbg), resumed, preempt_at_step=4)["step"] == 4
  pretrain.train(small_config(corpus, **rbg), resumed)
  a, b = _losses(straight), _losses(resumed)
  assert [a[s] for s in (5, 6)] == [b[s] for s in (5, 6)]
  threefry = str(tmp_path / "threefry")
  pretrain.train(small_config(corpus, **{"model.prng_impl": "threefry2x32",
                                         "model.dropout_rate": 0.1}), threefry)
  assert _losses(threefry)[1] != a[1]  # another dropout draw from the same initial params


def test_auto_is_threefry_on_the_cpu_and_rbg_on_accelerators():
  class Model(dict):
    prng_impl = "auto"
  assert train_core.prng_impl(Model(), "cpu") == "threefry2x32"
  assert train_core.prng_impl(Model(), "gpu") == train_core.prng_impl(Model(), "tpu") == "unsafe_rbg"


def test_an_unknown_prng_impl_is_a_config_error(corpus, tmp_path):  # noqa: F811
  with pytest.raises(ValueError, match=r"^bad config: model.prng_impl 'philox' not in"):
    pretrain.train(small_config(corpus, **{"model.prng_impl": "philox"}), str(tmp_path))
  assert not os.path.exists(tmp_path / "checkpoints")


def test_dropout_draws_16_bits_from_every_key_and_keeps_the_expectation():
  import flax.linen as nn
  import jax
  import jax.numpy as jnp
  from bert_jax.modeling import layers
  ones = jnp.ones((999, 1001))  # odd size: the last word's second draw is unused
  keys = [jax.random.PRNGKey(3)] + [jax.random.key(3, impl=impl)  # raw and typed keys
                                    for impl in ("threefry2x32", "rbg", "unsafe_rbg")]
  for key in keys:
    mask, keep_prob = jax.jit(lambda k: layers.keep_mask(k, 0.1, ones.shape))(key)
    assert keep_prob == 1 - 6554 / 65536
    assert abs(float(mask.mean()) - keep_prob) < 1e-3  # 1M draws: sd 3e-4
    out = layers.Dropout(0.1).apply({}, ones, deterministic=False, rngs={"dropout": key})
    assert abs(float(out.mean()) - 1.0) < 2e-3 and float(out.max()) == pytest.approx(1 / keep_prob)
    hlo = jax.jit(lambda k: layers.keep_mask(k, 0.1, ones.shape)[0]).lower(key).as_text()
    assert "tensor<500000xui32>" in hlo  # half as many words as elements (rounded up)
    # a rate 65536ths cannot give to within 0.1% keeps flax's 32-bit draw, mask for mask
    assert layers.keep_mask(key, 1e-4, (8,))[1] == 1 - 1e-4
    x = jax.random.normal(jax.random.PRNGKey(1), (4, 9, 16), jnp.bfloat16)
    flax_out = nn.Dropout(1e-4).apply({}, x, deterministic=False, rngs={"dropout": key})
    ours = layers.Dropout(1e-4).apply({}, x, deterministic=False, rngs={"dropout": key})
    assert (flax_out == ours).all()
  # threefry's 16-bit draw is not flax's 32-bit one: another mask from the same key
  key = jax.random.PRNGKey(3)
  x = jax.random.normal(jax.random.PRNGKey(1), (64, 128), jnp.float32)
  flax_out = nn.Dropout(0.1).apply({}, x, deterministic=False, rngs={"dropout": key})
  ours = layers.Dropout(0.1).apply({}, x, deterministic=False, rngs={"dropout": key})
  assert not ((flax_out == 0) == (ours == 0)).all()
