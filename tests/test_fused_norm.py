"""model.fused_norm='pallas': dropout, residual add and LayerNorm as one Pallas kernel, run in
Pallas's interpreter on the CPU, against the same computation in plain jnp with the same
hashed mask (fused_norm.reference); the mask's statistics; the model with the switch on."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.configuration import sections as config_sections
from bert_jax.modeling import compute_policy
from bert_jax.modeling import fused_norm
from bert_jax.modeling import model as model_lib
from bert_jax.modeling.model_config import BertConfig
from bert_jax.training import sharding

# the batch-mesh test shards over 4 devices; the other tests run on one
pytestmark = pytest.mark.multidevice

EPS = 1e-12
SEED = jnp.array([0x1234567, 0x89ABCDE], jnp.uint32)


def _inputs(shape, dtype=jnp.float32):
  k = jax.random.split(jax.random.key(0), 5)
  hidden = shape[-1]
  x = jax.random.normal(k[0], shape).astype(dtype)
  residual = jax.random.normal(k[1], shape).astype(dtype)
  scale = 1.0 + 0.1 * jax.random.normal(k[2], (hidden,))
  bias = 0.1 * jax.random.normal(k[3], (hidden,))
  weights = jax.random.normal(k[4], shape)  # a loss that weighs every output differently
  return x, residual, scale, bias, weights


def _value_and_grads(fn, rate, x, residual, scale, bias, weights):
  def loss(x, residual, scale, bias):
    out = fn(x, residual, scale, bias, SEED, rate=rate, eps=EPS)
    return jnp.sum(out.astype(jnp.float32) * weights), out
  (_, out), grads = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2, 3), has_aux=True))(
      x, residual, scale, bias)
  return out, grads


# [3, 5, 128]: rows that no block divides (15 rows; the last block is part padding); 96: a
# hidden size that is not a power of two (Triton's blocks are: the block's last 32 columns are
# padding, masked out of the statistics).
@pytest.mark.parametrize("shape", [(3, 5, 128), (2, 7, 96)])
@pytest.mark.parametrize("rate", [0.0, 0.1])
def test_float32_outputs_and_gradients_equal_the_reference(shape, rate):
  args = _inputs(shape)
  out, grads = _value_and_grads(fused_norm.dropout_add_norm, rate, *args)
  ref_out, ref_grads = _value_and_grads(fused_norm.reference, rate, *args)
  np.testing.assert_allclose(out, ref_out, atol=1e-5, rtol=1e-5)
  for name, g, r in zip(("x", "residual", "scale", "bias"), grads, ref_grads):
    np.testing.assert_allclose(g, r, atol=1e-5, rtol=1e-5, err_msg=name)


def test_bfloat16_outputs_and_gradients_equal_the_reference():
  # Both compute in float32 from the same bfloat16 inputs and differ there only in the order
  # of their sums (about 1e-6 relative); the result's cast to bfloat16 can then round the
  # two to neighbouring values, one bfloat16 step apart: 2**-8 of the value, at most 2**-7 of
  # the outputs' (and input gradients') magnitudes here (below 4 and 2), so atol 2**-6 bounds
  # one step and rtol 2**-7 the rest. The scale and bias gradients are float32 sums of the
  # same float32 terms: 1e-4 covers 64 rows' sums of terms up to about 10.
  args = _inputs((4, 16, 128), jnp.bfloat16)
  out, grads = _value_and_grads(fused_norm.dropout_add_norm, 0.1, *args)
  ref_out, ref_grads = _value_and_grads(fused_norm.reference, 0.1, *args)
  assert out.dtype == jnp.bfloat16 and grads[0].dtype == jnp.bfloat16
  tol = dict(atol=2**-6, rtol=2**-7)
  np.testing.assert_allclose(out.astype(np.float32), ref_out.astype(np.float32), **tol)
  for g, r in zip(grads[:2], ref_grads[:2]):
    np.testing.assert_allclose(g.astype(np.float32), r.astype(np.float32), **tol)
  for g, r in zip(grads[2:], ref_grads[2:]):
    np.testing.assert_allclose(g, r, atol=1e-4, rtol=1e-4)


def _kernel_mask(seed, rate, shape):
  """The keep mask the backward kernel regenerated, read from the gradient of x: zero exactly
  where an element was dropped (column 0, whose output the loss weighs by 0, reads dropped)."""
  x = jnp.ones(shape)
  grad = jax.jit(jax.grad(lambda x: jnp.sum(fused_norm.dropout_add_norm(
      x, jnp.zeros(shape), jnp.ones(shape[-1]), jnp.zeros(shape[-1]), seed, rate=rate,
      eps=EPS) * jnp.arange(shape[-1], dtype=jnp.float32))))(x)
  return grad != 0


def test_forward_and_backward_draw_the_same_mask():
  shape, rate = (4, 8, 128), 0.25
  x, residual, scale, bias, _ = _inputs(shape)
  out = fused_norm.dropout_add_norm(x, residual, scale, bias, SEED, rate=rate, eps=EPS)
  rows = jnp.arange(32, dtype=jnp.uint32)[:, None]
  expected = fused_norm.keep_mask(SEED, rate, rows, jnp.arange(128, dtype=jnp.uint32)[None, :])
  # forward: the output is the LayerNorm of residual + x / keep where kept, residual elsewhere
  z = jnp.where(expected.reshape(shape), x / fused_norm.threshold(rate)[1], 0.0) + residual
  manual = (z - z.mean(-1, keepdims=True)) * jax.lax.rsqrt(z.var(-1, keepdims=True) + EPS)
  np.testing.assert_allclose(out, manual * scale + bias, atol=1e-5, rtol=1e-5)
  # backward: dx is zero exactly where the forward dropped (column 0's weight is 0: skip it)
  mask = _kernel_mask(SEED, rate, shape).reshape(32, 128)
  np.testing.assert_array_equal(mask[:, 1:], expected[:, 1:])


def test_kept_fraction_over_a_million_draws():
  rows, cols = jnp.arange(2**13, dtype=jnp.uint32)[:, None], jnp.arange(128, dtype=jnp.uint32)
  for rate in (0.1, 0.5):
    kept = float(jnp.mean(fused_norm.keep_mask(SEED, rate, rows, cols[None, :])))
    assert abs(kept - (1 - rate)) < 0.005 * (1 - rate), (rate, kept)
  kept = float(jnp.mean(_kernel_mask(SEED, 0.1, (2**12, 2, 128))[..., 1:]))  # 1.04M draws
  assert abs(kept - 0.9) < 0.005 * 0.9, kept


def _seed(key, step, layer):
  """The seed words a layer draws: the state's key folded with the step, then the layer's."""
  key = jax.random.fold_in(jax.random.fold_in(key, step), layer)
  return jax.random.bits(key, (2,), jnp.uint32)


def test_masks_are_independent_across_layers_and_steps():
  rows, cols = jnp.arange(2**12, dtype=jnp.uint32)[:, None], jnp.arange(128, dtype=jnp.uint32)
  key = jax.random.key(7)
  masks = {(step, layer): fused_norm.keep_mask(_seed(key, step, layer), 0.1, rows, cols[None])
           for step in (0, 1) for layer in (0, 1, 2)}
  flat = {k: np.asarray(m, np.float32).ravel() for k, m in masks.items()}
  pairs = [((0, 0), (0, 1)), ((0, 1), (0, 2)), ((0, 0), (1, 0)), ((0, 2), (1, 2))]
  for a, b in pairs:  # 524,288 draws each: a correlation's standard error is about 0.0014
    corr = np.corrcoef(flat[a], flat[b])[0, 1]
    assert abs(corr) < 0.01, (a, b, corr)
  # neighbouring rows and columns of one mask are uncorrelated too
  m = np.asarray(masks[(0, 0)], np.float32)
  assert abs(np.corrcoef(m[:-1].ravel(), m[1:].ravel())[0, 1]) < 0.01
  assert abs(np.corrcoef(m[:, :-1].ravel(), m[:, 1:].ravel())[0, 1]) < 0.01


def test_the_mask_follows_global_rows_under_a_batch_mesh():
  """Under a mesh each batch shard numbers its rows from its offset: the sharded call equals
  the unsharded one, values and gradients."""
  args = _inputs((8, 4, 128))
  plain_out, plain_grads = _value_and_grads(fused_norm.dropout_add_norm, 0.1, *args)
  mesh = sharding.make_mesh((4, 1, 1), jax.devices()[:4])
  with sharding.mesh_context(mesh, sharding.logical_rules("data_parallel")):
    assert not jax.sharding.get_abstract_mesh().empty and fused_norm.applies((8, 4, 128))
    out, grads = _value_and_grads(fused_norm.dropout_add_norm, 0.1, *args)
  np.testing.assert_allclose(out, plain_out, atol=1e-5, rtol=1e-5)
  for g, r in zip(grads, plain_grads):
    np.testing.assert_allclose(g, r, atol=1e-5, rtol=1e-5)


def test_the_triton_kernels_mask_every_block_load_and_store(monkeypatch, capfd):
  """Lowered for CUDA from here (Triton's IR printed by Pallas's debug output): a hidden size
  that is not a power of two and rows that no block divides make every block reach past the
  array, so every tensor load and store must carry a mask (a store past a row's end would
  overwrite the next row)."""
  import functools  # pylint: disable=g-import-not-at-top
  from jax.experimental import pallas as pl  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(pl, "pallas_call", functools.partial(pl.pallas_call, debug=True))
  monkeypatch.setattr(fused_norm, "interpret", False)
  x, residual, scale, bias, _ = _inputs((3, 5, 96), jnp.bfloat16)
  grad = jax.grad(lambda x, r: jnp.sum(fused_norm.dropout_add_norm(
      x, r, scale, bias, SEED, rate=0.1, eps=EPS).astype(jnp.float32)), argnums=(0, 1))
  jax.export.export(jax.jit(grad), platforms=["cuda"], disabled_checks=[
      jax.export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")])(x, residual)
  lines = [l for l in capfd.readouterr().out.splitlines()
           if ("tt.load" in l or "tt.store" in l) and "tensor<" in l]
  assert len(lines) >= 20, lines  # forward and backward: 7 loads, 3 + 4 stores (as swaps)
  assert all('"masked_' in l for l in lines), [l for l in lines if '"masked_' not in l]


def _tiny(**kw):
  return BertConfig(vocab_size=50, hidden_size=32, num_layers=2, num_heads=2,
                    intermediate_size=64, max_position_embeddings=16, **kw)


def test_the_model_with_the_switch_has_the_same_params_and_outputs():
  ids = jnp.arange(24, dtype=jnp.int32).reshape(2, 12) % 50
  mask = jnp.ones_like(ids)
  off = model_lib.BertModel(_tiny(dropout_rate=0.1, attention_dropout_rate=0.0))
  on = model_lib.BertModel(_tiny(dropout_rate=0.1, attention_dropout_rate=0.0,
                                 fused_norm="pallas"))
  params = off.init(jax.random.key(0), ids, mask, ids)
  assert jax.tree.structure(params) == jax.tree.structure(
      on.init(jax.random.key(0), ids, mask, ids))
  a = off.apply(params, ids, mask, ids * 0)["sequence_output"]
  b = on.apply(params, ids, mask, ids * 0)["sequence_output"]
  np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5)  # deterministic: no dropout
  train = lambda seed: on.apply(params, ids, mask, ids * 0, deterministic=False,  # noqa: E731
                                rngs={"dropout": jax.random.key(seed)})["sequence_output"]
  assert not np.allclose(train(1), b) and not np.allclose(train(1), train(2))
  np.testing.assert_array_equal(train(1), train(1))


def test_the_switch_is_refused_in_one_line_where_it_cannot_run():
  m = config_sections.model()
  m.fused_norm = "pallas"
  compute_policy.check(m, "gpu")
  compute_policy.check(m, "cpu")
  with pytest.raises(ValueError, match=r"^bad config: model.fused_norm='pallas' runs on a GPU"):
    compute_policy.check(m, "tpu")
  m.fused_norm = "triton"
  with pytest.raises(ValueError, match=r"^bad config: model.fused_norm 'triton' not in"):
    compute_policy.check(m, "gpu")
  with pytest.raises(ValueError, match="fused_norm 'x' not in"):
    _tiny(fused_norm="x")
  with pytest.raises(ValueError, match="norm_first .pre-LN. layers have none to fuse"):
    _tiny(fused_norm="pallas", norm_first=True)


def test_a_norm_without_bias_has_no_bias_parameter():
  ids = jnp.arange(24, dtype=jnp.int32).reshape(2, 12) % 50
  mask = jnp.ones_like(ids)
  configs = [_tiny(norm_bias=False, fused_norm=f) for f in ("off", "pallas")]
  off, on = (model_lib.BertModel(c).init(jax.random.key(0), ids, mask, ids) for c in configs)
  assert jax.tree.structure(off) == jax.tree.structure(on)
  assert "bias" not in on["params"]["encoder"]["layer_0"]["output_norm"]
