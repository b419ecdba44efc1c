"""Small Flax layers whose parameters carry logical axis names.

Logical names used by parameters: 'vocab', 'embed', 'heads', 'kv', 'mlp',
'embed_out' (second axis of square hidden->hidden kernels),
'position', 'type', 'labels', 'layers' (scan). Activations are constrained with
'activation_batch', 'activation_length', 'activation_embed', 'activation_heads',
'activation_mlp'. bert_jax.training.sharding maps these onto the mesh.
"""
from typing import Callable, Optional, Sequence, Union

from flax import struct
import flax.linen as nn
from flax.linen import fp8_ops
import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.modeling import splash_attention

Dtype = Union[jnp.dtype, str]
Initializer = Callable[..., jax.Array]


def kernel_init(stddev: float) -> Initializer:
  """BERT's initializer: truncated normal with the given stddev."""
  return nn.initializers.truncated_normal(stddev)


def constrain(x: jax.Array, names: Sequence[Optional[str]]) -> jax.Array:
  """Applies a logical sharding constraint (a no-op outside a mesh)."""
  return nn.with_logical_constraint(x, tuple(names))


# Dropout with a key of the rbg family (rbg, unsafe_rbg: the accelerator default) draws 16
# bits per element, two from each 32-bit word, when the rate is a multiple of 1/65536 to
# within 0.1% (0.1 is 6554/65536); other keys, threefry's included, draw as flax does.
_DRAW_BITS = 16
_FAST_IMPLS = ("rbg", "unsafe_rbg")


def _fast_draw_threshold(rng: jax.Array, rate: float) -> Optional[int]:
  """The 16-bit threshold below which an element is dropped, or None to draw as flax does."""
  if not jnp.issubdtype(rng.dtype, jax.dtypes.prng_key):
    return None  # a raw key: the default implementation's (threefry unless set otherwise)
  if str(jax.random.key_impl(rng)) not in _FAST_IMPLS:
    return None
  threshold = round(rate * 2**_DRAW_BITS)
  if not 0 < threshold < 2**_DRAW_BITS or abs(threshold / 2**_DRAW_BITS - rate) > 1e-3 * rate:
    return None
  return threshold


def keep_mask(rng: jax.Array, rate: float, shape: Sequence[int]) -> tuple[jax.Array, float]:
  """(boolean keep mask of `shape`, the keep probability to divide the kept values by).

  With a threefry or raw key: jax.random.bernoulli(rng, 1 - rate, shape), flax's own draw
  (bit for bit). With an rbg-family key and a rate that is a multiple of 1/65536 to within
  0.1%: half as many 32-bit words, each split into two 16-bit draws; an element is dropped
  when its draw is below round(rate * 65536), so the keep probability returned is the one
  drawn (1 - 6554/65536 for 0.1) and the kept values' scale keeps the expectation exact.
  """
  threshold = _fast_draw_threshold(rng, rate)
  if threshold is None:
    return jax.random.bernoulli(rng, 1.0 - rate, shape), 1.0 - rate
  n = int(np.prod(shape))
  words = jax.random.bits(rng, ((n + 1) // 2,), jnp.uint32)
  draws = jax.lax.bitcast_convert_type(words, jnp.uint16).reshape(-1)
  if n % 2:
    draws = draws[:n]
  return draws.reshape(shape) >= threshold, 1.0 - threshold / 2**_DRAW_BITS


class Dropout(nn.Dropout):
  """flax's Dropout (same names, same rngs, same masks from a threefry key) drawing its mask
  with keep_mask: 16 bits per element from an rbg-family key."""

  @nn.compact
  def __call__(self, inputs, deterministic: Optional[bool] = None,
               rng: Optional[jax.Array] = None):
    deterministic = nn.merge_param("deterministic", self.deterministic, deterministic)
    if self.rate == 0.0 or deterministic:
      return inputs
    if self.rate == 1.0:  # as flax: no NaN gradients
      return jnp.zeros_like(inputs)
    if rng is None:
      rng = self.make_rng(self.rng_collection)
    shape = list(inputs.shape)
    for dim in self.broadcast_dims:
      shape[dim] = 1
    mask, keep_prob = keep_mask(rng, self.rate, shape)
    mask = jnp.broadcast_to(mask, inputs.shape)
    return jax.lax.select(mask, inputs / keep_prob, jnp.zeros_like(inputs))


class DenseGeneral(nn.Module):
  """A dense layer over the trailing `in_dims` axes to `features` axes.

  Attributes:
    features: output feature shape.
    kernel_axes: logical names of the kernel, input axes then output axes.
    in_dims: number of trailing input axes contracted.
    fp8: multiply through flax's Fp8DirectDotGeneralOp (bert_jax.modeling.fp8), whose
      scales are the `_overwrite_with_gradient` collection's.
  """
  features: Union[int, Sequence[int]]
  kernel_axes: Sequence[str]
  in_dims: int = 1
  use_bias: bool = True
  dtype: Dtype = jnp.float32
  param_dtype: Dtype = jnp.float32
  kernel_init: Initializer = kernel_init(0.02)
  fp8: bool = False

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    features = (self.features,) if isinstance(self.features, int) else tuple(self.features)
    in_shape = x.shape[-self.in_dims:]
    kernel = self.param(
        "kernel", nn.with_logical_partitioning(self.kernel_init, tuple(self.kernel_axes)),
        in_shape + features, self.param_dtype)
    # One 2-D matmul: [..., prod(in)] x [prod(in), prod(out)]. The reshapes are free
    # (row-major), where a dot over a 3-D kernel made XLA's CPU backend copy the
    # kernel into a matrix on every step (~3% of a base step for Q, K, V, O).
    batch_shape = x.shape[:x.ndim - self.in_dims]
    k_in, k_out = int(np.prod(in_shape)), int(np.prod(features))
    dot_general = fp8_ops.Fp8DirectDotGeneralOp(name="fp8") if self.fp8 else jax.lax.dot_general
    y = dot_general(
        x.reshape(batch_shape + (k_in,)).astype(self.dtype),
        kernel.reshape(k_in, k_out).astype(self.dtype),
        (((len(batch_shape),), (0,)), ((), ())))
    y = y.reshape(batch_shape + features)
    if self.use_bias:
      bias_axes = tuple(self.kernel_axes[-len(features):])
      bias = self.param("bias", nn.with_logical_partitioning(nn.initializers.zeros, bias_axes),
                        features, self.param_dtype)
      y = y + bias.astype(self.dtype)
    return y


class Embed(nn.Module):
  """An embedding table with `attend` for a tied output projection."""
  num_embeddings: int
  features: int
  embedding_axes: Sequence[str]
  dtype: Dtype = jnp.float32
  param_dtype: Dtype = jnp.float32
  embedding_init: Initializer = kernel_init(0.02)

  def setup(self):
    self.embedding = self.param(
        "embedding", nn.with_logical_partitioning(self.embedding_init, tuple(self.embedding_axes)),
        (self.num_embeddings, self.features), self.param_dtype)

  def __call__(self, ids: jax.Array) -> jax.Array:
    # Gathered in param_dtype, then cast: the gradient is a scatter-add in param_dtype
    # (float32). Casting the table first made it a bfloat16 scatter-add, which XLA:GPU
    # runs as compare-and-swap loops under the contention of repeated ids (token types,
    # [CLS], [SEP], padding), and which rounds every added gradient to bfloat16.
    return jnp.take(self.embedding, ids, axis=0).astype(self.dtype)

  def attend(self, query: jax.Array, bias: Optional[jax.Array] = None,
             padded: int = 0) -> jax.Array:
    """query [..., features] -> logits [..., num_embeddings] (+ bias [num_embeddings]).

    padded > num_embeddings: the product runs against the table padded with zero rows to
    that many (an aligned GEMM width), and the logits are cut back to num_embeddings; the
    padded rows' gradient is dropped with them."""
    query, table = query.astype(self.dtype), self.embedding.astype(self.dtype)
    rows = self.num_embeddings
    padded = max(padded, rows)
    if padded != rows:
      table = jnp.pad(table, ((0, padded - rows), (0, 0)))
      bias = None if bias is None else jnp.pad(bias, (0, padded - rows))
    if bias is None:
      logits = jnp.einsum("...h,vh->...v", query, table)
    else:
      logits = _tied_logits(query, table, bias.astype(self.dtype))
    return logits if padded == rows else logits[..., :rows]


@jax.custom_vjp
def _tied_logits(x: jax.Array, table: jax.Array, bias: jax.Array) -> jax.Array:
  """x [..., h] @ table[v, h]^T + bias [v]: the tied decoder with its output bias.

  The backward pass takes the bias gradient as a matrix-vector product with a
  ones vector: XLA's CPU reduction over the rows of the [rows, vocab] gradient
  was a slow separate pass (about 4% of a mini step).
  """
  return jnp.einsum("...h,vh->...v", x, table) + bias


def _tied_logits_fwd(x, table, bias):
  return _tied_logits(x, table, bias), (x, table)


def _tied_logits_bwd(residuals, g):
  x, table = residuals
  dx = jnp.einsum("...v,vh->...h", g, table)
  g2 = g.reshape(-1, g.shape[-1])  # [rows, v]
  dtable = jnp.einsum("nv,nh->vh", g2, x.reshape(-1, x.shape[-1]))
  dbias = jnp.ones((g2.shape[0],), g.dtype) @ g2
  return dx, dtable, dbias


_tied_logits.defvjp(_tied_logits_fwd, _tied_logits_bwd)


def layer_norm(eps: float, dtype: Dtype, param_dtype: Dtype, name: str,
               use_bias: bool = True) -> nn.LayerNorm:
  """LayerNorm over the hidden axis with logically named scale and bias (use_bias False:
  a scale only)."""
  return nn.LayerNorm(
      epsilon=eps, dtype=dtype, param_dtype=param_dtype, name=name, use_bias=use_bias,
      scale_init=nn.with_logical_partitioning(nn.initializers.ones, ("embed",)),
      bias_init=nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)))


def activation(name: str) -> Callable[[jax.Array], jax.Array]:
  """'gelu' is the exact erf form BERT uses; 'gelu_new' the tanh approximation."""
  if name == "gelu":
    return lambda x: jax.nn.gelu(x, approximate=False)
  if name == "gelu_new":
    return lambda x: jax.nn.gelu(x, approximate=True)
  if name == "relu":
    return jax.nn.relu
  raise ValueError(f"unknown activation {name!r}")


def attention_mask(input_mask: jax.Array, padding_attends: bool = True) -> jax.Array:
  """Boolean attention mask [batch, 1, len, len] from `input_mask` [batch, len].

  `input_mask` is 0 at padding and >0 at real tokens. Rows packed with several
  examples number them 1, 2, ...: a token attends only to tokens of its own
  example (block-diagonal). Padding queries attend to all real tokens, so no row
  is fully masked; with `padding_attends` False they attend to nothing (DeBERTa's
  mask: the softmax of a fully masked row is uniform over every column, as in
  transformers).
  """
  q = input_mask[:, :, None]  # [batch, len, 1]
  k = input_mask[:, None, :]  # [batch, 1, len]
  mask = (k > 0) & ((q == k) | (q == 0)) if padding_attends else (k > 0) & (q == k)
  return mask[:, None, :, :]


@struct.dataclass
class AttentionMask:
  """What attention masks with: the dense boolean mask [batch, 1, q_len, k_len] and, for rows
  of one example each with real tokens first (BertConfig.one_example_per_row), the key
  lengths int32 [batch], which cuDNN's fused kernel takes instead of the dense mask; and the
  rows' example numbers int [batch, len] (input_mask, where padding queries attend to every
  real token), which splash attention masks with."""
  dense: jax.Array
  kv_lengths: Optional[jax.Array] = None
  segments: Optional[jax.Array] = None
  # The keys' position ids int [batch, len] where queries and keys are rotated (RoPE).
  rotary_positions: Optional[jax.Array] = None

  def rows(self, positions: jax.Array) -> "AttentionMask":
    """The mask of the queries at `positions` [batch, Q] (the keys are unchanged)."""
    return self.replace(segments=None, dense=jnp.take_along_axis(
        self.dense, positions[:, None, :, None].astype(jnp.int32), axis=2))

  def windowed(self, window: int, query_columns: Optional[jax.Array] = None) -> "AttentionMask":
    """The mask with each query's keys cut to those at most `window` columns away (a
    sliding window); `query_columns` [batch, Q]: the queries' columns (None: 0..len-1).
    The fused kernels' lengths and segment ids do not know the window: dropped, so the
    dense mask is what masks."""
    k_len = self.dense.shape[-1]
    if query_columns is None:
      query_columns = jnp.broadcast_to(jnp.arange(self.dense.shape[2]),
                                       (self.dense.shape[0], self.dense.shape[2]))
    near = jnp.abs(query_columns[:, None, :, None] - jnp.arange(k_len)) <= window
    return self.replace(dense=self.dense & near, kv_lengths=None, segments=None)


def rotary(x: jax.Array, positions: jax.Array, theta: float) -> jax.Array:
  """Rotary position embedding (RoPE, Su et al. 2021) of x [batch, len, heads, head_dim] at
  positions int [batch, len], in transformers' layout: the first and second halves of
  head_dim are the pairs rotated by position / theta^(2i / head_dim), computed in float32."""
  half = x.shape[-1] // 2
  inv_freq = 1.0 / (theta ** (np.arange(0, 2 * half, 2, dtype=np.float32) / (2 * half)))
  angles = positions.astype(jnp.float32)[..., None] * inv_freq  # [batch, len, half]
  angles = jnp.concatenate([angles, angles], axis=-1)[:, :, None, :]  # [batch, len, 1, hd]
  cos, sin = jnp.cos(angles).astype(x.dtype), jnp.sin(angles).astype(x.dtype)
  rotated = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
  return x * cos + rotated * sin


def padding_lengths(input_mask: jax.Array) -> jax.Array:
  """int32 [batch]: the real tokens of each row of `input_mask` [batch, len] (0 at padding)."""
  return jnp.sum(input_mask > 0, axis=1, dtype=jnp.int32)


# jax.nn.dot_product_attention's kernels and Pallas splash attention: no attention dropout
FUSED_KERNELS = ("xla", "cudnn", "splash")


def attention_kernel(impl: str, dropout: bool, dtype: Dtype, has_bias: bool, head_dim: int,
                     backend: Optional[str] = None, shapes: Optional[tuple] = None,
                     segments: bool = True) -> str:
  """The kernel `dot_product_attention` runs: 'einsum', 'xla', 'cudnn' or 'splash'.

  'auto' is the einsum path while attention dropout is active (the fused kernels have
  none), else cuDNN's fused flash attention on a GPU where it applies (bf16 / fp16,
  no additive bias, head_dim a multiple of 8 up to 128), else Pallas splash attention on a
  TPU where it applies (splash_attention.applies: self-attention over a multiple of 128
  tokens with segment ids, no additive bias), else XLA's fused call. 'splash' asked for
  runs XLA's fused call where splash does not apply (neither has attention dropout).
  Asking for a fused kernel with attention dropout active is an error: it would train
  without the dropout the config asks for (`check_attention_impl` refuses the config
  before the run; this is the guard at trace time).

  Args:
    impl: 'auto', 'xla', 'cudnn' or 'einsum' (BertConfig.attention_impl).
    dropout: attention dropout is active (training with a nonzero rate).
    dtype: the compute dtype.
    has_bias: an additive bias (DeBERTa's relative terms) is added to the scores.
    head_dim: the heads' width.
    backend: JAX's backend (None: jax.default_backend()).
    shapes: (query shape [batch, len, heads, head_dim], key length) of the call; None: the
      run header's question (splash applies to the encoder's full-length layers).
    segments: the call's mask has the rows' segment ids (AttentionMask.segments).
  """
  if impl in FUSED_KERNELS and dropout:
    raise ValueError(f"attention_impl {impl!r} does not apply attention dropout; set "
                     "attention_dropout_rate=0 or use attention_impl 'auto' or 'einsum'")
  splash = not has_bias and segments and (shapes is None or splash_attention.applies(*shapes))
  if impl == "splash":
    return "splash" if splash else "xla"
  if impl != "auto":
    return impl
  if dropout:
    return "einsum"
  backend = backend or jax.default_backend()
  if (backend == "gpu" and jnp.dtype(dtype) in (jnp.bfloat16, jnp.float16) and not has_bias
      and head_dim % 8 == 0 and head_dim <= 128):
    return "cudnn"
  if backend == "tpu" and splash:
    return "splash"
  return "xla"


def dot_product_attention(query: jax.Array, key: jax.Array, value: jax.Array,
                          mask: jax.Array, *, impl: str, dropout_rate: float,
                          deterministic: bool, dropout_rng: Optional[jax.Array],
                          dtype: Dtype, bias: Optional[jax.Array] = None,
                          scale: Optional[float] = None,
                          kv_lengths: Optional[jax.Array] = None,
                          segments: Optional[jax.Array] = None) -> jax.Array:
  """Multi-head attention over [batch, len, heads, head_dim] inputs.

  Args:
    query, key, value: [batch, len, heads, head_dim].
    mask: boolean [batch, 1, q_len, k_len].
    impl: 'auto', 'xla', 'cudnn' or 'einsum' (see BertConfig.attention_impl).
    dropout_rate: dropout on attention probabilities (training only).
    deterministic: no dropout when True.
    dropout_rng: PRNG key for attention dropout.
    dtype: compute dtype.
    bias: optional float [batch, heads, q_len, k_len] added to the scaled scores
      (DeBERTa's relative terms).
    scale: the scores' factor; None: 1 / sqrt(head_dim).
    kv_lengths: optional int32 [batch]: each row's keys are its first kv_lengths and `mask`
      is exactly that (one example per row, real tokens first). cuDNN then masks by the
      lengths (its padding mode; every query attends to the first kv_lengths keys, as the
      dense mask has padding queries do) instead of a bias made from `mask`; other
      kernels read `mask`.
    segments: optional int [batch, len]: the rows' example numbers (input_mask), which
      splash attention masks with (splash_attention.segment_ids) instead of `mask`.

  Returns:
    [batch, q_len, heads, head_dim].
  """
  use_dropout = not deterministic and dropout_rate > 0.0
  kernel = attention_kernel(impl, use_dropout, dtype, bias is not None, query.shape[-1],
                            shapes=(query.shape, key.shape[1]),
                            segments=segments is not None)
  if kernel == "splash":
    q_seg, kv_seg = splash_attention.segment_ids(segments, kv_lengths is not None)
    return splash_attention.attention(query, key, value, q_seg, kv_seg, scale=scale)
  if kernel == "cudnn" and kv_lengths is not None and bias is None:
    return jax.nn.dot_product_attention(
        query, key, value, key_value_seq_lengths=kv_lengths, scale=scale,
        implementation="cudnn")
  if kernel in ("xla", "cudnn"):
    return jax.nn.dot_product_attention(
        query, key, value, mask=mask, bias=None if bias is None else bias.astype(dtype),
        scale=scale, implementation=kernel)
  if scale is None:
    query = query / np.sqrt(query.shape[-1]).astype(dtype)
  else:
    query = query * np.asarray(scale, dtype)
  logits = jnp.einsum("bqhd,bkhd->bhqk", query, key)  # [batch, heads, q, k]
  if bias is not None:
    logits = logits.astype(jnp.float32) + bias
  logits = jnp.where(mask, logits.astype(jnp.float32), jnp.finfo(jnp.float32).min)
  probs = jax.nn.softmax(logits, axis=-1).astype(dtype)
  if use_dropout:
    keep, keep_prob = keep_mask(dropout_rng, dropout_rate, probs.shape)
    probs = jnp.where(keep, probs / keep_prob, 0.0).astype(dtype)
  return jnp.einsum("bhqk,bkhd->bqhd", probs, value)


def local_attention(query: jax.Array, key: jax.Array, value: jax.Array, segments: jax.Array,
                    window: int, *, dropout_rate: float, deterministic: bool,
                    dropout_rng: Optional[jax.Array], dtype: Dtype,
                    impl: str = "einsum") -> jax.Array:
  """Sliding-window self-attention computed by blocks: the dense mask's result, in memory
  linear in the length.

  Each query attends to the keys at most `window` columns away that share its example
  (`segments`: input_mask, padding queries attending to every real key, as attention_mask
  has them). Queries go in blocks of `window`; a block's keys are the 3 x window columns
  around it, so the scores are [batch, blocks, heads, window, 3 window] instead of
  [batch, heads, len, len]. Where `impl` picks splash attention (attention_kernel), the
  kernel runs with its local mask instead (splash_attention.local_segment_ids: padding
  queries attend to padding keys there; real queries as here).

  Args:
    query, key, value: [batch, len, heads, head_dim].
    segments: int [batch, len], 0 at padding, the example's number elsewhere.
    window: the largest distance attended (BertConfig.local_window // 2), >= 1.
    dropout_rate, deterministic, dropout_rng, dtype: as dot_product_attention's.
    impl: BertConfig.attention_impl; 'splash' or 'auto' on a TPU take the kernel where it
      applies, anything else the blocks.

  Returns:
    [batch, len, heads, head_dim].
  """
  use_dropout = not deterministic and dropout_rate > 0.0
  if attention_kernel(impl, use_dropout, dtype, False, query.shape[-1],
                      shapes=(query.shape, key.shape[1])) == "splash":
    q_seg, kv_seg = splash_attention.local_segment_ids(segments)
    return splash_attention.attention(query, key, value, q_seg, kv_seg, window=window)
  b, s, h, d = query.shape
  blocks = -(-s // window)
  tail = blocks * window - s
  span = jnp.arange(blocks)[:, None] * window + jnp.arange(3 * window)  # [blocks, 3 w]
  pad = lambda x, value=0: jnp.pad(  # noqa: E731
      x, ((0, 0), (window, tail + window)) + ((0, 0),) * (x.ndim - 2), constant_values=value)
  q = jnp.pad(query, ((0, 0), (0, tail), (0, 0), (0, 0))).reshape(b, blocks, window, h, d)
  k, v = pad(key)[:, span], pad(value)[:, span]  # [batch, blocks, 3 w, heads, hd]
  q_seg = jnp.pad(segments, ((0, 0), (0, tail))).reshape(b, blocks, window, 1)
  k_seg = pad(segments)[:, span][:, :, None, :]  # [batch, blocks, 1, 3 w]
  q_col = jnp.arange(blocks * window).reshape(blocks, window, 1)
  near = jnp.abs(q_col - (span[:, None, :] - window)) <= window  # [blocks, w, 3 w]
  allowed = (k_seg > 0) & ((q_seg == k_seg) | (q_seg == 0)) & near
  q = q / np.sqrt(d).astype(dtype)
  logits = jnp.einsum("bnqhd,bnkhd->bnhqk", q, k).astype(jnp.float32)
  logits = jnp.where(allowed[:, :, None], logits, jnp.finfo(jnp.float32).min)
  probs = jax.nn.softmax(logits, axis=-1).astype(dtype)
  if not deterministic and dropout_rate > 0:
    keep, keep_prob = keep_mask(dropout_rng, dropout_rate, probs.shape)
    probs = jnp.where(keep, probs / keep_prob, 0.0).astype(dtype)
  out = jnp.einsum("bnhqk,bnkhd->bnqhd", probs, v).reshape(b, blocks * window, h, d)
  return out[:, :s]
