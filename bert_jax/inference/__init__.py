"""Using a trained encoder: sentence embeddings (and their aggregation), fill-mask, and the
ranking metrics of retrieval."""
