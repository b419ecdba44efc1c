"""The network: the frozen model config, Flax layers, the encoder and its heads (DeBERTa's
disentangled attention and EMD among them), pooling, FLOPs per token, and bundles (a model's
params, config and vocab in one directory)."""
