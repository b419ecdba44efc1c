"""What one more compiled sequence length costs a run, and the buckets that cost chooses."""
import jax
import numpy as np

from bert_jax.batching import length_buckets
from bert_jax.modeling import flops
from bert_jax.modeling.model_config import BertConfig

# What one more sequence length (a bucket) costs a fine-tuning run, per platform: its train
# and eval programs' compile seconds, a + b x layers, and the effective rate of the step in
# FLOP/s. Fixed guesses of the right order, never measurements, so that a run's buckets (and
# so its batches) are the same on every machine of a platform. CPU: the run's time one more
# length costs MiniLM on a 2-core CPU, halfway between a cold compile (about
# 10 s: its train and eval programs compile beside the steps, bert_jax.runtime.ahead_compile)
# and a load from the compilation cache that is on by default (about 2-3 s).
SHAPE_COMPILE_SECONDS = {"cpu": (1.5, 0.8), "gpu": (5.0, 1.5), "tpu": (10.0, 3.0)}
STEP_FLOPS_PER_SECOND = {"cpu": 5e10, "gpu": 2e14, "tpu": 1e14}


def shape_cost_row_tokens(config: BertConfig, platform: str, seq_len: int) -> float:
  """One more bucket length's compile time, in row-tokens of training (see the table above)."""
  a, b = SHAPE_COMPILE_SECONDS.get(platform, SHAPE_COMPILE_SECONDS["gpu"])
  rate = STEP_FLOPS_PER_SECOND.get(platform, STEP_FLOPS_PER_SECOND["gpu"])
  per_token = flops.train_flops_per_token(config, seq_len, masked_fraction=0.0) / rate
  return (a + b * config.num_layers) / per_token


def auto_buckets(config: BertConfig, groups, max_len: int) -> tuple[int, ...]:
  """length_buckets.choose_buckets at this platform's cost of one more length for `config`.

  groups: (lengths, weight) pairs: training rows weigh their epochs, inference rows a third
  (a forward pass is about a third of a training step).
  """
  every = np.concatenate([np.asarray(g[0]) for g in groups]) if groups else np.zeros(0)
  typical = max(1, int(np.mean(every))) if len(every) else max_len
  cost = shape_cost_row_tokens(config, jax.devices()[0].platform, typical)
  return length_buckets.choose_buckets(groups, max_len, cost)
