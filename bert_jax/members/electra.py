"""ELECTRA (Clark et al. 2020): BERT's network under ELECTRA's names, factorized embeddings,
the generator's MLM head and the discriminator's replaced-token head; no pooler or NSP."""
from bert_jax.members import base

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
    factorized_embeddings=True)
