"""Fine-tuning tasks: GLUE, SQuAD, NER and sentence embeddings; their data, metrics and outputs.

Eval pads rather than drops, so every example is scored (bert_jax.finetuning.evaluation).
"""
