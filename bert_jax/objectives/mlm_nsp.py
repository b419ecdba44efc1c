"""Masked-LM pretraining with an optional sentence-pair task: objectives mlm_nsp, mlm_sop, mlm.

  mlm_nsp  BERT: MLM + next-sentence prediction (labels 1 = random next)
  mlm_sop  ALBERT: MLM + sentence-order prediction (labels 1 = swapped), the same head
  mlm      MLM alone (RoBERTa); the model has no pair head

Google BERT's normalisation: the MLM loss is the weighted mean over the
predictions of the whole batch, the pair loss the mean over its rows. The pair
head is BertForPreTraining's `nsp` (pooler, dense to 2) for both tasks, as
ALBERT's SOP head is its NSP head's shape and place.
"""
import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp

from bert_jax.members import registry as members
from bert_jax.modeling import flops as flops_lib
from bert_jax.modeling import fp8
from bert_jax.modeling import model as model_lib
from bert_jax.objectives import base
from bert_jax.training import train_core


def init_fn(model: model_lib.BertForPreTraining, seq_len: int,
            num_predictions: int) -> Callable[[jax.Array], Any]:
  """rng -> boxed params of `model` for sequences of `seq_len` with `num_predictions` (with
  model.fp8, and the FP8 state: bert_jax.modeling.fp8)."""
  def init(rng):
    ids = jnp.zeros((1, seq_len), jnp.int32)
    return fp8.state_params(model.init({"params": rng}, ids, jnp.ones_like(ids), ids,
                                       jnp.zeros((1, num_predictions), jnp.int32)))
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


# The sentence-pair task of each objective that has one (its metrics' prefix).
PAIR_TASKS = {"mlm_nsp": "nsp", "mlm_sop": "sop"}


def objective(model: model_lib.BertForPreTraining, pair_task: str = "nsp"
              ) -> train_core.Objective:
  """MLM (+ the pair task when the model has the pair head) as a train_core.Objective.

  Args:
    model: BertForPreTraining; with_nsp=True adds the pair loss.
    pair_task: 'nsp' or 'sop': what the batch's next_sentence_labels mean; names
      the metrics (nsp_loss / nsp_accuracy or sop_loss / sop_accuracy).

  Returns:
    The objective.
  """
  t = pair_task

  def sums(params, batch, rng, deterministic):
    out = model.apply(fp8.variables(params), batch["input_ids"], batch["input_mask"],
                      batch["segment_ids"], batch["masked_lm_positions"],
                      model_lib.batch_position_ids(batch, model.config),
                      deterministic=deterministic,
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
      result[f"{t}_xent"] = -jnp.sum(jnp.take_along_axis(nsp_logp, labels[:, None], axis=-1))
      result[f"{t}_correct"] = jnp.sum(jnp.argmax(out["nsp_logits"], -1) == labels
                                       ).astype(jnp.float32)
      result[f"{t}_count"] = jnp.asarray(labels.shape[0], jnp.float32)
    return result

  def denominators(batch):
    return {"mlm": jnp.sum(batch["masked_lm_weights"].astype(jnp.float32)) + 1e-5,
            "pair": jnp.asarray(batch["input_ids"].shape[0], jnp.float32)}

  def loss(s, d):
    total = s["mlm_xent"] / d["mlm"]
    if f"{t}_xent" in s:
      total = total + s[f"{t}_xent"] / d["pair"]
    return total

  return train_core.Objective(sums=sums, denominators=denominators, loss=loss)


def summarize(sums: dict[str, float]) -> dict[str, float]:
  """Host-side: accumulated sums -> the logged means."""
  out = train_core.step_means(sums)
  w = max(sums["mlm_weight"], 1e-5)
  out["mlm_loss"] = sums["mlm_xent"] / w
  out["mlm_accuracy"] = sums["mlm_correct"] / w
  pair_loss = 0.0
  for t in PAIR_TASKS.values():
    if f"{t}_xent" in sums:
      n = max(sums[f"{t}_count"], 1.0)
      out[f"{t}_loss"] = pair_loss = sums[f"{t}_xent"] / n
      out[f"{t}_accuracy"] = sums[f"{t}_correct"] / n
  if "loss" not in sums:
    out["loss"] = out["mlm_loss"] + pair_loss
  return out


def check_config(options, bad) -> None:
  """What mlm_nsp / mlm_sop / mlm need of a pretraining config."""
  if not members.get(options.model_type).has_pooler and options.objective in PAIR_TASKS:
    bad(f"model_type {options.model_type!r} has no pooler for objective "
        f"{options.objective!r}'s sentence task; use objective='mlm' or 'distill'")


def build(options, inputs: base.BuildInputs) -> base.Pretraining:
  """BertForPreTraining with the pair head of config.objective (none for 'mlm')."""
  model_cfg, impl = inputs.model_config, inputs.prng_impl
  pair_task = PAIR_TASKS.get(options.objective)
  model = model_lib.BertForPreTraining(model_cfg, with_nsp=pair_task is not None, emd=options.emd)
  init_params = init_fn(model, options.seq_len, options.data.max_predictions_per_seq)
  return base.Pretraining(
      model_cfg, objective(model, pair_task or "nsp"), inputs.tx, inputs.schedule,
      functools.partial(train_core.init_state, init_params, inputs.tx, prng_impl=impl), summarize,
      lambda params: fp8.split(params)[0],  # exports carry no FP8 state
      functools.partial(flops_lib.train_flops_per_token, model_cfg, emd=options.emd),
      prng_impl=impl)


SPEC = base.Spec(data_modes={"mlm_nsp": ("nsp",), "mlm_sop": ("sop",),
                             "mlm": ("nsp", "sop", "full_sentences")},
                 options=("objective", "model_type", "seq_len", "emd", "data"),
                 build=build, check_config=check_config, emd=True, fp8=True,
                 console_metrics=("mlm_accuracy", "nsp_accuracy", "sop_accuracy"))
