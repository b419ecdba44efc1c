"""ALBERT (Lan et al. 2020): one layer's parameters applied num_layers times, factorized
embeddings projected to hidden, gelu_new, a SentencePiece tokenizer, SOP in the NSP head."""
from bert_jax.members import base

_LAYER = "albert.encoder.albert_layer_groups.0.albert_layers.0."


def build(config, pad_id: int):
  """Embeddings of 128 (half of hidden when hidden <= 128) projected to hidden, one layer
  shared by all, gelu_new."""
  del pad_id
  embed = 128 if config.hidden_size > 128 else config.hidden_size // 2
  return config.replace(model_type="albert", embedding_size=embed, share_layers=True,
                        hidden_act="gelu_new")


def read_hf(d: dict, kw: dict, source: str) -> dict:
  groups = (d.get("num_hidden_groups", 1), d.get("inner_group_num", 1))
  if groups != (1, 1) or kw["embedding_size"] == kw["hidden_size"]:
    raise ValueError(f"{source}: ALBERT with num_hidden_groups, inner_group_num {groups} and "
                     f"embedding_size {kw['embedding_size']} is not supported (only one shared "
                     "layer, embedding_size != hidden_size, as every released ALBERT)")
  return {}


def pretrain_recipe(c) -> None:
  """ALBERT's pretraining (configs/pretrain.py:VARIANT,recipe=albert)."""
  # ALBERT (Lan et al. 2020, arXiv:1909.11942). Sec. 3.1: sentence-order prediction in place of
  # NSP; Sec. 4.1: n-gram masking with n <= 3 and p(n) proportional to 1/n. Sec. 3.1: the
  # factorized embeddings (E = 128) and one layer's parameters shared across all layers.
  c.model_type = "albert"
  c.objective = "mlm_sop"
  c.data.mode = "sop"
  c.data.masking = "ngram"
  if c.variant in ("base", "large"):
    # Sec. 4.1: batch 4096, LAMB at 0.00176, 125K steps, inputs of 512 (shorter with p=0.1);
    # 3,125 warmup steps as google-research/albert's run_pretraining.
    c.optimizer.name = "lamb"
    c.batch_size = 4096
    c.optimizer.grad_accum_steps = 16
    c.total_steps = 125_000
    c.learning_rate = 0.00176
    c.warmup_steps = 3_125
    c.seq_len = 512
    c.data.max_predictions_per_seq = 80


MEMBER = base.Member(
    model_type="albert",
    hf_keys={**base.BERT_KEYS, "embedding_size": "embedding_size"},
    build=build,
    hf=base.HfLayout(
        "albert", {"predictions.decoder.weight": "albert.embeddings.word_embeddings.weight",
                   "predictions.decoder.bias": "predictions.bias"},
        ("AlbertModel", "AlbertForMaskedLM", "AlbertForPreTraining"), "AlbertTokenizer",
        other_tokenizer="a SentencePiece tokenizer (spiece.model)",
        # One shared layer (ours bert/encoder/layer_0: share_layers), SOP in the NSP group.
        renames={
            "bert.": "albert.",
            "bert.encoder.layer.{i}.attention.self.": _LAYER + "attention.",
            "bert.encoder.layer.{i}.attention.output.dense.": _LAYER + "attention.dense.",
            "bert.encoder.layer.{i}.attention.output.LayerNorm.": _LAYER + "attention.LayerNorm.",
            "bert.encoder.layer.{i}.intermediate.dense.": _LAYER + "ffn.",
            "bert.encoder.layer.{i}.output.dense.": _LAYER + "ffn_output.",
            "bert.encoder.layer.{i}.output.LayerNorm.": _LAYER + "full_layer_layer_norm.",
            "bert.pooler.dense.": "albert.pooler.",
            "cls.predictions.transform.dense.": "predictions.dense.",
            "cls.predictions.transform.LayerNorm.": "predictions.LayerNorm.",
            "cls.predictions.bias": "predictions.bias",
            "cls.seq_relationship.": "sop_classifier.classifier.",
        },
        projection="albert.encoder.embedding_hidden_mapping_in."),
    fixed={"share_layers": True},
    hf_defaults={"embedding_size": 128, "hidden_act": "gelu_new"},
    read_hf=read_hf,
    write_hf=lambda config: {**base.absolute_position_keys(config), "num_hidden_groups": 1,
                             "inner_group_num": 1},
    factorized_embeddings=True,
    recipe_name="albert",
    pretrain_recipe=pretrain_recipe)
