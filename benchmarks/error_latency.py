r"""How fast each program answers a mistake (the aim: under 3 s, in one line).

  python benchmarks/error_latency.py [--rounds 3]

Runs every program of the README's table with a misspelled config key, a missing file or a
missing required flag, as a user would (a fresh subprocess each time, so imports count), and
prints per case the median wall time of --rounds runs, the exit status and the one line.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MISSING = "/nonexistent/bert_jax_error_latency"

CASES = [
    ("pretrain: a misspelled key", ["bert_jax.pretrain", "--config", "configs/pretrain.py:tiny",
                                    "--workdir", "/tmp/el", "--config.totl_steps=3"]),
    ("pretrain: no --workdir", ["bert_jax.pretrain", "--config", "configs/pretrain.py:tiny"]),
    ("pretrain: no variant", ["bert_jax.pretrain", "--config", "configs/pretrain.py",
                              "--workdir", "/tmp/el"]),
    ("pretrain: a missing corpus", ["bert_jax.pretrain", "--config", "configs/pretrain.py:tiny",
                                    "--workdir", "/tmp/el", "--config.data.source=files",
                                    f"--config.data.files={MISSING}/*.txt"]),
    ("finetune: a misspelled key", ["bert_jax.finetune", "--config", "configs/glue.py:task=mrpc",
                                    "--workdir", "/tmp/el", "--config.learnig_rate=1"]),
    ("finetune: a missing checkpoint", ["bert_jax.finetune", "--config",
                                        "configs/glue.py:task=mrpc", "--workdir", "/tmp/el",
                                        f"--config.init_checkpoint={MISSING}",
                                        f"--config.data_dir={MISSING}"]),
    ("prepare_data: no --out", ["bert_jax.prepare_data", "--config", "configs/pretrain.py:tiny"]),
    ("embed: a missing checkpoint", ["bert_jax.embed", "--checkpoint", MISSING, "--input",
                                     MISSING, "--output", "/tmp/el.npy"]),
    ("retrieval_eval: a missing checkpoint", ["bert_jax.retrieval_eval", "--checkpoint", MISSING,
                                              "--beir_dir", MISSING]),
    ("fill_mask: a missing checkpoint", ["bert_jax.fill_mask", "--checkpoint", MISSING,
                                         "the [MASK] ."]),
    ("convert: a missing source", ["bert_jax.convert", "--from", "hf", "--src", MISSING,
                                   "--dst", "/tmp/el_conv"]),
    ("tokenize: a missing vocab", ["bert_jax.tokenize", "--vocab", MISSING]),
    ("squad_eval: a missing file", ["bert_jax.squad_eval", MISSING, MISSING]),
    ("build_vocab: no --output", ["bert_jax.build_vocab", "--input", "builtin"]),
    ("config_help: a missing config", ["bert_jax.config_help", f"{MISSING}.py"]),
]


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--rounds", type=int, default=3)
  args = p.parse_args(argv)
  print(f"| case | median s ({args.rounds} runs) | exit | stderr lines | the line |")
  print("|---|---|---|---|---|")
  worst = 0.0
  for name, cmd in CASES:
    times = []
    for _ in range(args.rounds):
      t = time.perf_counter()
      out = subprocess.run([sys.executable, "-m"] + cmd, cwd=ROOT, capture_output=True,
                           text=True, stdin=subprocess.DEVNULL, timeout=300)
      times.append(time.perf_counter() - t)
    lines = [l for l in (out.stderr + out.stdout).splitlines() if l.strip()]
    median = statistics.median(times)
    worst = max(worst, median)
    print(f"| {name} | {median:.2f} | {out.returncode} | {len(lines)} | "
          f"{(lines[-1] if lines else '')[:140]} |", flush=True)
  print(f"slowest: {worst:.2f} s")
  return 0


if __name__ == "__main__":
  sys.exit(main())
