"""The BERT family's members, one module each (bert_jax.members.registry lists them)."""
