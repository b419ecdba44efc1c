"""The fine-tuning train step's time per sequence length, against the bucket cost model's rate.

A GLUE sequence-classification step at all-MiniLM-L6-v2's size (L6 H384, vocab 30,522; random
weights), batch 32, AdamW, dropout on, timed over 15 back-to-back steps per length after
warm-up, with its compile. Prints the FLOP/s each length reaches by DESIGN.md's formula beside
bert_jax.batching.bucket_cost.STEP_FLOPS_PER_SECOND, the fixed rate `auto` length buckets assume,
and a line through the step times (fixed part + cost per padded token).

What it showed (2-core AMD EPYC Zen 4 CPU, 2026-11-27): 155 ms at length 8 up to 1,121 ms at
64, 106-136 GFLOP/s, 6-7 s to compile each length. The cost model's 50 GFLOP/s is about half
what the step reaches, so `auto` values a padded token at about twice its cost; its compile
estimate per length (1.5 + 0.8 x layers seconds, 6.3 s for MiniLM) matches the compile times.

  python benchmarks/experiments/step_by_length.py
"""
import os
import sys
import time

# The repository root (two levels up), so that bert_jax imports from a plain checkout.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import jax, jax.numpy as jnp, numpy as np, optax
from bert_jax.batching import bucket_cost
from bert_jax.batching import length_buckets
from bert_jax.modeling import model_config, flops
from bert_jax.tasks.glue import task as glue_task
from bert_jax.tasks import task as task_lib
from bert_jax.training import train_core
cfg = model_config.BertConfig(vocab_size=30522, hidden_size=384, num_layers=6, num_heads=12,
                              intermediate_size=1536, max_position_embeddings=512)
tm = task_lib.TaskModel("cola", glue_task.sequence_model(cfg, 2), "classifier")
loss = lambda logits, b: optax.softmax_cross_entropy_with_integer_labels(logits, b["label_ids"])
task = task_lib.Task(tm, {}, ("label_ids",), loss, [], "accuracy")
tx = optax.adamw(5e-5, weight_decay=0.01)
init = lambda rng: train_core.init_state(task_lib.init_fn(tm, 64), tx, rng, "threefry2x32")
state = jax.jit(init)(jax.random.PRNGKey(0))
step = jax.jit(train_core.make_train_step(task_lib.objective(task), tx, optax.constant_schedule(5e-5), 1,
                                          prng_impl="threefry2x32"), donate_argnums=(0,))
B = 32
rows = []
for L in length_buckets.bucket_lengths(64):  # the fixed lengths a bucket may take
  rng = np.random.default_rng(L)
  batch = {"input_ids": jnp.asarray(rng.integers(1000, 30000, (B, L)), jnp.int32),
           "input_mask": jnp.ones((B, L), jnp.int32), "segment_ids": jnp.zeros((B, L), jnp.int32),
           "label_ids": jnp.asarray(rng.integers(0, 2, B), jnp.int32)}
  t = time.time(); state, m = step(state, batch); jax.block_until_ready(m); c = time.time() - t
  for _ in range(3):
    state, m = step(state, batch)
  jax.block_until_ready(m)
  n = 15; t = time.time()
  for _ in range(n):
    state, m = step(state, batch)
  jax.block_until_ready(m); s = (time.time() - t) / n
  f = flops.train_flops_per_token(cfg, L, 0.0) * B * L
  rows.append((L, c, s, f / s))
  print(f"len {L:3d}: compile+first {c:5.1f} s, step {s*1000:6.1f} ms, {f/s/1e9:6.1f} GFLOP/s", flush=True)
L = np.array([r[0] for r in rows], float); S = np.array([r[2] for r in rows])
b, a = np.polyfit(L * B, S, 1)
print(f"fit: step = {a*1000:.1f} ms + {b*1e6:.2f} us per padded token (batch {B})")
print(f"cost model rate (cpu): {bucket_cost.STEP_FLOPS_PER_SECOND['cpu']/1e9:.0f} GFLOP/s")
