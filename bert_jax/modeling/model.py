"""The BERT encoder and its heads, as functional Flax linen modules.

Parameter tree (canonical, unscanned; scan_layers stacks `encoder/layer_i` into
`encoder/layers` with a leading 'layers' axis, see `unstack_layers`):

  bert/embeddings/{word_embeddings,position_embeddings,token_type_embeddings}/embedding
      (no token_type_embeddings when type_vocab_size is 0: DistilBERT; tables of
      width embedding_size, then bert/embeddings/project/{kernel,bias} to hidden_size,
      when it differs: ELECTRA, ALBERT)
  (share_layers, ALBERT: only bert/encoder/layer_0, applied num_layers times)
  (DeBERTa-v2/v3: no position_embeddings when absolute_positions is False;
      bert/encoder/rel_embeddings/embedding [2 x relative_span, H] and
      bert/encoder/rel_norm/{scale,bias}, shared by the layers' disentangled attention)
  bert/embeddings/layer_norm/{scale,bias}
  bert/encoder/layer_{i}/attention/{query,key,value}/{kernel [H,heads,hd], bias [heads,hd]}
  bert/encoder/layer_{i}/attention/out/{kernel [heads,hd,H], bias [H]}
  bert/encoder/layer_{i}/{attention_norm,output_norm}/{scale,bias}
  bert/encoder/layer_{i}/{intermediate [H,I], output [I,H]}/{kernel,bias}
  bert/pooler/{kernel,bias}
  mlm/{transform/{kernel,bias}, transform_norm/{scale,bias}}, mlm_output_bias  (pretraining)
  emd/position_embeddings/embedding   (DeBERTa's enhanced mask decoder, pretraining; emd=True)
  nsp/{kernel,bias}                                                          (pretraining)
  discriminator/{dense,prediction}/{kernel,bias}                 (ELECTRA's discriminator)
  classifier | qa_outputs | token_classifier/{kernel,bias}                   (fine-tuning)
  aggregation/query [H]                  (the layers_attention sequence head, fine-tuning)
"""
import functools
from typing import Any, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.members import registry as members
from bert_jax.modeling import disentangled
from bert_jax.modeling import emd
from bert_jax.modeling import fused_norm
from bert_jax.modeling import fused_qkv
from bert_jax.modeling import layers
from bert_jax.modeling.model_config import BertConfig

Array = jax.Array
BATCH_LEN_EMBED = ("activation_batch", "activation_length", "activation_embed")


def _dtype(name: str):
  return jnp.dtype(name)


class BertEmbeddings(nn.Module):
  """Word + position (+ token type) embeddings, LayerNorm, dropout (+ projection to hidden)."""
  config: BertConfig

  def setup(self):
    c = self.config
    kw = dict(dtype=_dtype(c.dtype), param_dtype=_dtype(c.param_dtype),
              embedding_init=layers.kernel_init(c.initializer_range))
    self.word_embeddings = layers.Embed(c.vocab_size, c.embed_dim, ("vocab", "embed"), **kw)
    if c.absolute_positions:
      self.position_embeddings = layers.Embed(
          c.max_position_embeddings, c.embed_dim, ("position", "embed"), **kw)
    if c.type_vocab_size:
      self.token_type_embeddings = layers.Embed(
          c.type_vocab_size, c.embed_dim, ("type", "embed"), **kw)
    if c.embed_dim != c.hidden_size:
      self.project = layers.DenseGeneral(
          c.hidden_size, ("embed", "embed_out"), dtype=_dtype(c.dtype),
          param_dtype=_dtype(c.param_dtype), kernel_init=layers.kernel_init(c.initializer_range))
    self.layer_norm = layers.layer_norm(c.layer_norm_eps, _dtype(c.dtype), _dtype(c.param_dtype),
                                        "layer_norm", c.norm_bias)
    self.dropout = layers.Dropout(c.dropout_rate)

  def __call__(self, input_ids: Array, segment_ids: Array, position_ids: Array,
               deterministic: bool, input_mask: Optional[Array] = None) -> Array:
    """DeBERTa-v2 (with `input_mask`) zeroes the padding rows after the LayerNorm."""
    x = self.word_embeddings(input_ids)
    if self.config.absolute_positions:
      x = x + self.position_embeddings(position_ids)
    if self.config.type_vocab_size:
      x = x + self.token_type_embeddings(segment_ids)  # [batch, len, embed_dim]
    x = self.layer_norm(x)
    if members.get(self.config.model_type).zero_padding_embeddings:
      x = x * (input_mask > 0)[..., None].astype(x.dtype)
    x = self.dropout(x, deterministic=deterministic)
    if self.config.embed_dim != self.config.hidden_size:
      x = self.project(x)  # [batch, len, hidden]
    return layers.constrain(x, BATCH_LEN_EMBED)


class SelfAttention(nn.Module):
  """Bidirectional multi-head self-attention with the output projection; `local`: within
  config.local_window (a sliding window), with the local RoPE base."""
  config: BertConfig
  deterministic: bool
  local: bool = False

  @nn.compact
  def __call__(self, x: Array, mask: layers.AttentionMask, queries: Optional[Array] = None,
               relative: Optional[Array] = None,
               query_positions: Optional[Array] = None) -> Array:
    """x [batch, len, hidden] -> [batch, len, hidden]; with `queries` [batch, Q, hidden]
    (rows of x), only those rows attend: -> [batch, Q, hidden], mask.dense [batch, 1, Q, len].

    DeBERTa-v2: `relative` [2 x span, hidden] is the encoder's LayerNorm'd relative
    embeddings, `query_positions` [batch, Q] the columns of `queries`
    (bert_jax.modeling.disentangled)."""
    c = self.config
    kw = dict(dtype=_dtype(c.dtype), param_dtype=_dtype(c.param_dtype),
              kernel_init=layers.kernel_init(c.initializer_range), fp8=c.fp8)
    proj = lambda name: layers.DenseGeneral(  # noqa: E731
        (c.num_heads, c.head_dim), ("embed", "heads", "kv"), name=name,
        use_bias=c.linear_bias, **kw)
    if members.get(c.model_type).fused_qkv:  # one [hidden, 3 x hidden] kernel, q | k | v
      qkv = layers.DenseGeneral(3 * c.hidden_size, ("embed", "mlp"), name="qkv",
                                use_bias=c.linear_bias, **kw)
      split = lambda t: t.reshape(t.shape[:-1] + (3, c.num_heads, c.head_dim))  # noqa: E731
      kv = split(qkv(x))  # [batch, len, 3, heads, hd]
      k, v = kv[:, :, 1], kv[:, :, 2]
      q = kv[:, :, 0] if queries is None else split(qkv(queries))[:, :, 0]
    elif c.qkv_projection == "fused":  # BERT's three params, one GEMM (modeling/fused_qkv.py)
      params = {name: fused_qkv.ProjectionParams(
          (c.num_heads, c.head_dim), ("embed", "heads", "kv"), use_bias=c.linear_bias,
          param_dtype=kw["param_dtype"], kernel_init=kw["kernel_init"], name=name)(c.hidden_size)
                for name in ("query", "key", "value")}
      query, key = ((lambda t, p=params[n]: fused_qkv.project(t, [p], kw["dtype"])[0])
                    for n in ("query", "key"))
      if queries is None:  # [batch, len, heads, hd] each
        q, k, v = fused_qkv.project(x, list(params.values()), kw["dtype"])
      else:  # keys and values from every row, queries from theirs
        k, v = fused_qkv.project(x, [params["key"], params["value"]], kw["dtype"])
        q = query(queries)
    else:
      query, key = proj("query"), proj("key")
      q = query(x if queries is None else queries)  # [batch, Q, heads, hd]
      k, v = key(x), proj("value")(x)  # [batch, len, heads, hd]
    names = ("activation_batch", "activation_length", "activation_heads", None)
    q, k, v = (layers.constrain(t, names) for t in (q, k, v))
    if c.rope_theta:
      theta = (c.local_rope_theta or c.rope_theta) if self.local else c.rope_theta
      k_pos = mask.rotary_positions  # [batch, len]
      q_pos = k_pos if query_positions is None else jnp.take_along_axis(
          k_pos, query_positions.astype(jnp.int32), axis=1)
      q, k = layers.rotary(q, q_pos, theta), layers.rotary(k, k_pos, theta)
    banded = (self.local and query_positions is None and mask.segments is not None
              and relative is None and c.local_window >= 2)
    if self.local and not banded:  # e.g. the last layer's rows only: the dense mask, windowed
      mask = mask.windowed(c.local_window // 2, query_positions)
    bias = scale = None
    if relative is not None:  # DeBERTa's c2p and p2c terms (share_att_key: the same projections)
      relative = layers.Dropout(c.dropout_rate)(relative, deterministic=self.deterministic)
      if query_positions is None:
        query_positions = jnp.broadcast_to(jnp.arange(x.shape[1]), x.shape[:2])
      index = disentangled.relative_index(query_positions, x.shape[1], c)
      bias = disentangled.attention_bias(q, k, query(relative), key(relative), index)
      scale = 1 / float(np.sqrt(c.head_dim * disentangled.SCALE_FACTOR))
    dropout_rng = None
    if not self.deterministic and c.attention_dropout_rate > 0:
      dropout_rng = self.make_rng("dropout")
    if banded:  # scores over the window only: memory linear in the length
      y = layers.local_attention(
          q, k, v, mask.segments, c.local_window // 2, dropout_rate=c.attention_dropout_rate,
          deterministic=self.deterministic, dropout_rng=dropout_rng, dtype=_dtype(c.dtype),
          impl=c.attention_impl)
    else:
      y = layers.dot_product_attention(
          q, k, v, mask.dense, impl=c.attention_impl, dropout_rate=c.attention_dropout_rate,
          deterministic=self.deterministic, dropout_rng=dropout_rng, dtype=_dtype(c.dtype),
          bias=bias, scale=scale, kv_lengths=mask.kv_lengths, segments=mask.segments)
    y = layers.constrain(y, names)
    return layers.DenseGeneral(c.hidden_size, ("heads", "kv", "embed"), in_dims=2,
                               name="out", use_bias=c.linear_bias, **kw)(y)  # [batch, len, hidden]


class EncoderLayer(nn.Module):
  """One post-LN BERT layer: attention, add & norm, GELU MLP, add & norm; with
  config.norm_first a pre-LN layer: norm, attention, add, norm, MLP, add (`first`: no norm
  before attention). `local`: sliding-window attention (SelfAttention)."""
  config: BertConfig
  deterministic: bool
  local: bool = False
  first: bool = False

  @nn.compact
  def __call__(self, x: Array, mask: layers.AttentionMask, relative: Optional[Array] = None,
               positions: Optional[Array] = None,
               query_states: Optional[Array] = None) -> tuple[Array, Array]:
    """x [batch, len, hidden] -> (x', x'); with `positions` [batch, Q] only those rows
    are computed (keys and values still come from every row): x' is [batch, Q, hidden].
    `relative`: DeBERTa's relative embeddings (SelfAttention). `query_states`
    [batch, Q, hidden] (with `positions`, their columns) replace x's rows as the
    queries and the residual (DeBERTa's enhanced mask decoder)."""
    c = self.config
    dtype, pdtype = _dtype(c.dtype), _dtype(c.param_dtype)
    kw = dict(dtype=dtype, param_dtype=pdtype, kernel_init=layers.kernel_init(c.initializer_range),
              fp8=c.fp8)  # the feed-forward's GEMMs in FP8 (bert_jax.modeling.fp8)
    drop = layers.Dropout(c.dropout_rate)
    norm = lambda name: layers.layer_norm(  # noqa: E731
        c.layer_norm_eps, dtype, pdtype, name, c.norm_bias)

    def add_norm(name, x, y):  # LayerNorm(x + dropout(y)); one kernel with model.fused_norm
      if c.fused_norm == "pallas":
        return fused_norm.DropoutAddNorm(c.dropout_rate, c.layer_norm_eps, dtype, pdtype,
                                         self.deterministic, c.norm_bias, name=name)(y, x)
      return norm(name)(x + drop(y, deterministic=self.deterministic))

    def mlp(x, dropped=True):  # [batch, rows, hidden] -> the feed-forward's output (dropped)
      width = c.intermediate_size * (2 if c.glu else 1)
      h = layers.DenseGeneral(width, ("embed", "mlp"), name="intermediate",
                              use_bias=c.linear_bias, **kw)(x)
      act = layers.activation(c.hidden_act)
      h = act(h[..., :c.intermediate_size]) * h[..., c.intermediate_size:] if c.glu else act(h)
      h = layers.constrain(h, ("activation_batch", "activation_length", "activation_mlp"))
      y = layers.DenseGeneral(c.hidden_size, ("mlp", "embed"), name="output",
                              use_bias=c.linear_bias, **kw)(h)
      return drop(y, deterministic=self.deterministic) if dropped else y

    attention = SelfAttention(c, self.deterministic, self.local, name="attention")
    if positions is not None:
      mask = mask.rows(positions)
    if c.norm_first:
      h = x if self.first else norm("attention_norm")(x)
      queries = None if positions is None else gather_positions(h, positions)
      y = attention(h, mask, queries, relative, positions)
      x = x if positions is None else gather_positions(x, positions)  # [batch, Q, hidden]
      x = x + drop(y, deterministic=self.deterministic)
      x = x + mlp(norm("output_norm")(x))
      x = layers.constrain(x, BATCH_LEN_EMBED)
      return x, x
    queries = query_states
    if positions is not None and queries is None:
      queries = gather_positions(x, positions)  # [batch, Q, hidden]
    y = attention(x, mask, queries, relative, positions)
    x = x if queries is None else queries
    x = add_norm("attention_norm", x, y)
    x = add_norm("output_norm", x, mlp(x, dropped=False))
    x = layers.constrain(x, BATCH_LEN_EMBED)
    return x, x


def _remat_policy(name: str):
  if name == "full":
    return jax.checkpoint_policies.nothing_saveable
  if name == "dots":
    return jax.checkpoint_policies.dots_with_no_batch_dims_saveable
  return None


class BertEncoder(nn.Module):
  """N encoder layers, unrolled or scanned, optionally rematerialised; with share_layers
  (ALBERT) one layer, layer_0, applied N times."""
  config: BertConfig

  @nn.compact
  def __call__(self, x: Array, mask: layers.AttentionMask, deterministic: bool,
               output_hidden_states: bool = False,
               output_positions: Optional[Array] = None,
               emd_queries: Optional[tuple[Array, Array]] = None
               ) -> tuple[Array, Optional[list[Array]], Optional[Array]]:
    """Returns (last hidden state, all hidden states or None, EMD output or None).

    With `output_positions` [batch, Q] the last hidden state holds only those rows
    ([batch, Q, hidden]); the last layer then computes only those rows (its keys and
    values still cover the sequence). Scanned, every layer but the last runs in one
    loop and the last alone on its slice of the stacked params; with hidden states or
    DeBERTa's decoder asked for, all of them run in the loop and the rows are gathered.
    With `emd_queries` (positions int [batch, P], z [batch, P, hidden])
    the third output is DeBERTa's enhanced mask decoder at those rows, [batch, P,
    hidden]: the last layer run again on its own input (bert_jax.modeling.emd).
    """
    c = self.config
    layer_cls = EncoderLayer
    if c.remat != "none":
      layer_cls = nn.remat(EncoderLayer, policy=_remat_policy(c.remat), prevent_cse=not c.scan_layers)
    hidden = [x] if output_hidden_states else None
    extra = ()  # DeBERTa: the relative embeddings every layer reads
    if c.relative_span:
      table = layers.Embed(2 * c.relative_span, c.hidden_size, ("position", "embed"),
                           dtype=_dtype(c.dtype), param_dtype=_dtype(c.param_dtype),
                           embedding_init=layers.kernel_init(c.initializer_range),
                           name="rel_embeddings")
      extra = (layers.layer_norm(c.layer_norm_eps, _dtype(c.dtype), _dtype(c.param_dtype),
                                 "rel_norm")(table(jnp.arange(2 * c.relative_span))),)
    if c.scan_layers:
      scanned = nn.scan(
          layer_cls, variable_axes={"params": 0}, split_rngs={"params": True, "dropout": True},
          in_axes=nn.broadcast, length=c.num_layers,
          metadata_params={nn.PARTITION_NAME: "layers"})(c, deterministic, name="layers")
      embedded = x
      unbound = layer_cls(c, deterministic, parent=None)

      def stacked_layer(index):  # the layer at `index` of the stacked params, applied alone
        params = self._stacked_params(index)
        return lambda *args: unbound.apply(  # noqa: E731
            {"params": params}, *args,
            rngs=None if deterministic else {"dropout": self.make_rng("dropout")})

      if (output_positions is not None and not output_hidden_states and emd_queries is None
          and c.num_layers > 1 and not self.is_initializing()):
        # Every layer but the last scanned, the last computing only the rows asked for, as
        # unrolled layers do (a layer loop of num_layers - 1, then the last layer's slice).
        last_input = self._scan_head(unbound, x, mask, extra, deterministic)
        x, _ = stacked_layer(-1)(last_input, mask, extra[0] if extra else None,
                                 output_positions)
      else:
        x, ys = scanned(x, mask, *extra)  # ys: [layers, batch, len, hidden]
        if output_hidden_states:
          hidden += [ys[i] for i in range(c.num_layers)]
        if output_positions is not None:
          x = gather_positions(x, output_positions)
        last_input = ys[-2] if c.num_layers > 1 else embedded
      if emd_queries is not None:
        last_layer = stacked_layer(-1)
    else:
      shared = layer_cls(c, deterministic, name="layer_0") if c.share_layers else None
      for i in range(c.num_layers):
        last_rows = output_positions if i == c.num_layers - 1 and not output_hidden_states else None
        layer = shared if shared is not None else layer_cls(
            c, deterministic, c.is_local(i), i == 0, name=f"layer_{i}")
        last_input = x
        x, _ = layer(x, mask, extra[0] if extra else None, last_rows)
        if output_hidden_states:
          hidden.append(x)
      if c.norm_first:  # pre-LN: the encoder's output is normalised (the last hidden state too)
        x = layers.layer_norm(c.layer_norm_eps, _dtype(c.dtype), _dtype(c.param_dtype),
                              "final_norm", c.norm_bias)(x)
        if output_hidden_states:
          hidden[-1] = x
      if output_positions is not None and output_hidden_states:
        x = gather_positions(x, output_positions)
      last_layer = layer
    decoded = None
    if emd_queries is not None:
      positions, z = emd_queries
      decoded = emd.decode(
          lambda h, q: last_layer(h, mask, extra[0] if extra else None, positions, q)[0],
          last_input, positions, z)
    return x, hidden, decoded

  def _stacked_params(self, index) -> dict:
    """The scanned layers' params at `index` of their leading axis (an int: one layer's)."""
    return jax.tree.map(lambda p: p[index], nn.unbox(self.variables["params"]["layers"]))

  def _scan_head(self, unbound: nn.Module, x: Array, mask: layers.AttentionMask, extra: tuple,
                 deterministic: bool) -> Array:
    """Layers 0 .. num_layers - 2 of the stacked params in one loop; the last one's input."""
    c = self.config
    head = self._stacked_params(slice(None, -1))
    keys = (None if deterministic
            else jax.random.split(self.make_rng("dropout"), c.num_layers - 1))

    def body(h, params_and_key):
      params, key = params_and_key
      h, _ = unbound.apply({"params": params}, h, mask, *extra,
                           rngs=None if key is None else {"dropout": key})
      return h, None

    x, _ = jax.lax.scan(body, x, (head, keys))
    return x


class BertModel(nn.Module):
  """Embeddings, encoder and (optionally) the pooler.

  Call arguments:
    input_ids, segment_ids: int [batch, len].
    input_mask: int [batch, len]; 0 = padding, >0 = real token (packed rows
      number their examples 1, 2, ... for a block-diagonal mask).
    position_ids: optional int [batch, len], used as given; by default
      `default_position_ids` (0..len-1, or RoBERTa's offset positions).
  """
  config: BertConfig
  add_pooler: bool = True

  def setup(self):
    c = self.config
    self.embeddings = BertEmbeddings(c)
    self.encoder = BertEncoder(c)
    if self.add_pooler:
      self.pooler = layers.DenseGeneral(
          c.hidden_size, ("embed", "embed_out"), dtype=_dtype(c.dtype),
          param_dtype=_dtype(c.param_dtype), kernel_init=layers.kernel_init(c.initializer_range))

  def __call__(self, input_ids: Array, input_mask: Array, segment_ids: Array,
               position_ids: Optional[Array] = None, deterministic: bool = True,
               output_hidden_states: bool = False,
               output_positions: Optional[Array] = None,
               pool_index: Optional[Array] = None,
               emd_queries: Optional[tuple[Array, Array]] = None) -> dict[str, Any]:
    """Returns sequence_output [batch, len, hidden] (or [batch, Q, hidden]: the rows
    at `output_positions` [batch, Q], the only rows the last layer computes; with
    the pooler, their first column must be 0, the [CLS] row), pooled_output
    [batch, hidden] with the pooler, hidden_states when asked.

    `emd_queries`: BertEncoder's; the decoder's output is then emd_output.

    With `pool_index` int [E] (packed rows: flat indices row * len + column of
    each example's [CLS] in sequence_output), pooled_output is [E, hidden], one
    per example."""
    if position_ids is None:
      position_ids = default_position_ids(input_ids, self.config)
    x = self.embeddings(input_ids, segment_ids, position_ids, deterministic, input_mask)
    padding_attends = members.get(self.config.model_type).padding_attends
    mask = layers.AttentionMask(
        layers.attention_mask(input_mask, padding_attends=padding_attends),
        layers.padding_lengths(input_mask) if self.config.one_example_per_row else None,
        input_mask if padding_attends else None,
        position_ids if self.config.rope_theta else None)
    x, hidden, decoded = self.encoder(x, mask, deterministic, output_hidden_states,
                                      output_positions, emd_queries)
    out = {"sequence_output": x}  # [batch, len or Q, hidden]
    if hidden is not None:
      out["hidden_states"] = hidden  # num_layers + 1 of [batch, len, hidden]
    if decoded is not None:
      out["emd_output"] = decoded  # [batch, P, hidden]
    if self.add_pooler:
      if pool_index is None:
        first = x[:, 0]  # [batch, hidden]
      else:
        first = x.reshape(-1, x.shape[-1])[pool_index]  # [examples, hidden]
      # BERT's pooler is dense + tanh; DeBERTa-v2's ContextPooler dense + its
      # pooler_hidden_act, exact GELU (the only one bert_jax reads).
      act = {"tanh": jnp.tanh, "gelu": functools.partial(jax.nn.gelu, approximate=False)}[
          members.get(self.config.model_type).pooler_activation]
      out["pooled_output"] = act(self.pooler(first))
    return out

  def attend(self, x: Array, bias: Optional[Array] = None) -> Array:
    """Logits over the vocabulary with the tied word embeddings (+ an output bias), the
    product config.decoder_rows wide."""
    return self.embeddings.word_embeddings.attend(x, bias, self.config.decoder_rows)


def default_position_ids(input_ids: Array, config: BertConfig) -> Array:
  """int [batch, len] position ids for input_ids [batch, len].

  0..len-1 when config.position_offset is 0 (BERT, DistilBERT). Otherwise
  transformers' RoBERTa create_position_ids_from_input_ids: tokens other than
  config.pad_token_id count up from position_offset (= pad_token_id + 1), padding
  tokens take position_offset - 1.
  """
  if not config.position_offset:
    return jnp.broadcast_to(jnp.arange(input_ids.shape[1]), input_ids.shape)
  real = (input_ids != config.pad_token_id).astype(jnp.int32)
  return jnp.cumsum(real, axis=1) * real + (config.position_offset - 1)


def batch_position_ids(batch: dict, config: BertConfig) -> Optional[Array]:
  """A pretraining batch's position ids as the model's table reads them, or None (defaults).

  The pipeline's packed rows restart at 0 for each example (bert_jax/data/stream/rows.py); a model
  with a position_offset (RoBERTa) reads them from position_offset on, padding at
  position_offset - 1, as default_position_ids numbers an unpacked row.
  """
  position_ids = batch.get("position_ids")
  if position_ids is None or not config.position_offset:
    return position_ids
  return jnp.where(batch["input_mask"] > 0, position_ids + config.position_offset,
                   config.position_offset - 1)


def gather_positions(x: Array, positions: Array) -> Array:
  """x [batch, len, hidden], positions [batch, P] -> [batch, P, hidden].

  Gathered in float32: the gradient is then a float32 scatter-add (a bfloat16 one is
  compare-and-swap loops on XLA:GPU, and rounds each added gradient); a no-op for float32.
  """
  y = jnp.take_along_axis(x.astype(jnp.float32), positions[..., None].astype(jnp.int32), axis=1)
  return y.astype(x.dtype)


class MlmHead(nn.Module):
  """BERT's MLM transform (dense, GELU, LayerNorm) before the tied decoder; it maps to the
  embedding width (ELECTRA's generator: hidden -> embedding_size)."""
  config: BertConfig

  @nn.compact
  def __call__(self, x: Array) -> Array:
    c = self.config
    dtype, pdtype = _dtype(c.dtype), _dtype(c.param_dtype)
    x = layers.DenseGeneral(c.embed_dim, ("embed", "embed_out"), dtype=dtype, param_dtype=pdtype,
                            kernel_init=layers.kernel_init(c.initializer_range), name="transform",
                            use_bias=c.linear_bias)(x)
    x = layers.activation(c.hidden_act)(x)
    return layers.layer_norm(c.layer_norm_eps, dtype, pdtype, "transform_norm", c.norm_bias)(x)


class BertForPreTraining(nn.Module):
  """BERT with the MLM head (at masked positions only) and, optionally, NSP.

  emd: the MLM head reads DeBERTa's enhanced mask decoder (bert_jax.modeling.emd; model_type
  'deberta-v2' only), with its position table `emd/position_embeddings`.
  """
  config: BertConfig
  with_nsp: bool = True
  emd: bool = False

  def setup(self):
    c = self.config
    if self.emd and not members.get(c.model_type).emd:
      with_emd = " or ".join(repr(t) for t in members.names() if members.get(t).emd)
      raise ValueError(f"emd (DeBERTa's enhanced mask decoder) needs model_type {with_emd}, "
                       f"not {c.model_type!r}")
    self.bert = BertModel(c, add_pooler=self.with_nsp)
    if self.emd:
      self.emd_positions = emd.PositionEmbeddings(c, name="emd")
    self.mlm = MlmHead(c)
    self.mlm_output_bias = self.param(
        "mlm_output_bias", nn.with_logical_partitioning(nn.initializers.zeros, ("vocab",)),
        (c.vocab_size,), _dtype(c.param_dtype))
    if self.with_nsp:
      self.nsp = layers.DenseGeneral(2, ("embed", "labels"), dtype=_dtype(c.dtype),
                                     param_dtype=_dtype(c.param_dtype),
                                     kernel_init=layers.kernel_init(c.initializer_range))

  def __call__(self, input_ids: Array, input_mask: Array, segment_ids: Array,
               masked_lm_positions: Array, position_ids: Optional[Array] = None,
               deterministic: bool = True, sequence_output: bool = False) -> dict[str, Array]:
    """Returns mlm_logits [batch, P, vocab] (float32) and nsp_logits [batch, 2]; with
    `sequence_output`, also the last layer's every row, sequence_output [batch, len, hidden]
    (distillation's cosine loss), which the last layer then computes in full."""
    # The last layer computes only the rows the heads read: the masked positions,
    # and [CLS] for NSP. With the EMD the MLM head reads the decoder instead, and the
    # last layer's own pass computes only [CLS] (read by NSP, else by nobody).
    masked = masked_lm_positions.astype(jnp.int32)  # [batch, P]
    cls = jnp.zeros_like(masked[:, :1])
    emd_queries = None
    if self.emd:
      if position_ids is None:
        position_ids = default_position_ids(input_ids, self.config)
      emd_queries = (masked, self.emd_positions(position_ids, masked))
      rows = cls
    elif self.with_nsp:
      rows = jnp.concatenate([cls, masked], axis=1)  # [batch, 1 + P]
    else:
      rows = masked
    out = self.bert(input_ids, input_mask, segment_ids, position_ids, deterministic,
                    output_positions=None if sequence_output else rows,
                    emd_queries=emd_queries)
    if self.emd:
      x = out["emd_output"]  # [batch, P, hidden]
    else:
      x = out["sequence_output"]  # [batch, 1 + P or P (or len), hidden]
      if sequence_output:
        x = gather_positions(x, rows)
      x = x[:, 1:] if self.with_nsp else x  # [batch, P, hidden]
    x = self.mlm(x)
    logits = self.bert.attend(x, self.mlm_output_bias)
    result = {"mlm_logits": logits.astype(jnp.float32)}
    if sequence_output:
      result["sequence_output"] = out["sequence_output"]
    if self.with_nsp:
      result["nsp_logits"] = self.nsp(out["pooled_output"]).astype(jnp.float32)
    return result


class ElectraDiscriminator(nn.Module):
  """ELECTRA's discriminator: the encoder and a per-token replaced-token logit
  (dense, activation, dense to one)."""
  config: BertConfig

  @nn.compact
  def __call__(self, input_ids: Array, input_mask: Array, segment_ids: Array,
               deterministic: bool = True, position_ids: Optional[Array] = None) -> Array:
    """Returns the replaced-token logits, float32 [batch, len] (position_ids as BertModel's)."""
    x = BertModel(self.config, add_pooler=False, name="bert")(
        input_ids, input_mask, segment_ids, position_ids,
        deterministic=deterministic)["sequence_output"]
    return DiscriminatorHead(self.config, name="discriminator")(x)  # [batch, len]


class DiscriminatorHead(nn.Module):
  """hidden [..., hidden] -> replaced-token logits [...] (float32)."""
  config: BertConfig

  @nn.compact
  def __call__(self, x: Array) -> Array:
    c = self.config
    kw = dict(dtype=_dtype(c.dtype), param_dtype=_dtype(c.param_dtype),
              kernel_init=layers.kernel_init(c.initializer_range))
    x = layers.DenseGeneral(c.hidden_size, ("embed", "embed_out"), name="dense", **kw)(x)
    x = layers.activation(c.hidden_act)(x)
    x = layers.DenseGeneral(1, ("embed", "labels"), name="prediction", **kw)(x)
    return x[..., 0].astype(jnp.float32)


def _head_dense(c: BertConfig, features: int, name: str) -> layers.DenseGeneral:
  """A task head's dense layer (hidden -> features), initialised as BERT's heads are."""
  return layers.DenseGeneral(features, ("embed", "labels"), dtype=_dtype(c.dtype),
                             param_dtype=_dtype(c.param_dtype),
                             kernel_init=layers.kernel_init(c.initializer_range), name=name)


def _dropout_dense(c: BertConfig, x: Array, features: int, name: str,
                   deterministic: bool) -> Array:
  """Dropout then the head's dense layer, in float32 (call inside a compact module)."""
  x = layers.Dropout(c.dropout_rate)(x, deterministic=deterministic)
  return _head_dense(c, features, name)(x).astype(jnp.float32)


# Sequence heads of BertForSequenceClassification (configs/glue.py `head`).
SEQUENCE_HEADS = ("cls", "mean", "layers_attention")


class BertForSequenceClassification(nn.Module):
  """A vector per example -> dropout -> dense; num_labels=1 is regression.

  The vector (`head`):
    cls: BERT's pooled [CLS] (the pooler, dense + tanh, on the last layer's [CLS]);
      the last layer computes only the [CLS] row.
    mean: the mean of the last layer over the example's real tokens (no pooler).
    layers_attention: the [CLS] vectors of the last `head_layers` layers combined by
      LayerAttention (a learned query, softmax over layers; no pooler).

  One example per row, or packed rows (several examples to a row,
  bert_jax.batching.packing): `position_ids` restart for each example, `input_mask`
  numbers them, and `cls_index` int [examples] gives each example's [CLS] as a
  flat index row * len + column; the logits are then per example.
  """
  config: BertConfig
  num_labels: int
  head: str = "cls"
  head_layers: int = 4

  @nn.compact
  def __call__(self, input_ids, input_mask, segment_ids, deterministic: bool = True,
               position_ids: Optional[Array] = None,
               cls_index: Optional[Array] = None) -> Array:
    c = self.config
    if self.head not in SEQUENCE_HEADS:
      raise ValueError(f"unknown sequence head {self.head!r}; known: {SEQUENCE_HEADS}")
    transform = members.get(c.model_type).head_transform
    bert = BertModel(c, add_pooler=self.head == "cls" and not transform, name="bert")
    if self.head == "cls" and transform:  # ModernBERT: [CLS] of the last layer, no pooler
      if cls_index is None:
        out = bert(input_ids, input_mask, segment_ids, position_ids, deterministic,
                   output_positions=jnp.zeros((input_ids.shape[0], 1), jnp.int32))
      else:
        out = bert(input_ids, input_mask, segment_ids, position_ids, deterministic)
      vector = first_tokens(out["sequence_output"], cls_index)
    elif self.head == "cls" and cls_index is None:
      cls_rows = jnp.zeros((input_ids.shape[0], 1), jnp.int32)  # [batch, 1]
      vector = bert(input_ids, input_mask, segment_ids, position_ids, deterministic,
                    output_positions=cls_rows)["pooled_output"]
    elif self.head == "cls":
      vector = bert(input_ids, input_mask, segment_ids, position_ids, deterministic,
                    pool_index=cls_index)["pooled_output"]
    elif self.head == "mean":
      out = bert(input_ids, input_mask, segment_ids, position_ids, deterministic)
      vector = example_mean(out["sequence_output"], input_mask, cls_index)
    else:
      out = bert(input_ids, input_mask, segment_ids, position_ids, deterministic,
                 output_hidden_states=True)
      vectors = jnp.stack([first_tokens(h, cls_index)
                           for h in out["hidden_states"][-self.head_layers:]], axis=1)
      vector = LayerAttention(c, name="aggregation")(vectors)  # [batch or examples, hidden]
    if transform:
      vector = HeadTransform(c, name="head")(vector)
    return _dropout_dense(c, vector, self.num_labels, "classifier",
                          deterministic)  # [batch or examples, labels]


class HeadTransform(nn.Module):
  """[..., hidden] -> dense, activation, LayerNorm: what a member with head_transform
  (ModernBERT's prediction head) puts before a task head's classifier."""
  config: BertConfig

  @nn.compact
  def __call__(self, x: Array) -> Array:
    c = self.config
    dtype, pdtype = _dtype(c.dtype), _dtype(c.param_dtype)
    x = layers.DenseGeneral(c.hidden_size, ("embed", "embed_out"), dtype=dtype,
                            param_dtype=pdtype, use_bias=c.linear_bias, name="dense",
                            kernel_init=layers.kernel_init(c.initializer_range))(x)
    x = layers.activation(c.hidden_act)(x)
    return layers.layer_norm(c.layer_norm_eps, dtype, pdtype, "norm", c.norm_bias)(x)


def first_tokens(x: Array, cls_index: Optional[Array] = None) -> Array:
  """x [rows, len, hidden] -> each example's first ([CLS]) vector: [rows, hidden], or
  [examples, hidden] at the flat indices `cls_index` (packed rows)."""
  return x[:, 0] if cls_index is None else x.reshape(-1, x.shape[-1])[cls_index]


def example_mean(x: Array, input_mask: Array, cls_index: Optional[Array] = None) -> Array:
  """The mean of x [rows, len, hidden] over each example's real tokens, float32.

  Returns [rows, hidden]; packed rows (`cls_index` as BertForSequenceClassification's):
  [examples, hidden], each example's tokens being those of its row whose
  `input_mask` holds the number it has at its [CLS]."""
  if cls_index is None:
    weights = (input_mask > 0).astype(jnp.float32)  # [rows, len]
  else:
    rows = cls_index // x.shape[1]  # [examples]
    number = input_mask.reshape(-1)[cls_index]
    weights = (input_mask[rows] == number[:, None]).astype(jnp.float32)  # [examples, len]
    x = x[rows]  # [examples, len, hidden]
  total = jnp.einsum("bl,blh->bh", weights, x.astype(jnp.float32))
  return total / jnp.maximum(jnp.sum(weights, axis=1, keepdims=True), 1.0)


class LayerAttention(nn.Module):
  """Softmax-weighted sum of per-layer vectors with a learned query.

  vectors [b, k, hidden] -> [b, hidden]: weights softmax_k(vectors_k . query /
  sqrt(hidden)), so each example weighs the layers by its own vectors (learned
  scalar weights, ELMo's scalar mix, would give every example the same weights).
  The query starts at zero: training starts from the plain mean of the k vectors.
  """
  config: BertConfig

  @nn.compact
  def __call__(self, vectors: Array) -> Array:
    c = self.config
    query = self.param("query", nn.with_logical_partitioning(nn.initializers.zeros, ("embed",)),
                       (c.hidden_size,), _dtype(c.param_dtype))
    vectors = vectors.astype(jnp.float32)
    scores = jnp.einsum("bkh,h->bk", vectors, query.astype(jnp.float32)) / jnp.sqrt(
        jnp.float32(c.hidden_size))
    weights = jax.nn.softmax(scores, axis=-1)  # [b, k]
    return jnp.einsum("bk,bkh->bh", weights, vectors)


class BertForQuestionAnswering(nn.Module):
  """Span start/end logits over the sequence."""
  config: BertConfig

  @nn.compact
  def __call__(self, input_ids, input_mask, segment_ids,
               deterministic: bool = True) -> tuple[Array, Array]:
    c = self.config
    out = BertModel(c, add_pooler=False, name="bert")(
        input_ids, input_mask, segment_ids, deterministic=deterministic)
    logits = _head_dense(c, 2, "qa_outputs")(out["sequence_output"]).astype(jnp.float32)
    return logits[..., 0], logits[..., 1]  # [batch, len] each


class BertForTokenClassification(nn.Module):
  """Per-token labels (e.g. NER)."""
  config: BertConfig
  num_labels: int

  @nn.compact
  def __call__(self, input_ids, input_mask, segment_ids, deterministic: bool = True) -> Array:
    c = self.config
    x = BertModel(c, add_pooler=False, name="bert")(
        input_ids, input_mask, segment_ids, deterministic=deterministic)["sequence_output"]
    if members.get(c.model_type).head_transform:
      x = HeadTransform(c, name="head")(x)
    return _dropout_dense(c, x, self.num_labels, "token_classifier",
                          deterministic)  # [batch, len, labels]


def _layer_keys(encoder: dict) -> list[str]:
  return sorted((k for k in encoder if k.startswith("layer_")), key=lambda k: int(k[6:]))


def stack_layers(params: dict) -> dict:
  """Canonical per-layer params -> scan layout (`bert/encoder/layers`, leading axis)."""
  enc = params["bert"]["encoder"]
  if "layers" in enc:
    return params
  keys = _layer_keys(enc)
  stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *[enc[k] for k in keys])
  shared = {k: v for k, v in enc.items() if k not in keys}  # DeBERTa's relative embeddings
  return {**params, "bert": {**params["bert"], "encoder": {**shared, "layers": stacked}}}


def unstack_layers(params: dict) -> dict:
  """Scan layout -> canonical per-layer params (`bert/encoder/layer_i`)."""
  enc = params["bert"]["encoder"]
  if "layers" not in enc:
    return params
  n = jax.tree.leaves(enc["layers"])[0].shape[0]
  layers_ = {f"layer_{i}": jax.tree.map(lambda x, i=i: x[i], enc["layers"]) for i in range(n)}
  shared = {k: v for k, v in enc.items() if k != "layers"}  # DeBERTa's relative embeddings
  return {**params, "bert": {**params["bert"], "encoder": {**shared, **layers_}}}


def match_scan_layout(params: dict, config: BertConfig) -> dict:
  """Params in either layer layout -> the one `config` computes with (stacked for scan_layers)."""
  return stack_layers(params) if config.scan_layers else unstack_layers(params)


def init_params(model: nn.Module, rng: jax.Array, batch: int = 1, seq_len: int = 8,
                num_predictions: int = 2) -> dict:
  """Initialises unboxed params of any model here with dummy inputs."""
  ids = jnp.zeros((batch, seq_len), jnp.int32)
  mask = jnp.ones((batch, seq_len), jnp.int32)
  if isinstance(model, BertForPreTraining):
    args = (ids, mask, ids, jnp.zeros((batch, num_predictions), jnp.int32))
  else:
    args = (ids, mask, ids)
  return nn.unbox(model.init({"params": rng}, *args))["params"]
