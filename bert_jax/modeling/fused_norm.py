"""Dropout, residual add and LayerNorm as one Pallas kernel (model.fused_norm='pallas').

A post-LN layer ends twice in LayerNorm(residual + dropout(y)). Unfused, the dropout's
random bits are drawn by kernels of their own into memory, and its mask is kept for the
backward pass, beside what the add and the normalisation read. Here one kernel reads y and
the residual once and writes the normalised rows and two floats per row (mean, 1 / std); the
backward kernel reads them with y, the residual and the incoming gradient and writes the two
input gradients and per-block partial sums of the scale and bias gradients.

The dropout mask never reaches memory: each element's keep bit is a counter-based hash
(two rounds of murmur3's 32-bit finaliser) of the call's two seed words, the element's
row and its column, computed in the forward kernel and again, identically, in the backward
kernel. The seed words are drawn from the layer's dropout key (`DropoutAddNorm`), which the
training step folds from the state's key and the step, and flax folds per layer: the mask
follows the train state as flax's dropout does, so an exact resume stays exact. Rows are
numbered over the whole batch, under a mesh too (each shard's rows start at its offset),
so the mask does not depend on how the batch is split.

`reference` is the same computation in plain jnp with the same hash; it is what the kernel
is tested against, and what runs where the kernel does not apply (a mesh that splits the
hidden or length axis). The kernel runs through Triton on a GPU and in Pallas's
interpreter on the CPU (tests); compute_policy refuses the switch on a TPU.
"""
import functools
from typing import Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

_NAMES = ("activation_batch", "activation_length", "activation_embed")
# Triton's tensors have power-of-two sides: a row block is this many elements at most
# (rows x the hidden size rounded up to a power of two), a register budget that keeps
# BERT-large's 1024-wide rows at 8 to a block.
_BLOCK_ELEMENTS = 8192
interpret: Optional[bool] = None  # None: the interpreter on the CPU, Triton elsewhere


def _fmix(h: jax.Array) -> jax.Array:
  """murmur3's 32-bit finaliser: a bijection of uint32 whose every output bit depends on
  every input bit."""
  h = h ^ (h >> 16)
  h = h * jnp.uint32(0x85EBCA6B)
  h = h ^ (h >> 13)
  h = h * jnp.uint32(0xC2B2AE35)
  return h ^ (h >> 16)


def hash_bits(k0: jax.Array, k1: jax.Array, rows: jax.Array, cols: jax.Array) -> jax.Array:
  """uint32 draws for elements at `rows` [R, 1] x `cols` [1, C] (uint32) under seed words k0, k1.

  Per row one mix of (row, k0); per element a second of (that + column * an odd constant,
  k1): for a fixed row the columns map one to one, and both seed words reach every bit."""
  per_row = _fmix(rows ^ k0)
  return _fmix((per_row + cols * jnp.uint32(0x9E3779B1)) ^ k1)


def threshold(rate: float) -> tuple[int, float]:
  """(the uint32 draw below which an element is dropped, the keep probability it gives)."""
  t = min(int(round(rate * 2.0**32)), 2**32 - 1)
  return t, 1.0 - t / 2.0**32


def keep_mask(seed: jax.Array, rate: float, rows: jax.Array, cols: jax.Array) -> jax.Array:
  """Boolean keep mask [R, C] of `rows` [R, 1] x `cols` [1, C]; seed uint32 [>= 2]."""
  return hash_bits(seed[0], seed[1], rows, cols) >= jnp.uint32(threshold(rate)[0])


def reference(x: jax.Array, residual: jax.Array, scale: jax.Array, bias: jax.Array,
              seed: jax.Array, *, rate: float, eps: float, row_offset=0) -> jax.Array:
  """LayerNorm(residual + dropout(x)) over the last axis in plain jnp, float32 inside, in
  residual's dtype; the mask is the kernel's (rows numbered from `row_offset`)."""
  hidden = x.shape[-1]
  x2 = x.reshape(-1, hidden).astype(jnp.float32)
  z = residual.reshape(-1, hidden).astype(jnp.float32)
  if rate:
    rows = (jnp.arange(x2.shape[0], dtype=jnp.uint32) + jnp.uint32(row_offset))[:, None]
    keep = keep_mask(seed, rate, rows, jnp.arange(hidden, dtype=jnp.uint32)[None, :])
    z = z + jnp.where(keep, x2 * (1.0 / threshold(rate)[1]), 0.0)
  else:
    z = z + x2
  mean = jnp.mean(z, axis=1, keepdims=True)
  var = jnp.mean(jnp.square(z - mean), axis=1, keepdims=True)
  out = (z - mean) * jax.lax.rsqrt(var + eps) * scale.astype(jnp.float32) + bias.astype(
      jnp.float32)
  return out.astype(residual.dtype).reshape(residual.shape)


def _block_rows(hidden: int) -> int:
  return max(1, min(64, _BLOCK_ELEMENTS // _next_power_of_2(hidden)))


def _next_power_of_2(n: int) -> int:
  return 1 << (n - 1).bit_length()


def _masks(block_rows: int, width: int, hidden: int, rows_total: int):
  """(rows [R] int32 of this block, rows in the array [R, 1], columns in the array [1, Hp]).

  A block is a power of two on each side (Triton's tensors are), so the last block's rows
  past the end and every block's columns past the hidden size lie outside the array. Triton
  reads and writes a block's every element at the array's strides: unmasked, a padding
  column would be the next row's first and a store there would overwrite it. Every load and
  store below is masked with these."""
  from jax.experimental import pallas as pl  # pylint: disable=g-import-not-at-top
  rows = pl.program_id(0) * block_rows + jnp.arange(block_rows, dtype=jnp.int32)
  return rows, (rows < rows_total)[:, None], jnp.arange(width, dtype=jnp.int32)[None, :] < hidden


def _load(ref, mask):
  from jax.experimental.pallas import triton as pl_triton  # pylint: disable=g-import-not-at-top
  return pl_triton.load(ref, mask=mask, other=0).astype(jnp.float32)


def _store(ref, value, mask):
  from jax.experimental.pallas import triton as pl_triton  # pylint: disable=g-import-not-at-top
  pl_triton.store(ref, value.astype(ref.dtype), mask=mask)


def _tile(seed_ref, x_ref, res_ref, rows, valid, *, rate: float):
  """One block's (z = residual + dropout(x) float32 [R, Hp], 0 outside the array; keep mask)."""
  cols = jnp.arange(x_ref.shape[-1], dtype=jnp.uint32)[None, :]
  x, z = _load(x_ref, valid), _load(res_ref, valid)
  keep = None
  if rate:
    global_rows = rows.astype(jnp.uint32) + seed_ref[2]
    keep = hash_bits(seed_ref[0], seed_ref[1], global_rows[:, None], cols) >= (
        jnp.uint32(threshold(rate)[0]))
    x = jnp.where(keep, x * (1.0 / threshold(rate)[1]), 0.0)
  return jnp.where(valid, z + x, 0.0), keep


def _fused_norm_forward(seed_ref, x_ref, res_ref, scale_ref, bias_ref, out_ref, mean_ref,
                        rstd_ref, *, hidden: int, rate: float, eps: float, block_rows: int,
                        rows_total: int):
  rows, row_ok, col_ok = _masks(block_rows, x_ref.shape[-1], hidden, rows_total)
  valid = row_ok & col_ok
  z, _ = _tile(seed_ref, x_ref, res_ref, rows, valid, rate=rate)
  mean = jnp.sum(z, axis=1) / hidden  # [R]
  centred = jnp.where(valid, z - mean[:, None], 0.0)
  rstd = jax.lax.rsqrt(jnp.sum(centred * centred, axis=1) / hidden + eps)
  out = centred * rstd[:, None] * _load(scale_ref, col_ok) + _load(bias_ref, col_ok)
  _store(out_ref, out, valid)
  _store(mean_ref, mean, row_ok[:, 0])
  _store(rstd_ref, rstd, row_ok[:, 0])


def _fused_norm_backward(seed_ref, x_ref, res_ref, g_ref, scale_ref, mean_ref, rstd_ref,
                         dx_ref, dres_ref, dscale_ref, dbias_ref,
                         *, hidden: int, rate: float, block_rows: int, rows_total: int):
  rows, row_ok, col_ok = _masks(block_rows, x_ref.shape[-1], hidden, rows_total)
  valid = row_ok & col_ok
  z, keep = _tile(seed_ref, x_ref, res_ref, rows, valid, rate=rate)
  rstd = _load(rstd_ref, row_ok[:, 0])[:, None]
  xhat = jnp.where(valid, (z - _load(mean_ref, row_ok[:, 0])[:, None]) * rstd, 0.0)
  g = _load(g_ref, valid)  # 0 outside the array: those elements add nothing below
  gs = g * _load(scale_ref, col_ok)
  dz = rstd * (gs - jnp.sum(gs, axis=1, keepdims=True) / hidden
               - xhat * (jnp.sum(gs * xhat, axis=1, keepdims=True) / hidden))
  _store(dres_ref, dz, valid)
  if rate:
    dz = jnp.where(keep, dz * (1.0 / threshold(rate)[1]), 0.0)
  _store(dx_ref, dz, valid)
  _store(dscale_ref, jnp.sum(g * xhat, axis=0)[None, :], col_ok)
  _store(dbias_ref, jnp.sum(g, axis=0)[None, :], col_ok)


def _call(kernel, rows: int, hidden: int, row_inputs: int, vectors: int, outputs, grid: int,
          block_rows: int, *operands):
  """pallas_call over row blocks: operands are seed [4], `row_inputs` [rows, hidden] arrays,
  `vectors` [1, hidden] arrays and per-row [rows] arrays, in that order."""
  from jax.experimental import pallas as pl  # pylint: disable=g-import-not-at-top
  from jax.experimental.pallas import triton as pl_triton  # pylint: disable=g-import-not-at-top
  width = _next_power_of_2(hidden)
  row_block = pl.BlockSpec((block_rows, width), lambda i: (i, 0))
  specs = [pl.BlockSpec((4,), lambda i: (0,))] + [row_block] * row_inputs + [
      pl.BlockSpec((1, width), lambda i: (0, 0))] * vectors
  specs += [pl.BlockSpec((block_rows,), lambda i: (i,))] * (
      len(operands) - 1 - row_inputs - vectors)
  out_specs = []
  for o in outputs:
    if o.shape == (rows, hidden):
      out_specs.append(row_block)
    elif o.shape == (rows,):
      out_specs.append(pl.BlockSpec((block_rows,), lambda i: (i,)))
    else:  # [blocks, hidden] partial sums
      out_specs.append(pl.BlockSpec((1, width), lambda i: (i, 0)))
  run_interpreted = jax.default_backend() == "cpu" if interpret is None else interpret
  return pl.pallas_call(
      kernel, grid=(grid,), in_specs=specs, out_specs=out_specs, out_shape=outputs,
      interpret=run_interpreted,
      compiler_params=pl_triton.CompilerParams(num_warps=4, num_stages=1))(*operands)


def _geometry(x, seed, row_offset) -> tuple:
  """A shard's launch: (hidden, rows, rows per block, blocks, the kernel's four seed words)."""
  hidden = x.shape[-1]
  rows = int(np.prod(x.shape[:-1]))
  block_rows = _block_rows(hidden)
  seed4 = jnp.stack([seed[0], seed[1], row_offset.astype(jnp.uint32), jnp.uint32(0)])
  return hidden, rows, block_rows, -(-rows // block_rows), seed4


def _local_forward(x, residual, scale, bias, seed, row_offset, *, rate, eps):
  """The forward kernel on this shard's [..., hidden]: (out, mean [rows], rstd [rows])."""
  hidden, rows, block_rows, grid, seed4 = _geometry(x, seed, row_offset)
  kernel = functools.partial(_fused_norm_forward, hidden=hidden, rate=rate, eps=eps,
                             block_rows=block_rows, rows_total=rows)
  outputs = (jax.ShapeDtypeStruct((rows, hidden), residual.dtype),
             jax.ShapeDtypeStruct((rows,), jnp.float32), jax.ShapeDtypeStruct((rows,), jnp.float32))
  out, mean, rstd = _call(kernel, rows, hidden, 2, 2, outputs, grid, block_rows, seed4,
                          x.reshape(rows, hidden), residual.reshape(rows, hidden),
                          scale.reshape(1, hidden), bias.reshape(1, hidden))
  return out.reshape(residual.shape), mean, rstd


def _local_backward(x, residual, scale, mean, rstd, g, seed, row_offset, *, rate):
  """The backward kernel on this shard: (dx, dresidual, dscale and dbias partials [blocks, H])."""
  hidden, rows, block_rows, grid, seed4 = _geometry(x, seed, row_offset)
  kernel = functools.partial(_fused_norm_backward, hidden=hidden, rate=rate, block_rows=block_rows,
                             rows_total=rows)
  outputs = (jax.ShapeDtypeStruct((rows, hidden), x.dtype),
             jax.ShapeDtypeStruct((rows, hidden), residual.dtype),
             jax.ShapeDtypeStruct((grid, hidden), jnp.float32),
             jax.ShapeDtypeStruct((grid, hidden), jnp.float32))
  dx, dres, dscale, dbias = _call(
      kernel, rows, hidden, 3, 1, outputs, grid, block_rows, seed4, x.reshape(rows, hidden),
      residual.reshape(rows, hidden), g.reshape(rows, hidden), scale.reshape(1, hidden), mean,
      rstd)
  return dx.reshape(x.shape), dres.reshape(residual.shape), dscale, dbias


def _spec() -> Optional[jax.sharding.PartitionSpec]:
  """The activations' PartitionSpec under the mesh and rules in scope; None without a mesh."""
  if jax.sharding.get_abstract_mesh().empty:
    return None
  return jax.sharding.PartitionSpec(*nn.logical_to_mesh_axes(_NAMES))


def _axes(entry) -> tuple[str, ...]:
  return () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)


def applies(shape: tuple[int, ...]) -> bool:
  """The kernel takes whole rows on each shard: a mesh splits at most the batch axis, and
  into parts that divide it. Elsewhere `dropout_add_norm` computes `reference`."""
  spec = _spec()
  if spec is None:
    return True
  sizes = jax.sharding.get_abstract_mesh().shape
  shards = int(np.prod([sizes[a] for a in _axes(spec[0])]))
  return not _axes(spec[1]) and not _axes(spec[2]) and shape[0] % shards == 0


def _sharded(local, n_row_args: int, row_outputs: int, partial_outputs: int):
  """`local` per batch shard (shard_map) under a mesh, with each shard's first row number;
  without a mesh, on the whole array from row 0. The first `n_row_args` arguments are
  [batch, ...] activations, the rest replicated."""
  def call(*args):
    spec = _spec()
    if spec is None:
      return local(*args, jnp.uint32(0))
    batch = _axes(spec[0])

    def per_shard(*a):
      rows = int(np.prod(a[0].shape[:-1]))
      index = jax.lax.axis_index(batch) if batch else 0
      return local(*a, jnp.asarray(index * rows, jnp.uint32))

    P = jax.sharding.PartitionSpec  # noqa: N806
    row = P(spec[0])
    in_specs = tuple(row if i < n_row_args else P() for i in range(len(args)))
    out_specs = (row,) * row_outputs + (P(spec[0], None),) * partial_outputs
    return jax.shard_map(per_shard, mesh=jax.sharding.get_abstract_mesh(), in_specs=in_specs,
                         out_specs=out_specs, check_vma=False)(*args)
  return call


@functools.partial(jax.custom_vjp, nondiff_argnums=(5, 6))
def _fused(x, residual, scale, bias, seed, rate, eps):
  return _fused_fwd(x, residual, scale, bias, seed, rate, eps)[0]


def _fused_fwd(x, residual, scale, bias, seed, rate, eps):
  local = functools.partial(_local_forward, rate=rate, eps=eps)
  out, mean, rstd = _sharded(lambda x, r, s, b, k, off: local(x, r, s, b, k, off), 2, 3, 0)(
      x, residual, scale, bias, seed)
  return out, (x, residual, scale, bias, seed, mean, rstd)


def _fused_bwd(rate, eps, saved, g):
  del eps
  x, residual, scale, bias, seed, mean, rstd = saved
  local = functools.partial(_local_backward, rate=rate)
  # mean and rstd are per row: [rows] over the batch's shards, as the activations
  dx, dres, dscale, dbias = _sharded(
      lambda x, r, g, m, s, sc, k, off: local(x, r, sc, m, s, g, k, off), 5, 2, 2)(
          x, residual, g, mean, rstd, scale, seed)
  return (dx, dres, jnp.sum(dscale, axis=0).astype(scale.dtype),
          jnp.sum(dbias, axis=0).astype(bias.dtype), None)


_fused.defvjp(_fused_fwd, _fused_bwd)


def dropout_add_norm(x: jax.Array, residual: jax.Array, scale: jax.Array, bias: jax.Array,
                     seed: jax.Array, *, rate: float, eps: float) -> jax.Array:
  """LayerNorm(residual + dropout(x)) over the last axis, by the kernel where it applies.

  Args:
    x: [batch, ..., hidden], the sublayer's output (dropped).
    residual: like x, the layer's input.
    scale, bias: [hidden], the LayerNorm's.
    seed: uint32 [2], the call's seed words (`DropoutAddNorm` draws them from its key).
    rate: the dropout rate (0: none).
    eps: the LayerNorm's epsilon.

  Returns:
    like residual (its dtype), computed in float32.
  """
  if not 0.0 <= rate < 1.0:
    raise ValueError(f"dropout rate must be in [0, 1), got {rate}")
  seed = seed.astype(jnp.uint32)
  if not applies(x.shape):
    return reference(x, residual, scale, bias, seed, rate=rate, eps=eps)
  return _fused(x, residual, scale, bias, seed, rate, eps)


class DropoutAddNorm(nn.Module):
  """LayerNorm(residual + dropout(y)) with a LayerNorm's parameters (`scale`, and `bias` unless
  use_bias is False, named and initialised as layers.layer_norm's, so checkpoints are the same
  either way)."""
  rate: float
  eps: float
  dtype: jnp.dtype
  param_dtype: jnp.dtype
  deterministic: bool
  use_bias: bool = True

  @nn.compact
  def __call__(self, y: jax.Array, residual: jax.Array) -> jax.Array:
    hidden = residual.shape[-1]
    scale = self.param("scale", nn.with_logical_partitioning(nn.initializers.ones, ("embed",)),
                       (hidden,), self.param_dtype)
    bias = (self.param("bias", nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
                       (hidden,), self.param_dtype) if self.use_bias
            else jnp.zeros((hidden,), self.param_dtype))
    rate = 0.0 if self.deterministic else self.rate
    seed = (jax.random.bits(self.make_rng("dropout"), (2,), jnp.uint32) if rate
            else jnp.zeros((2,), jnp.uint32))
    return dropout_add_norm(y.astype(self.dtype), residual.astype(self.dtype), scale, bias, seed,
                            rate=rate, eps=self.eps)
