r"""Exact resume under real process kills: SIGKILL and SIGTERM, pretraining or fine-tuning.

  python benchmarks/exact_resume.py [--steps 40] [--kill_after 25] [--workdir /tmp/bert_jax_resume]
  python benchmarks/exact_resume.py --program finetune --checkpoint_every 10 --kill_after 15 \
      --config configs/glue.py:task=mrpc --config.init_checkpoint=CKPT --config.data_dir=GLUE

Runs `python -m bert_jax.pretrain` (tiny, built-in corpus unless overridden) or
`python -m bert_jax.finetune` (the --config given) three ways with the same config: (a)
straight; (b) killed with SIGKILL once it has logged step `--kill_after` (the last
checkpoint is at a multiple of `--checkpoint_every`), then restarted on the same workdir to
the end; (c) the same with SIGTERM, which saves a checkpoint at the step it stops. Prints,
per way, the resume step and the max |loss difference| against (a) over the resumed steps
(fine-tuning: the first seed's), whether they are bitwise equal, and for fine-tuning
whether eval_results.json is byte for byte (a)'s. Pretraining runs `--steps` steps;
fine-tuning as many as its config gives.

Extra arguments (`--config ...`, `--config.*`) are passed through to every run.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


PROGRAM = "pretrain"  # or 'finetune' (--program)
LOSS_KEY = {"pretrain": "loss", "finetune": "seed0_train_loss"}
CHECKPOINTS = {"pretrain": "checkpoints", "finetune": "finetune_checkpoints"}


def _cmd(workdir, steps, every, extra):
  if PROGRAM == "finetune":
    return [sys.executable, "-m", "bert_jax.finetune", "--workdir", workdir, *extra,
            "--config.log_every=1", f"--config.checkpoint_every={every}"]  # after --config
  return [sys.executable, "-m", "bert_jax.pretrain", "--config", "configs/pretrain.py:tiny",
          "--workdir", workdir, f"--config.total_steps={steps}", "--config.log_every=1",
          f"--config.checkpoint_every={every}", "--config.fill_mask_example=", *extra]


def _losses(workdir):
  path = os.path.join(workdir, "metrics.jsonl")
  if not os.path.exists(path):
    return {}
  out = {}
  with open(path) as f:
    for line in f:
      r = json.loads(line)
      if LOSS_KEY[PROGRAM] in r:
        out[r["step"]] = r[LOSS_KEY[PROGRAM]]  # a re-run step overwrites the earlier record
  return out


def _eval_results(workdir):
  path = os.path.join(workdir, "eval_results.json")
  return open(path).read() if os.path.exists(path) else None


def _run(cmd, env):
  subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL)


def _interrupted(workdir, steps, every, extra, sig, kill_after, env):
  proc = subprocess.Popen(_cmd(workdir, steps, every, extra), cwd=ROOT, env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  while max(_losses(workdir), default=0) < kill_after:
    if proc.poll() is not None:
      raise RuntimeError(f"run ended (rc {proc.returncode}) before step {kill_after}")
    time.sleep(0.05)
  proc.send_signal(sig)
  proc.wait()
  ckpts = sorted(int(s) for s in os.listdir(os.path.join(workdir, CHECKPOINTS[PROGRAM]))
                 if s.isdigit())
  _run(_cmd(workdir, steps, every, extra), env)
  return proc.returncode, ckpts[-1] if ckpts else 0


def main():
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--steps", type=int, default=40)
  p.add_argument("--checkpoint_every", type=int, default=20)
  p.add_argument("--kill_after", type=int, default=25)
  p.add_argument("--workdir", default="/tmp/bert_jax_resume")
  p.add_argument("--program", default="pretrain", choices=["pretrain", "finetune"])
  args, extra = p.parse_known_args()
  global PROGRAM
  PROGRAM = args.program
  if PROGRAM == "finetune" and not any(a == "--config" or a.startswith("--config=") for a in extra):
    p.error("--program finetune needs --config (and --config.init_checkpoint, --config.data_dir)")
  if PROGRAM == "pretrain" and not 0 < args.kill_after < args.steps:
    p.error(f"--kill_after {args.kill_after} must be between 0 and --steps {args.steps} "
            "(the run is killed after logging that step)")
  if args.checkpoint_every <= 0:
    p.error(f"--checkpoint_every {args.checkpoint_every} must be positive")
  env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
  shutil.rmtree(args.workdir, ignore_errors=True)
  straight = os.path.join(args.workdir, "straight")
  _run(_cmd(straight, args.steps, args.checkpoint_every, extra), env)
  ref = _losses(straight)
  last = max(ref)
  if not args.kill_after < last:
    p.error(f"--kill_after {args.kill_after} must be below the run's {last} steps")
  print(f"straight run: {len(ref)} steps, loss {ref[1]:.4f} -> {ref[last]:.4f}")
  for name, sig in (("SIGKILL", signal.SIGKILL), ("SIGTERM", signal.SIGTERM)):
    workdir = os.path.join(args.workdir, name.lower())
    rc, resumed_from = _interrupted(workdir, args.steps, args.checkpoint_every, extra, sig,
                                    args.kill_after, env)
    got = _losses(workdir)
    steps = range(resumed_from + 1, last + 1)
    diffs = [abs(got[s] - ref[s]) for s in steps]
    bitwise = all(got[s] == ref[s] for s in steps)
    results = ("" if PROGRAM == "pretrain" else
               f", eval_results.json identical: {_eval_results(workdir) == _eval_results(straight)}")
    print(f"{name}: exit code {rc}, resumed from checkpoint {resumed_from}, steps "
          f"{steps.start}-{steps.stop - 1}: max |loss diff| {max(diffs):.3e}, bitwise equal: "
          f"{bitwise}{results}")


if __name__ == "__main__":
  main()
