"""The encoder against the reference's parameter counts, and its compute options against each other.

Output parity with transformers is in test_convert_hf.py / test_convert_tf1.py
(it needs the conversion); here: parameter counts of base and large with the
pretraining heads (no allocation: jax.eval_shape), bf16 compute within bf16
tolerance of float32, and scan / einsum giving the float32 numbers of the
unrolled fused path.
"""
from flax import traverse_util
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.checkpoints import bundle
from bert_jax.modeling import layers
from bert_jax.modeling import model as model_lib
from bert_jax.modeling.model_config import BertConfig, variant
from tests.fixtures import parity


def _count(tree) -> int:
  return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(tree))


def _ours_count(config: BertConfig, module) -> int:
  return _count(jax.eval_shape(lambda: model_lib.init_params(module, jax.random.PRNGKey(0))))


@pytest.mark.parametrize("name", ["base", "large"])
def test_parameter_count_matches_transformers(name):
  transformers = parity.require("transformers")
  config = variant(name, vocab_size=30522)
  hf_config = transformers.BertConfig(
      vocab_size=30522, hidden_size=config.hidden_size, num_hidden_layers=config.num_layers,
      num_attention_heads=config.num_heads, intermediate_size=config.intermediate_size)
  hf = transformers.FlaxBertForPreTraining(hf_config, _do_init=False)
  want = _count(jax.eval_shape(lambda r: hf.init_weights(r, (1, 8)), jax.random.PRNGKey(0)))
  assert _ours_count(config, model_lib.BertForPreTraining(config)) == want
  if name == "base":  # the published bert-base-uncased figures
    assert want == 110_106_428
    assert _ours_count(config, model_lib.BertModel(config)) == 109_482_240


def _inputs():
  rng = np.random.default_rng(0)
  ids = rng.integers(5, 64, (2, 24)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[1, 15:] = 0
  seg = np.zeros_like(ids)
  seg[:, 10:] = 1
  positions = np.array([[1, 2, 20], [3, 7, 9]], np.int32)
  return ids, mask, seg, positions


@pytest.fixture(scope="module")
def setup():
  config = BertConfig(vocab_size=64, hidden_size=64, num_layers=3, num_heads=4,
                      intermediate_size=128, max_position_embeddings=32, attention_impl="xla")
  # Random params (no init to compile): N(0, 0.05), LayerNorm scales around 1.
  rng = np.random.default_rng(1)
  params = traverse_util.unflatten_dict(
      {k: (rng.normal(0, 0.05, s) + k.endswith("scale")).astype(np.float32)
       for k, s in bundle.pretraining_shapes(config).items()}, sep="/")
  return config, params


def _run(config, params):
  ids, mask, seg, positions = _inputs()

  @jax.jit
  def run(params):
    params = model_lib.match_scan_layout(params, config)
    enc = model_lib.BertModel(config).apply({"params": params["bert"]}, ids, mask, seg)
    heads = model_lib.BertForPreTraining(config).apply({"params": params}, ids, mask, seg,
                                                       positions)
    return enc["sequence_output"], heads["mlm_logits"], heads["nsp_logits"]
  return run(params)


@pytest.mark.parametrize("overrides", [
    dict(attention_impl="einsum"), dict(scan_layers=True), dict(scan_layers=True, remat="full"),
    dict(remat="dots"),
], ids=["einsum", "scan", "scan_remat", "remat"])
def test_compute_options_agree_in_float32(setup, overrides):
  config, params = setup
  want = _run(config, params)
  got = _run(config.replace(**overrides), params)
  for w, g in zip(want, got):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=1e-5, rtol=1e-5)


def test_bf16_compute_within_bf16_tolerance(setup):
  config, params = setup
  f32 = _run(config, params)
  bf16 = _run(config.replace(dtype="bfloat16"), params)
  assert bf16[0].dtype == np.dtype("bfloat16")  # really computed in bf16
  assert bf16[1].dtype == np.float32  # logits are returned in float32
  for name, w, g in zip(("sequence", "mlm", "nsp"), f32, bf16):
    w, g = np.asarray(w, np.float32), np.asarray(g, np.float32)
    assert np.all(np.isfinite(g)), name
    scale = np.max(np.abs(w))
    err = np.max(np.abs(g - w))
    # bf16 keeps 8 bits of mantissa (eps 2^-8); a few roundings per layer.
    assert err <= 0.02 * scale, f"{name}: max abs err {err} for values up to {scale}"
    assert err > 0, f"{name}: identical to float32, so bf16 was not used"


def test_last_layer_on_head_rows_equals_full_sequence_when_packed(setup):
  """Unrolled, the last layer computes only [CLS] and the masked rows; scanned layers
  compute every row and gather. Both agree, with a block-diagonal (packed) mask."""
  config, params = setup
  ids, _, seg, positions = _inputs()
  packed = np.zeros_like(ids)
  packed[0, :9], packed[0, 9:20] = 1, 2  # two examples, then padding
  packed[1, :12], packed[1, 12:] = 1, 2
  position_ids = np.broadcast_to(np.arange(24), ids.shape)

  def run(cfg):
    p = model_lib.match_scan_layout(params, cfg)
    out = jax.jit(lambda p: model_lib.BertForPreTraining(cfg).apply(
        {"params": p}, ids, packed, seg, positions, position_ids))(p)
    return out["mlm_logits"], out["nsp_logits"]

  for got, want in zip(run(config), run(config.replace(scan_layers=True))):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_scanned_layers_prune_the_last_one_to_the_asked_rows_and_train(setup):
  """Scanned, every layer but the last runs in the loop and the last computes only the
  masked rows (not every row, then a gather): its MLP is [batch, Q, intermediate]. The
  gradients equal the unrolled model's; with dropout the scanned step runs and draws."""
  config, params = setup
  ids, mask, seg, positions = _inputs()
  config = config.replace(dropout_rate=0.0, attention_dropout_rate=0.0)

  def loss(cfg, p, rng=None):
    out = model_lib.BertForPreTraining(cfg).apply(
        {"params": model_lib.match_scan_layout(p, cfg)}, ids, mask, seg, positions,
        deterministic=rng is None, rngs=None if rng is None else {"dropout": rng})
    return jnp.sum(out["mlm_logits"] ** 2) / 1e3 + jnp.sum(out["nsp_logits"])

  scanned = config.replace(scan_layers=True)
  jaxpr = str(jax.make_jaxpr(lambda p: loss(scanned, p))(params))
  assert f"f32[2,4,{config.intermediate_size}]" in jaxpr  # the last layer's MLP: [CLS] + 3 rows
  assert f"f32[2,24,{config.intermediate_size}]" in jaxpr  # the looped layers': every row
  want = jax.grad(lambda p: loss(config, p))(params)
  got = model_lib.unstack_layers(jax.grad(lambda p: loss(scanned, p))(
      model_lib.stack_layers(params)))
  for w, g in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
    np.testing.assert_allclose(np.asarray(g), np.asarray(w), atol=1e-5, rtol=1e-4)
  noisy = scanned.replace(dropout_rate=0.1)
  a, b = (loss(noisy, model_lib.stack_layers(params), jax.random.PRNGKey(k)) for k in (1, 2))
  assert np.isfinite(a) and a != b


@pytest.mark.parametrize("padded", [0, 16])
def test_tied_decoder_gradients_match_autodiff(padded):
  """padded 16: the product runs on the table padded to 16 rows and is cut back."""
  rng = np.random.default_rng(2)
  x = jnp.asarray(rng.normal(size=(2, 3, 8)), jnp.float32)
  table = jnp.asarray(rng.normal(size=(11, 8)), jnp.float32)
  bias = jnp.asarray(rng.normal(size=(11,)), jnp.float32)
  w = jnp.asarray(rng.normal(size=(2, 3, 11)), jnp.float32)
  embed = layers.Embed(11, 8, ("vocab", "embed"))

  def loss(fn):
    return lambda *a: jnp.sum(jnp.sin(fn(*a)) * w)

  ours = lambda x, t, b: embed.apply({"params": {"embedding": t}}, x, b, padded,  # noqa: E731
                                     method="attend")
  if padded:
    assert "f32[2,3,16]" in str(jax.make_jaxpr(ours)(x, table, bias))  # the padded product
  plain = lambda x, t, b: jnp.einsum("...h,vh->...v", x, t) + b  # noqa: E731
  np.testing.assert_allclose(ours(x, table, bias), plain(x, table, bias), rtol=1e-6, atol=1e-6)
  for got, want in zip(jax.grad(loss(ours), argnums=(0, 1, 2))(x, table, bias),
                       jax.grad(loss(plain), argnums=(0, 1, 2))(x, table, bias)):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_padded_decoder_keeps_the_params_logits_and_gradients(setup):
  """BertConfig.vocab_pad_multiple pads only the MLM decoder's product (64 -> 96 rows here):
  the params keep vocab_size rows, the logits and every gradient are the unpadded ones,
  and the padding is a compute layout that is never saved."""
  config, params = setup
  padded = config.replace(vocab_pad_multiple=48)
  shapes = lambda c: jax.tree.map(jnp.shape, jax.eval_shape(  # noqa: E731
      lambda: model_lib.init_params(model_lib.BertForPreTraining(c), jax.random.PRNGKey(0))))
  assert shapes(padded) == shapes(config)
  ids, mask, seg, positions = _inputs()
  w = np.random.default_rng(3).normal(size=(2, 3, config.vocab_size)).astype(np.float32)

  def loss(cfg, p):
    logits = model_lib.BertForPreTraining(cfg).apply({"params": p}, ids, mask, seg,
                                                     positions)["mlm_logits"]
    return jnp.sum(jnp.sin(logits) * w), logits

  assert "f32[2,3,96]" in str(jax.make_jaxpr(lambda p: loss(padded, p))(params))
  (_, want), want_grads = jax.value_and_grad(lambda p: loss(config, p), has_aux=True)(params)
  (_, got), got_grads = jax.value_and_grad(lambda p: loss(padded, p), has_aux=True)(params)
  assert got.shape == (2, 3, config.vocab_size)
  np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=1e-6, rtol=1e-6)
  # The padded product is another GEMM shape, reduced in another order: equal up to rounding
  # at the scale of each array (with a Zen 4 CPU's AVX-512 kernels one element of 0.0017 in a
  # [2, 64] gradient whose largest is 23 came out 6.7e-6 apart: about 3 ulps of 23).
  for g, v in zip(jax.tree.leaves(got_grads), jax.tree.leaves(want_grads)):
    v = np.asarray(v)
    np.testing.assert_allclose(np.asarray(g), v, atol=1e-6 * max(1.0, float(np.abs(v).max())),
                               rtol=1e-5)
  assert "vocab_pad_multiple" not in padded.to_dict()
  assert BertConfig.from_dict(padded.to_dict()) == config
