"""Token vectors -> one vector per text: the pooling that embedding and its training share.

  pool              [batch, len, hidden] -> [batch, hidden] by one of POOL_MODES over real tokens
  SentenceDense     the Dense layers a sentence-transformers model applies after pooling
  l2_normalize      unit-length vectors (cosine similarity becomes a dot product)
  SentenceEncoder   the encoder, pooled (and optionally normalised), over inputs [..., len]:
                    the siamese model of sentence-embedding training (every sentence of a
                    pair or triplet through the same weights)
  embedding_record  bundle.json's `embedding`: how the bundle's model embeds, checked

`bert_jax.embed` pools with the same functions, so an embedding computed there
is the one the training objective saw.
"""
import functools
import json
from typing import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.modeling import model as model_lib
from bert_jax.modeling.model_config import BertConfig

# Poolings a sentence encoder trains with (bert_jax.embed also has the other POOL_MODES and
# 'pooler').
TRAIN_POOLINGS = ("mean", "cls")
# The poolings over token vectors, named as sentence-transformers' Pooling modes are (its
# pooling_mode_X_tokens keys), so that a converted model records the one it was trained with.
POOL_MODES = ("cls", "mean", "max", "mean_sqrt_len", "weightedmean", "lasttoken")
# The activations of sentence-transformers' Dense layers that bert_jax computes, by the name a
# bundle records; torch's GELU is the exact one.
DENSE_ACTIVATIONS = {"identity": lambda x: x, "tanh": jnp.tanh, "relu": jax.nn.relu,
                     "gelu": functools.partial(jax.nn.gelu, approximate=False),
                     "sigmoid": jax.nn.sigmoid}
# The param group of those Dense layers, beside 'bert' (layer_0, layer_1, ...).
DENSE_GROUP = "sentence_dense"
# The longest input (special tokens included) of a checkpoint that records none: what embed
# uses and an export tells sentence-transformers.
DEFAULT_MAX_LENGTH = 128


def pool(h: jax.Array, mask: jax.Array, pooling: str) -> jax.Array:
  """h [batch, len, hidden], mask [batch, len] (right-padded) -> [batch, hidden].

  As sentence-transformers' Pooling computes them, over real tokens only ([CLS] and [SEP]
  included): `cls` the first position; `mean` the average; `max` the maximum; `mean_sqrt_len`
  the sum over the square root of the count; `weightedmean` the average weighted by position
  (1, 2, ...); `lasttoken` the last real token.
  """
  m = mask[..., None].astype(h.dtype)  # [batch, len, 1]
  if pooling == "cls":
    return h[:, 0]
  if pooling == "mean":
    return (h * m).sum(axis=1) / jnp.maximum(m.sum(axis=1), 1.0)
  if pooling == "max":
    return jnp.where(m > 0, h, -jnp.inf).max(axis=1)
  if pooling == "mean_sqrt_len":
    return (h * m).sum(axis=1) / jnp.sqrt(jnp.maximum(m.sum(axis=1), 1.0))
  if pooling == "weightedmean":
    w = m * jnp.arange(1, h.shape[1] + 1, dtype=h.dtype)[None, :, None]  # [batch, len, 1]
    return (h * w).sum(axis=1) / jnp.maximum(w.sum(axis=1), 1.0)
  if pooling == "lasttoken":
    last = jnp.maximum(mask.astype(jnp.int32).sum(axis=1) - 1, 0)  # [batch]
    return jnp.take_along_axis(h, last[:, None, None], axis=1)[:, 0]
  raise ValueError(f"unknown pooling {pooling!r}")


class SentenceDense(nn.Module):
  """sentence-transformers' Dense modules in order: x @ kernel (+ bias), then the activation.

  Attributes:
    layers: ((out_features, bias, activation), ...), activation one of DENSE_ACTIVATIONS.
  """
  layers: tuple = ()

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    for i, (features, bias, activation) in enumerate(self.layers):
      x = DENSE_ACTIVATIONS[activation](
          nn.Dense(features, use_bias=bias, name=f"layer_{i}")(x))
    return x


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
  # The init checkpoint's Dense layers after pooling (SentenceDense.layers), trained with it.
  dense: tuple = ()

  @nn.compact
  def __call__(self, input_ids, input_mask, segment_ids, deterministic: bool = True):
    lead, length = input_ids.shape[:-1], input_ids.shape[-1]
    flat = lambda x: x.reshape(-1, length)  # noqa: E731  [sequences, len]
    out = model_lib.BertModel(self.config, add_pooler=False, name="bert")(
        flat(input_ids), flat(input_mask), flat(segment_ids), deterministic=deterministic)
    x = pool(out["sequence_output"].astype(jnp.float32), flat(input_mask), self.pooling)
    if self.dense:
      x = SentenceDense(self.dense, name=DENSE_GROUP)(x)
    if self.normalize:
      x = l2_normalize(x)
    return x.reshape(lead + x.shape[-1:])  # [..., hidden]


# What bundle.json's `embedding` may hold, each optional: {"pooling": one of POOL_MODES or
# "pooler", "normalize": bool, "max_seq_length": int, "dense": [{"features", "bias",
# "activation"}, ...], "prompts": {name: text}, "default_prompt_name": str or null,
# "include_prompt": false when pooling leaves the prompt's tokens out, "source": where the
# record came from}.
RECORD_KEYS = ("pooling", "normalize", "max_seq_length", "dense", "prompts",
               "default_prompt_name", "include_prompt", "source")


def embedding_record(recorded, where: str) -> dict:
  """bundle.json's `embedding`, checked: every program that embeds reads it through here.

  Args:
    recorded: the JSON value (a dict).
    where: the file, for messages.

  Returns:
    The record, its `dense` as SentenceDense.layers (a tuple of tuples).

  Raises:
    ValueError: one line naming the file, the key and what it must be.
  """
  poolings = POOL_MODES + ("pooler",)
  # A hand-edited "normalize": "false" (a string) was read as true.
  if (not isinstance(recorded, dict) or not set(recorded) <= set(RECORD_KEYS)
      or recorded.get("pooling", "mean") not in poolings
      or not isinstance(recorded.get("normalize", False), bool)):
    raise ValueError(f"{where}: 'embedding' must be {{\"pooling\": one of {list(poolings)}, "
                     f"\"normalize\": true or false}}, got {json.dumps(recorded)}")
  out = dict(recorded)
  length = out.get("max_seq_length")
  if length is not None and (not isinstance(length, int) or isinstance(length, bool)
                             or length < 2):
    raise ValueError(f"{where}: 'embedding' max_seq_length must be an integer >= 2, got "
                     f"{json.dumps(length)}")
  layers = []
  for layer in out.get("dense", []):
    if (not isinstance(layer, dict) or set(layer) != {"features", "bias", "activation"}
        or layer["activation"] not in DENSE_ACTIVATIONS or not isinstance(layer["bias"], bool)
        or not isinstance(layer["features"], int)):
      raise ValueError(f"{where}: 'embedding' dense layers must be {{\"features\": int, "
                       f"\"bias\": true or false, \"activation\": one of "
                       f"{list(DENSE_ACTIVATIONS)}}}, got {json.dumps(layer)}")
    layers.append((layer["features"], layer["bias"], layer["activation"]))
  out["dense"] = tuple(layers)
  prompts = out.get("prompts", {})
  if not isinstance(prompts, dict) or not all(isinstance(v, str) for v in prompts.values()):
    raise ValueError(f"{where}: 'embedding' prompts must be {{name: text}}, got "
                     f"{json.dumps(prompts)}")
  default = out.get("default_prompt_name")
  if default is not None and default not in prompts:
    raise ValueError(f"{where}: 'embedding' default_prompt_name {json.dumps(default)} is not one "
                     f"of its prompts {sorted(prompts)}")
  if not isinstance(out.get("include_prompt", True), bool):
    raise ValueError(f"{where}: 'embedding' include_prompt must be true or false, got "
                     f"{json.dumps(out['include_prompt'])}")
  return out


def dense_record(layers: Sequence[tuple]) -> list[dict]:
  """SentenceDense.layers as bundle.json records them."""
  return [{"features": f, "bias": b, "activation": a} for f, b, a in layers]
