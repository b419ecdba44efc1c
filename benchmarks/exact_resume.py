r"""Exact resume under real process kills: SIGKILL and SIGTERM.

  python benchmarks/exact_resume.py [--steps 40] [--kill_after 25] [--workdir /tmp/bert_jax_resume]

Runs `python -m bert_jax.pretrain` (tiny, built-in corpus unless overridden)
three ways with the same config: (a) `--steps` straight; (b) killed with SIGKILL
once it has logged step `--kill_after` (the last checkpoint is at a multiple of
`--checkpoint_every`), then restarted on the same workdir to the end; (c) the
same with SIGTERM, which saves a checkpoint at the step it stops. Prints, per
way, the resume step and the max |loss difference| against (a) over the
resumed steps, and whether they are bitwise equal.

Extra `--config.*` arguments are passed through to every run.
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


def _cmd(workdir, steps, every, extra):
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
      if "loss" in r:
        out[r["step"]] = r["loss"]  # a re-run step overwrites the earlier record
  return out


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
  ckpts = sorted(int(s) for s in os.listdir(os.path.join(workdir, "checkpoints")) if s.isdigit())
  _run(_cmd(workdir, steps, every, extra), env)
  return proc.returncode, ckpts[-1] if ckpts else 0


def main():
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--steps", type=int, default=40)
  p.add_argument("--checkpoint_every", type=int, default=20)
  p.add_argument("--kill_after", type=int, default=25)
  p.add_argument("--workdir", default="/tmp/bert_jax_resume")
  args, extra = p.parse_known_args()
  if not 0 < args.kill_after < args.steps:
    p.error(f"--kill_after {args.kill_after} must be between 0 and --steps {args.steps} "
            "(the run is killed after logging that step)")
  if args.checkpoint_every <= 0:
    p.error(f"--checkpoint_every {args.checkpoint_every} must be positive")
  env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
  shutil.rmtree(args.workdir, ignore_errors=True)
  straight = os.path.join(args.workdir, "straight")
  _run(_cmd(straight, args.steps, args.checkpoint_every, extra), env)
  ref = _losses(straight)
  print(f"straight run: {len(ref)} steps, loss {ref[1]:.4f} -> {ref[args.steps]:.4f}")
  for name, sig in (("SIGKILL", signal.SIGKILL), ("SIGTERM", signal.SIGTERM)):
    workdir = os.path.join(args.workdir, name.lower())
    rc, resumed_from = _interrupted(workdir, args.steps, args.checkpoint_every, extra, sig,
                                    args.kill_after, env)
    got = _losses(workdir)
    steps = range(resumed_from + 1, args.steps + 1)
    diffs = [abs(got[s] - ref[s]) for s in steps]
    bitwise = all(got[s] == ref[s] for s in steps)
    print(f"{name}: exit code {rc}, resumed from checkpoint {resumed_from}, steps "
          f"{steps.start}-{steps.stop - 1}: max |loss diff| {max(diffs):.3e}, bitwise equal: {bitwise}")


if __name__ == "__main__":
  main()
