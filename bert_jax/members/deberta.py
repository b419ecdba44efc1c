"""DeBERTa-v2/v3 (He et al. 2021, 2023): disentangled attention over relative positions,
padding that neither attends nor is embedded, the enhanced mask decoder, a SentencePiece
tokenizer; bert_jax computes DeBERTa-v3's attention."""
from bert_jax.members import base

# DeBERTa-v2's attention as bert_jax computes it (DeBERTa-v3's), as config.json spells it.
ATTENTION = {"relative_attention": True, "pos_att_type": ["p2c", "c2p"],
             "share_att_key": True, "norm_rel_ebd": "layer_norm", "conv_kernel_size": 0,
             "legacy": True}
_SELF = "deberta.encoder.layer.{i}.attention.self."


def v3(config):
  """`config`'s sizes with DeBERTa-v3's encoder (microsoft/deberta-v3-base's config.json):
  disentangled attention over 256 log position buckets up to max_position_embeddings, no
  absolute position embeddings, no token types, LayerNorm eps 1e-7."""
  return config.replace(model_type="deberta-v2", absolute_positions=False, type_vocab_size=0,
                        max_relative_positions=config.max_position_embeddings,
                        position_buckets=256, layer_norm_eps=1e-7)


def read_hf(d: dict, kw: dict, source: str) -> dict:
  """The relative-attention fields of a deberta-v2 config.json (transformers' getattr
  defaults where a key is absent); one error naming every setting bert_jax does not compute."""
  pos_att = d.get("pos_att_type") or []
  if isinstance(pos_att, str):
    pos_att = [x.strip() for x in pos_att.lower().split("|")]
  norm = [x.strip() for x in str(d.get("norm_rel_ebd", "none")).lower().split("|")]
  found = {"relative_attention": bool(d.get("relative_attention", False)),
           "pos_att_type": sorted(pos_att, reverse=True),
           "share_att_key": bool(d.get("share_att_key", False)),
           "norm_rel_ebd": "layer_norm" if "layer_norm" in norm else d.get("norm_rel_ebd", "none"),
           "conv_kernel_size": d.get("conv_kernel_size", 0), "legacy": d.get("legacy", True)}
  bad = [f"{k}={v!r}" for k, v in found.items() if v != ATTENTION[k]]
  hidden = kw["hidden_size"]
  if d.get("embedding_size", hidden) != hidden:
    bad.append(f"embedding_size={d['embedding_size']!r} (!= hidden_size)")
  if d.get("attention_head_size", hidden // kw["num_heads"]) != hidden // kw["num_heads"]:
    bad.append(f"attention_head_size={d['attention_head_size']!r}")
  if bad:
    raise ValueError(f"{source}: DeBERTa-v2 with {', '.join(bad)} is not supported (bert_jax "
                     "computes DeBERTa-v3's attention: relative_attention, pos_att_type p2c|c2p, "
                     "share_att_key, norm_rel_ebd layer_norm, no ConvLayer, the legacy "
                     "cls.predictions MLM head)")
  if d.get("pooler_hidden_act", "gelu") not in ("gelu", "gelu_python"):
    bad.append(f"pooler_hidden_act={d['pooler_hidden_act']!r}")
  if d.get("pooler_hidden_size", hidden) != hidden:
    bad.append(f"pooler_hidden_size={d['pooler_hidden_size']!r} (!= hidden_size)")
  if bad:
    raise ValueError(f"{source}: DeBERTa-v2 with {', '.join(bad)} is not supported (bert_jax's "
                     "ContextPooler is dense hidden -> hidden and exact GELU)")
  max_rel = d.get("max_relative_positions", -1)
  return dict(max_relative_positions=max_rel if max_rel >= 1 else kw.get(
                  "max_position_embeddings", 512),
              position_buckets=max(d.get("position_buckets", -1), 0),
              absolute_positions=bool(d.get("position_biased_input", True)))


def write_hf(config) -> dict:
  return {**ATTENTION, "model_type": "deberta-v2",
          "max_relative_positions": config.max_relative_positions,
          "position_buckets": config.position_buckets or -1,
          "position_biased_input": config.absolute_positions}


def pretrain_recipe(c) -> None:
  """DeBERTa's pretraining (configs/pretrain.py:VARIANT,recipe=deberta)."""
  # DeBERTa-v3's encoder (He et al. 2021, arXiv:2111.09543) trained with DeBERTa's MLM
  # (arXiv:2006.03654) on full sentences without NSP. v3's own objective (replaced-token
  # detection with gradient-disentangled embedding sharing) is not implemented here; the
  # sizes and optimizer stay the variant's.
  c.model_type = "deberta-v2"
  c.objective = "mlm"
  # arXiv:2006.03654 Sec. 3.2: the MLM head reads the enhanced mask decoder.
  c.emd = True
  c.data.mode = "full_sentences"


MEMBER = base.Member(
    model_type="deberta-v2",
    # The relative-attention keys are read by read_hf.
    hf_keys={**base.BERT_KEYS, "pad_token_id": "pad_token_id"},
    build=lambda config, pad_id: v3(config),
    hf=base.HfLayout(
        "deberta", {"cls.predictions.decoder.weight": "deberta.embeddings.word_embeddings.weight",
                    "cls.predictions.decoder.bias": "cls.predictions.bias"},
        ("DebertaV2Model", "DebertaV2ForMaskedLM", None), "DebertaV2Tokenizer",
        other_tokenizer="a SentencePiece tokenizer (spm.model)",
        # BERT's names under `deberta.` with query_proj / key_proj / value_proj, the pooler
        # as DebertaV2ForSequenceClassification's ContextPooler (`pooler.dense`), transformers'
        # legacy cls.predictions head, no NSP; the encoder's relative embeddings and their
        # LayerNorm. (No position_embeddings when position_biased_input is false: that rule
        # drops out with the parameter.)
        renames={"bert.": "deberta.",
                 "bert.encoder.layer.{i}.attention.self.query.": _SELF + "query_proj.",
                 "bert.encoder.layer.{i}.attention.self.key.": _SELF + "key_proj.",
                 "bert.encoder.layer.{i}.attention.self.value.": _SELF + "value_proj.",
                 "bert.pooler.": "pooler.",
                 "cls.predictions.": "cls.predictions.",
                 "cls.seq_relationship.": None},
        extra_rules=(
            ("bert/encoder/rel_embeddings/embedding", "deberta.encoder.rel_embeddings.weight",
             "identity", "encoder"),
            ("bert/encoder/rel_norm/scale", "deberta.encoder.LayerNorm.weight", "identity",
             "encoder"),
            ("bert/encoder/rel_norm/bias", "deberta.encoder.LayerNorm.bias", "identity",
             "encoder"),
        )),
    hf_defaults={"type_vocab_size": 0, "layer_norm_eps": 1e-7},
    read_hf=read_hf,
    write_hf=write_hf,
    relative_attention=True,
    padding_attends=False,
    zero_padding_embeddings=True,
    emd=True,
    vocab_table_padded=True,
    pooler_activation="gelu",
    recipe_name="deberta",
    pretrain_recipe=pretrain_recipe)
