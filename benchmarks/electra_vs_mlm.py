r"""ELECTRA against MLM at equal pretraining FLOPs, small enough for a CPU.

  python benchmarks/electra_vs_mlm.py --corpus $CORPUS_DIR/wikitext-2-raw/wiki.test.raw \
      --glue_dir $GLUE_DIR [--steps 600] [--variant tiny] [--out DIR]

1. ELECTRA: `configs/pretrain.py:VARIANT,recipe=electra` (generator of the recipe's
   generator_hidden_fraction, discriminator loss weight 50) for --steps steps on --corpus (one
   document per line; every 100th document held out), with AdamW at --lr (β 0.9 / 0.999),
   linear warmup over a tenth of the steps and linear decay; held-out rtd_auc,
   rtd_replaced_recall and the generator's mlm_accuracy every --eval_every steps.
2. MLM: `configs/pretrain.py:VARIANT` with objective=mlm on the same data, seq_len, batch and
   optimizer, for as many steps as give the same training FLOPs, counted per token by each
   objective's own `flops_per_token` (bert_jax/modeling/flops.py; ELECTRA's counts the
   generator and the discriminator head).
3. Each export fine-tuned on each of --tasks (seq 64, --finetune_epochs epochs at
   --finetune_lr; GLUE dev, --seeds seeds in one run, mean ± std).

Prints one table. Each pretraining workdir with an export/ already in --out is reused
(--reuse), so a finished part is not run again.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# Masked fraction of real tokens that the FLOPs count (data.mask_prob of both runs).
MASK_PROB = 0.15
# The dev metric reported for each task.
TASK_METRIC = {"stsb": "pearson", "mrpc": "accuracy", "rte": "accuracy", "cola": "mcc",
               "sst2": "accuracy"}


def parse_args(argv=None) -> argparse.Namespace:
  """The flags, checked."""
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--corpus", required=True, help="text file(s), one document per line (glob)")
  p.add_argument("--glue_dir", required=True, help="GLUE TSVs (STS-B/train.tsv, ...)")
  p.add_argument("--out", default=os.path.join(os.getcwd(), "electra_vs_mlm_out"))
  p.add_argument("--variant", default="tiny")
  p.add_argument("--steps", type=int, default=600, help="ELECTRA's pretraining steps")
  p.add_argument("--batch", type=int, default=32)
  p.add_argument("--seq_len", type=int, default=128)
  p.add_argument("--lr", type=float, default=1e-3, help="pretraining peak rate (AdamW)")
  p.add_argument("--eval_every", type=int, default=100)
  p.add_argument("--tasks", default="stsb,mrpc")
  p.add_argument("--seeds", type=int, default=3)
  p.add_argument("--finetune_lr", type=float, default=3e-4)
  p.add_argument("--finetune_epochs", type=float, default=3.0)
  p.add_argument("--max_train_examples", type=int, default=0,
                 help="fine-tuning examples per task (0: all)")
  p.add_argument("--reuse", action="store_true",
                 help="keep a pretraining workdir that already has its export/")
  args = p.parse_args(argv)
  if args.steps < 10:
    p.error(f"--steps must be at least 10, got {args.steps}")
  if args.seeds < 1:
    p.error(f"--seeds must be at least 1, got {args.seeds}")
  tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
  unknown = [t for t in tasks if t not in TASK_METRIC]
  if not tasks or unknown:
    p.error(f"--tasks: give some of {sorted(TASK_METRIC)}, got {args.tasks!r}")
  args.tasks = tasks
  args.out = os.path.abspath(args.out)
  return args


def pretrain_overrides(args, steps: int) -> list[str]:
  """The settings both pretraining runs share: data, shapes, optimizer, schedule, logging."""
  return ["--config.data.source=files", f"--config.data.files={args.corpus}",
          "--config.data.format=document_per_line", f"--config.batch_size={args.batch}",
          f"--config.seq_len={args.seq_len}", "--config.optimizer.name=adamw",
          "--config.optimizer.b1=0.9", "--config.optimizer.b2=0.999",
          "--config.optimizer.schedule=linear", f"--config.learning_rate={args.lr}",
          f"--config.total_steps={steps}", f"--config.warmup_steps={max(1, steps // 10)}",
          f"--config.log_every={max(1, min(25, steps // 10))}",
          f"--config.eval_every={args.eval_every}", "--config.eval_batches=5",
          f"--config.checkpoint_every={steps}", "--config.fill_mask_example="]


def flops_per_token(config_arg: str, overrides: list[str]) -> float:
  """Training FLOPs per token of a pretraining config, as the run counts them."""
  sys.path.insert(0, ROOT)
  from bert_jax import config_help  # pylint: disable=g-import-not-at-top
  from bert_jax.pretraining import setup as pretrain_setup  # pylint: disable=g-import-not-at-top
  config = config_help.load(os.path.join(ROOT, config_arg)).config
  flat = config_help.flatten(config)
  for o in overrides:
    key, value = o[len("--config."):].split("=", 1)
    if key.startswith("data.") or key == "fill_mask_example":
      continue  # not read by the FLOPs count
    kind = type(flat[key])
    config.update_from_flattened_dict({key: kind(float(value)) if kind is int else kind(value)})
  return pretrain_setup.build(config, 30522).flops_per_token(config.seq_len, MASK_PROB)


def run(cmd: list[str], log: str) -> None:
  """Runs a CLI, its output appended to log; exits with its tail on failure."""
  with open(log, "a") as f:
    f.write("$ " + " ".join(cmd) + "\n")
    f.flush()
    rc = subprocess.call(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT)
  if rc:
    with open(log) as f:
      sys.exit(f"electra_vs_mlm: failed ({rc}): {' '.join(cmd)}\n" + f.read()[-3000:])


def pretrain(args, name: str, config_arg: str, steps: int, extra: list[str], log: str):
  """Pretrains into out/name (or reuses it); returns the metrics.jsonl records."""
  workdir = os.path.join(args.out, name)
  if not (args.reuse and os.path.isdir(os.path.join(workdir, "export"))):
    run([sys.executable, "-m", "bert_jax.pretrain", "--config", config_arg, "--workdir", workdir,
         "--config.start_over=True", *pretrain_overrides(args, steps), *extra], log)
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [json.loads(line) for line in f]


def finetune(args, name: str, task: str, log: str) -> dict:
  """Fine-tunes out/name/export on task with args.seeds seeds; returns eval_results.json."""
  workdir = os.path.join(args.out, f"{task}_{name}")
  cmd = [sys.executable, "-m", "bert_jax.finetune", "--config", f"configs/glue.py:task={task}",
         "--workdir", workdir, f"--config.init_checkpoint={os.path.join(args.out, name, 'export')}",
         f"--config.data_dir={args.glue_dir}", "--config.max_seq_length=64",
         f"--config.num_epochs={args.finetune_epochs}", f"--config.seeds={args.seeds}",
         f"--config.learning_rate={args.finetune_lr}", "--config.predict_test=False"]
  if args.max_train_examples:
    cmd.append(f"--config.max_train_examples={args.max_train_examples}")
  results = os.path.join(workdir, "eval_results.json")
  if not (args.reuse and os.path.exists(results)):
    run(cmd, log)
  with open(results) as f:
    return json.load(f)


def last_eval(records: list[dict], key: str):
  values = [r[f"eval_{key}"] for r in records if f"eval_{key}" in r]
  return values[-1] if values else float("nan")


def main(argv=None) -> int:
  args = parse_args(argv)
  os.makedirs(args.out, exist_ok=True)
  log = os.path.join(args.out, "electra_vs_mlm.log")
  electra_cfg = f"configs/pretrain.py:{args.variant},recipe=electra"
  mlm_cfg = f"configs/pretrain.py:{args.variant}"
  mlm_extra = ["--config.objective=mlm", "--config.data.mode=full_sentences"]
  common = pretrain_overrides(args, args.steps)
  electra_tok = flops_per_token(electra_cfg, common)
  mlm_tok = flops_per_token(mlm_cfg, common + mlm_extra)
  tokens_per_step = args.batch * args.seq_len
  mlm_steps = max(1, round(args.steps * electra_tok / mlm_tok))
  runs = {"electra": (args.steps, electra_tok * tokens_per_step * args.steps,
                      pretrain(args, "electra", electra_cfg, args.steps, [], log)),
          "mlm": (mlm_steps, mlm_tok * tokens_per_step * mlm_steps,
                  pretrain(args, "mlm", mlm_cfg, mlm_steps, mlm_extra, log))}
  print(f"FLOPs per token: electra {electra_tok:.4g}, mlm {mlm_tok:.4g} "
        f"(ratio {electra_tok / mlm_tok:.3f}); tokens per step {tokens_per_step}")
  print("ELECTRA held-out curve: step, rtd_auc, generator mlm_accuracy, rtd_replaced_recall")
  for r in runs["electra"][2]:
    if "eval_rtd_auc" in r:
      print(f"  {r['step']:>6}  {r['eval_rtd_auc']:.3f}  {r['eval_mlm_accuracy']:.3f}  "
            f"{r['eval_rtd_replaced_recall']:.3f}")
  header = ["objective", "steps", "pretraining FLOPs", "rtd_auc", "mlm_accuracy"]
  header += [f"{t} {TASK_METRIC[t]}" for t in args.tasks]
  rows = []
  for name, (steps, total, records) in runs.items():
    row = [name, str(steps), f"{total:.3g}",
           f"{last_eval(records, 'rtd_auc'):.3f}" if name == "electra" else "-",
           f"{last_eval(records, 'mlm_accuracy'):.3f}"]
    for task in args.tasks:
      res = finetune(args, name, task, log)
      metric = TASK_METRIC[task]
      row.append(f"{res[metric]:.3f} ± {res.get(metric + '_std', 0.0):.3f}")
    rows.append(row)
  print("| " + " | ".join(header) + " |")
  print("|" + "---|" * len(header))
  for row in rows:
    print("| " + " | ".join(row) + " |")
  with open(os.path.join(args.out, "table.json"), "w") as f:
    json.dump({"header": header, "rows": rows}, f, indent=2)
  return 0


if __name__ == "__main__":
  sys.exit(main())
