"""Token vectors -> one vector per text: the pooling that embedding and its training share.

  pool              [batch, len, hidden] -> [batch, hidden] by cls, mean or max over real tokens
  l2_normalize      unit-length vectors (cosine similarity becomes a dot product)
  SentenceEncoder   the encoder, pooled (and optionally normalised), over inputs [..., len]:
                    the siamese model of sentence-embedding training (every sentence of a
                    pair or triplet through the same weights)

`bert_jax.embed` pools with the same functions, so an embedding computed there
is the one the training objective saw.
"""
import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.modeling import model as model_lib
from bert_jax.modeling.model_config import BertConfig

# Poolings a sentence encoder trains with (bert_jax.embed also has 'max' and 'pooler').
TRAIN_POOLINGS = ("mean", "cls")


def pool(h: jax.Array, mask: jax.Array, pooling: str) -> jax.Array:
  """h [batch, len, hidden], mask [batch, len] -> [batch, hidden].

  `mean` averages real tokens only ([CLS] and [SEP] included, as sentence-transformers
  does); `max` takes the maximum over real tokens; `cls` the first position.
  """
  m = mask[..., None].astype(h.dtype)  # [batch, len, 1]
  if pooling == "cls":
    return h[:, 0]
  if pooling == "mean":
    return (h * m).sum(axis=1) / jnp.maximum(m.sum(axis=1), 1.0)
  if pooling == "max":
    return jnp.where(m > 0, h, -jnp.inf).max(axis=1)
  raise ValueError(f"unknown pooling {pooling!r}")


def l2_normalize(x: jax.Array) -> jax.Array:
  """x [..., dim] scaled to unit L2 norm (zero vectors stay zero)."""
  return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), 1e-12)


class SentenceEncoder(nn.Module):
  """BertModel (params under 'bert', no pooler) -> pooled float32 vectors.

  Call arguments: input_ids, input_mask, segment_ids int [..., len] (e.g. [batch,
  2, len] for pairs: every sequence goes through the same weights). Returns
  float32 [..., hidden].
  """
  config: BertConfig
  pooling: str = "mean"
  normalize: bool = False

  @nn.compact
  def __call__(self, input_ids, input_mask, segment_ids, deterministic: bool = True):
    lead, length = input_ids.shape[:-1], input_ids.shape[-1]
    flat = lambda x: x.reshape(-1, length)  # noqa: E731  [sequences, len]
    out = model_lib.BertModel(self.config, add_pooler=False, name="bert")(
        flat(input_ids), flat(input_mask), flat(segment_ids), deterministic=deterministic)
    x = pool(out["sequence_output"].astype(jnp.float32), flat(input_mask), self.pooling)
    if self.normalize:
      x = l2_normalize(x)
    return x.reshape(lead + x.shape[-1:])  # [..., hidden]
