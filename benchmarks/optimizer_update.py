"""The optimizer update alone: bert_jax's AdamW with its gradient clip against optax's clip.

Both sides are `make_optimizer`'s AdamW (weight decay 0.01 on kernels and embeddings, clip
at global norm 1.0) with the update applied, jitted with the params and moments donated, at
all-MiniLM-L6-v2's parameter shapes (L6 H384, vocab 30,522; 22.7M params) unless told
otherwise. They differ only in the clip: bert_jax.training.optimizer.clip_by_global_norm (one
factor, one multiply per element) or optax.clip_by_global_norm (a divide per element). The two
alternate, one update each, so both see the same machine; it prints each side's median and
min, the ratio, and whether the params and moments after the same updates are bit for bit
the same (they are when no update is clipped) or how far apart.

  python benchmarks/optimizer_update.py                     # gradients of norm ~4.8: clipped
  python benchmarks/optimizer_update.py --grad_scale 1e-4   # norm ~0.48: never clipped
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_collections  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from bert_jax.training import optimizer  # noqa: E402


def shapes(vocab: int, hidden: int, layers: int) -> dict:
  """BERT's parameter shapes (the leaf names decide weight decay, as in the model)."""
  tree = {"embeddings": {"word": {"embedding": (vocab, hidden)},
                         "position": {"embedding": (512, hidden)},
                         "type": {"embedding": (2, hidden)},
                         "norm": {"scale": (hidden,), "bias": (hidden,)}},
          "pooler": {"kernel": (hidden, hidden), "bias": (hidden,)}}
  for i in range(layers):
    dense = [("query", (hidden, hidden)), ("key", (hidden, hidden)), ("value", (hidden, hidden)),
             ("out", (hidden, hidden)), ("intermediate", (hidden, 4 * hidden)),
             ("output", (4 * hidden, hidden))]
    tree[f"layer_{i}"] = {name: {"kernel": s, "bias": (s[1],)} for name, s in dense}
    for norm in ("attention_norm", "output_norm"):
      tree[f"layer_{i}"][norm] = {"scale": (hidden,), "bias": (hidden,)}
  return tree


def make_update(clip: optax.GradientTransformation):
  opt = ml_collections.ConfigDict(dict(
      name="adamw", b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.01, grad_clip_norm=0.0,
      bf16_moments=False, schedule="linear", poly_power=1.0, grad_accum_steps=1))
  core, _ = optimizer.make_optimizer(opt, 5e-5, 12, 125)  # AdamW, no clip of its own
  tx = optax.chain(clip, core)

  def update(params, state, grads):
    updates, state = tx.update(grads, state, params)
    return optax.apply_updates(params, updates), state
  return tx, jax.jit(update, donate_argnums=(0, 1))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--vocab", type=int, default=30522)
  parser.add_argument("--hidden", type=int, default=384)
  parser.add_argument("--layers", type=int, default=6)
  parser.add_argument("--grad_scale", type=float, default=1e-3,
                      help="gradient elements ~ N(0, scale^2); 1e-3 gives norm ~4.8 at MiniLM")
  parser.add_argument("--updates", type=int, default=30)
  args = parser.parse_args()
  rng = np.random.default_rng(0)
  tree = shapes(args.vocab, args.hidden, args.layers)
  is_shape = lambda x: isinstance(x, tuple)  # noqa: E731
  draw = lambda s, scale: rng.standard_normal(s, dtype=np.float32) * scale  # noqa: E731
  params0 = jax.tree.map(lambda s: draw(s, 0.02), tree, is_leaf=is_shape)
  grads = jax.tree.map(lambda s: jnp.asarray(draw(s, args.grad_scale)), tree, is_leaf=is_shape)
  norm = float(optax.global_norm(grads))
  sides = {"bert_jax clip (one multiply)": optimizer.clip_by_global_norm(1.0),
           "optax.clip_by_global_norm": optax.clip_by_global_norm(1.0)}
  runs = {}
  for name, clip in sides.items():
    tx, update = make_update(clip)
    params = jax.tree.map(jnp.asarray, params0)
    runs[name] = [update, params, tx.init(params), []]
  n = sum(int(np.prod(s)) for s in jax.tree.leaves(tree, is_leaf=is_shape))
  print(f"{n / 1e6:.1f}M params, gradient norm {norm:.3f} "
        f"({'clipped' if norm >= 1.0 else 'not clipped'} at 1.0), {jax.devices()[0].platform}")
  for i in range(args.updates + 1):
    for run in runs.values():
      update, params, state, times = run
      start = time.perf_counter()
      params, state = update(params, state, grads)
      jax.block_until_ready(params)
      if i:  # the first call compiles
        times.append(time.perf_counter() - start)
      run[1], run[2] = params, state
  for name, (_, _, _, times) in runs.items():
    print(f"{name:32s} median {1e3 * np.median(times):6.1f} ms  min {1e3 * min(times):6.1f} ms")
  (ours, theirs) = runs.values()
  print(f"ratio (optax / bert_jax, medians): {np.median(theirs[3]) / np.median(ours[3]):.2f}x")
  a = jax.tree.leaves((ours[1], ours[2]))
  b = jax.tree.leaves((theirs[1], theirs[2]))
  differ = sum(int(np.sum(np.asarray(x) != np.asarray(y))) for x, y in zip(a, b))
  worst = max(float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)))
                    / max(float(np.max(np.abs(np.asarray(y, np.float64)))), 1e-30))
              for x, y in zip(a, b) if np.asarray(x).dtype.kind == "f")
  print(f"after {args.updates + 1} updates: {differ} of {3 * n} param and moment values differ "
        f"(largest difference {worst:.1e} of its array's largest value)")


if __name__ == "__main__":
  main()
