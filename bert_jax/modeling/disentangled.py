"""DeBERTa-v2/v3's disentangled attention: the relative-position terms added to BERT's scores.

As transformers' DebertaV2 (modeling_deberta_v2.py, DisentangledSelfAttention with
share_att_key, pos_att_type ['p2c', 'c2p'] and norm_rel_ebd 'layer_norm'): one table
of 2 x span relative embeddings per encoder (LayerNorm'd, bert/encoder/rel_embeddings
and rel_norm), projected by each layer's own query and key projections; for query i
and key j with relative index r(i, j) = clip(bucket(i - j) + span, 0, 2 span - 1):

  content->position  c2p[i, j] = q_i . pos_key[r(i, j)]
  position->content  p2c[i, j] = k_j . pos_query[r(i, j)]

(transformers' p2c gathers at -bucket(j - i), which is bucket(i - j): the buckets are
odd in the distance). The scores are (q_i . k_j + c2p + p2c) / sqrt(3 x head_dim).
bucket() is make_log_bucket_position: distances up to position_buckets / 2 as they
are, longer ones on a log scale up to max_relative_positions; without buckets the
distance itself (clipped to +-span by the index).
"""
import numpy as np

import jax
import jax.numpy as jnp

from bert_jax.modeling.model_config import BertConfig

Array = jax.Array
# 1 (content->content) + c2p + p2c: the scores are divided by sqrt(3 x head_dim).
SCALE_FACTOR = 3


def log_buckets(relative: np.ndarray, bucket_size: int, max_position: int) -> np.ndarray:
  """transformers' make_log_bucket_position, in float32 as it computes it.

  Args:
    relative: int array of distances q - k.
    bucket_size: position_buckets.
    max_position: max_relative_positions.

  Returns:
    int64 array of bucketed distances, same shape.
  """
  relative = np.asarray(relative, np.int64)
  mid = bucket_size // 2
  abs_pos = np.where((relative < mid) & (relative > -mid), mid - 1, np.abs(relative))
  ratio = np.log(abs_pos.astype(np.float32) / np.float32(mid)) / np.log(
      np.float32((max_position - 1) / mid))
  log_pos = np.ceil(ratio.astype(np.float32) * np.float32(mid - 1)) + mid
  return np.where(abs_pos <= mid, relative, log_pos * np.sign(relative)).astype(np.int64)


def relative_index(query_positions: Array, key_len: int, config: BertConfig) -> Array:
  """Rows of the relative-embedding table for each (query, key) pair.

  Args:
    query_positions: int [batch, Q], the queries' columns (0..len-1 for all rows).
    key_len: the number of keys (columns 0..key_len-1).
    config: a deberta-v2 config.

  Returns:
    int32 [batch, Q, key_len] in [0, 2 x relative_span).
  """
  span = config.relative_span
  distances = np.arange(-(key_len - 1), key_len)  # every q - k, static
  if config.position_buckets:
    distances = log_buckets(distances, config.position_buckets, config.max_relative_positions)
  table = jnp.asarray(np.clip(distances + span, 0, 2 * span - 1), jnp.int32)
  offsets = query_positions[:, :, None] - jnp.arange(key_len)[None, None, :]  # [batch, Q, len]
  return jnp.take(table, offsets + key_len - 1)


def attention_bias(query: Array, key: Array, pos_query: Array, pos_key: Array,
                   index: Array) -> Array:
  """The c2p + p2c terms, scaled as the content scores are.

  Args:
    query: [batch, Q, heads, head_dim] (content queries).
    key: [batch, len, heads, head_dim].
    pos_query, pos_key: [2 x span, heads, head_dim], the relative embeddings through
      the layer's query and key projections.
    index: int [batch, Q, len] from `relative_index`.

  Returns:
    float32 [batch, heads, Q, len].
  """
  f32 = jnp.float32
  c2p = jnp.einsum("bqhd,rhd->bhqr", query, pos_key).astype(f32)  # [batch, heads, Q, 2 span]
  c2p = jnp.take_along_axis(c2p, index[:, None], axis=-1)  # [batch, heads, Q, len]
  p2c = jnp.einsum("bkhd,rhd->bhkr", key, pos_query).astype(f32)  # [batch, heads, len, 2 span]
  # p2c[b, h, i, j] = p2c_all[b, h, j, index[b, i, j]]
  p2c = jnp.take_along_axis(p2c[:, :, None], index[:, None, :, :, None], axis=-1)[..., 0]
  return (c2p + p2c) / np.sqrt(query.shape[-1] * SCALE_FACTOR).astype(np.float32)
