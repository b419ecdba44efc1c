"""What tests/test_pretrain.py's straight runs would cost at 50 steps instead of 6.

What it showed (2-core CPU, 2026-11-24): 50 steps instead of 6 add 0.1-5.3 s per objective,
about 13 s for the six, and the resume tests would pay the extra steps again, so the tests
stay at 6 steps.

The tests run 6 steps (seq 32, batch 8, tiny). For each objective of the tests
(OBJECTIVES, the same config overrides), after one warm-up run: the wall time of
a 6-step run (checkpoints every 3, as the tests) and of a 50-step run
(checkpoints every 25, the same two saves), and the difference.

  nice -n 5 python benchmarks/experiments/pretrain_test_steps.py [OBJECTIVE ...]
"""
import pathlib
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))  # the repository root

from bert_jax import pretrain  # noqa: E402
from tests.fixtures import pretraining as tp  # noqa: E402  (OBJECTIVES: the tests' overrides)
from tests.fixtures import pretraining as fx  # noqa: E402  (the tests' corpus and config)


def main():
  root = pathlib.Path(tempfile.mkdtemp())
  corpus = fx.write_corpus(root / "corpus.txt")
  teacher = str(root / "teacher")
  pretrain.train(fx.small_config(corpus), teacher)  # warm-up, and distill's teacher
  total = 0.0
  for objective in sys.argv[1:] or list(tp.OBJECTIVES):
    overrides = dict(tp.OBJECTIVES[objective][0])
    if objective == "distill":
      overrides["teacher_checkpoint"] = teacher
    wall = {}
    for steps, every in ((6, 3), (50, 25)):
      c = fx.small_config(corpus, **overrides)
      c.total_steps, c.checkpoint_every = steps, every
      t0 = time.perf_counter()
      pretrain.train(c, str(root / f"{objective}_{steps}"))
      wall[steps] = time.perf_counter() - t0
    total += wall[50] - wall[6]
    print(f"{objective}: 6 steps {wall[6]:.1f}s, 50 steps {wall[50]:.1f}s, "
          f"+{wall[50] - wall[6]:.1f}s", flush=True)
  print(f"total extra for 50 steps: {total:.1f}s")


if __name__ == "__main__":
  main()
