r"""The step time of a 2-process CPU pretraining run, this checkout beside another.

  python benchmarks/multihost_step_time.py --reference DIR [--steps 60] [--repeats 3]

Runs the tiny pretraining config as 2 processes (launch/local_multiprocess.sh, one CPU device
each, collectives through gloo, `data.host_invariant_stream=True`) from this checkout and from
DIR (another checkout of the repository, e.g. `git worktree add DIR COMMIT`), alternating the
two `--repeats` times, and prints the median step time of each run (from metrics.jsonl's
steps_per_second, one log line per step, the first 5 steps left out) and the medians of each
side; then the time of one stop check (`StopSignals.reached()` of a process in a job with a
coordination service) in this process. What it is for: the cost on the step's path of what a
multi-process run does around each step (the stop check that every process agrees on).
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parents[1]


def step_times(checkout: pathlib.Path, steps: int, workdir: pathlib.Path) -> list[float]:
  """Seconds per step of one 2-process run from `checkout`, steps 6 to `steps`."""
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(checkout), XLA_FLAGS="")
  cmd = [str(checkout / "launch" / "local_multiprocess.sh"), "2", sys.executable, "-m",
         "bert_jax.pretrain", "--config", "configs/pretrain.py:tiny", "--workdir", str(workdir),
         f"--config.total_steps={steps}", "--config.log_every=1",
         f"--config.checkpoint_every={steps}", "--config.data.host_invariant_stream=True",
         "--config.fill_mask_example="]
  done = subprocess.run(cmd, cwd=checkout, env=env, capture_output=True, text=True, check=False)
  if done.returncode:
    raise SystemExit(f"{checkout}: status {done.returncode}\n{done.stdout[-3000:]}")
  records = [json.loads(l) for l in (workdir / "metrics.jsonl").read_text().splitlines()]
  return [1.0 / r["steps_per_second"] for r in records
          if "steps_per_second" in r and r["step"] > 5]


def check_seconds(calls: int = 100_000) -> float:
  """Seconds per `StopSignals.reached()` with the agreement of a multi-process run (a job of
  one process here: the check is local whatever the count)."""
  import socket  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  sys.path.insert(0, str(HERE))
  from bert_jax.runtime import stop_signals  # pylint: disable=g-import-not-at-top
  with socket.socket() as s:
    s.bind(("localhost", 0))
    port = s.getsockname()[1]
  jax.distributed.initialize(f"localhost:{port}", 1, 0)
  stop = stop_signals.StopSignals()
  try:
    start = time.perf_counter()
    for _ in range(calls):
      stop.reached()
    return (time.perf_counter() - start) / calls
  finally:
    stop.restore()


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--reference", required=True, type=pathlib.Path,
                      help="another checkout of the repository")
  parser.add_argument("--steps", type=int, default=60)
  parser.add_argument("--repeats", type=int, default=3)
  args = parser.parse_args()
  sides = {"this checkout": HERE, "reference": args.reference.resolve()}
  medians = {name: [] for name in sides}
  with tempfile.TemporaryDirectory() as tmp:
    for repeat in range(args.repeats):
      for name, checkout in sides.items():
        times = step_times(checkout, args.steps, pathlib.Path(tmp) / f"{name}_{repeat}")
        medians[name].append(statistics.median(times))
        print(f"run {repeat + 1} {name:>13}: median {medians[name][-1] * 1e3:7.1f} ms/step "
              f"over {len(times)} steps", flush=True)
  here, ref = (statistics.median(medians[n]) for n in sides)
  print(f"median of medians: this checkout {here * 1e3:.1f} ms/step, reference "
        f"{ref * 1e3:.1f} ms/step, ratio {here / ref:.3f}")
  print(f"one stop check: {check_seconds() * 1e6:.2f} us", flush=True)


if __name__ == "__main__":
  main()
