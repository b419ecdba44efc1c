"""RoBERTa (Liu et al. 2019): BERT's network with one token type, positions counted from
pad_token_id + 1, LayerNorm eps 1e-5, a byte-level BPE tokenizer and no NSP head."""
from bert_jax.members import base


def build(config, pad_id: int):
  """One token type, positions from pad_id + 1 (the table grows by pad_id + 1 rows, 514
  for roberta-base), LayerNorm eps 1e-5."""
  return config.replace(model_type="roberta", type_vocab_size=1, pad_token_id=pad_id,
                        position_offset=pad_id + 1, layer_norm_eps=1e-5,
                        max_position_embeddings=config.max_position_embeddings + pad_id + 1)


def read_hf(d: dict, kw: dict, source: str) -> dict:
  if kw.get("hidden_act", "gelu") != "gelu":  # RoBERTa's lm_head is always exact GELU
    raise ValueError(f"{source}: hidden_act {d['hidden_act']!r} is not supported for roberta "
                     "(its MLM head uses GELU whatever hidden_act says; bert_jax uses one "
                     "activation)")
  return {"position_offset": kw["pad_token_id"] + 1}


MEMBER = base.Member(
    model_type="roberta",
    hf_keys={**base.BERT_KEYS, "pad_token_id": "pad_token_id"},
    build=build,
    hf=base.HfLayout(
        "roberta", {"lm_head.decoder.weight": "roberta.embeddings.word_embeddings.weight",
                    "lm_head.decoder.bias": "lm_head.bias"},
        ("RobertaModel", "RobertaForMaskedLM", None), "RobertaTokenizer",
        other_tokenizer="a byte-level BPE tokenizer (vocab.json + merges.txt)",
        # BERT's names under `roberta.`, the MLM head as `lm_head`, no NSP.
        renames={"bert.": "roberta.",
                 "cls.predictions.transform.dense.": "lm_head.dense.",
                 "cls.predictions.transform.LayerNorm.": "lm_head.layer_norm.",
                 "cls.predictions.bias": "lm_head.bias",
                 "cls.seq_relationship.": None}),
    hf_defaults={"pad_token_id": 1},
    read_hf=read_hf,
    offset_positions=True)
