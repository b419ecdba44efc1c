r"""The whole chain on a machine with an NVIDIA GPU, in one command: pretrain from prepared
data, SIGKILL, resume, export, fine-tune STS-B from the export.

  # once, on a machine with TensorFlow (writes .e2e/, a few MB; copy it to the GPU machine):
  python benchmarks/gpu_end_to_end.py --prepare --glue_dir $GLUE_DIR [--corpus 'BOOKS/*.txt']
  # on the machine with an NVIDIA GPU (no TensorFlow needed; under 10 minutes):
  bash benchmarks/gpu_end_to_end.sh [--out DIR]
  # the same chain, tiny and short, on a CPU, from the built-in corpus and a synthetic STS-B
  # (what tests/test_gpu_end_to_end.py runs; no data to download):
  bash benchmarks/gpu_end_to_end.sh --dry_run [--out DIR]

--glue_dir is the GLUE folder holding STS-B/train.tsv and STS-B/dev.tsv (GLUE's download
script, or https://gluebenchmark.com/tasks); --corpus defaults to the package's built-in
corpus (Python standard-library docstrings).

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
Writes e2e.json, e2e.md and e2e.log to --out (default ./gpu_e2e_out) and prints the table.
On a GPU both pretraining runs use XLA's deterministic ops (the embedding gradients' scatter is
otherwise reordered by atomics, and bitwise equality would not hold); the step-only figure is
measured with the same flags, and once more without them.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, ".e2e")  # prepared corpus and STS-B, ignored by git
DRY_RUN_CORPUS_CHARS = 1_100_000  # of the built-in corpus: about a megabyte of text
DETERMINISTIC = "--xla_gpu_deterministic_ops=true"

# (config, batch, steps, checkpoint_every, log_every, fine-tune train rows) per mode
PLANS = {
    # Not fused_attention: cuDNN attention under --xla_gpu_deterministic_ops crashed XLA's
    # compile (IndexError raw_hash_map::at, jax 0.11.2, H200, 2026-11-26).
    # 600 steps: on an H200 (2026-11-26) a deterministic step took 0.12 s, and with 1,000 steps
    # the chain's two pretraining runs left no time for the fine-tune within 10 minutes.
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


STSB_HEADER = ("index", "genre", "filename", "year", "old_index", "source1", "source2",
               "sentence1", "sentence2", "score")


def _dry_run_data(data_dir: str) -> str:
  """A corpus file cut from the built-in corpus and a small synthetic STS-B; the corpus path.

  The dry run needs no download: its figures check the chain, not the model. STS-B pairs are
  a line with itself (score 5), with its words reversed (3), and with another line (0-1).
  """
  import random  # pylint: disable=g-import-not-at-top
  sys.path.insert(0, ROOT)
  from bert_jax.data.sources import builtin_corpus  # pylint: disable=g-import-not-at-top
  text = builtin_corpus.load_text()[:DRY_RUN_CORPUS_CHARS]
  os.makedirs(data_dir, exist_ok=True)
  corpus = os.path.join(data_dir, "corpus.txt")
  with open(corpus, "w", encoding="utf-8") as f:
    f.write(text[:text.rfind("\n") + 1])
  lines = [l.strip() for l in text.splitlines()
           if 4 <= len(l.split()) <= 30 and "\t" not in l]
  rng = random.Random(0)
  glue = os.path.join(data_dir, "glue", "STS-B")
  os.makedirs(glue, exist_ok=True)
  for split, n in (("train", 96), ("dev", 48)):
    rows = ["\t".join(STSB_HEADER)]
    for i in range(n):
      a = rng.choice(lines)
      kind = i % 3
      b, score = ((a, 5.0) if kind == 0 else
                  (" ".join(reversed(a.split())), 3.0) if kind == 1 else
                  (rng.choice(lines), rng.uniform(0.0, 1.0)))
      rows.append(f"{i}\tsynthetic\tnone\t2024\t{i:04d}\tnone\tnone\t{a}\t{b}\t{score:.3f}")
    with open(os.path.join(glue, f"{split}.tsv"), "w", encoding="utf-8") as f:
      f.write("\n".join(rows) + "\n")
  return corpus


def prepare(data_dir: str = DATA, glue_dir: str = "", corpus: str = "",
            tiny: bool = False) -> None:
  """Writes the prepared corpus and STS-B under data_dir (needs TensorFlow).

  tiny: the dry run's data (_dry_run_data). Otherwise STS-B is copied from glue_dir, and the
  corpus is the files of the `corpus` glob, or the built-in corpus when it is empty.
  """
  if tiny:
    source = ["--config.data.source=files", f"--config.data.files={_dry_run_data(data_dir)}"]
  else:
    if not glue_dir:
      sys.exit("gpu_end_to_end: --prepare needs --glue_dir (or $GLUE_DIR): the GLUE folder with "
               "STS-B/train.tsv and STS-B/dev.tsv")
    needed = [os.path.join(glue_dir, "STS-B", x) for x in ("train.tsv", "dev.tsv")]
    missing = [x for x in needed if not os.path.isfile(x)]
    if missing:
      sys.exit(f"gpu_end_to_end: {missing[0]}: no such file")
    glue = os.path.join(data_dir, "glue", "STS-B")
    os.makedirs(glue, exist_ok=True)
    for path in needed:
      shutil.copy(path, glue)
    source = (["--config.data.source=files", f"--config.data.files={corpus}"] if corpus else
              ["--config.data.source=builtin"])
  out = os.path.join(data_dir, "prepared")
  shutil.rmtree(out, ignore_errors=True)
  subprocess.run([sys.executable, "-m", "bert_jax.prepare_data", "--config",
                  "configs/pretrain.py:tiny", *source, "--out", out], cwd=ROOT, check=True)


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
  p.add_argument("--prepare", action="store_true",
                 help="write the prepared data to --data (a machine with TensorFlow)")
  p.add_argument("--dry_run", action="store_true", help="tiny and short, on this CPU")
  p.add_argument("--out", default=os.path.join(os.getcwd(), "gpu_e2e_out"),
                 help="where e2e.json, e2e.md, e2e.log and the runs go (default ./gpu_e2e_out)")
  p.add_argument("--data", default=DATA, help="where --prepare writes (default .e2e/)")
  p.add_argument("--glue_dir", default=os.environ.get("GLUE_DIR", ""),
                 help="--prepare: the GLUE folder with STS-B/ (default $GLUE_DIR)")
  p.add_argument("--corpus", default="",
                 help="--prepare: pretraining text files, a glob (default: the built-in corpus)")
  args = p.parse_args(argv)
  args.out = os.path.abspath(args.out)
  if args.prepare:
    prepare(args.data, args.glue_dir, args.corpus)
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
             "`python benchmarks/gpu_end_to_end.py --prepare --glue_dir $GLUE_DIR` on a machine "
             "with TensorFlow first")
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
  report(step_only)  # written first, so that a run stopped early still has the chain's results
  if dev.platform == "gpu":  # the step without deterministic ops
    report(_step_only(plan, log, env, "default"))
  return 0 if resumed_equal else 1


if __name__ == "__main__":
  sys.exit(main())
