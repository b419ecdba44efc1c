"""Where pretraining text comes from: the source registry and one module per source."""
