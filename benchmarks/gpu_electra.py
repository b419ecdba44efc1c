r"""ELECTRA against MLM at equal compute, on a machine with an NVIDIA GPU, one part per run.

  bash benchmarks/gpu_electra.sh --part electra [--out DIR]   # ELECTRA-small, held-out RTD
  bash benchmarks/gpu_electra.sh --part mlm [--out DIR]       # MLM, the same FLOPs
  bash benchmarks/gpu_electra.sh --part compare [--out DIR]   # STS-B from both exports
  bash benchmarks/gpu_electra.sh --dry_run [--out DIR]        # all three, tiny, on the CPU

From the corpus prepared on a machine with TensorFlow (`python benchmarks/gpu_end_to_end.py
--prepare --glue_dir $GLUE_DIR`, .e2e/), both pretrain with `configs/pretrain.py:small` at seq 128, batch 128:
  electra   recipe=electra (its generator, replaced-token detection), --steps steps (default
            10,000), held-out eval every fifth: rtd_auc, rtd_replaced_recall, rtd_accuracy;
  mlm       objective=mlm on the same data, for as many steps as give the same training
            FLOPs (bert_jax/modeling/flops.py: ELECTRA's step costs both encoders);
  compare   STS-B (1 epoch from each export, the same settings): dev Pearson of each.
Each part writes DIR/<part>.json (default ./gpu_electra_out) and prints its table; each part
is sized to take at most 9 minutes on one H100 (`--steps` scales the two pretraining parts).
"""
import argparse
import json
import os
import shutil
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import gpu_end_to_end as e2e  # noqa: E402  pylint: disable=g-import-not-at-top


def _flops_per_token(config_arg: str, overrides: list[str]) -> float:
  """Training FLOPs per token of a pretraining config, as the run computes them."""
  sys.path.insert(0, ROOT)
  from bert_jax import config_help  # pylint: disable=g-import-not-at-top
  from bert_jax.pretraining import setup as pretrain_setup  # pylint: disable=g-import-not-at-top
  config = config_help.load(os.path.join(ROOT, config_arg)).config
  for o in overrides:
    key, value = o[len("--config."):].split("=", 1)
    config.update_from_flattened_dict({key: type(config_help.flatten(config)[key])(value)})
  setup = pretrain_setup.build(config, 30522)
  return setup.flops_per_token(config.seq_len, 0.15)


def _pretrain(args, name, config_arg, steps, data_dir, log, extra=()):
  workdir = os.path.join(args.out, name)
  shutil.rmtree(workdir, ignore_errors=True)
  overrides = ["--config.data.source=prepared",
               f"--config.data.prepared_dir={os.path.join(data_dir, 'prepared')}",
               f"--config.batch_size={args.batch}", f"--config.total_steps={steps}",
               f"--config.warmup_steps={max(1, steps // 10)}", "--config.seq_len=128",
               f"--config.checkpoint_every={steps}", f"--config.log_every={max(1, steps // 20)}",
               f"--config.eval_every={max(1, steps // 5)}", "--config.eval_batches=8",
               "--config.fill_mask_example=", *extra]
  e2e._run([sys.executable, "-m", "bert_jax.pretrain", "--config", config_arg, "--workdir",
            workdir] + overrides, log)
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    records = [json.loads(line) for line in f]
  evals = [r for r in records if any(k.startswith("eval_") for k in r)]
  return workdir, records, evals[-1] if evals else {}


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--part", choices=("electra", "mlm", "compare"), default=None)
  p.add_argument("--dry_run", action="store_true")
  p.add_argument("--steps", type=int, default=10_000)
  p.add_argument("--batch", type=int, default=128)
  p.add_argument("--out", default=os.path.join(os.getcwd(), "gpu_electra_out"),
                 help="where <part>.json, electra.log and the runs go (default ./gpu_electra_out)")
  p.add_argument("--data", default=e2e.DATA)
  args = p.parse_args(argv)
  args.out = os.path.abspath(args.out)
  size = "tiny" if args.dry_run else "small"
  if args.dry_run:
    args.steps, args.batch = min(args.steps, 20), min(args.batch, 8)
  parts = [args.part] if args.part else (["electra", "mlm", "compare"] if args.dry_run else [])
  if not parts:
    sys.exit("gpu_electra: give --part electra, mlm or compare (one run each), or "
             "--dry_run")
  data_dir = args.data
  if args.dry_run and not os.path.isdir(os.path.join(data_dir, "prepared")):
    data_dir = os.path.join(args.out, "data")
    if not os.path.isdir(os.path.join(data_dir, "prepared")):
      e2e.prepare(data_dir, tiny=True)
  os.makedirs(args.out, exist_ok=True)
  log = os.path.join(args.out, "electra.log")
  electra_cfg = f"configs/pretrain.py:{size},recipe=electra"
  mlm_cfg, mlm_extra = f"configs/pretrain.py:{size}", ["--config.objective=mlm",
                                                       "--config.data.mode=full_sentences"]
  for part in parts:
    if part == "electra":
      _, _, last = _pretrain(args, "electra", electra_cfg, args.steps, data_dir, log)
      out = {k: last.get(f"eval_{k}") for k in ("rtd_auc", "rtd_replaced_recall",
                                                "rtd_accuracy", "mlm_accuracy")}
      out.update(steps=args.steps, batch=args.batch, config=electra_cfg)
    elif part == "mlm":
      ratio = (_flops_per_token(electra_cfg, [])
               / _flops_per_token(mlm_cfg, mlm_extra))
      steps = max(1, round(args.steps * ratio))
      _, _, last = _pretrain(args, "mlm", mlm_cfg, steps, data_dir, log, mlm_extra)
      out = dict(steps=steps, batch=args.batch, config=mlm_cfg, flops_ratio=ratio,
                 mlm_accuracy=last.get("eval_mlm_accuracy"))
    else:
      out = {}
      for name in ("electra", "mlm"):
        ft = os.path.join(args.out, f"stsb_{name}")
        shutil.rmtree(ft, ignore_errors=True)
        cmd = [sys.executable, "-m", "bert_jax.finetune", "--config",
               "configs/glue.py:task=stsb", "--workdir", ft,
               f"--config.init_checkpoint={os.path.join(args.out, name)}",
               f"--config.data_dir={os.path.join(data_dir, 'glue')}", "--config.num_epochs=1",
               "--config.predict_test=False"]
        if args.dry_run:
          cmd.append("--config.max_train_examples=64")
        e2e._run(cmd, log)
        with open(os.path.join(ft, "eval_results.json")) as f:
          out[f"stsb_pearson_from_{name}"] = json.load(f)["pearson"]
    with open(os.path.join(args.out, f"{part}.json"), "w") as f:
      json.dump(out, f, indent=2)
    print(f"{part}: " + json.dumps(out), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
