"""DeBERTa's enhanced mask decoder (EMD): what the MLM head reads in DeBERTa's pretraining.

He et al. 2020 (arXiv:2006.03654, Sec. 3.2), as microsoft/DeBERTa's EnhancedMaskDecoder
(DeBERTa/apps/models/masked_language_model.py) with position_biased_input false
(DeBERTa-v2/v3, whose encoder sees no absolute positions):

  H    = the last encoder layer's input (the second-to-last hidden states),
  z    = absolute position embeddings at the position ids (a table used by the EMD only,
         DeBERTa's `embeddings.position_embeddings`; looked up raw, no LayerNorm),
  q_0  = H + z,
  q_k  = last_layer(queries q_{k-1}, keys and values H), k = 1 .. EMD_PASSES (2),

the same layer's parameters in both passes, the relative-position terms as in the
encoder, and the residual and LayerNorms taken on the queries. The MLM head (transform,
then the tied decoder) reads q_2; the encoder's own last-layer output is not read.
DeBERTa runs the passes at every row and keeps the masked ones; a row's output depends
only on its own query and on H, so bert_jax computes the masked rows only (the same
values).

The table is `emd/position_embeddings/embedding` [max_position_embeddings, hidden] in
BertForPreTraining's params (`emd=True`). transformers has no EMD (DebertaV2ForMaskedLM
reads the last layer), so exporting to HF drops the table (bert_jax.conversion.hf).
"""
import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.modeling import layers
from bert_jax.modeling.model_config import BertConfig

Array = jax.Array
# Passes of the last layer (DeBERTa: `layers = [encoder.layer[-1] for _ in range(2)]`).
EMD_PASSES = 2


class PositionEmbeddings(nn.Module):
  """The EMD's absolute position table: z at the queries' position ids."""
  config: BertConfig

  @nn.compact
  def __call__(self, position_ids: Array, positions: Array) -> Array:
    """position_ids int [batch, len], positions int [batch, Q] -> z [batch, Q, hidden]."""
    c = self.config
    table = layers.Embed(c.max_position_embeddings, c.hidden_size, ("position", "embed"),
                         dtype=jnp.dtype(c.dtype), param_dtype=jnp.dtype(c.param_dtype),
                         embedding_init=layers.kernel_init(c.initializer_range),
                         name="position_embeddings")
    return table(jnp.take_along_axis(position_ids, positions.astype(jnp.int32), axis=1))


def decode(last_layer, hidden: Array, positions: Array, z: Array) -> Array:
  """The EMD's passes.

  Args:
    last_layer: (keys_values [batch, len, hidden], queries [batch, Q, hidden]) -> the last
      encoder layer's output at the queries [batch, Q, hidden] (EncoderLayer with
      `positions` and `query_states`).
    hidden: H, the last layer's input [batch, len, hidden].
    positions: int [batch, Q], the queries' columns.
    z: [batch, Q, hidden], the absolute position embeddings of the queries.

  Returns:
    q_EMD_PASSES [batch, Q, hidden].
  """
  queries = jnp.take_along_axis(hidden, positions[..., None].astype(jnp.int32), axis=1) + z
  for _ in range(EMD_PASSES):
    queries = last_layer(hidden, queries)
  return queries
