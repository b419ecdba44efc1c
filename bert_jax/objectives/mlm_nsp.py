"""BERT's pretraining objective: masked-LM loss plus next-sentence prediction.

Google BERT's normalisation: the MLM loss is the weighted mean over the
predictions of the whole batch, the NSP loss the mean over its rows. Without
sentence pairs (full_sentences data) the model has no NSP head and the loss is
MLM alone.
"""
from typing import Any, Callable

import jax
import jax.numpy as jnp

from bert_jax import model as model_lib
from bert_jax import train_core


def init_fn(model: model_lib.BertForPreTraining, seq_len: int,
            num_predictions: int) -> Callable[[jax.Array], Any]:
  """rng -> boxed params of `model` for sequences of `seq_len` with `num_predictions`."""
  def init(rng):
    ids = jnp.zeros((1, seq_len), jnp.int32)
    return model.init({"params": rng}, ids, jnp.ones_like(ids), ids,
                      jnp.zeros((1, num_predictions), jnp.int32))["params"]
  return init


def mlm_xent_and_correct(logits: jax.Array, ids: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Cross-entropy and top-1 hit at each prediction; logits [..., vocab], ids [...].

  Written for the vocabulary-sized arrays: the label's logit is picked with a
  comparison against an iota (its gradient is elementwise, where a gather's is a
  scatter into a zero tensor), and a hit is "the label's logit is the max" (a max
  reduction, shared with the log-sum-exp, instead of an argmax). Ties count as
  hits, which argmax would break by index.
  """
  logits = logits.astype(jnp.float32)
  is_label = jax.lax.broadcasted_iota(jnp.int32, logits.shape, logits.ndim - 1) == ids[..., None]
  label_logit = jnp.sum(jnp.where(is_label, logits, 0.0), axis=-1)
  top = jax.lax.stop_gradient(jnp.max(logits, axis=-1))
  lse = top + jnp.log(jnp.sum(jnp.exp(logits - top[..., None]), axis=-1))
  correct = (jax.lax.stop_gradient(label_logit) >= top).astype(jnp.float32)
  return lse - label_logit, correct


def objective(model: model_lib.BertForPreTraining) -> train_core.Objective:
  """MLM (+ NSP when the model has the NSP head) as a train_core.Objective."""

  def sums(params, batch, rng, deterministic):
    out = model.apply({"params": params}, batch["input_ids"], batch["input_mask"],
                      batch["segment_ids"], batch["masked_lm_positions"],
                      batch.get("position_ids"), deterministic=deterministic,
                      rngs=None if deterministic else {"dropout": rng})
    w = batch["masked_lm_weights"].astype(jnp.float32)
    xent, correct = mlm_xent_and_correct(out["mlm_logits"], batch["masked_lm_ids"])
    result = {
        "mlm_xent": jnp.sum(xent * w),
        "mlm_correct": jnp.sum(correct * w),
        "mlm_weight": jnp.sum(w),
        "real_tokens": jnp.sum(batch["input_mask"] > 0).astype(jnp.float32),
    }
    if "nsp_logits" in out:
      labels = batch["next_sentence_labels"]
      nsp_logp = jax.nn.log_softmax(out["nsp_logits"], axis=-1)
      result["nsp_xent"] = -jnp.sum(jnp.take_along_axis(nsp_logp, labels[:, None], axis=-1))
      result["nsp_correct"] = jnp.sum(jnp.argmax(out["nsp_logits"], -1) == labels
                                      ).astype(jnp.float32)
      result["nsp_count"] = jnp.asarray(labels.shape[0], jnp.float32)
    return result

  def denominators(batch):
    return {"mlm": jnp.sum(batch["masked_lm_weights"].astype(jnp.float32)) + 1e-5,
            "nsp": jnp.asarray(batch["input_ids"].shape[0], jnp.float32)}

  def loss(s, d):
    total = s["mlm_xent"] / d["mlm"]
    if "nsp_xent" in s:
      total = total + s["nsp_xent"] / d["nsp"]
    return total

  return train_core.Objective(sums=sums, denominators=denominators, loss=loss)


def summarize(sums: dict[str, float]) -> dict[str, float]:
  """Host-side: accumulated sums -> the logged means."""
  out = {}
  steps = max(sums.get("steps", 1.0), 1.0)
  if "loss" in sums:
    out["loss"] = sums["loss"] / steps
    out["grad_norm"] = sums["grad_norm"] / steps
    out["learning_rate"] = sums["learning_rate"] / steps
  w = max(sums["mlm_weight"], 1e-5)
  out["mlm_loss"] = sums["mlm_xent"] / w
  out["mlm_accuracy"] = sums["mlm_correct"] / w
  if "nsp_xent" in sums:
    n = max(sums["nsp_count"], 1.0)
    out["nsp_loss"] = sums["nsp_xent"] / n
    out["nsp_accuracy"] = sums["nsp_correct"] / n
  if "loss" not in sums:
    out["loss"] = out["mlm_loss"] + out.get("nsp_loss", 0.0)
  return out
