"""The pretraining train state, losses, and jitted train / eval steps."""
import functools
from typing import Any, Callable

import flax
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from bert_jax import model as model_lib

Batch = dict[str, jax.Array]


@flax.struct.dataclass
class TrainState:
  """Everything a step changes; checkpointed whole for exact resume."""
  step: jax.Array  # int32 scalar: updates applied so far
  params: Any
  opt_state: Any
  rng: jax.Array  # base PRNG key (raw uint32[2]); step keys are fold_in(rng, step)
  nonfinite_steps: jax.Array  # int32 scalar: steps whose loss or grads were NaN/inf


def init_state(model: model_lib.BertForPreTraining, tx: optax.GradientTransformation,
               rng: jax.Array, seq_len: int, num_predictions: int) -> TrainState:
  """Initial state with boxed (logically named) params; use under eval_shape/jit."""
  init_rng, state_rng = jax.random.split(rng)
  ids = jnp.zeros((1, seq_len), jnp.int32)
  variables = model.init({"params": init_rng}, ids, jnp.ones_like(ids), ids,
                         jnp.zeros((1, num_predictions), jnp.int32))
  params = variables["params"]
  return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params),
                    rng=state_rng, nonfinite_steps=jnp.zeros((), jnp.int32))


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


def _forward_sums(model, params, batch: Batch, rng, deterministic: bool) -> dict[str, jax.Array]:
  """Un-normalised loss and metric sums of one (micro)batch."""
  out = model.apply({"params": params}, batch["input_ids"], batch["input_mask"],
                    batch["segment_ids"], batch["masked_lm_positions"],
                    batch.get("position_ids"), deterministic=deterministic,
                    rngs=None if deterministic else {"dropout": rng})
  logits = out["mlm_logits"]  # [batch, P, vocab] float32
  ids = batch["masked_lm_ids"]
  w = batch["masked_lm_weights"].astype(jnp.float32)
  xent, correct = mlm_xent_and_correct(logits, ids)
  sums = {
      "mlm_xent": jnp.sum(xent * w),
      "mlm_correct": jnp.sum(correct * w),
      "mlm_weight": jnp.sum(w),
      "real_tokens": jnp.sum(batch["input_mask"] > 0).astype(jnp.float32),
  }
  if "nsp_logits" in out:
    labels = batch["next_sentence_labels"]
    nsp_logp = jax.nn.log_softmax(out["nsp_logits"], axis=-1)
    sums["nsp_xent"] = -jnp.sum(jnp.take_along_axis(nsp_logp, labels[:, None], axis=-1))
    sums["nsp_correct"] = jnp.sum(jnp.argmax(out["nsp_logits"], -1) == labels).astype(jnp.float32)
    sums["nsp_count"] = jnp.asarray(labels.shape[0], jnp.float32)
  return sums


def _loss_from_sums(sums, mlm_denom, nsp_denom):
  # Google BERT: MLM loss is the weighted mean over predictions, NSP the mean over rows.
  loss = sums["mlm_xent"] / mlm_denom
  if "nsp_xent" in sums:
    loss = loss + sums["nsp_xent"] / nsp_denom
  return loss


def _microbatches(batch: Batch, k: int) -> Batch:
  """[B, ...] -> [k, B/k, ...] taking rows i, i+k, ... so each device's shard splits evenly."""
  def split(x):
    x = x.reshape((x.shape[0] // k, k) + x.shape[1:])
    return jnp.swapaxes(x, 0, 1)
  return jax.tree.map(split, batch)


def make_train_step(model: model_lib.BertForPreTraining, tx: optax.GradientTransformation,
                    schedule: optax.Schedule, grad_accum_steps: int = 1,
                    deterministic: bool = False) -> Callable[[TrainState, Batch], tuple]:
  """Returns train_step(state, batch) -> (state, metrics); jit it with donation.

  The gradient is that of the full batch's loss: with accumulation, each
  microbatch's sums are normalised by the whole batch's denominators, so k
  microbatches give the same update as one batch (dropout aside). A step whose
  loss or gradient is not finite leaves params and optimizer state unchanged and
  counts itself in `nonfinite_steps`.
  """
  def grad_sums(params, mb, rng, mlm_denom, nsp_denom):
    def loss_fn(p):
      sums = _forward_sums(model, p, mb, rng, deterministic)
      return _loss_from_sums(sums, mlm_denom, nsp_denom), sums
    (_, sums), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    return grads, sums

  def train_step(state: TrainState, batch: Batch):
    rng = jax.random.fold_in(state.rng, state.step)
    mlm_denom = jnp.sum(batch["masked_lm_weights"].astype(jnp.float32)) + 1e-5
    nsp_denom = jnp.asarray(batch["input_ids"].shape[0], jnp.float32)
    if grad_accum_steps == 1:
      grads, sums = grad_sums(state.params, batch, rng, mlm_denom, nsp_denom)
    else:
      mbs = _microbatches(batch, grad_accum_steps)

      def body(carry, xs):
        i, mb = xs
        g, s = grad_sums(state.params, mb, jax.random.fold_in(rng, i), mlm_denom, nsp_denom)
        return jax.tree.map(jnp.add, carry, (g, s)), None

      zeros_g = jax.tree.map(jnp.zeros_like, state.params)
      zeros_s = jax.eval_shape(lambda: grad_sums(
          state.params, jax.tree.map(lambda x: x[0], mbs), rng, mlm_denom, nsp_denom)[1])
      zeros_s = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), zeros_s)
      (grads, sums), _ = jax.lax.scan(body, (zeros_g, zeros_s),
                                      (jnp.arange(grad_accum_steps), mbs))
    loss = _loss_from_sums(sums, mlm_denom, nsp_denom)
    grad_norm = jnp.sqrt(sum(jnp.sum(jnp.square(g.astype(jnp.float32))) for g in jax.tree.leaves(grads)))
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)

    def apply_update(operand):
      params, opt_state, grads = operand
      updates, opt_state = tx.update(grads, opt_state, params)
      return optax.apply_updates(params, updates), opt_state

    # A conditional, not a select between new and old state: with donated buffers the
    # select cost a pass over params and moments plus copies (6% of a base step on CPU).
    new_params, new_opt = jax.lax.cond(finite, apply_update, lambda op: (op[0], op[1]),
                                       (state.params, state.opt_state, grads))
    new_state = state.replace(
        step=state.step + 1,
        params=new_params,
        opt_state=new_opt,
        nonfinite_steps=state.nonfinite_steps + (~finite).astype(jnp.int32))
    metrics = dict(sums, loss=loss, grad_norm=grad_norm, learning_rate=schedule(state.step),
                   finite=finite.astype(jnp.float32), steps=jnp.ones((), jnp.float32))
    return new_state, metrics

  return train_step


def make_eval_step(model: model_lib.BertForPreTraining) -> Callable[[Any, Batch], dict]:
  """Returns eval_step(params, batch) -> metric sums (deterministic)."""
  def eval_step(params, batch):
    return _forward_sums(model, params, batch, None, deterministic=True)
  return eval_step


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
