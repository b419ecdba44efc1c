r"""Repeated SIGKILLs during checkpoint saves, and a second run on the same workdir.

  python benchmarks/fault_loop.py [--steps 60] [--checkpoint_every 2] [--kills 8] [--seed 0]

Runs `python -m bert_jax.pretrain` (tiny, built-in corpus unless overridden,
as benchmarks/exact_resume.py does):
  (a) `--steps` straight, the reference;
  (b) killed with SIGKILL `--kills` times at random moments (each a random
      0-6 steps plus 0-0.5 s after the steps logged so far; with a checkpoint
      every 2 steps most kills land in an asynchronous save), restarted each
      time on the same workdir, then run to the end;
  (c) a run started on (c)'s workdir while another trains on it: it must stop
      at once (the workdir lock) and leave the first run to finish.
Prints, for (b) and (c): the metrics.jsonl records per step (each step must
appear once: no gap, no duplicate) and whether every step's loss is bitwise
equal to (a)'s.
"""
import argparse
import collections
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import exact_resume  # noqa: E402  (its command line and loss reader)


def _records(workdir):
  path = os.path.join(workdir, "metrics.jsonl")
  if not os.path.exists(path):
    return []
  with open(path) as f:
    return [json.loads(line) for line in f if line.strip()]


def _check(name, workdir, ref, steps):
  records = [r for r in _records(workdir) if "loss" in r]
  counts = collections.Counter(r["step"] for r in records)
  gaps = [s for s in range(1, steps + 1) if counts[s] == 0]
  dups = sorted(s for s, n in counts.items() if n > 1)
  got = {r["step"]: r["loss"] for r in records}
  bitwise = not gaps and all(got[s] == ref[s] for s in range(1, steps + 1))
  print(f"{name}: {len(records)} loss records for {steps} steps, gaps {gaps or 'none'}, "
        f"duplicates {dups or 'none'}, every loss bitwise equal to the straight run: {bitwise}")
  return not gaps and not dups and bitwise


def _wait_for_step(proc, workdir, step):
  while max((r["step"] for r in _records(workdir)), default=0) < step:
    if proc.poll() is not None:
      return False
    time.sleep(0.02)
  return True


def main():
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--steps", type=int, default=60)
  p.add_argument("--checkpoint_every", type=int, default=2)
  p.add_argument("--kills", type=int, default=8)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--workdir", default="/tmp/bert_jax_fault_loop")
  args, extra = p.parse_known_args()
  if args.kills * 6 >= args.steps:
    p.error(f"--steps {args.steps} leaves no room for {args.kills} kills of up to 6 steps each")
  env = dict(os.environ, JAX_PLATFORMS=os.environ.get("JAX_PLATFORMS", "cpu"))
  rng = random.Random(args.seed)
  shutil.rmtree(args.workdir, ignore_errors=True)

  def cmd(workdir):
    return exact_resume._cmd(workdir, args.steps, args.checkpoint_every, extra)  # pylint: disable=protected-access

  straight = os.path.join(args.workdir, "straight")
  exact_resume._run(cmd(straight), env)  # pylint: disable=protected-access
  ref = exact_resume._losses(straight)  # pylint: disable=protected-access
  print(f"straight run: {len(ref)} steps, loss {ref[1]:.4f} -> {ref[args.steps]:.4f}")

  killed = os.path.join(args.workdir, "killed")
  kills = []
  while len(kills) < args.kills:
    logged = max((r["step"] for r in _records(killed)), default=0)
    proc = subprocess.Popen(cmd(killed), cwd=exact_resume.ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    target = logged + rng.randint(0, 6)
    if not _wait_for_step(proc, killed, min(target, args.steps - 1)):
      raise RuntimeError(f"run ended (rc {proc.returncode}) before step {target}")
    time.sleep(rng.uniform(0.0, 0.5))
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    ckpts = sorted(int(s) for s in os.listdir(os.path.join(killed, "checkpoints")) if s.isdigit())
    tmp = [s for s in os.listdir(os.path.join(killed, "checkpoints")) if not s.isdigit()]
    kills.append((max((r["step"] for r in _records(killed)), default=0), ckpts[-1:], tmp))
  exact_resume._run(cmd(killed), env)  # pylint: disable=protected-access
  for i, (step, last, tmp) in enumerate(kills, 1):
    print(f"kill {i}: after logging step {step}; newest checkpoint {last or 'none'}"
          + (f", unfinished save {tmp}" if tmp else ""))
  ok = _check(f"{args.kills} SIGKILLs", killed, ref, args.steps)

  shared = os.path.join(args.workdir, "shared")
  first = subprocess.Popen(cmd(shared), cwd=exact_resume.ROOT, env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  _wait_for_step(first, shared, 2)
  t = time.time()
  second = subprocess.run(cmd(shared), cwd=exact_resume.ROOT, env=env, capture_output=True,
                          text=True)
  line = second.stderr.strip().splitlines()[-1] if second.stderr.strip() else ""
  print(f"second run on the same workdir: exit code {second.returncode} after "
        f"{time.time() - t:.1f} s: {line}")
  first.wait()
  print(f"first run: exit code {first.returncode}")
  ok &= _check("concurrent workdir", shared, ref, args.steps) and second.returncode != 0
  print("all checks passed" if ok else "FAILED")
  sys.exit(0 if ok else 1)


if __name__ == "__main__":
  main()
