r"""The whole chain on an accelerator host, in one command (issue 30): pretrain from data
prepared elsewhere, SIGKILL, resume, export, fine-tune STS-B from the export.

  # on a CPU machine with TensorFlow, once (writes .e2e/: a few MB, carried to the GPU):
  python benchmarks/gpu_end_to_end.py --prepare
  # on the GPU host (no TensorFlow needed), one device call (under 10 minutes):
  bash benchmarks/gpu_end_to_end.sh [--out DIR]
  # the same chain, tiny and short, on this CPU (what tests/test_gpu_end_to_end.py runs):
  bash benchmarks/gpu_end_to_end.sh --dry_run

Steps, each the real command line a user runs (subprocesses):
  1. step only    benchmarks/train_step.py on the same config, batch and sequence length:
                  tokens/s of N back-to-back steps (the step's own speed);
  2. straight     python -m bert_jax.pretrain from .e2e/prepared (data.source=prepared: no
                  TensorFlow), checkpoints every half; tokens/s of the whole program (its
                  logged windows after the first) and the input's share of the step time;
  3. killed       the same command in another workdir, SIGKILL once its first checkpoint is
                  written, then the same command again: it resumes, and its losses after the
                  checkpoint must equal the straight run's, step for step;
  4. fine-tune    python -m bert_jax.finetune configs/glue.py:task=stsb from the straight run's
                  export (tokenized without TensorFlow where it is missing); dev Pearson
                  against a constant prediction's (none: 0).
Writes e2e.json and e2e.md to --out (default $OUT, else ./gpu_e2e_out) and prints the table.
On a GPU both pretraining runs use XLA's deterministic ops (the embedding gradients' scatter is
otherwise reordered by atomics, and bitwise equality would not hold); the step-only figure is
measured with the same flags, and once more without them.
"""
import argparse
import glob
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, ".e2e")  # prepared corpus and STS-B, ignored by git, carried
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "data")
CORPUS = "corpus/books/*.txt"  # three public-domain books, 5.5 MB of text
DETERMINISTIC = "--xla_gpu_deterministic_ops=true"

# (config, batch, steps, checkpoint_every, log_every, fine-tune train rows) per mode
PLANS = {
    # Not fused_attention: cuDNN attention under --xla_gpu_deterministic_ops crashed XLA's
    # compile (IndexError raw_hash_map::at, jax 0.11.2, H200, 2026-11-26).
    # 600 steps: on the H200 (2026-11-26) 1,000 deterministic steps took 0.12 s each, and the
    # chain with two runs of them outlasted a 395 s device call before its fine-tune.
    "gpu": dict(config="configs/pretrain.py:base", batch=256, steps=600,
                log_every=50, step_only_steps=30, finetune_rows=0, finetune_epochs=2.0),
    "dry_run": dict(config="configs/pretrain.py:tiny", batch=16, steps=40, log_every=5,
                    step_only_steps=5, finetune_rows=64, finetune_epochs=1.0),
}


def _run(cmd, log, env=None, check=True):
  """Runs a command, its output appended to `log`; returns its exit status."""
  with open(log, "a") as f:
    f.write(f"\n$ {' '.join(cmd)}\n")
    f.flush()
    rc = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
  if check and rc != 0:
    sys.exit(f"gpu_end_to_end: {' '.join(cmd[:4])} ... exited {rc}; see {log}")
  return rc


def prepare(data_dir: str = DATA, tiny: bool = False) -> None:
  """Writes the prepared corpus and STS-B under data_dir (needs TensorFlow: a CPU machine)."""
  files = os.path.join(SHARED, CORPUS)
  if tiny:
    files = os.path.join(SHARED, "corpus/books/tinyshakespeare.txt")
  needed = [files] + [os.path.join(SHARED, "glue", "STS-B", x) for x in ("train.tsv", "dev.tsv")]
  missing = [x for x in needed if not os.path.isfile(x)]
  if missing:
    sys.exit(f"gpu_end_to_end: {missing[0]} does not exist: the chain reads the repository's "
             f"shared data beside it ({SHARED}); run it from a checkout next to shared/")
  out = os.path.join(data_dir, "prepared")
  shutil.rmtree(out, ignore_errors=True)
  subprocess.run([sys.executable, "-m", "bert_jax.prepare_data", "--config",
                  "configs/pretrain.py:tiny", "--config.data.source=files",
                  f"--config.data.files={files}", "--out", out], cwd=ROOT, check=True)
  glue = os.path.join(data_dir, "glue", "STS-B")
  os.makedirs(glue, exist_ok=True)
  for split in ("train.tsv", "dev.tsv"):
    shutil.copy(os.path.join(SHARED, "glue", "STS-B", split), glue)


def _losses(workdir: str) -> dict[int, float]:
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return {r["step"]: r["loss"] for r in map(json.loads, f) if "loss" in r}


def _windows(workdir: str) -> list[dict]:
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return [r for r in map(json.loads, f) if "tokens_per_second" in r]


def _pretrain_cmd(plan, workdir, data_dir):
  return [sys.executable, "-m", "bert_jax.pretrain", "--config", plan["config"],
          "--workdir", workdir, "--config.data.source=prepared",
          f"--config.data.prepared_dir={os.path.join(data_dir, 'prepared')}",
          f"--config.batch_size={plan['batch']}", f"--config.total_steps={plan['steps']}",
          f"--config.warmup_steps={max(1, plan['steps'] // 10)}",
          f"--config.checkpoint_every={plan['steps'] // 2}",
          f"--config.log_every={plan['log_every']}", "--config.seq_len=128",
          "--config.fill_mask_example="]


def _killed_and_resumed(plan, workdir, data_dir, log, env) -> int:
  """Starts the run, SIGKILLs it once its first checkpoint is written, runs it again."""
  first = plan["steps"] // 2
  with open(log, "a") as f:
    f.write(f"\n$ (to be killed after checkpoint {first}) ...\n")
    f.flush()
    proc = subprocess.Popen(_pretrain_cmd(plan, workdir, data_dir), cwd=ROOT, stdout=f,
                            stderr=subprocess.STDOUT, env=env)
    ckpt = os.path.join(workdir, "checkpoints", str(first))
    while proc.poll() is None and not os.path.isdir(ckpt):
      time.sleep(0.2)
    killed_at = max(_losses(workdir), default=0) if os.path.exists(
        os.path.join(workdir, "metrics.jsonl")) else 0
    proc.send_signal(signal.SIGKILL)
    proc.wait()
  if not os.path.isdir(ckpt):
    sys.exit(f"gpu_end_to_end: the run ended (exit {proc.returncode}) before checkpoint "
             f"{first}; see {log}")
  _run(_pretrain_cmd(plan, workdir, data_dir), log, env)
  return killed_at


def _step_only(plan, log, env, label) -> float:
  out = os.path.join(os.path.dirname(log), f"step_only_{label}.json")
  _run([sys.executable, "benchmarks/train_step.py", "--config", plan["config"],
        "--batch_size", str(plan["batch"]), "--seq_len", "128", "--steps",
        str(plan["step_only_steps"]), "--rounds", "2", "--dtype", plan["dtype"], "--no_reference",
        "--json", out],
       log, env)
  with open(out) as f:
    return float(json.load(f)["rows"][0]["tokens_per_s"])


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--prepare", action="store_true", help="write .e2e/ (a CPU machine with TF)")
  p.add_argument("--dry_run", action="store_true", help="tiny and short, on this CPU")
  p.add_argument("--out", default=os.environ.get("OUT") or os.path.join(ROOT, "gpu_e2e_out"))
  p.add_argument("--data", default=DATA, help="where --prepare wrote (default .e2e/)")
  args = p.parse_args(argv)
  if args.prepare:
    prepare(args.data)
    return 0
  sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
  import gpu_suite  # pylint: disable=g-import-not-at-top
  gpu_suite.check_packages(["jax", "flax", "optax", "orbax", "ml_collections", "etils", "absl",
                            "tensorboardX", "safetensors", "tokenizers"])
  import jax  # pylint: disable=g-import-not-at-top
  plan = dict(PLANS["dry_run" if args.dry_run else "gpu"])
  plan["dtype"] = "float32" if args.dry_run else "bfloat16"
  data_dir = args.data
  if args.dry_run and not os.path.isdir(os.path.join(data_dir, "prepared")):
    data_dir = os.path.join(args.out, "data")
    prepare(data_dir, tiny=True)
  if not os.path.isfile(os.path.join(data_dir, "prepared", "prepared.json")):
    sys.exit(f"gpu_end_to_end: no prepared data in {data_dir}: run "
             "`python benchmarks/gpu_end_to_end.py --prepare` on a machine with TensorFlow first")
  os.makedirs(args.out, exist_ok=True)
  log = os.path.join(args.out, "e2e.log")
  dev = jax.devices()[0]
  device = f"{dev.platform} {dev.device_kind}"
  env = dict(os.environ, PYTHONUNBUFFERED="1")
  det_env = dict(env)
  if dev.platform == "gpu":
    det_env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + DETERMINISTIC).strip()
  t0 = time.time()
  step_only = _step_only(plan, log, det_env, "deterministic")
  straight = os.path.join(args.out, "straight")
  killed = os.path.join(args.out, "killed")
  for d in (straight, killed):
    shutil.rmtree(d, ignore_errors=True)
  t1 = time.time()
  _run(_pretrain_cmd(plan, straight, data_dir), log, det_env)
  pretrain_seconds = time.time() - t1
  killed_at = _killed_and_resumed(plan, killed, data_dir, log, det_env)
  a, b = _losses(straight), _losses(killed)
  after = [s for s in sorted(a) if s > plan["steps"] // 2]
  resumed_equal = bool(after) and all(b.get(s) == a[s] for s in after)
  max_diff = max((abs(b[s] - a[s]) for s in after if s in b), default=float("nan"))
  windows = _windows(straight)[1:] or _windows(straight)  # the first window holds the compile
  # Steps of batch x seq (padding included), as the step-only benchmark counts its tokens;
  # the program's own tokens_per_second counts real tokens only.
  program = statistics.median(w["steps_per_second"] for w in windows) * plan["batch"] * 128
  real = statistics.median(w["tokens_per_second"] for w in windows)
  input_wait = statistics.median(w.get("input_wait", float("nan")) for w in windows)
  ft = os.path.join(args.out, "stsb")
  shutil.rmtree(ft, ignore_errors=True)
  ft_cmd = [sys.executable, "-m", "bert_jax.finetune", "--config", "configs/glue.py:task=stsb",
            "--workdir", ft, f"--config.init_checkpoint={straight}",
            f"--config.data_dir={os.path.join(data_dir, 'glue')}",
            f"--config.num_epochs={plan['finetune_epochs']}", "--config.predict_test=False"]
  if plan["finetune_rows"]:
    ft_cmd.append(f"--config.max_train_examples={plan['finetune_rows']}")
  _run(ft_cmd, log, env)
  with open(os.path.join(ft, "eval_results.json")) as f:
    pearson = json.load(f)["pearson"]
  def report(step_only_fast):
    result = {
        "device": device, "dry_run": args.dry_run, "config": plan["config"],
        "batch": plan["batch"], "seq_len": 128, "steps": plan["steps"], "dtype": plan["dtype"],
        "step_only_tokens_per_second": step_only,
        "step_only_tokens_per_second_default_flags": step_only_fast,
        "program_tokens_per_second": program, "program_vs_step_only": program / step_only,
        "program_real_tokens_per_second": real,
        "input_wait_share": input_wait, "pretrain_seconds": pretrain_seconds,
        "killed_after_step": killed_at, "resumed_losses_equal": resumed_equal,
        "resumed_max_abs_diff": max_diff, "resumed_steps_compared": len(after),
        "stsb_dev_pearson": pearson, "stsb_beats_constant": bool(pearson and pearson > 0),
        "seconds": time.time() - t0}
    rows = [("device", device),
            ("pretraining", f"{plan['config']}, batch {plan['batch']} x seq 128, {plan['dtype']}, "
                            f"{plan['steps']} steps from prepared data"),
            ("step only (tokens/s)", f"{step_only:,.0f}"
             + (f" (without deterministic ops: {step_only_fast:,.0f})"
                if step_only_fast != step_only else "")),
            ("whole program (tokens/s)", f"{program:,.0f} ({program / step_only:.1%} of step only; "
                                         f"real tokens, padding left out: {real:,.0f})"),
            ("input wait share", f"{input_wait:.1%}"),
            ("SIGKILL + resume", f"killed near step {killed_at}; losses of {len(after)} logged "
                                 f"steps after the checkpoint "
                                 + ("equal" if resumed_equal else f"differ (max {max_diff:.3g})")),
            ("STS-B dev Pearson", f"{pearson:.4f} (a constant prediction: 0)"),
            ("wall", f"{time.time() - t0:.0f} s")]
    md = "| gpu_end_to_end | |\n|---|---|\n" + "".join(f"| {k} | {v} |\n" for k, v in rows)
    with open(os.path.join(args.out, "e2e.json"), "w") as f:
      json.dump(result, f, indent=2)
    with open(os.path.join(args.out, "e2e.md"), "w") as f:
      f.write(md)
    print(md)
    print(json.dumps(result))
  report(step_only)  # written first, so that a short lease still gets the chain's results
  if dev.platform == "gpu":  # the step without deterministic ops
    report(_step_only(plan, log, env, "default"))
  return 0 if resumed_equal else 1


if __name__ == "__main__":
  sys.exit(main())
