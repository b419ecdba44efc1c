"""ELECTRA's replaced-token detection: a small MLM generator and a discriminator, trained together.

As google-research/electra's run_pretraining.py (PretrainingModel):

  generator      BertForPreTraining without NSP, hidden = generator_hidden_fraction x the
                 discriminator's, heads hidden // 64 (>= 1), intermediate 4 x hidden; its MLM
                 loss on the pipeline's masked positions
  sampling       at each masked position a token from the generator's softmax (temperature 1),
                 jax.random.categorical (Gumbel-max) on stop_gradient(logits): no gradient
                 flows through the sample
  discriminator  the family's ElectraDiscriminator on the corrupted input; per real token, was
                 it replaced? A sampled token equal to the original counts as original
  loss           mlm_loss + disc_weight x the discriminator's sigmoid cross-entropy (the mean
                 over real tokens)
  sharing        the generator's embeddings (word, position, token type, LayerNorm) are the
                 discriminator's: stored once, under params['discriminator']['bert']
                 ['embeddings'], with the tables of the discriminator's embedding width; the
                 generator projects them to its hidden size (its own `project`) and its MLM
                 head decodes with the shared word table (ELECTRA's tied embeddings)

Both models are one params tree {'generator', 'discriminator'} in one TrainState and one
jitted step. Masking is the pipeline's (BERT's 80/10/10); ELECTRA's own masks 85% [MASK]
and keeps 15%.

rtd_auc is computed per batch on device from histograms: each real token's discriminator
logit is binned (AUC_BINS bins over [-AUC_LOGIT_RANGE, AUC_LOGIT_RANGE], clipped; a scatter-add,
so no [tokens, bins] array) separately for replaced and original tokens; the histograms are
sums, so they add over microbatches and log steps like every other metric, and the host
computes the Mann-Whitney AUC from them, counting pairs in the same bin as half. Its error is
at most half the fraction of (replaced, original) pairs that share a bin. Bins of 1/256 logit:
an early discriminator's logits crowd into a narrow range (measured on War and Peace after 300
tiny steps: std 0.84; 128 bins gave 0.546 where the exact AUC was 0.530, 4,096 bins 0.5297).
"""
import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from bert_jax.modeling import flops as flops_lib
from bert_jax.modeling import model as model_lib
from bert_jax.modeling.model_config import BertConfig
from bert_jax.objectives import base
from bert_jax.objectives import mlm_nsp
from bert_jax.training import train_core

AUC_BINS = 4096
AUC_LOGIT_RANGE = 8.0
# The generator's embedding sub-modules that are the discriminator's (its `project` is its own).
SHARED_EMBEDDINGS = ("word_embeddings", "position_embeddings", "token_type_embeddings",
                     "layer_norm")


def generator_config(discriminator: BertConfig, hidden_fraction: float) -> BertConfig:
  """The generator's config: a narrower encoder over the discriminator's embedding tables.

  Args:
    discriminator: the discriminator's config.
    hidden_fraction: generator hidden size / discriminator hidden size, in (0, 1].

  Returns:
    The generator's BertConfig (google-research/electra's get_generator_config).
  """
  hidden = max(1, int(round(discriminator.hidden_size * hidden_fraction)))
  heads = max(1, hidden // 64)
  if hidden % heads:
    raise ValueError(f"bad config: electra.generator_hidden_fraction {hidden_fraction} gives a "
                     f"generator hidden size {hidden} not divisible by its {heads} heads "
                     "(hidden // 64)")
  return discriminator.replace(hidden_size=hidden, intermediate_size=4 * hidden, num_heads=heads,
                               embedding_size=discriminator.embed_dim)


class Models:
  """The generator (BertForPreTraining, no NSP) and the discriminator (ElectraDiscriminator)."""

  def __init__(self, discriminator: BertConfig, hidden_fraction: float):
    self.discriminator_config = discriminator
    self.generator_config = generator_config(discriminator, hidden_fraction)
    self.generator = model_lib.BertForPreTraining(self.generator_config, with_nsp=False)
    self.discriminator = model_lib.ElectraDiscriminator(discriminator)


def generator_params(params: dict) -> dict:
  """The generator's full params: its own, with the discriminator's shared embeddings."""
  shared = {k: v for k, v in params["discriminator"]["bert"]["embeddings"].items()
            if k in SHARED_EMBEDDINGS}
  g = params["generator"]
  embeddings = {**shared, **g["bert"].get("embeddings", {})}
  return {**g, "bert": {**g["bert"], "embeddings": embeddings}}


def init_fn(models: Models, seq_len: int, num_predictions: int) -> Callable[[jax.Array], Any]:
  """rng -> boxed params {'generator', 'discriminator'} (the shared embeddings stored once)."""
  def init(rng):
    g_rng, d_rng = jax.random.split(rng)
    ids = jnp.zeros((1, seq_len), jnp.int32)
    d = models.discriminator.init({"params": d_rng}, ids, jnp.ones_like(ids), ids)["params"]
    g = mlm_nsp.init_fn(models.generator, seq_len, num_predictions)(g_rng)
    own = {k: v for k, v in g["bert"]["embeddings"].items() if k not in SHARED_EMBEDDINGS}
    g = {**g, "bert": {**g["bert"], "embeddings": own}}
    return {"generator": g, "discriminator": d}
  return init


def scatter_predictions(ids: jax.Array, positions: jax.Array, values: jax.Array,
                        weights: jax.Array) -> jax.Array:
  """ids [b, L] with values [b, P] written at positions [b, P] where weights [b, P] > 0.

  A one-hot comparison rather than a scatter, so it shards over the batch like the
  rest of the step (the padding predictions, position 0 with weight 0, write nothing).
  """
  hit = (positions[..., None] == jnp.arange(ids.shape[1])) & (weights[..., None] > 0)  # [b, P, L]
  written = jnp.sum(jnp.where(hit, values[..., None], 0), axis=1)  # [b, L]
  return jnp.where(jnp.any(hit, axis=1), written, ids)


def objective(models: Models, disc_weight: float) -> train_core.Objective:
  """ELECTRA's generator MLM + disc_weight x replaced-token detection."""

  def sums(params, batch, rng, deterministic):
    if rng is None:  # eval: a fixed sample
      rng = jax.random.PRNGKey(0)
    gen_rng, sample_rng, disc_rng = jax.random.split(rng, 3)
    positions = batch["masked_lm_positions"]
    w = batch["masked_lm_weights"].astype(jnp.float32)  # [b, P]
    position_ids = batch.get("position_ids")
    out = models.generator.apply(
        {"params": generator_params(params)}, batch["input_ids"], batch["input_mask"],
        batch["segment_ids"], positions, position_ids, deterministic=deterministic,
        rngs=None if deterministic else {"dropout": gen_rng})
    xent, correct = mlm_nsp.mlm_xent_and_correct(out["mlm_logits"], batch["masked_lm_ids"])
    sampled = jax.random.categorical(sample_rng, jax.lax.stop_gradient(out["mlm_logits"]),
                                     axis=-1)  # [b, P]
    original = scatter_predictions(batch["input_ids"], positions, batch["masked_lm_ids"], w)
    corrupted = scatter_predictions(batch["input_ids"], positions, sampled, w)  # [b, L]
    real = (batch["input_mask"] > 0).astype(jnp.float32)  # [b, L]
    replaced = (corrupted != original).astype(jnp.float32) * real
    logits = models.discriminator.apply(
        {"params": params["discriminator"]}, corrupted, batch["input_mask"],
        batch["segment_ids"], deterministic=deterministic, position_ids=position_ids,
        rngs=None if deterministic else {"dropout": disc_rng})  # [b, L]
    disc_xent = optax.sigmoid_binary_cross_entropy(logits, replaced)
    predicted = (logits > 0).astype(jnp.float32)
    bins = jnp.clip(((logits + AUC_LOGIT_RANGE) / (2 * AUC_LOGIT_RANGE) * AUC_BINS).astype(
        jnp.int32), 0, AUC_BINS - 1).reshape(-1)  # [b * L]

    def histogram(weights):  # [b, L] -> [bins]
      return jnp.zeros(AUC_BINS, jnp.float32).at[bins].add(weights.reshape(-1))
    return {
        "mlm_xent": jnp.sum(xent * w),
        "mlm_correct": jnp.sum(correct * w),
        "mlm_weight": jnp.sum(w),
        "real_tokens": jnp.sum(real),
        "rtd_xent": jnp.sum(disc_xent * real),
        "rtd_correct": jnp.sum((predicted == replaced) * real),
        "rtd_replaced": jnp.sum(replaced),
        "rtd_replaced_hit": jnp.sum(predicted * replaced),
        "rtd_hist_replaced": histogram(replaced),
        "rtd_hist_original": histogram(real - replaced),
    }

  def denominators(batch):
    return {"mlm": jnp.sum(batch["masked_lm_weights"].astype(jnp.float32)) + 1e-5,
            "rtd": jnp.sum(batch["input_mask"] > 0).astype(jnp.float32) + 1e-5}

  def loss(s, d):
    return s["mlm_xent"] / d["mlm"] + disc_weight * s["rtd_xent"] / d["rtd"]

  return train_core.Objective(sums=sums, denominators=denominators, loss=loss)


def auc_from_histograms(positive: np.ndarray, negative: np.ndarray) -> float:
  """Mann-Whitney AUC of binned scores (bins ascending), ties within a bin counted half.

  Args:
    positive, negative: counts per bin [bins] of the positive and negative class.

  Returns:
    P(score of a positive > score of a negative), NaN when a class is empty.
  """
  positive, negative = np.asarray(positive, np.float64), np.asarray(negative, np.float64)
  if positive.sum() <= 0 or negative.sum() <= 0:
    return float("nan")
  below = np.cumsum(negative) - negative  # negatives in lower bins
  return float(np.sum(positive * (below + 0.5 * negative)) / (positive.sum() * negative.sum()))


def summarize(sums: dict[str, Any], disc_weight: float) -> dict[str, float]:
  """Host-side: accumulated sums -> the logged means.

  mlm_loss / mlm_accuracy are the generator's; rtd_* the discriminator's over real
  tokens; rtd_replaced_fraction is the share of replaced tokens (always answering
  'original' scores 1 - it in rtd_accuracy, and 0 in rtd_replaced_recall).

  Args:
    sums: the objective's sums (and the step's, in training) added over steps.
    disc_weight: the discriminator loss's weight (for `loss` from eval sums).

  Returns:
    The metrics by name.
  """
  out = train_core.step_means(sums)
  w = max(float(sums["mlm_weight"]), 1e-5)
  out["mlm_loss"] = float(sums["mlm_xent"]) / w
  out["mlm_accuracy"] = float(sums["mlm_correct"]) / w
  n = max(float(sums["real_tokens"]), 1.0)
  out["rtd_loss"] = float(sums["rtd_xent"]) / n
  out["rtd_accuracy"] = float(sums["rtd_correct"]) / n
  out["rtd_replaced_fraction"] = float(sums["rtd_replaced"]) / n
  out["rtd_replaced_recall"] = float(sums["rtd_replaced_hit"]) / max(float(sums["rtd_replaced"]),
                                                                     1.0)
  out["rtd_auc"] = auc_from_histograms(sums["rtd_hist_replaced"], sums["rtd_hist_original"])
  if "loss" not in sums:
    out["loss"] = out["mlm_loss"] + disc_weight * out["rtd_loss"]
  return out


def check_config(options, bad) -> None:
  """What objective='electra' needs of a pretraining config."""
  if options.model_type not in ("electra", "bert"):
    bad(f"objective 'electra' trains ELECTRA's own encoders; model_type {options.model_type!r} "
        "is not supported with it")
  e = options.electra
  if not 0.0 < e.generator_hidden_fraction <= 1.0:
    bad(f"electra.generator_hidden_fraction {e.generator_hidden_fraction} must be in (0, 1]")
  if e.disc_weight <= 0:
    bad(f"electra.disc_weight must be positive, got {e.disc_weight}")
  if options.init_checkpoint:
    bad("init_checkpoint is not supported with objective='electra' yet (the state holds a "
        "generator and a discriminator)")


def build(options, inputs: base.BuildInputs) -> base.Pretraining:
  """The generator and the discriminator in one state; the discriminator is exported."""
  models = Models(inputs.model_config.replace(model_type="electra"),
                  options.electra.generator_hidden_fraction)
  init_params = init_fn(models, options.seq_len, options.data.max_predictions_per_seq)

  def flops(length, masked_fraction):  # both encoders; the generator's MLM head; the
    h = models.discriminator_config.hidden_size  # discriminator's head at every token
    return (flops_lib.train_flops_per_token(models.discriminator_config, length, 0.0)
            + flops_lib.train_flops_per_token(models.generator_config, length, masked_fraction)
            + 6.0 * (h * h + h))
  return base.Pretraining(
      models.discriminator_config, objective(models, options.electra.disc_weight), inputs.tx,
      inputs.schedule,
      functools.partial(train_core.init_state, init_params, inputs.tx,
                        prng_impl=inputs.prng_impl),
      functools.partial(summarize, disc_weight=options.electra.disc_weight),
      lambda params: params["discriminator"], flops, prng_impl=inputs.prng_impl)


SPEC = base.Spec(data_modes={"electra": ("nsp", "sop", "full_sentences")},
                 options=("model_type", "seq_len", "init_checkpoint", "electra", "data"),
                 build=build,
                 check_config=check_config, owns_model_types=("electra",),
                 console_metrics=("mlm_accuracy", "rtd_accuracy", "rtd_replaced_recall"))
