"""Attention kernels: none accepts an attention dropout it does not apply, and
'auto' picks the kernel the run header names."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.modeling import compute_policy
from bert_jax.modeling import layers
from bert_jax.modeling import model_config
from tests.fixtures.pretraining import small_config


def _qkv(seed=0, batch=2, length=8, heads=2, head_dim=8):
  keys = jax.random.split(jax.random.PRNGKey(seed), 3)
  return [jax.random.normal(k, (batch, length, heads, head_dim)) for k in keys]


def _attend(impl, rng, deterministic=False, rate=0.5):
  q, k, v = _qkv()
  mask = layers.attention_mask(jnp.ones((2, 8), jnp.int32))
  return layers.dot_product_attention(q, k, v, mask, impl=impl, dropout_rate=rate,
                                      deterministic=deterministic, dropout_rng=rng,
                                      dtype=jnp.float32)


@pytest.mark.parametrize("impl", ["auto", "einsum", "xla", "cudnn", "splash"])
def test_no_kernel_accepts_an_attention_dropout_it_does_not_apply(impl):
  """A fused kernel asked for attention dropout is an error: it would return the undropped
  attention silently."""
  if impl in layers.FUSED_KERNELS:
    with pytest.raises(ValueError, match=f"attention_impl '{impl}' does not apply attention dropout"):
      _attend(impl, jax.random.PRNGKey(1))
    return
  a, b = _attend(impl, jax.random.PRNGKey(1)), _attend(impl, jax.random.PRNGKey(2))
  plain = _attend(impl, None, deterministic=True)
  assert not np.allclose(a, b) and not np.allclose(a, plain)  # the dropout is applied
  # Without dropout every kernel that runs here computes the same attention.
  np.testing.assert_allclose(plain, _attend("xla", None, deterministic=True), atol=1e-5)


@pytest.mark.parametrize("impl, dropout, dtype, bias, backend, kernel", [
    ("auto", True, jnp.bfloat16, False, "gpu", "einsum"),
    ("auto", False, jnp.bfloat16, False, "gpu", "cudnn"),
    ("auto", False, jnp.float16, False, "gpu", "cudnn"),
    ("auto", False, jnp.float32, False, "gpu", "xla"),  # cuDNN's flash attention: 16-bit only
    ("auto", False, jnp.bfloat16, True, "gpu", "xla"),  # DeBERTa's additive bias
    ("auto", False, jnp.bfloat16, False, "tpu", "splash"),  # where it applies (below)
    ("auto", False, jnp.bfloat16, True, "tpu", "xla"),
    ("auto", False, jnp.float32, False, "cpu", "xla"),
    ("einsum", False, jnp.bfloat16, False, "gpu", "einsum"),
    ("xla", False, jnp.bfloat16, False, "gpu", "xla"),
])
def test_auto_picks_cudnn_on_a_gpu_where_it_applies(impl, dropout, dtype, bias, backend, kernel):
  assert layers.attention_kernel(impl, dropout, dtype, bias, 64, backend=backend) == kernel


@pytest.mark.parametrize("impl, backend, lengths, segments, kernel", [
    ("auto", "tpu", (128, 128), True, "splash"),
    ("auto", "tpu", (512, 512), True, "splash"),
    ("auto", "tpu", (48, 48), True, "xla"),  # a short fine-tuning bucket: not a block multiple
    ("auto", "tpu", (19, 128), True, "xla"),  # the last layer's masked rows only
    ("auto", "tpu", (128, 128), False, "xla"),  # DeBERTa's mask (no segment ids)
    ("splash", "cpu", (128, 128), True, "splash"),
    ("splash", "cpu", (48, 48), True, "xla"),
    ("auto", "gpu", (128, 128), True, "cudnn"),
])
def test_splash_runs_where_it_applies_and_xla_elsewhere(impl, backend, lengths, segments, kernel):
  shapes = ((8, lengths[0], 12, 64), lengths[1])
  assert layers.attention_kernel(impl, False, jnp.bfloat16, False, 64, backend=backend,
                                 shapes=shapes, segments=segments) == kernel


@pytest.mark.parametrize("packed", [False, True])
def test_splash_attention_computes_the_dense_masks_attention(packed, monkeypatch):
  """Pallas's interpreter on the CPU: values and gradients as the einsum path's, at every
  position for rows of one example each, at the real tokens of packed rows."""
  from bert_jax.modeling import splash_attention  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(splash_attention, "interpret", True)
  q, k, v = _qkv(length=128, head_dim=16)
  segments = (np.arange(128)[None] < np.array([[100], [128]])).astype(np.int32)
  if packed:
    segments[0, 40:100] = 2
  segments = jnp.asarray(segments)
  mask = layers.AttentionMask(layers.attention_mask(segments),
                              None if packed else layers.padding_lengths(segments), segments)
  real = np.asarray(segments) > 0 if packed else np.ones(segments.shape, bool)

  def attend(impl, q, k, v):
    return layers.dot_product_attention(
        q, k, v, mask.dense, impl=impl, dropout_rate=0.0, deterministic=True, dropout_rng=None,
        dtype=jnp.float32, kv_lengths=mask.kv_lengths, segments=mask.segments)

  np.testing.assert_allclose(attend("splash", q, k, v)[real], attend("einsum", q, k, v)[real],
                             atol=2e-6)
  grads = [jax.grad(lambda *x, i=impl: (attend(i, *x)[real] ** 2).sum(), argnums=(0, 1, 2))(
      q, k, v) for impl in ("splash", "einsum")]
  for a, b in zip(*grads):
    np.testing.assert_allclose(a, b, atol=2e-6)
  assert "splash_attention" in jax.jit(lambda *x: attend("splash", *x)).lower(q, k, v).as_text()


def _segments(length, packed):
  """Example numbers [2, length]: row 0 one example of 20 tokens then padding (most of its
  padding queries farther than any window from a real token); row 1 one example, or with
  `packed` two examples split at a third of the row and 7 padding columns."""
  segments = np.ones((2, length), np.int32)
  segments[0, 20:] = 0
  if packed:
    segments[1, length // 3:] = 2
    segments[1, length - 7:] = 0
  return jnp.asarray(segments)


@pytest.mark.parametrize("packed", [False, True])
@pytest.mark.parametrize("half, length", [
    (64, 128), (64, 384),  # ModernBERT's window (128 tokens): length equal to it and above
    (192, 256),  # a 384-token window: below it, then equal and above
    pytest.param(192, 384, marks=pytest.mark.slow), pytest.param(192, 512, marks=pytest.mark.slow),
])
def test_splash_local_window_computes_the_xla_paths_attention(half, length, packed,
                                                              monkeypatch):
  """The local layers' splash kernel (its local mask, Pallas's interpreter on the CPU):
  values and gradients of the real tokens as the blocked path that runs off a TPU and as
  the dense mask cut to the window (|q - k| <= half, transformers' ModernBERT convention)
  run by XLA; padding outputs are finite (a padding query far from the real tokens attends
  to padding keys there, not to nothing)."""
  from bert_jax.modeling import splash_attention  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(splash_attention, "interpret", True)
  windows = []
  kernel = splash_attention._kernel  # pylint: disable=protected-access
  monkeypatch.setattr(splash_attention, "_kernel",
                      lambda h, n, w=None: windows.append(w) or kernel(h, n, w))
  q, k, v = _qkv(length=length, head_dim=16)
  segments = _segments(length, packed)
  real = np.asarray(segments) > 0
  kw = dict(dropout_rate=0.0, deterministic=True, dropout_rng=None, dtype=jnp.float32)

  def local(impl, q, k, v):
    return layers.local_attention(q, k, v, segments, half, impl=impl, **kw)

  def dense(q, k, v):
    mask = layers.AttentionMask(layers.attention_mask(segments)).windowed(half)
    return jax.nn.dot_product_attention(q, k, v, mask=mask.dense, implementation="xla")

  ours = local("splash", q, k, v)
  assert windows == [half]  # the kernel ran, with the local mask
  assert np.isfinite(np.asarray(ours)).all()
  for other in (local("xla", q, k, v), dense(q, k, v)):
    np.testing.assert_allclose(ours[real], other[real], atol=1e-5, rtol=0)
  grads = [jax.grad(lambda *x, f=f: (f(*x)[real] ** 2).sum(), argnums=(0, 1, 2))(q, k, v)
           for f in (functools.partial(local, "splash"), dense)]
  for a, b in zip(*grads):
    np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)


def test_splash_local_window_leaves_lengths_it_cannot_take_to_the_blocks():
  """A length below the kernel's 128-column blocks (a fine-tuning bucket shorter than
  ModernBERT's window) is not splash's: the blocked path computes it, as the dense mask."""
  assert layers.attention_kernel("splash", False, jnp.float32, False, 16,
                                 shapes=((2, 64, 2, 16), 64)) == "xla"
  q, k, v = _qkv(length=64, head_dim=16)
  segments = _segments(64, packed=True)
  ours = layers.local_attention(q, k, v, segments, 64, impl="splash", dropout_rate=0.0,
                                deterministic=True, dropout_rng=None, dtype=jnp.float32)
  mask = layers.AttentionMask(layers.attention_mask(segments)).windowed(64)
  real = np.asarray(segments) > 0
  np.testing.assert_allclose(
      ours[real], jax.nn.dot_product_attention(q, k, v, mask=mask.dense)[real], atol=1e-5)


@pytest.mark.slow
def test_modernbert_with_splash_attention_computes_the_xla_model(monkeypatch):
  """A 3-layer ModernBERT (layers 0 global, 1 and 2 local) on packed, padded rows of 256:
  with attention_impl 'splash' (the interpreter) the global layers run the full mask and the
  local ones the local mask, and the real tokens' outputs are the XLA path's."""
  from bert_jax.modeling import model as model_lib  # pylint: disable=g-import-not-at-top
  from bert_jax.modeling import splash_attention  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(splash_attention, "interpret", True)
  windows = []
  kernel = splash_attention._kernel  # pylint: disable=protected-access
  monkeypatch.setattr(splash_attention, "_kernel",
                      lambda h, n, w=None: windows.append(w) or kernel(h, n, w))
  cfg = model_config.for_pretraining(
      model_config.BertConfig(vocab_size=64, hidden_size=32, num_layers=3, num_heads=2,
                              intermediate_size=64, max_position_embeddings=256),
      "modernbert", 0)
  assert [cfg.is_local(i) for i in range(3)] == [False, True, True]
  segments = _segments(256, packed=True)
  ids = (jnp.arange(512, dtype=jnp.int32).reshape(2, 256) * 7 + 3) % 64 * (segments > 0)
  outs = []
  for impl in ("splash", "xla"):
    m = model_lib.BertModel(cfg.replace(attention_impl=impl))
    params = m.init(jax.random.PRNGKey(0), ids, segments, jnp.zeros_like(ids))
    outs.append(m.apply(params, ids, segments, jnp.zeros_like(ids))["sequence_output"])
  assert sorted(windows, key=str)[:1] == [64] and None in windows
  real = np.asarray(segments) > 0
  np.testing.assert_allclose(outs[0][real], outs[1][real], atol=1e-5, rtol=0)


@pytest.mark.parametrize("impl, rate, message, backend_that_can", [
    ("splash", 0.0, r"model.attention_impl='splash' needs a TPU; JAX runs on cpu here", "tpu"),
    ("xla", 0.1, r"model.attention_impl='xla' applies no attention dropout and "
     r"model.attention_dropout_rate=0.1 asks for it", None),
])
def test_a_kernel_the_run_cannot_use_is_a_config_error_naming_the_keys(impl, rate, message,
                                                                       backend_that_can):
  config = small_config("unused")
  config.model.attention_impl = impl
  config.model.attention_dropout_rate = rate
  with pytest.raises(ValueError, match="^bad config: " + message):
    compute_policy.check_attention_impl(config.model)
  if backend_that_can:  # an AOT target's devices
    compute_policy.check_attention_impl(config.model, backend=backend_that_can)
  else:
    config.model.attention_dropout_rate = 0.0
    compute_policy.check_attention_impl(config.model)  # no dropout asked: the fused kernel is fine


def test_the_header_names_the_kernel_and_its_dropout():
  c = model_config.BertConfig(vocab_size=10, hidden_size=16, num_layers=1, num_heads=2,
                              intermediate_size=32, attention_dropout_rate=0.1)
  assert compute_policy.describe_attention(c).startswith("einsum (explicit softmax) (attention "
                                                         "dropout 0.1;")
  assert compute_policy.describe_attention(c, training=False).startswith("XLA fused (no attention")
  c = c.replace(attention_dropout_rate=0.0, attention_impl="xla")
  assert "no attention dropout; model.attention_impl='xla'" in compute_policy.describe_attention(c)
  # ModernBERT's sliding-window layers run by blocks whatever kernel the global ones take.
  local = c.replace(attention_impl="cudnn", local_window=128, global_every=3)
  assert compute_policy.describe_attention(local).startswith(
      "cuDNN fused flash, masked by a dense bias; the sliding-window layers (128 tokens) by "
      "blocks of the keys near each query (XLA) (no attention dropout")


def test_the_fused_attention_recipe_states_no_attention_dropout_and_keeps_hidden_dropout():
  from configs import pretrain as pretrain_config  # pylint: disable=g-import-not-at-top
  base = pretrain_config.get_config("base")
  fused = pretrain_config.get_config("base,fused_attention")
  assert base.model.attention_dropout_rate == 0.1 and fused.model.attention_dropout_rate == 0.0
  assert fused.model.dropout_rate == base.model.dropout_rate == 0.1
  cfg = model_config.variant("base", 30522, dtype="bfloat16",
                             attention_dropout_rate=fused.model.attention_dropout_rate)
  assert not compute_policy.describe_attention(cfg).startswith("einsum")
  kernel = layers.attention_kernel(fused.model.attention_impl, False, jnp.bfloat16, False,
                                   cfg.head_dim, backend="gpu")
  assert kernel == "cudnn"


def test_key_lengths_mask_as_the_dense_padding_mask_does_every_row_included():
  """One example per row, real tokens first: masking by key lengths (what cuDNN gets) gives
  the dense mask's attention at every position, padding queries included (they attend to
  the real tokens). XLA's kernel takes the same lengths on the CPU."""
  q, k, v = _qkv(length=8)
  input_mask = jnp.array([[1] * 5 + [0] * 3, [1] * 8], jnp.int32)
  dense = layers.dot_product_attention(
      q, k, v, layers.attention_mask(input_mask), impl="einsum", dropout_rate=0.0,
      deterministic=True, dropout_rng=None, dtype=jnp.float32)
  by_lengths = jax.nn.dot_product_attention(
      q, k, v, key_value_seq_lengths=layers.padding_lengths(input_mask), implementation="xla")
  np.testing.assert_allclose(dense, by_lengths, atol=1e-6)
  np.testing.assert_array_equal(layers.padding_lengths(input_mask), [5, 8])


def test_cudnn_gets_key_lengths_and_no_dense_mask_when_rows_hold_one_example(monkeypatch):
  seen = []
  monkeypatch.setattr(jax.nn, "dot_product_attention",
                      lambda *a, **kw: seen.append((a, kw)) or a[0])
  q, k, v = _qkv()
  input_mask = jnp.array([[1] * 5 + [0] * 3, [1] * 8], jnp.int32)
  mask = layers.attention_mask(input_mask)
  kwargs = dict(impl="cudnn", dropout_rate=0.0, deterministic=True, dropout_rng=None,
                dtype=jnp.bfloat16)
  layers.dot_product_attention(q, k, v, mask, kv_lengths=layers.padding_lengths(input_mask),
                               **kwargs)
  layers.dot_product_attention(q, k, v, mask, **kwargs)  # packed rows: the dense mask
  bias = jnp.zeros((2, 2, 8, 8))  # an additive bias (DeBERTa) goes with the dense mask
  layers.dot_product_attention(q, k, v, mask, kv_lengths=layers.padding_lengths(input_mask),
                               bias=bias, **kwargs)
  (args, kw), (args2, kw2), (_, kw3) = seen
  assert len(args) == 3 and "mask" not in kw and kw["implementation"] == "cudnn"
  np.testing.assert_array_equal(kw["key_value_seq_lengths"], [5, 8])
  assert kw2["mask"] is mask and "key_value_seq_lengths" not in kw2
  assert kw3["mask"] is mask and kw3["bias"] is not None and "key_value_seq_lengths" not in kw3


@pytest.mark.slow
@pytest.mark.parametrize("scan", [False, True])
def test_one_example_per_row_computes_the_same_model_on_the_cpu(scan):
  """The lengths reach every layer (scanned too, and the last layer's masked rows); off a
  GPU the kernels read the dense mask, so the outputs are equal."""
  from bert_jax.modeling import model as model_lib  # pylint: disable=g-import-not-at-top
  cfg = model_config.BertConfig(vocab_size=64, hidden_size=32, num_layers=2, num_heads=2,
                                intermediate_size=64, max_position_embeddings=16,
                                scan_layers=scan, attention_impl="xla")
  ids = jnp.arange(32, dtype=jnp.int32).reshape(2, 16) % 64
  input_mask = jnp.array([[1] * 9 + [0] * 7, [1] * 16], jnp.int32)
  positions = jnp.array([[0, 3], [1, 15]], jnp.int32)
  outs = []
  for one in (False, True):
    m = model_lib.BertModel(cfg.replace(one_example_per_row=one))
    params = m.init(jax.random.PRNGKey(0), ids, input_mask, jnp.zeros_like(ids))
    outs.append(m.apply(params, ids, input_mask, jnp.zeros_like(ids),
                        output_positions=positions)["sequence_output"])
  np.testing.assert_array_equal(outs[0], outs[1])


def test_one_example_per_row_follows_the_data_and_is_never_saved():
  from bert_jax.pretraining import setup as pretrain_setup  # pylint: disable=g-import-not-at-top
  config = small_config("unused")
  for packing in (False, True):
    config.data.packing = packing
    assert pretrain_setup.variant_model_config(config, 64).one_example_per_row is not packing
  cfg = model_config.BertConfig(one_example_per_row=True)
  assert "one_example_per_row" not in cfg.to_dict()
  assert model_config.BertConfig.from_dict(cfg.to_dict()).one_example_per_row is False


def test_xla_defaults_keep_what_the_user_set():
  from bert_jax.runtime import xla_flags  # pylint: disable=g-import-not-at-top
  env = {}
  assert xla_flags.add_defaults(env, {"xla_gpu_enable_triton_gemm": "false"}) == [
      "--xla_gpu_enable_triton_gemm=false"]
  assert env["XLA_FLAGS"] == "--xla_gpu_enable_triton_gemm=false"
  env = {"XLA_FLAGS": "--xla_dump_to=/tmp/d --xla_gpu_enable_triton_gemm=true"}
  assert xla_flags.add_defaults(env, xla_flags.GPU_DEFAULTS) == []
  assert env["XLA_FLAGS"] == "--xla_dump_to=/tmp/d --xla_gpu_enable_triton_gemm=true"
  env = {"XLA_FLAGS": "--xla_dump_to=/tmp/d"}
  xla_flags.add_defaults(env, xla_flags.GPU_DEFAULTS)
  assert env["XLA_FLAGS"] == "--xla_dump_to=/tmp/d --xla_gpu_enable_triton_gemm=false"
  # On a machine without accelerators the CPU defaults are added; a level the user set stays.
  if xla_flags.cpu_only_machine():
    env = {}
    assert xla_flags.apply(env) == ["--xla_backend_optimization_level=2"]
    assert env == {"XLA_FLAGS": "--xla_backend_optimization_level=2"}
    env = {"XLA_FLAGS": "--xla_backend_optimization_level=3"}
    assert xla_flags.apply(env) == [] and env["XLA_FLAGS"] == "--xla_backend_optimization_level=3"
