r"""Train-step throughput and MFU, side by side with Hugging Face's Flax BERT.

  python benchmarks/train_step.py --config configs/pretrain.py:mini --batch_size 32 \
      --seq_len 128 --steps 10 [--dtype float32|bfloat16] [--no_reference]

Times the steady-state step (median after compilation) of bert_jax's
pretraining step and, in the same run, of transformers' FlaxBertForPreTraining
(4.x) with the same config, batch, masking rate (15%, max_predictions_per_seq =
round(0.15 * seq_len)) and optimizer (AdamW, weight decay on kernels, clipping
1.0). The reference computes MLM logits over every token, as its model does;
bert_jax computes them at the masked positions only. Both apply dropout 0.1.
The two alternate step by step (after their compiles), so a drifting shared
machine affects both alike.

MFU uses DESIGN.md's formula over real tokens; the CPU peak is a large float32
matmul measured in this run, accelerator peaks come from bert_jax.flops
(override with --peak_flops). Last lines: `tokens/s: N`, `mfu: X`,
`vs_reference: R`.
"""
import argparse
import os
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_collections  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from bert_jax import config_help  # noqa: E402
from bert_jax import flops as flops_lib  # noqa: E402
from bert_jax import model as model_lib  # noqa: E402
from bert_jax import optimizer as opt_lib  # noqa: E402
from bert_jax import pretrain_setup  # noqa: E402
from bert_jax import train_core  # noqa: E402
from bert_jax.objectives import mlm_nsp  # noqa: E402


def load_config(spec: str) -> ml_collections.ConfigDict:
  return config_help.load(spec).config


def synthetic_batch(rng: np.random.Generator, b: int, L: int, P: int, vocab: int) -> dict:
  """All tokens real, P masked positions per row, two segments, random NSP labels."""
  ids = rng.integers(1000, vocab, (b, L)).astype(np.int32)
  pos = np.sort(np.stack([rng.choice(np.arange(1, L), P, replace=False) for _ in range(b)]), 1)
  return dict(
      input_ids=ids, input_mask=np.ones((b, L), np.int32),
      segment_ids=np.broadcast_to((np.arange(L) >= L // 2).astype(np.int32), (b, L)).copy(),
      masked_lm_positions=pos.astype(np.int32),
      masked_lm_ids=np.take_along_axis(ids, pos, 1).astype(np.int32),
      masked_lm_weights=np.ones((b, P), np.float32),
      next_sentence_labels=rng.integers(0, 2, b).astype(np.int32))


class Runner:
  """A jitted step with its (donated) state and batch."""

  def __init__(self, step_fn, state, batch):
    self.step_fn, self.state, self.batch = step_fn, state, batch

  def step(self) -> float:
    """Runs one step to completion; returns its seconds."""
    t = time.perf_counter()
    self.state, out = self.step_fn(self.state, self.batch)
    jax.block_until_ready(out)
    return time.perf_counter() - t


def interleaved_times(runners: list, steps: int) -> list[list[float]]:
  """2 warm-up (compile) steps each, then `steps` rounds of one timed step per runner.

  Alternating the implementations step by step exposes them to the same machine
  conditions (a shared CPU drifts by several percent over a minute), so their
  ratio is not biased by when each one ran.
  """
  for r in runners:
    for _ in range(2):
      r.step()
  times = [[] for _ in runners]
  for _ in range(steps):
    for r, t in zip(runners, times):
      t.append(r.step())
  return times


def ours(config, model_cfg, batch) -> Runner:
  model = model_lib.BertForPreTraining(model_cfg, with_nsp=True)
  tx, schedule = opt_lib.make_optimizer(config.optimizer, 1e-4, 0, 1000)
  import flax.linen as nn  # pylint: disable=g-import-not-at-top
  init_params = mlm_nsp.init_fn(model, batch["input_ids"].shape[1],
                                batch["masked_lm_positions"].shape[1])
  state = jax.jit(lambda r: nn.unbox(train_core.init_state(init_params, tx, r)))(
      jax.random.PRNGKey(0))
  step = jax.jit(train_core.make_train_step(mlm_nsp.objective(model), tx, schedule),
                 donate_argnums=(0,))
  return Runner(step, state, jax.device_put(batch))


def reference(model_cfg, batch) -> Runner:
  """transformers' FlaxBertForPreTraining with run_mlm_flax-style loss and AdamW."""
  import transformers  # pylint: disable=g-import-not-at-top
  hf_cfg = transformers.BertConfig(
      vocab_size=model_cfg.vocab_size, hidden_size=model_cfg.hidden_size,
      num_hidden_layers=model_cfg.num_layers, num_attention_heads=model_cfg.num_heads,
      intermediate_size=model_cfg.intermediate_size, hidden_dropout_prob=model_cfg.dropout_rate,
      attention_probs_dropout_prob=model_cfg.attention_dropout_rate)
  dtype = jnp.dtype(model_cfg.dtype)
  model = transformers.FlaxBertForPreTraining(hf_cfg, seed=0, dtype=dtype)
  params = model.params
  decay = jax.tree_util.tree_map_with_path(
      lambda p, _: getattr(p[-1], "key", "") in ("kernel", "embedding"), params)
  tx = optax.chain(optax.clip_by_global_norm(1.0),
                   optax.adamw(1e-4, b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.01, mask=decay))
  b, L = batch["input_ids"].shape
  labels = np.full((b, L), -100, np.int32)
  np.put_along_axis(labels, batch["masked_lm_positions"], batch["masked_lm_ids"], 1)
  masked_ids = batch["input_ids"].copy()
  np.put_along_axis(masked_ids, batch["masked_lm_positions"], 103, 1)
  hf_batch = dict(input_ids=masked_ids, attention_mask=batch["input_mask"],
                  token_type_ids=batch["segment_ids"], labels=labels,
                  next_sentence_label=batch["next_sentence_labels"])

  def train_step(state, hf_batch):
    params, opt_state, rng = state
    rng, dropout_rng = jax.random.split(rng)

    def loss_fn(p):
      out = model(hf_batch["input_ids"], hf_batch["attention_mask"], hf_batch["token_type_ids"],
                  params=p, dropout_rng=dropout_rng, train=True)
      logits = out.prediction_logits.astype(jnp.float32)  # [b, L, vocab]: every token
      w = (hf_batch["labels"] >= 0).astype(jnp.float32)
      onehot = jax.nn.one_hot(jnp.maximum(hf_batch["labels"], 0), logits.shape[-1])
      mlm = jnp.sum(optax.softmax_cross_entropy(logits, onehot) * w) / jnp.maximum(w.sum(), 1)
      nsp = optax.softmax_cross_entropy_with_integer_labels(
          out.seq_relationship_logits.astype(jnp.float32), hf_batch["next_sentence_label"]).mean()
      return mlm + nsp

    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return (optax.apply_updates(params, updates), opt_state, rng), loss

  state = (params, tx.init(params), jax.random.PRNGKey(0))
  step = jax.jit(train_step, donate_argnums=(0,))
  return Runner(step, state, jax.device_put(hf_batch))


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--config", default="configs/pretrain.py:mini")
  p.add_argument("--batch_size", type=int, default=32)
  p.add_argument("--seq_len", type=int, default=128)
  p.add_argument("--steps", type=int, default=10)
  p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
  p.add_argument("--attention_impl", default=None, help="override model.attention_impl")
  p.add_argument("--remat", default=None, help="override model.remat")
  p.add_argument("--scan_layers", default=None, choices=["true", "false"])
  p.add_argument("--vocab_size", type=int, default=30522)
  p.add_argument("--peak_flops", type=float, default=0.0, help="per-device peak FLOP/s")
  p.add_argument("--no_reference", action="store_true")
  args = p.parse_args(argv)

  config = load_config(args.config)
  config.model.dtype = args.dtype
  if args.attention_impl:
    config.model.attention_impl = args.attention_impl
  if args.remat:
    config.model.remat = args.remat
  if args.scan_layers:
    config.model.scan_layers = args.scan_layers == "true"
  model_cfg = pretrain_setup.model_config_from(config, args.vocab_size)
  num_predictions = max(1, round(0.15 * args.seq_len))
  batch = synthetic_batch(np.random.default_rng(0), args.batch_size, args.seq_len,
                          num_predictions, args.vocab_size)
  tokens = args.batch_size * args.seq_len
  peak = args.peak_flops or flops_lib.device_peak_flops(args.dtype)
  flops_per_token = flops_lib.train_flops_per_token(
      model_cfg, args.seq_len, num_predictions / args.seq_len)

  runners = [ours(config, model_cfg, batch)]
  runners[0].step()  # compile; the RSS below is bert_jax's own (the reference adds to it)
  rss_ours = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
  names = ["bert_jax"]
  if not args.no_reference:
    runners.append(reference(model_cfg, batch))
    names.append("hf FlaxBertForPreTraining")
  rows = []
  for name, times in zip(names, interleaved_times(runners, args.steps)):
    t = statistics.median(times)
    rows.append((name, t, tokens / t, tokens / t * flops_per_token / peak))

  dev = jax.devices()[0]
  print(f"device: {dev.platform} {dev.device_kind} x{jax.device_count()} | jax {jax.__version__}")
  print(f"config: {config.variant} L{model_cfg.num_layers} H{model_cfg.hidden_size} "
        f"A{model_cfg.num_heads} | batch {args.batch_size} x seq {args.seq_len} | "
        f"{num_predictions} predictions/seq | {args.dtype} | attention {model_cfg.attention_impl} "
        f"| remat {model_cfg.remat} | scan {model_cfg.scan_layers}")
  print(f"peak FLOP/s per device: {peak:.3e} ({'measured matmul' if dev.platform == 'cpu' and not args.peak_flops else 'table/override'})"
        f" | model FLOPs/token {flops_per_token:.3e}")
  print(f"peak RSS after bert_jax steps: {rss_ours:.2f} GiB")
  print(f"{'implementation':<28}{'step ms (median)':>18}{'tokens/s':>14}{'MFU':>9}")
  for name, t, tps, mfu in rows:
    print(f"{name:<28}{t * 1e3:>18.1f}{tps:>14,.0f}{mfu:>9.2%}")
  print(f"tokens/s: {rows[0][2]:.0f}")
  print(f"mfu: {rows[0][3]:.4f}")
  if len(rows) > 1:
    print(f"vs_reference: {rows[0][2] / rows[1][2]:.2f}")


if __name__ == "__main__":
  main()
