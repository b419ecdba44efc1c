r"""Cost of the checks on a full train state: checksums and the finite-state guard.

  python benchmarks/state_checks.py --config configs/pretrain.py:base --batch_size 8 --repeats 5

Builds the variant's full pretraining train state (params and optimizer
moments) and times, alternating them round by round (median of --repeats):
the array checksums recorded with every checkpoint (bert_jax.checkpoints.checksum), the
finite-state check run at log steps and before every save
(train_core.check_finite), the Orbax save of the same state to a temporary
directory (the reference the checksum is paid beside), and one train step at
--batch_size x --seq_len (the reference the finite check is paid beside, once
per log_every steps).
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from bert_jax.checkpoints import checksum  # noqa: E402
from bert_jax.checkpoints import run_checkpoints as ckpt_lib  # noqa: E402
from bert_jax.training import train_core  # noqa: E402
from benchmarks import train_step as train_step_bench  # noqa: E402
from bert_jax.pretraining import setup as pretrain_setup  # noqa: E402


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--config", default="configs/pretrain.py:base")
  p.add_argument("--batch_size", type=int, default=8)
  p.add_argument("--seq_len", type=int, default=128)
  p.add_argument("--repeats", type=int, default=5)
  args = p.parse_args(argv)

  config = train_step_bench.load_config(args.config)
  config.model.dtype = "float32"
  model_cfg = pretrain_setup.variant_model_config(config, 30522)
  num_predictions = max(1, round(0.15 * args.seq_len))
  batch = train_step_bench.synthetic_batch(np.random.default_rng(0), args.batch_size,
                                           args.seq_len, num_predictions, 30522)
  runner = train_step_bench.ours(config, model_cfg, batch)
  runner.step()  # compile
  state = runner.state
  n_arrays = len(jax.tree.leaves(state))
  n_bytes = sum(x.nbytes for x in jax.tree.leaves(state))
  checksum.tree_checksums(state)  # compile
  train_core.check_finite(state, 0, "stop", "-")

  tmp = tempfile.mkdtemp(prefix="state_checks_")
  ckpts = ckpt_lib.TrainCheckpoints(tmp, max_to_keep=1, async_save=False)
  save_step = [0]

  def timed(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t

  def save():
    save_step[0] += 1
    # The manager's save computes the checksums too: subtract them from this reference.
    ckpts.save(save_step[0], runner.state, {"data_position": 0})
    ckpts.wait()

  names = ["checksums", "finite check", "orbax save (incl. checksums)", "train step"]
  fns = [lambda: checksum.tree_checksums(runner.state),
         lambda: train_core.check_finite(runner.state, 0, "stop", "-"),
         save, runner.step]
  times = {n: [] for n in names}
  for _ in range(args.repeats):
    for n, f in zip(names, fns):
      times[n].append(timed(f))
  ckpts.close()
  med = {n: statistics.median(t) for n, t in times.items()}
  print(f"state: {args.config}, {n_arrays} arrays, {n_bytes / 2**20:.0f} MiB "
        f"(params + AdamW moments), {jax.devices()[0].platform}")
  for n in names:
    print(f"{n:>30}: {med[n] * 1000:9.1f} ms")
  save_only = med["orbax save (incl. checksums)"] - med["checksums"]
  print(f"checksums vs the save without them: {med['checksums'] / save_only:.1%}")
  print(f"finite check vs one train step (batch {args.batch_size} x {args.seq_len}): "
        f"{med['finite check'] / med['train step']:.1%}")


if __name__ == "__main__":
  main()
