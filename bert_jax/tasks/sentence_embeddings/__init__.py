"""Sentence-embedding training on text pairs."""
