"""ELECTRA (Clark et al. 2020): BERT's network under ELECTRA's names, factorized embeddings,
the generator's MLM head and the discriminator's replaced-token head; no pooler or NSP."""
from bert_jax.members import base


def pretrain_recipe(c) -> None:
  """ELECTRA's pretraining (configs/pretrain.py:VARIANT,recipe=electra)."""
  # ELECTRA (Clark et al. 2020, arXiv:2003.10555): replaced-token detection with a generator of
  # 1/4 the discriminator's hidden size (config.electra), on contiguous text without NSP.
  c.model_type = "electra"
  c.objective = "electra"
  c.data.mode = "full_sentences"
  if c.variant == "base":
    # Appendix Table 6: ELECTRA-Base, lr 2e-4, batch 256 (the variant's), 10K warmup steps (the
    # variant's), 766K steps, seq 512, a generator of 1/3 the discriminator's size.
    c.electra.generator_hidden_fraction = 1 / 3
    c.learning_rate = 2e-4
    c.total_steps = 766_000
    c.seq_len = 512
    c.data.max_predictions_per_seq = 80


MEMBER = base.Member(
    model_type="electra",
    hf_keys={**base.BERT_KEYS, "embedding_size": "embedding_size"},
    build=lambda config, pad_id: config.replace(model_type="electra"),
    hf=base.HfLayout(
        "electra", {"generator_lm_head.weight": "electra.embeddings.word_embeddings.weight"},
        ("ElectraModel", "ElectraForMaskedLM", None), "ElectraTokenizer",
        discriminator="ElectraForPreTraining",
        renames={"bert.": "electra.",
                 "bert.pooler.": None,
                 "cls.predictions.transform.dense.": "generator_predictions.dense.",
                 "cls.predictions.transform.LayerNorm.": "generator_predictions.LayerNorm.",
                 "cls.predictions.bias": "generator_lm_head.bias",
                 "cls.seq_relationship.": None},
        projection="electra.embeddings_project.",
        extra_rules=(
            ("discriminator/dense/kernel", "discriminator_predictions.dense.weight",
             "transpose", "discriminator"),
            ("discriminator/dense/bias", "discriminator_predictions.dense.bias",
             "identity", "discriminator"),
            ("discriminator/prediction/kernel",
             "discriminator_predictions.dense_prediction.weight", "transpose", "discriminator"),
            ("discriminator/prediction/bias", "discriminator_predictions.dense_prediction.bias",
             "identity", "discriminator"),
        )),
    hf_defaults={"embedding_size": 128},
    factorized_embeddings=True,
    recipe_name="electra",
    pretrain_recipe=pretrain_recipe)
