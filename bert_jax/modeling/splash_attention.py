"""Pallas splash attention (TPU flash attention) for BERT's bidirectional masks.

The kernel (jax.experimental.pallas.ops.tpu.splash_attention, as MaxText runs it) takes
segment ids instead of a dense [batch, 1, len, len] mask: a query attends to the keys of its
own segment. For rows of one example each (BertConfig.one_example_per_row) every query is in
segment 1 and the real keys are too, padding keys in 0: every query, padding queries
included, attends to the row's real tokens, exactly as the dense mask. For packed rows the
segments are the examples' numbers (input_mask): block-diagonal, as the dense mask, except
that padding queries (0) attend to the padding keys instead of to every real token; their
outputs are never read by a loss and never reach a real token (padding keys are masked for
real queries).

It applies to self-attention over lengths that are multiples of 128 (its blocks) with no
additive bias and no attention dropout (it has none); `layers.attention_kernel` picks XLA's
fused attention for the other calls (the last layer's masked-rows-only queries, short
fine-tuning buckets). Under a mesh it runs per shard (shard_map) over the batch and heads
axes of the activations' logical sharding; a sharded length axis takes XLA's attention.

ModernBERT's local layers (`window`) run the kernel with its local mask: a query attends to
the keys at most `window` columns away (the dense path's |q - k| <= local_window // 2), and
the kernel skips the blocks outside the band, so a local layer costs about its window, not
the length. Their segment ids are `local_segment_ids`.
"""
import functools
from typing import Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

BLOCK = 128  # the kernel's lane width: lengths must be multiples of it
_QKV_NAMES = ("activation_batch", "activation_length", "activation_heads", None)
interpret = False  # tests: run the kernel in Pallas's interpreter (on the CPU)


def applies(query_shape: tuple[int, ...], kv_len: int) -> bool:
  """Self-attention over a length the kernel's blocks divide, whole rows on each shard, and
  batch and heads that the mesh's axes divide (the init's batch of one takes XLA's)."""
  batch, q_len, heads, _ = query_shape
  if q_len != kv_len or q_len % BLOCK:
    return False
  spec = _spec()
  if spec is None:
    return True
  sizes = jax.sharding.get_abstract_mesh().shape
  shards = lambda entry: int(np.prod([sizes[a] for a in (  # noqa: E731
      () if entry is None else (entry,) if isinstance(entry, str) else entry)]))
  return spec[1] is None and batch % shards(spec[0]) == 0 and heads % shards(spec[2]) == 0


def _spec() -> Optional[jax.sharding.PartitionSpec]:
  """The activations' PartitionSpec under the mesh and rules in scope; None without a mesh."""
  if jax.sharding.get_abstract_mesh().empty:
    return None
  return jax.sharding.PartitionSpec(*nn.logical_to_mesh_axes(_QKV_NAMES))


def _block(length: int) -> int:
  return next(b for b in (512, 256, 128) if length % b == 0)


def _pallas():
  """The splash kernel's and its masks' modules (imported on first use)."""
  # pylint: disable-next=g-import-not-at-top
  from jax.experimental.pallas.ops.tpu.splash_attention import (
      splash_attention_kernel, splash_attention_mask)
  return splash_attention_kernel, splash_attention_mask


def _kernel(heads: int, length: int, window: Optional[int] = None):
  sk, sm = _pallas()
  b = _block(length)
  sizes = sk.BlockSizes(block_q=b, block_kv=b, block_kv_compute=b, block_q_dkv=b,
                        block_kv_dkv=b, block_kv_dkv_compute=b, block_q_dq=b, block_kv_dq=b)
  if window is None:
    head_mask = sm.FullMask((length, length))
  else:  # keys k with q - window <= k <= q + window
    head_mask = sm.LocalMask((length, length), window_size=(window, window), offset=0)
  mask = sm.MultiHeadMask([head_mask] * heads)
  return sk.make_splash_mha(mask, head_shards=1, q_seq_shards=1, block_sizes=sizes,
                            interpret=interpret)


def segment_ids(segments: jax.Array, one_example_per_row: bool) -> tuple[jax.Array, jax.Array]:
  """(query, key) segment ids int32 [batch, len] from input_mask's example numbers."""
  segments = segments.astype(jnp.int32)
  if one_example_per_row:
    return jnp.ones_like(segments), (segments > 0).astype(jnp.int32)
  return segments, segments


def local_segment_ids(segments: jax.Array) -> tuple[jax.Array, jax.Array]:
  """(query, key) segment ids of a sliding-window layer: the example numbers on both sides.

  Real queries attend to the real keys of their example, as the dense mask. A padding query
  attends to the padding keys in its window (its own column among them), not to the real
  ones: past the window from the last real token it has none, and a query with no key is
  a row the kernel skips entirely (no finite softmax). Padding outputs are never read."""
  segments = segments.astype(jnp.int32)
  return segments, segments


def _local(query, key, value, q_seg, kv_seg, window=None):
  """Splash on this shard's [batch, len, heads, head_dim] (the query already scaled)."""
  kernel = _kernel(query.shape[2], query.shape[1], window)
  heads_first = lambda x: x.transpose(0, 2, 1, 3)  # noqa: E731
  out = jax.vmap(kernel)(heads_first(query), heads_first(key), heads_first(value),
                         segment_ids=_pallas()[0].SegmentIds(q=q_seg, kv=kv_seg))
  return heads_first(out)


def attention(query: jax.Array, key: jax.Array, value: jax.Array, q_seg: jax.Array,
              kv_seg: jax.Array, scale: Optional[float] = None,
              window: Optional[int] = None) -> jax.Array:
  """Bidirectional attention of [batch, len, heads, head_dim] inputs within segments.

  `scale`: the scores' factor (None: 1 / sqrt(head_dim)); applied to the query in its dtype,
  as the einsum path does. `window`: a sliding window, keys at most this many columns from
  the query (None: every key)."""
  if scale is None:
    query = query / np.sqrt(query.shape[-1]).astype(query.dtype)
  else:
    query = query * np.asarray(scale, query.dtype)
  spec = _spec()
  if spec is None:
    return _local(query, key, value, q_seg, kv_seg, window)
  seg_spec = jax.sharding.PartitionSpec(spec[0], spec[1])
  return jax.shard_map(functools.partial(_local, window=window), mesh=jax.sharding.get_abstract_mesh(),
                       in_specs=(spec, spec, spec, seg_spec, seg_spec), out_specs=spec,
                       check_vma=False)(query, key, value, q_seg, kv_seg)
