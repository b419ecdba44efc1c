r"""Train-step throughput and MFU, side by side with a reference implementation.

  python benchmarks/train_step.py --config configs/pretrain.py:mini --batch_size 32 \
      --seq_len 128 --steps 10 [--rounds 3] [--dtype float32|bfloat16] \
      [--reference flax|torch|none] [--no_torch_compile] [--json PATH]

Times bert_jax's pretraining step and, in the same process, a reference with the
same config, batch, masking rate (15%, max_predictions_per_seq = round(0.15 * seq_len))
and optimizer (AdamW, weight decay on kernels, clipping 1.0), both with dropout:
  flax   transformers' FlaxBertForPreTraining (transformers 4.x; 5.x has no Flax models)
  torch  transformers' PyTorch BertForPreTraining (benchmarks/torch_reference.py):
         SDPA attention, bf16 autocast on CUDA (float32 on CPU), torch.compile unless
         --no_torch_compile, torch.optim.AdamW
The references compute MLM logits over every token, as their models do; bert_jax
computes them at the masked positions only.

The reported figure is back-to-back: --steps steps dispatched in a row and waited for
once at the end, per step (the mean of a round; the median over --rounds rounds). Each
round also times one step waited for on its own ("blocked", the old figure: it adds the
dispatch and the host round trip to every step). Rounds alternate the implementations
(ours, reference, ours, reference, ...), so a drifting shared machine affects both alike.

MFU uses DESIGN.md's formula (bert_jax.modeling.flops) over real tokens for both sides; the CPU
peak is a large float32 matmul measured in this run, accelerator peaks come from
bert_jax.modeling.flops (override with --peak_flops). Last lines: `tokens/s: N`, `mfu: X`,
`vs_reference: R`; --json writes every figure.
"""
import time

START = time.perf_counter()  # before the imports: start-up is reported with the compile

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import zlib  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(1, HERE)  # torch_reference, also when run through runpy

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_collections  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from bert_jax.checkpoints import checksum  # noqa: E402
from bert_jax import config_help  # noqa: E402
from bert_jax.modeling import compute_policy
from bert_jax.modeling import flops as flops_lib  # noqa: E402
from bert_jax.modeling import model as model_lib  # noqa: E402
from bert_jax.objectives import mlm_nsp  # noqa: E402
from bert_jax.pretraining import setup as pretrain_setup  # noqa: E402
from bert_jax.runtime import xla_flags  # noqa: E402
from bert_jax.training import optimizer as opt_lib  # noqa: E402
from bert_jax.training import sharding  # noqa: E402
from bert_jax.training import train_core  # noqa: E402

xla_flags.apply()  # the trainer's GPU defaults (bert_jax.cli applies them to every program)

MASK_ID = 103  # [MASK] in the bundled bert-base-uncased vocab; the references' masked inputs


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


def reference_inputs(batch: dict) -> dict:
  """The batch as a Hugging Face model takes it: [MASK] at the masked positions, labels -100 elsewhere."""
  b, L = batch["input_ids"].shape
  labels = np.full((b, L), -100, np.int32)
  np.put_along_axis(labels, batch["masked_lm_positions"], batch["masked_lm_ids"], 1)
  masked_ids = batch["input_ids"].copy()
  np.put_along_axis(masked_ids, batch["masked_lm_positions"], MASK_ID, 1)
  return dict(input_ids=masked_ids, attention_mask=batch["input_mask"],
              token_type_ids=batch["segment_ids"], labels=labels,
              next_sentence_label=batch["next_sentence_labels"])


def hf_config(model_cfg, **kwargs):
  """transformers.BertConfig with model_cfg's sizes and dropout."""
  import transformers  # pylint: disable=g-import-not-at-top
  return transformers.BertConfig(
      vocab_size=model_cfg.vocab_size, hidden_size=model_cfg.hidden_size,
      num_hidden_layers=model_cfg.num_layers, num_attention_heads=model_cfg.num_heads,
      intermediate_size=model_cfg.intermediate_size, hidden_dropout_prob=model_cfg.dropout_rate,
      attention_probs_dropout_prob=model_cfg.attention_dropout_rate,
      max_position_embeddings=max(512, model_cfg.max_position_embeddings), **kwargs)


class Runner:
  """A jitted step with its (donated) state and batch. `step_fn` may be a jax.stages.Compiled."""

  def __init__(self, step_fn, state, batch):
    self.step_fn, self.state, self.batch = step_fn, state, batch
    self.out = None

  def dispatch(self) -> None:
    """Enqueues one step without waiting for it."""
    self.state, self.out = self.step_fn(self.state, self.batch)

  def sync(self) -> None:
    jax.block_until_ready((self.state, self.out))

  def step(self) -> float:
    """Runs one step to completion; returns its seconds."""
    t = time.perf_counter()
    self.dispatch()
    self.sync()
    return time.perf_counter() - t


def back_to_back(runner, steps: int) -> float:
  """Seconds per step of `steps` steps dispatched in a row, waited for once at the end."""
  runner.sync()
  t = time.perf_counter()
  for _ in range(steps):
    runner.dispatch()
  runner.sync()
  return (time.perf_counter() - t) / steps


def interleaved_rounds(runners: list, rounds: int, steps: int, warmup: int = 2) -> list[dict]:
  """`warmup` (compile) steps each, then `rounds` rounds of: per runner in turn, one blocked step and `steps` back-to-back.

  Alternating the implementations exposes them to the same machine conditions (a shared
  CPU drifts by several percent over a minute), so their ratio is not biased by when
  each one ran. Returns per runner {"back_to_back": [s/step per round], "blocked": [s]}.
  """
  for r in runners:
    for _ in range(warmup):
      r.step()
  times = [dict(back_to_back=[], blocked=[]) for _ in runners]
  for _ in range(rounds):
    for r, t in zip(runners, times):
      t["blocked"].append(r.step())
      t["back_to_back"].append(back_to_back(r, steps))
  return times


def build_ours(config, model_cfg, batch):
  """(jitted step with donated state, initial state, batch on the device): bert_jax's pretraining step.

  Dropout draws from the run's PRNG implementation (model.prng_impl; 'auto' is threefry
  on the CPU and unsafe_rbg on accelerators), as bert_jax.pretrain's step does."""
  model = model_lib.BertForPreTraining(model_cfg, with_nsp=True)
  tx, schedule = opt_lib.make_optimizer(config.optimizer, 1e-4, 0, 1000)
  import flax.linen as nn  # pylint: disable=g-import-not-at-top
  init_params = mlm_nsp.init_fn(model, batch["input_ids"].shape[1],
                                batch["masked_lm_positions"].shape[1])
  impl = compute_policy.prng_impl(config.model)
  state = sharding.run_init(
      lambda r: nn.unbox(train_core.init_state(init_params, tx, r, prng_impl=impl)),
      jax.random.PRNGKey(0))
  step = jax.jit(train_core.make_train_step(mlm_nsp.objective(model), tx, schedule,
                                            prng_impl=impl), donate_argnums=(0,))
  return step, state, jax.device_put(batch)


def params_checksum(params) -> int:
  """One number for every parameter's bits (bert_jax.checkpoints.checksum's, combined)."""
  sums = checksum.tree_checksums(params)
  return zlib.crc32(json.dumps(sums, sort_keys=True).encode())


def ours(config, model_cfg, batch) -> Runner:
  return Runner(*build_ours(config, model_cfg, batch))


def flax_reference(model_cfg, batch) -> Runner:
  """transformers' FlaxBertForPreTraining with run_mlm_flax-style loss and AdamW."""
  import transformers  # pylint: disable=g-import-not-at-top
  dtype = jnp.dtype(model_cfg.dtype)
  model = transformers.FlaxBertForPreTraining(hf_config(model_cfg), seed=0, dtype=dtype)
  params = model.params
  decay = jax.tree_util.tree_map_with_path(
      lambda p, _: getattr(p[-1], "key", "") in ("kernel", "embedding"), params)
  tx = optax.chain(optax.clip_by_global_norm(1.0),
                   optax.adamw(1e-4, b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.01, mask=decay))
  hf_batch = reference_inputs(batch)

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


def add_step_args(p: argparse.ArgumentParser) -> None:
  """The flags that choose the step (shared with benchmarks/profile_step.py)."""
  p.add_argument("--config", default="configs/pretrain.py:mini")
  p.add_argument("--batch_size", type=int, default=32)
  p.add_argument("--seq_len", type=int, default=128)
  p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
  p.add_argument("--attention_impl", default=None, help="override model.attention_impl")
  p.add_argument("--remat", default=None, help="override model.remat")
  p.add_argument("--scan_layers", default=None, choices=["true", "false"])
  p.add_argument("--vocab_size", type=int, default=30522)
  p.add_argument("--peak_flops", type=float, default=0.0, help="per-device peak FLOP/s")
  p.add_argument("--drop_mask", action="store_true",
                 help="experiment: attention gets no mask (every token of the synthetic batch is "
                 "real): what a fused kernel gains from dropping the dense [B,1,S,S] mask; needs "
                 "attention dropout 0")
  p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                 help="override a config key, e.g. --set model.prng_impl=threefry2x32 (repeatable)")


def device_name() -> str:
  """'cpu' or e.g. 'gpu NVIDIA H100 80GB HBM3': the platform and device_kind of jax's first device."""
  dev = jax.devices()[0]
  return dev.platform if dev.device_kind == dev.platform else f"{dev.platform} {dev.device_kind}"


def set_key(config, item: str) -> None:
  """Applies one --set KEY=VALUE: VALUE parsed as the key's current type; exits naming a bad one."""
  key, eq, value = item.partition("=")
  *path, last = key.split(".")
  node = config
  try:
    for name in path:
      node = node[name]
    old = node[last]
  except (KeyError, AttributeError, TypeError):
    sys.exit(f"--set {item}: no config key {key!r}")
  if not eq:
    sys.exit(f"--set {item}: expected KEY=VALUE")
  if isinstance(old, bool):
    if value.lower() not in ("true", "false"):
      sys.exit(f"--set {item}: {key} is a bool (true or false)")
    node[last] = value.lower() == "true"
  else:
    try:
      node[last] = type(old)(value)
    except ValueError:
      sys.exit(f"--set {item}: {key} is a {type(old).__name__}")


class Setup:
  """What add_step_args' flags choose: config, model config, batch and the FLOP figures."""

  def __init__(self, args):
    if args.batch_size < 1 or args.seq_len < 8:
      sys.exit(f"--batch_size must be >= 1 and --seq_len >= 8 (got {args.batch_size}, {args.seq_len})")
    config = load_config(args.config)
    config.model.dtype = args.dtype
    if args.attention_impl:
      config.model.attention_impl = args.attention_impl
    if args.remat:
      config.model.remat = args.remat
    if args.scan_layers:
      config.model.scan_layers = args.scan_layers == "true"
    for item in args.set:
      set_key(config, item)
    self.config, self.args = config, args
    self.model_cfg = pretrain_setup.variant_model_config(config, args.vocab_size)
    if args.drop_mask:
      if self.model_cfg.attention_dropout_rate > 0:
        sys.exit("--drop_mask needs a fused attention kernel: set model.attention_dropout_rate=0 "
                 "(e.g. configs/pretrain.py:base,fused_attention)")
      attend = model_lib.layers.dot_product_attention
      model_lib.layers.dot_product_attention = (
          lambda q, k, v, mask, **kw: attend(q, k, v, None, **kw))
    if args.seq_len > self.model_cfg.max_position_embeddings:
      sys.exit(f"--seq_len {args.seq_len} exceeds the model's max_position_embeddings "
               f"{self.model_cfg.max_position_embeddings}")
    self.num_predictions = max(1, round(0.15 * args.seq_len))
    self.batch = synthetic_batch(np.random.default_rng(0), args.batch_size, args.seq_len,
                                 self.num_predictions, args.vocab_size)
    self.tokens = args.batch_size * args.seq_len
    self.flops_per_token = flops_lib.train_flops_per_token(
        self.model_cfg, args.seq_len, self.num_predictions / args.seq_len)
    self.peak = args.peak_flops or flops_lib.device_peak_flops(args.dtype)
    dev = jax.devices()[0]
    self.device = device_name()
    self.peak_source = ("measured float32 matmul" if dev.platform == "cpu" and not args.peak_flops
                        else "override" if args.peak_flops else "bert_jax.modeling.flops table")

  def describe(self) -> str:
    m, a = self.model_cfg, self.args
    padded = m.decoder_rows
    decoder = f" (decoder padded to {padded})" if padded != m.vocab_size else ""
    return (f"config: {self.config.variant} L{m.num_layers} H{m.hidden_size} A{m.num_heads} "
            f"I{m.intermediate_size} V{m.vocab_size}{decoder} | "
            f"batch {a.batch_size} x seq {a.seq_len} | "
            f"{self.num_predictions} predictions/seq | {a.dtype} | attention {m.attention_impl} "
            f"| dropout {m.dropout_rate}/{m.attention_dropout_rate} | remat {m.remat} "
            f"| scan {m.scan_layers} | prng {compute_policy.prng_impl(self.config.model)}"
            + (" | no attention mask (--drop_mask)" if a.drop_mask else "")
            + f" | XLA_FLAGS {xla_flags.describe()}")

  def figures(self, seconds_per_step: float) -> dict:
    tps = self.tokens / seconds_per_step
    return dict(ms_per_step=seconds_per_step * 1e3, tokens_per_s=tps,
                mfu=tps * self.flops_per_token / self.peak)


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  add_step_args(p)
  p.add_argument("--steps", type=int, default=10, help="back-to-back steps per round")
  p.add_argument("--rounds", type=int, default=3)
  p.add_argument("--reference", default="flax", choices=["flax", "torch", "none"])
  p.add_argument("--no_reference", action="store_true", help="same as --reference none")
  p.add_argument("--no_torch_compile", action="store_true", help="torch reference: eager mode")
  p.add_argument("--json", default="", help="write every figure to this JSON file")
  args = p.parse_args(argv)
  if args.steps < 1 or args.rounds < 1:
    sys.exit(f"--steps and --rounds must be >= 1 (got {args.steps}, {args.rounds})")
  if args.no_reference:
    args.reference = "none"
  if args.reference == "torch":  # torch shares the GPU: jax must not take 75% of it up front
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
  imported = time.perf_counter()
  setup = Setup(args)
  runners = [ours(setup.config, setup.model_cfg, setup.batch)]
  jax.block_until_ready(runners[0].state)
  built = time.perf_counter()
  init_sum = params_checksum(runners[0].state.params)  # before the first step donates them
  first = [runners[0].step()]  # compile; the RSS below is bert_jax's own (the reference adds to it)
  # Printed at once: a run stopped by its time limit still says where the time went.
  print(f"start-up: imports {imported - START:.1f} s, device, state and batch "
        f"{built - imported:.1f} s", flush=True)
  print(f"initial parameters: checksum {init_sum:08x}", flush=True)
  print(f"first step (compile): bert_jax {first[0]:.1f} s", flush=True)
  rss_ours = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
  names, devices = ["bert_jax"], [setup.device]
  if args.reference == "flax":
    runners.append(flax_reference(setup.model_cfg, setup.batch))
    first.append(runners[-1].step())
    names.append("hf FlaxBertForPreTraining")
    devices.append(setup.device)
  elif args.reference == "torch":
    import torch_reference  # pylint: disable=g-import-not-at-top
    r = torch_reference.TorchRunner(hf_config(setup.model_cfg), reference_inputs(setup.batch),
                                    args.dtype, compile_model=not args.no_torch_compile)
    runners.append(r)
    first.append(r.first_step_s)
    print(f"first step (compile): {r.name} {r.first_step_s:.1f} s", flush=True)
    names.append(r.name)
    devices.append(r.device)
  times = interleaved_rounds(runners, args.rounds, args.steps)
  rows = []
  for name, device, t, t0 in zip(names, devices, times, first):
    rows.append(dict(implementation=name, device=device, first_step_s=t0,
                     **setup.figures(statistics.median(t["back_to_back"])),
                     blocked_ms_per_step=statistics.median(t["blocked"]) * 1e3,
                     rounds_ms_per_step=[x * 1e3 for x in t["back_to_back"]]))

  print(f"device: {setup.device} x{jax.device_count()} | jax {jax.__version__}")
  print(setup.describe())
  print(f"peak FLOP/s per device: {setup.peak:.3e} ({setup.peak_source})"
        f" | model FLOPs/token {setup.flops_per_token:.3e}")
  print(f"peak RSS after bert_jax steps: {rss_ours:.2f} GiB | first step (compile): "
        + ", ".join(f"{r['implementation']} {r['first_step_s']:.1f} s" for r in rows))
  print(f"timing: {args.rounds} rounds x {args.steps} back-to-back steps, interleaved; "
        "median of the rounds' mean step")
  print(f"{'implementation':<50}{'device':<28}{'ms/step':>9}{'blocked ms':>12}{'tokens/s':>13}{'MFU':>8}")
  for r in rows:
    print(f"{r['implementation']:<50}{r['device']:<28}{r['ms_per_step']:>9.1f}"
          f"{r['blocked_ms_per_step']:>12.1f}{r['tokens_per_s']:>13,.0f}{r['mfu']:>8.2%}")
  result = dict(device=setup.device, jax=jax.__version__, config=setup.describe(),
                batch_size=args.batch_size, seq_len=args.seq_len, dtype=args.dtype,
                steps=args.steps, rounds=args.rounds, peak_flops=setup.peak,
                peak_source=setup.peak_source, flops_per_token=setup.flops_per_token, rows=rows,
                state_s=built - imported, init_checksum=f"{init_sum:08x}",
                loss=float(runners[0].out["loss"]), steps_run=int(runners[0].state.step))
  if len(rows) > 1:
    result["vs_reference"] = rows[0]["tokens_per_s"] / rows[1]["tokens_per_s"]
  if args.json:
    with open(args.json, "w") as f:
      json.dump(result, f, indent=1)
  print(f"tokens/s: {rows[0]['tokens_per_s']:.0f}")
  print(f"mfu: {rows[0]['mfu']:.4f}")
  if len(rows) > 1:
    print(f"vs_reference: {result['vs_reference']:.2f}")
  return result


if __name__ == "__main__":
  main()
