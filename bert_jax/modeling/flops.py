"""Training FLOPs per token (DESIGN.md formula) and device peak FLOP/s."""
import functools
import time

import jax
import jax.numpy as jnp

from bert_jax.modeling import emd as emd_lib
from bert_jax.modeling.model_config import BertConfig

# Dense peak FLOP/s per chip, (bfloat16, float32), matched in order against
# `jax.devices()[0].device_kind` (on NVIDIA the CUDA device name: "NVIDIA H100 80GB HBM3"
# is the SXM part, "NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA H200", "NVIDIA H200 NVL",
# "NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe", "NVIDIA GH200 480GB"); the more specific
# names come first. float32 on NVIDIA is the TF32 tensor-core peak XLA uses by default.
# Figures: NVIDIA's datasheets, dense (half the "with sparsity" figures). Override with
# --peak_flops where known better.
PEAK_FLOPS = (
    ("H100 PCIe", 756e12, 378e12),
    ("H100 NVL", 835e12, 418e12),
    ("H200 NVL", 835e12, 418e12),
    ("GH200", 989e12, 494e12),
    ("H100", 989e12, 494e12),  # SXM5 ("NVIDIA H100 80GB HBM3")
    ("H200", 989e12, 494e12),  # SXM
    ("A100", 312e12, 156e12),  # SXM4 and PCIe alike
    ("L4", 121e12, 60e12),
    ("TPU v4", 275e12, 275e12),
    ("TPU v5 lite", 197e12, 197e12),
    ("TPU v5e", 197e12, 197e12),
    ("TPU v5p", 459e12, 459e12),
    ("TPU v6 lite", 918e12, 918e12),
    ("TPU v6e", 918e12, 918e12),
)


def encoder_params(config: BertConfig) -> int:
  """Parameters of the encoder layers (everything per token except embeddings and heads); a
  gated feed-forward (glu) has 3 H I kernel parameters, and the biases and LayerNorm shifts
  count where the config has them."""
  h, i = config.hidden_size, config.intermediate_size
  gate = 2 if config.glu else 1
  biases = (4 * h + gate * i + h) if config.linear_bias else 0
  norms = 2 * h * (2 if config.norm_bias else 1)
  per_layer = 4 * h * h + (gate + 1) * h * i + biases + norms
  return config.num_layers * per_layer


def train_flops_per_token(config: BertConfig, seq_len: int, masked_fraction: float,
                          emd: bool = False) -> float:
  """6 N_nonembed + 12 L S H + 6 E (V + H) x masked fraction (+ 6 E H) (+ 24 L R H), per real token.

  Attention is bidirectional, so its term is not halved; S is the keys a query attends to: the
  sequence in a global layer, at most local_window + 1 in a sliding-window one (ModernBERT's
  local layers). The MLM head (transform
  H -> E and the tied decoder E -> V, E the embedding width) runs only at masked
  positions; factorized embeddings (E != H: ALBERT, ELECTRA) add their projection
  E -> H at every token. DeBERTa's disentangled attention adds, per layer and token, its
  c2p and p2c scores against all 2 R relative embeddings (R: relative_span;
  bert_jax/modeling/disentangled.py's einsums, 8 R H forward); the table's projections, once per
  batch, are left out. DeBERTa's enhanced mask decoder (`emd`, bert_jax.modeling.emd) adds
  two passes of a layer with queries at the masked positions only: per pass
  (6 N_layer + 12 S H + 12 R H) x masked fraction (c2p at the queries), plus, for the
  other tokens, the backward passes of the key and value projections and of p2c, 8 (H^2 + H)
  x (1 - masked fraction) + 8 R H; their forward passes equal the last layer's own on the
  same input (keys and values are H in both) and XLA computes them once.
  """
  h, e = config.hidden_size, config.embed_dim
  keys = sum(min(seq_len, 2 * (config.local_window // 2) + 1) if config.is_local(layer)
             else seq_len for layer in range(config.num_layers))
  flops = (6.0 * encoder_params(config) + 12.0 * keys * h
           + 6.0 * e * (config.vocab_size + h) * masked_fraction + (6.0 * e * h if e != h else 0.0)
           + 24.0 * config.num_layers * config.relative_span * h)
  if emd:
    per_layer = encoder_params(config) / config.num_layers
    r = config.relative_span
    flops += emd_lib.EMD_PASSES * ((6.0 * per_layer + 12.0 * seq_len * h + 12.0 * r * h)
                                   * masked_fraction
                                   + 8.0 * (h * h + h) * (1.0 - masked_fraction) + 8.0 * r * h)
  return flops


def measure_matmul_peak(n: int = 2048, dtype=jnp.float32, repeats: int = 5) -> float:
  """Achieved FLOP/s of a large square matmul on the default device (CPU peak)."""
  a = jnp.ones((n, n), dtype)
  f = jax.jit(lambda x: x @ x)
  f(a).block_until_ready()
  best = float("inf")
  for _ in range(repeats):
    t = time.perf_counter()
    f(a).block_until_ready()
    best = min(best, time.perf_counter() - t)
  return 2.0 * n ** 3 / best


@functools.lru_cache(maxsize=None)
def device_peak_flops(dtype: str = "float32") -> float:
  """Per-device peak: table for known accelerators, a measured matmul on CPU."""
  dev = jax.devices()[0]
  if dev.platform == "cpu":
    return measure_matmul_peak(dtype=jnp.float32)
  return peak_flops_for_kind(dev.device_kind, dtype)


def peak_flops_for_kind(kind: str, dtype: str = "float32") -> float:
  """Dense peak FLOP/s of a `device_kind` string from PEAK_FLOPS (first match); NaN if unknown."""
  for name, bf16, f32 in PEAK_FLOPS:
    if name.lower() in kind.lower():
      return bf16 if dtype == "bfloat16" else f32
  return float("nan")
