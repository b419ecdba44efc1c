"""BERT (Devlin et al. 2019): the family's reference network, under its own names."""
from bert_jax.members import base

MEMBER = base.Member(
    model_type="bert",
    hf_keys=base.BERT_KEYS,
    build=lambda config, pad_id: config.replace(model_type="bert"),
    hf=base.HfLayout("bert", {"cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
                              "cls.predictions.decoder.bias": "cls.predictions.bias"},
                     ("BertModel", "BertForMaskedLM", "BertForPreTraining"), "BertTokenizer"),
    # Devlin et al. 2019: MLM + NSP on sentence pairs, the pretraining config as built.
    recipe_name="bert")
