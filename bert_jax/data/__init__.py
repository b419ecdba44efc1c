"""Pretraining's input, in three wings, lowest first: sources (where text comes from),
tokenizers (text to ids, vocabularies), stream (examples, masking and host batches)."""
