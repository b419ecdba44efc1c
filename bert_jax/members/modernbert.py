"""ModernBERT (Warner et al. 2024, arXiv:2412.13663): pre-LN layers without biases, GeGLU
feed-forward, rotary positions, every third layer global and the others a sliding window,
no token types, a BPE tokenizer; transformers' ModernBertModel / ModernBertForMaskedLM."""
from bert_jax.members import base

_LAYER = "model.layers.{i}."
# What ModernBERT's released configs fix and bert_jax computes (transformers' defaults).
FIXED = {"type_vocab_size": 0, "absolute_positions": False, "norm_first": True,
         "linear_bias": False, "norm_bias": False, "glu": True}
# config.json switches bert_jax does not read, with the only value it computes.
_ONLY = {"attention_bias": False, "mlp_bias": False, "norm_bias": False,
         "classifier_bias": False, "decoder_bias": True}
# The released sizes (answerdotai/ModernBERT-base and -large config.json), by the BERT
# variant's (hidden, layers) they replace: layers, heads, intermediate size per GLU half.
PUBLISHED = {(768, 12): (22, 12, 1152), (1024, 24): (28, 16, 2624)}


def build(config, pad_id: int):
  """The variant's sizes as ModernBERT: base and large are the released models (22 layers,
  GLU halves of 1152; 28 layers, 2624; 8,192 positions), smaller variants keep their layers
  and heads with GLU halves of 1.5 x hidden (base's ratio)."""
  layers, heads, intermediate = PUBLISHED.get(
      (config.hidden_size, config.num_layers),
      (config.num_layers, config.num_heads, 3 * config.hidden_size // 2))
  positions = 8192 if (config.hidden_size, config.num_layers) in PUBLISHED else (
      config.max_position_embeddings)
  return config.replace(
      model_type="modernbert", num_layers=layers, num_heads=heads,
      intermediate_size=intermediate, max_position_embeddings=positions, pad_token_id=pad_id,
      layer_norm_eps=1e-5, hidden_act="gelu", rope_theta=160_000.0, local_rope_theta=10_000.0,
      local_window=128, global_every=3, dropout_rate=0.0, attention_dropout_rate=0.0, **FIXED)


def read_hf(d: dict, kw: dict, source: str) -> dict:
  """One error naming every config.json setting bert_jax does not compute."""
  bad = [f"{k}={d[k]!r}" for k, v in _ONLY.items() if k in d and d[k] != v]
  act = d.get("classifier_activation", "gelu")
  if act != kw.get("hidden_act", "gelu"):
    bad.append(f"classifier_activation={act!r} (!= hidden_activation)")
  if d.get("rope_scaling"):
    bad.append(f"rope_scaling={d['rope_scaling']!r}")
  if bad:
    raise ValueError(f"{source}: ModernBERT with {', '.join(bad)} is not supported (bert_jax "
                     "computes ModernBERT as released: no biases but the MLM decoder's, "
                     "LayerNorms without bias, one activation, plain rotary positions)")
  if kw.get("local_rope_theta") is None:  # transformers: the global base then
    kw["local_rope_theta"] = 0.0
  return {"local_rope_theta": float(kw["local_rope_theta"]),
          "rope_theta": float(kw["rope_theta"])}


def write_hf(config) -> dict:
  return {"model_type": "modernbert", **_ONLY, "classifier_activation": config.hidden_act,
          "embedding_dropout": config.dropout_rate,
          "local_rope_theta": config.local_rope_theta or config.rope_theta}


def pretrain_recipe(c) -> None:
  """ModernBERT's pretraining (configs/pretrain.py:VARIANT,recipe=modernbert)."""
  # arXiv:2412.13663 Sec. 2.2: MLM alone (no NSP) at a 30 % masking rate, on sequences
  # packed without padding (Sec. 2.1.3: unpadding and sequence packing).
  c.model_type = "modernbert"
  c.objective = "mlm"
  c.data.mode = "full_sentences"
  c.data.packing = True
  c.data.mask_prob = 0.3
  # The released configs train without dropout (embedding, attention and MLP dropout 0).
  c.model.dropout_rate = 0.0
  c.model.attention_dropout_rate = 0.0
  c.data.max_predictions_per_seq = max(c.data.max_predictions_per_seq,
                                       -(-c.seq_len * 3 // 10))
  if c.variant in ("base", "large"):
    # Sec. 2.2: StableAdamW (AdamW with AdaFactor-style update clipping per tensor, in
    # place of gradient clipping), weight decay 1e-5, a trapezoidal (warmup-stable-decay)
    # schedule with a 1 - sqrt decay, peak rate 8e-4 (base) / 5e-4 (large), sequences of
    # 1,024 tokens. Batch and steps stay the variant's.
    c.optimizer.name = "stable_adamw"
    c.optimizer.schedule = "trapezoidal"
    c.optimizer.b2 = 0.98
    c.optimizer.weight_decay = 1e-5
    c.optimizer.grad_clip_norm = 0.0
    c.learning_rate = 8e-4 if c.variant == "base" else 5e-4
    c.seq_len = 1024
    c.data.max_predictions_per_seq = 308


def pretrain_phase2(c) -> None:
  """ModernBERT's context extension (configs/pretrain.py:VARIANT,recipe=modernbert,phase2),
  from phase 1's checkpoint (init_checkpoint), applied after pretrain_recipe."""
  # arXiv:2412.13663 Sec. 2.2, "Context Length Extension": after 1.7T tokens at 1,024, the
  # native length goes to 8,192 with the global layers' RoPE theta at 160,000 (the local
  # layers' stays 10,000) for 300B more tokens at a lower learning rate: constant, then a
  # 1 - sqrt decay. `build` gives the global layers 160,000 in both phases (the released
  # model's value; rope_theta is part of a checkpoint's architecture), so this phase
  # changes the length, the steps and the schedule.
  phase1_len = c.seq_len
  # Base and large: the released 8,192 positions; smaller variants extend to their 512.
  c.seq_len = 8192 if c.variant in ("base", "large") else 512
  c.data.max_predictions_per_seq = -(-c.seq_len * 3 // 10)  # 30 % masking, as phase 1
  # 300B tokens after 1.7T: phase 1's tokens x 3 / 17 at the variant's batch.
  c.total_steps = max(1, round(c.total_steps * phase1_len / c.seq_len * 3 / 17))
  # The moments start over from init_checkpoint's params: a short warmup, as BERT's phase 2.
  c.warmup_steps = max(1, c.warmup_steps // 10)
  if c.variant in ("base", "large"):
    # The same section: 3e-4 for base (8e-4 in phase 1) and 5e-5 for large, held constant
    # and decayed at the end (optimizer.schedule 'trapezoidal': 1 - sqrt over the last tenth
    # of the steps; the paper decays over the last 50B of 300B tokens).
    c.learning_rate = 3e-4 if c.variant == "base" else 5e-5
    c.optimizer.schedule = "trapezoidal"
  else:
    c.learning_rate *= 3 / 8  # base's ratio of the phase-2 to the phase-1 rate


MEMBER = base.Member(
    model_type="modernbert",
    hf_keys={"vocab_size": "vocab_size", "hidden_size": "hidden_size",
             "num_hidden_layers": "num_layers", "num_attention_heads": "num_heads",
             "intermediate_size": "intermediate_size",
             "max_position_embeddings": "max_position_embeddings",
             "hidden_activation": "hidden_act", "norm_eps": "layer_norm_eps",
             "initializer_range": "initializer_range", "pad_token_id": "pad_token_id",
             "mlp_dropout": "dropout_rate", "attention_dropout": "attention_dropout_rate",
             "global_rope_theta": "rope_theta", "local_rope_theta": "local_rope_theta",
             "local_attention": "local_window",
             "global_attn_every_n_layers": "global_every"},
    build=build,
    hf=base.HfLayout(
        "model", {"decoder.weight": "model.embeddings.tok_embeddings.weight"},
        ("ModernBertModel", "ModernBertForMaskedLM", None), "PreTrainedTokenizerFast",
        other_tokenizer="a BPE tokenizer (tokenizer.json)",
        # BERT's names where ModernBERT has the tensor: the fused Wqkv and the final norm
        # are extra; no positions, token types, pooler or NSP; the first layer has no
        # attention norm (no such param here either).
        renames={"bert.embeddings.word_embeddings.": "model.embeddings.tok_embeddings.",
                 "bert.embeddings.position_embeddings.": None,
                 "bert.embeddings.token_type_embeddings.": None,
                 "bert.embeddings.LayerNorm.": "model.embeddings.norm.",
                 "bert.encoder.layer.{i}.attention.self.": None,
                 "bert.encoder.layer.{i}.attention.output.dense.": _LAYER + "attn.Wo.",
                 "bert.encoder.layer.{i}.attention.output.LayerNorm.": _LAYER + "attn_norm.",
                 "bert.encoder.layer.{i}.intermediate.dense.": _LAYER + "mlp.Wi.",
                 "bert.encoder.layer.{i}.output.dense.": _LAYER + "mlp.Wo.",
                 "bert.encoder.layer.{i}.output.LayerNorm.": _LAYER + "mlp_norm.",
                 "bert.pooler.": None,
                 "cls.predictions.transform.dense.": "head.dense.",
                 "cls.predictions.transform.LayerNorm.": "head.norm.",
                 "cls.predictions.bias": "decoder.bias",
                 "cls.seq_relationship.": None},
        extra_rules=(
            ("bert/encoder/layer_{i}/attention/qkv/kernel", _LAYER + "attn.Wqkv.weight",
             "transpose", "encoder"),
            ("bert/encoder/final_norm/scale", "model.final_norm.weight", "identity",
             "encoder"),
        )),
    fixed=FIXED,
    hf_defaults={"vocab_size": 50368, "max_position_embeddings": 8192, "hidden_act": "gelu",
                 "layer_norm_eps": 1e-5, "pad_token_id": 50283, "dropout_rate": 0.0,
                 "attention_dropout_rate": 0.0, "rope_theta": 160_000.0,
                 "local_rope_theta": 10_000.0, "local_window": 128, "global_every": 3},
    read_hf=read_hf,
    write_hf=write_hf,
    has_pooler=False,
    fused_qkv=True,
    head_transform=True,
    recipe_name="modernbert",
    pretrain_recipe=pretrain_recipe,
    pretrain_phase2=pretrain_phase2)
