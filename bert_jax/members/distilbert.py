"""DistilBERT (Sanh et al. 2019): BERT's network without token types or pooler, under its
own config keys and names."""
from bert_jax.members import base

_LAYER = "distilbert.transformer.layer.{i}."

MEMBER = base.Member(
    model_type="distilbert",
    hf_keys={
        "vocab_size": "vocab_size",
        "dim": "hidden_size",
        "n_layers": "num_layers",
        "n_heads": "num_heads",
        "hidden_dim": "intermediate_size",
        "max_position_embeddings": "max_position_embeddings",
        "activation": "hidden_act",
        "dropout": "dropout_rate",
        "attention_dropout": "attention_dropout_rate",
        "initializer_range": "initializer_range",
        "pad_token_id": "pad_token_id",
    },
    build=lambda config, pad_id: config.replace(model_type="distilbert", type_vocab_size=0),
    hf=base.HfLayout(
        "distilbert", {"vocab_projector.weight": "distilbert.embeddings.word_embeddings.weight"},
        ("DistilBertModel", "DistilBertForMaskedLM", None), "DistilBertTokenizer",
        # No token types, no pooler, no NSP; its own layer and head names.
        renames={
            "bert.embeddings.": "distilbert.embeddings.",
            "bert.embeddings.token_type_embeddings.": None,
            "bert.encoder.layer.{i}.attention.self.query.": _LAYER + "attention.q_lin.",
            "bert.encoder.layer.{i}.attention.self.key.": _LAYER + "attention.k_lin.",
            "bert.encoder.layer.{i}.attention.self.value.": _LAYER + "attention.v_lin.",
            "bert.encoder.layer.{i}.attention.output.dense.": _LAYER + "attention.out_lin.",
            "bert.encoder.layer.{i}.attention.output.LayerNorm.": _LAYER + "sa_layer_norm.",
            "bert.encoder.layer.{i}.intermediate.dense.": _LAYER + "ffn.lin1.",
            "bert.encoder.layer.{i}.output.dense.": _LAYER + "ffn.lin2.",
            "bert.encoder.layer.{i}.output.LayerNorm.": _LAYER + "output_layer_norm.",
            "bert.pooler.": None,
            "cls.predictions.transform.dense.": "vocab_transform.",
            "cls.predictions.transform.LayerNorm.": "vocab_layer_norm.",
            "cls.predictions.bias": "vocab_projector.bias",
            "cls.seq_relationship.": None,
        }),
    fixed={"type_vocab_size": 0, "layer_norm_eps": 1e-12},
    write_hf=lambda config: {"model_type": "distilbert", "sinusoidal_pos_embds": False,
                             "tie_weights_": True},
    has_pooler=False)
