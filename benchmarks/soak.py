r"""Soak: many tiny pretraining runs (and optionally the test suite) under a concurrent CPU load.

  python benchmarks/soak.py [--runs 50] [--steps 30] [--load 2] [--devices 8] [--suite 0]
                            [--timeout 900] [--out DIR]

Starts `--load` busy processes (pure-Python spin loops) for the whole soak, then runs
`python -m bert_jax.pretrain --config configs/pretrain.py:tiny` `--runs` times, one after
the other, each on a fresh workdir with TensorBoard, metrics.jsonl and checkpoints on (the
default) and `--devices` CPU devices (XLA's --xla_force_host_platform_device_count, as the
test suite uses 8: the data-parallel step then runs XLA:CPU's in-process collectives, where
a host that runs ahead of its devices can deadlock them
and abort on XLA's rendezvous timeout, which is what the soak looks for). Then, with `--suite N`, the README's test command N times in
a row under the same load. Each child's stdout and stderr go to files under --out; nothing
is captured in memory.

Counts, printed as one table at the end:
  aborts   a child killed by SIGABRT (status -6 / 134), or with 'Fatal Python error' or
           'Check failure' in its stderr,
  hangs    a child still running after --timeout seconds (then killed),
  failures any other non-zero exit,
and for each run its wall time. The exit status is 1 when any count is non-zero.
"""
import argparse
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
_SPIN = "while True: pass"


def _classify(status, stderr_path):
  text = pathlib.Path(stderr_path).read_text(errors="replace") if os.path.exists(
      stderr_path) else ""
  if status in (-signal.SIGABRT, 128 + signal.SIGABRT) or "Fatal Python error" in text \
      or "Check failure" in text:
    return "abort"
  return "ok" if status == 0 else "failure"


def _run(cmd, out_dir, name, timeout, env):
  out_dir.mkdir(parents=True, exist_ok=True)
  stdout, stderr = out_dir / f"{name}.out", out_dir / f"{name}.err"
  t0 = time.time()
  with open(stdout, "wb") as o, open(stderr, "wb") as e:
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=o, stderr=e, env=env, start_new_session=True)
    try:
      status = proc.wait(timeout=timeout)
      outcome = _classify(status, stderr)
    except subprocess.TimeoutExpired:
      os.killpg(proc.pid, signal.SIGKILL)
      proc.wait()
      status, outcome = None, "hang"
  return outcome, status, time.time() - t0


def main():
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--runs", type=int, default=50)
  p.add_argument("--steps", type=int, default=30)
  p.add_argument("--load", type=int, default=2, help="busy processes beside the soak")
  p.add_argument("--devices", type=int, default=8, help="CPU devices of each pretraining run")
  p.add_argument("--suite", type=int, default=0, help="times to run `pytest -q tests` after")
  p.add_argument("--timeout", type=float, default=900.0, help="seconds before a run is a hang")
  p.add_argument("--suite_timeout", type=float, default=3600.0)
  p.add_argument("--out", default=os.path.join(os.getcwd(), "soak_out"),
                 help="children's stdout and stderr (default ./soak_out; emptied first)")
  args = p.parse_args()

  out = pathlib.Path(args.out).resolve()
  if out.exists():
    shutil.rmtree(out)
  out.mkdir(parents=True)
  env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONFAULTHANDLER="1")
  env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "")
                      + f" --xla_force_host_platform_device_count={args.devices}").strip()
  load = [subprocess.Popen([sys.executable, "-c", _SPIN]) for _ in range(args.load)]
  rows = []
  try:
    for i in range(args.runs):
      cmd = [sys.executable, "-m", "bert_jax.pretrain", "--config", "configs/pretrain.py:tiny",
             "--workdir", str(out / f"run_{i}"), f"--config.total_steps={args.steps}",
             "--config.log_every=5", f"--config.checkpoint_every={max(1, args.steps // 3)}"]
      rows.append((f"pretrain {i}",) + _run(cmd, out / "logs", f"run_{i}", args.timeout, env))
      print(f"pretrain {i}: {rows[-1][1]} (status {rows[-1][2]}, {rows[-1][3]:.0f} s)",
            flush=True)
      shutil.rmtree(out / f"run_{i}", ignore_errors=True)
    suite_env = {k: v for k, v in env.items() if k != "XLA_FLAGS"}  # conftest sets its own
    for i in range(args.suite):
      cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"]
      rows.append((f"suite {i}",) + _run(cmd, out / "logs", f"suite_{i}", args.suite_timeout,
                                         suite_env))
      tail = (out / "logs" / f"suite_{i}.out").read_text(errors="replace").strip().splitlines()
      print(f"suite {i}: {rows[-1][1]} (status {rows[-1][2]}, {rows[-1][3]:.0f} s) "
            f"{tail[-1] if tail else ''}", flush=True)
  finally:
    for proc in load:
      proc.kill()
  counts = {k: sum(r[1] == k for r in rows) for k in ("ok", "abort", "hang", "failure")}
  walls = [r[3] for r in rows if r[0].startswith("pretrain")]
  print(f"\nsoak: {args.runs} pretraining runs of {args.steps} steps on {args.devices} CPU devices"
        f" and {args.suite} suite run(s), under {args.load} busy processes")
  print("| ok | aborts | hangs | failures | pretrain wall s (min / median / max) |")
  print("|---|---|---|---|---|")
  walls.sort()
  spread = (f"{walls[0]:.0f} / {walls[len(walls) // 2]:.0f} / {walls[-1]:.0f}" if walls
            else "-")
  print(f"| {counts['ok']} | {counts['abort']} | {counts['hang']} | {counts['failure']} | "
        f"{spread} |")
  sys.exit(1 if counts["abort"] or counts["hang"] or counts["failure"] else 0)


if __name__ == "__main__":
  main()
