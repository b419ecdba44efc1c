"""Fine-tuning tasks: GLUE and SQuAD data, their metrics, and eval padding.

Modules:
  glue     the GLUE task registry, TSV / TFDS readers, encoding, submission files
  squad    SQuAD v1.1 / v2.0 readers, run_squad features, n-best post-processing
  metrics  GLUE metrics (numpy) with per-example weights
  packing  packed fine-tuning batches (several examples to a row)

Eval pads rather than drops (every example is scored): bert_jax.finetuning.evaluation.predict
fills the last batch with rows it drops again (bert_jax.data.stream.length_buckets).
"""
