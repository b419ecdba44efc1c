"""The network: the frozen model config, Flax layers, the encoder and its heads (DeBERTa's
disentangled attention and EMD among them), pooling, FLOPs per token, bundles (a model's
params, config and vocab in one directory), and loading a trained model from a bundle, a
workdir or its train checkpoints (below training: using a model needs nothing from it)."""
