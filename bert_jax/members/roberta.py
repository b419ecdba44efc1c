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


def pretrain_recipe(c) -> None:
  """RoBERTa's pretraining (configs/pretrain.py:VARIANT,recipe=roberta)."""
  variant = c.variant
  # RoBERTa (Liu et al. 2019, arXiv:1907.11692). Sec. 4.2: FULL-SENTENCES without NSP ("removing
  # the NSP loss matches or slightly improves downstream task performance").
  c.model_type = "roberta"
  c.objective = "mlm"
  c.data.mode = "full_sentences"
  # Rows filled with whole sentences and no padding (Sec. 4.2's inputs are "packed with full
  # sentences ... so that the total length is at most 512 tokens"); packed here as several
  # documents per row with block-diagonal attention (DOC-SENTENCES, which Sec. 4.2 found
  # slightly better; FULL-SENTENCES crossing documents is packing=False).
  c.data.packing = True
  # Sec. 4.1: dynamic masking (every batch is masked afresh; this pipeline always does).
  # Sec. 3.1: "setting beta2 = 0.98 to improve stability when training with large batch sizes";
  # Table 9: Adam eps 1e-6, weight decay 0.01, no gradient clipping, linear decay.
  c.optimizer.b2 = 0.98
  c.optimizer.eps = 1e-6
  c.optimizer.weight_decay = 0.01
  c.optimizer.grad_clip_norm = 0.0
  if variant in ("base", "large"):
    c.optimizer.name = "adamw"
    c.optimizer.schedule = "linear"
    # Sec. 4.3 / Table 9: batches of 8K sequences (here 32 microbatches of 256), 500K steps,
    # peak rate 6e-4 (base) / 4e-4 (large), warmup 24K (base) / 30K (large) steps.
    c.batch_size = 8192
    c.optimizer.grad_accum_steps = 32
    c.total_steps = 500_000
    c.learning_rate = 6e-4 if variant == "base" else 4e-4
    c.warmup_steps = 24_000 if variant == "base" else 30_000
    # Sec. 3.1: "we train only with full-length sequences" of T = 512 tokens.
    c.seq_len = 512
    c.data.max_predictions_per_seq = 80


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
    offset_positions=True,
    recipe_name="roberta",
    pretrain_recipe=pretrain_recipe)
