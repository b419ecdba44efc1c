r"""Peak memory of a pretraining step per variant, and the largest batch that fits.

  python benchmarks/memory.py [--variants tiny,mini,base] [--batch_size 8] [--seq_len 128]
      [--fit base,large] [--dtype float32|bfloat16] [--no_run]

Runtime on a 2-core CPU: seconds per small variant, minutes for base and large;
each --fit variant adds about ten compiles (several minutes each for base and
large), so --fit is empty unless given.

For each variant: XLA's compiled memory analysis of the real train step
(arguments, outputs, temporaries; per device) and, unless --no_run, the
measured peak of one executed step: jax memory stats (peak_bytes_in_use) on an
accelerator, process peak RSS on CPU (each variant in its own subprocess so the
figures do not mix). Then, for the --fit variants, the largest global batch
whose compiled footprint fits the device (accelerator: bytes_limit; CPU:
MemAvailable), found by doubling then bisection on compiles only.
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

GiB = 2 ** 30


def _step_and_state(variant: str, batch: int, seq_len: int, dtype: str, remat: str):
  import flax.linen as nn  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import ml_collections  # pylint: disable=g-import-not-at-top
  from bert_jax.modeling import model as model_lib  # pylint: disable=g-import-not-at-top
  from bert_jax.modeling import model_config  # pylint: disable=g-import-not-at-top
  from bert_jax.objectives import mlm_nsp  # pylint: disable=g-import-not-at-top
  from bert_jax.training import optimizer, train_core
  cfg = model_config.variant(variant, 30522, dtype=dtype, remat=remat)
  model = model_lib.BertForPreTraining(cfg)
  opt = ml_collections.ConfigDict(dict(name="adamw", b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.01,
                                       grad_clip_norm=1.0, bf16_moments=False, schedule="linear",
                                       poly_power=1.0))
  tx, sched = optimizer.make_optimizer(opt, 1e-4, 10, 100)
  P = max(1, round(0.15 * seq_len))
  init = lambda r: nn.unbox(train_core.init_state(mlm_nsp.init_fn(model, seq_len, P), tx, r))  # noqa: E731
  abstract_state = jax.eval_shape(init, jax.random.PRNGKey(0))
  i32 = lambda *s: jax.ShapeDtypeStruct(s, jnp.int32)  # noqa: E731
  batch_spec = dict(input_ids=i32(batch, seq_len), input_mask=i32(batch, seq_len),
                    segment_ids=i32(batch, seq_len), masked_lm_positions=i32(batch, P),
                    masked_lm_ids=i32(batch, P),
                    masked_lm_weights=jax.ShapeDtypeStruct((batch, P), jnp.float32),
                    next_sentence_labels=i32(batch))
  step = jax.jit(train_core.make_train_step(mlm_nsp.objective(model), tx, sched),
                 donate_argnums=(0,))
  return step, init, abstract_state, batch_spec


def compiled_bytes(variant, batch, seq_len, dtype, remat) -> dict:
  step, _, state, batch_spec = _step_and_state(variant, batch, seq_len, dtype, remat)
  m = step.lower(state, batch_spec).compile().memory_analysis()
  out = {"arguments": m.argument_size_in_bytes, "outputs": m.output_size_in_bytes,
         "temporaries": m.temp_size_in_bytes, "aliased": m.alias_size_in_bytes}
  out["peak_estimate"] = out["arguments"] + out["outputs"] + out["temporaries"] - out["aliased"]
  return out


def run_one(variant, batch, seq_len, dtype, remat) -> dict:
  """Executes one step; returns measured peak bytes (device stats or RSS)."""
  import resource  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  step, init, _, batch_spec = _step_and_state(variant, batch, seq_len, dtype, remat)
  rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
  state = jax.jit(init)(jax.random.PRNGKey(0))
  rng = np.random.default_rng(0)
  batch_arrays = {k: (rng.integers(1, 1000, s.shape) if s.dtype.kind == "i" else np.ones(s.shape))
                  .astype(s.dtype) for k, s in batch_spec.items()}
  batch_arrays["masked_lm_positions"] = np.sort(rng.integers(0, seq_len, batch_spec[
      "masked_lm_positions"].shape), 1).astype(np.int32)
  batch_arrays["next_sentence_labels"] %= 2
  for _ in range(2):
    state, metrics = step(state, batch_arrays)
  jax.block_until_ready(metrics)
  dev = jax.devices()[0]
  if dev.platform != "cpu" and dev.memory_stats():
    return {"measured_peak": dev.memory_stats()["peak_bytes_in_use"], "how": "device peak_bytes_in_use"}
  rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
  return {"measured_peak": rss, "how": "process peak RSS", "rss_before_state": rss0}


def device_capacity() -> tuple[float, str]:
  import jax  # pylint: disable=g-import-not-at-top
  dev = jax.devices()[0]
  if dev.platform != "cpu" and dev.memory_stats():
    return float(dev.memory_stats()["bytes_limit"]), f"{dev.device_kind} bytes_limit"
  with open("/proc/meminfo") as f:
    avail = next(int(l.split()[1]) * 1024 for l in f if l.startswith("MemAvailable"))
  return float(avail), "CPU MemAvailable"


def largest_batch(variant, seq_len, dtype, remat, capacity, limit=1 << 14) -> int:
  fits = lambda b: compiled_bytes(variant, b, seq_len, dtype, remat)["peak_estimate"] <= capacity  # noqa: E731
  lo, hi = 0, 1
  while hi <= limit and fits(hi):
    lo, hi = hi, hi * 2
  while hi - lo > max(1, lo // 16):  # within ~6%
    mid = (lo + hi) // 2
    lo, hi = (mid, hi) if fits(mid) else (lo, mid)
  return lo


def main():
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--variants", default="tiny,mini,small,medium,base,large")
  p.add_argument("--batch_size", type=int, default=8)
  p.add_argument("--seq_len", type=int, default=128)
  p.add_argument("--dtype", default="float32")
  p.add_argument("--remat", default="none")
  p.add_argument("--fit", default="", help="variants to find the largest batch for, e.g. "
                 "base,large (about ten compiles each; none by default)")
  p.add_argument("--no_run", action="store_true", help="compiled analysis only, no executed step")
  p.add_argument("--_child", default="", help=argparse.SUPPRESS)
  args = p.parse_args()
  from bert_jax.modeling import model_config  # pylint: disable=g-import-not-at-top
  for flag in ("variants", "fit"):
    bad = [v for v in getattr(args, flag).split(",") if v and v not in model_config.VARIANTS]
    if bad:
      p.error(f"--{flag}: unknown variants {bad}; known: {list(model_config.VARIANTS)}")
  if args._child:
    print(json.dumps(run_one(args._child, args.batch_size, args.seq_len, args.dtype, args.remat)))
    return

  import jax  # pylint: disable=g-import-not-at-top
  dev = jax.devices()[0]
  print(f"device: {dev.platform} {dev.device_kind} | jax {jax.__version__} | batch {args.batch_size} "
        f"x seq {args.seq_len} | {args.dtype} | remat {args.remat}")
  print(f"{'variant':<8}{'args GiB':>10}{'temps GiB':>11}{'outs GiB':>10}{'XLA peak GiB':>14}"
        f"{'measured GiB':>14}  measured as")
  for v in args.variants.split(","):
    c = compiled_bytes(v, args.batch_size, args.seq_len, args.dtype, args.remat)
    measured, how = float("nan"), "-"
    if not args.no_run:
      proc = subprocess.run([sys.executable, __file__, "--_child", v, "--batch_size",
                             str(args.batch_size), "--seq_len", str(args.seq_len), "--dtype",
                             args.dtype, "--remat", args.remat], capture_output=True, text=True)
      if proc.returncode == 0:
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        measured, how = r["measured_peak"] / GiB, r["how"]
      else:
        how = "failed: " + proc.stderr.strip().splitlines()[-1][:80]
    print(f"{v:<8}{c['arguments'] / GiB:>10.3f}{c['temporaries'] / GiB:>11.3f}"
          f"{c['outputs'] / GiB:>10.3f}{c['peak_estimate'] / GiB:>14.3f}{measured:>14.3f}  {how}")
  capacity, what = device_capacity()
  for v in [x for x in args.fit.split(",") if x]:
    b = largest_batch(v, args.seq_len, args.dtype, args.remat, capacity)
    print(f"largest batch that fits: {v} seq {args.seq_len}: {b} (capacity {capacity / GiB:.1f} GiB, {what})")


if __name__ == "__main__":
  main()
