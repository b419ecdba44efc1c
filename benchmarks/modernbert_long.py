r"""A long input through a small ModernBERT on the CPU: local layers against every layer global.

  python benchmarks/modernbert_long.py [--seq_len 8192] [--layers 6] [--repeats 3]

ModernBERT of the mini sizes (hidden 256, 4 heads, GeGLU) with --layers layers, every third
global and the others in the 128-token window (the member's layout), against the same model
with global attention in every layer (`global_every` 1). Each runs in its own process: the
forward pass over one row of --seq_len tokens, jitted; the first call (compile included), the
median of --repeats more, and the process's peak RSS. Prints one JSON line per layout and the
ratios.
"""
import argparse
import json
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def measure(seq_len: int, layers: int, global_every: int, repeats: int) -> dict:
  """This process's figures for one layout (run in a fresh process: see main)."""
  sys.path.insert(0, ROOT)
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from bert_jax.modeling import model as model_lib  # pylint: disable=g-import-not-at-top
  from bert_jax.modeling import model_config  # pylint: disable=g-import-not-at-top
  cfg = model_config.for_pretraining(model_config.variant("mini", 50368), "modernbert", 50283)
  cfg = cfg.replace(num_layers=layers, global_every=global_every,
                    max_position_embeddings=max(seq_len, cfg.max_position_embeddings))
  model = model_lib.BertModel(cfg, add_pooler=False)
  ids = jnp.asarray(np.random.default_rng(0).integers(5, 50000, (1, seq_len)), jnp.int32)
  mask = jnp.ones_like(ids)
  params = jax.jit(lambda r: model.init(r, ids[:, :128], mask[:, :128],
                                        jnp.zeros_like(ids[:, :128])))(jax.random.PRNGKey(0))
  forward = jax.jit(lambda p, i, m: model.apply(p, i, m, jnp.zeros_like(i))["sequence_output"])
  start = time.perf_counter()
  forward(params, ids, mask).block_until_ready()
  first = time.perf_counter() - start
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    forward(params, ids, mask).block_until_ready()
    times.append(time.perf_counter() - start)
  return {"global_every": global_every, "layers": layers, "seq_len": seq_len,
          "first_call_s": round(first, 3), "median_s": round(float(np.median(times)), 3),
          "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)}


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--seq_len", type=int, default=8192)
  p.add_argument("--layers", type=int, default=6)
  p.add_argument("--repeats", type=int, default=3)
  p.add_argument("--global_every", type=int, default=0, help=argparse.SUPPRESS)  # one layout
  args = p.parse_args(argv)
  if args.global_every:
    print(json.dumps(measure(args.seq_len, args.layers, args.global_every, args.repeats)))
    return 0
  rows = {}
  for every in (3, 1):
    out = subprocess.run([sys.executable, os.path.abspath(__file__), f"--seq_len={args.seq_len}",
                          f"--layers={args.layers}", f"--repeats={args.repeats}",
                          f"--global_every={every}"], capture_output=True, text=True, check=False)
    if out.returncode:
      sys.exit(f"modernbert_long: global_every {every} failed:\n{out.stderr[-2000:]}")
    rows[every] = json.loads(out.stdout.strip().splitlines()[-1])
    print(json.dumps(rows[every]), flush=True)
  local, dense = rows[3], rows[1]
  print(f"local layers against every layer global: time {local['median_s'] / dense['median_s']:.2f}x,"
        f" peak RSS {local['peak_rss_gib'] / dense['peak_rss_gib']:.2f}x")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
