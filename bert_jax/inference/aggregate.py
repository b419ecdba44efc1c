"""Several vectors of one text -> one: layers, chunks of a long text, checkpoints of an
ensemble (bert_jax.embed's --layers, --chunk_stride and several --checkpoint). `combine` is
the same code in numpy on the host and in jax.numpy inside a jitted function."""
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

COMBINES = ("mean", "max", "concat", "weighted_mean")


def check_weights(weights: Optional[Sequence[float]], members: int, what: str) -> np.ndarray:
  """float64 [members] weights summing to 1; ValueError (naming `what`) for missing weights,
  another count, or a weight that is not positive."""
  if not weights:
    raise ValueError(f"--combine weighted_mean needs --weights, one per {what} ({members})")
  w = np.asarray(weights, np.float64)
  if len(w) != members:
    raise ValueError(f"--weights has {len(w)} value(s) but there are {members} {what} "
                     "to combine")
  if not np.all(w > 0) or not np.all(np.isfinite(w)):
    raise ValueError(f"--weights must be positive numbers, got {list(weights)}")
  return w / w.sum()


def combine(vectors, how: str, weights: Optional[np.ndarray] = None):
  """[members, texts, dim] -> [texts, dim] by `how` ([texts, members * dim] for concat, member
  0 first); `weights` for weighted_mean."""
  xp = jnp if isinstance(vectors, jax.Array) else np
  if how == "mean":
    return vectors.mean(0)
  if how == "max":
    return vectors.max(0)
  if how == "concat":
    return xp.concatenate(list(vectors), axis=-1)
  if how == "weighted_mean":
    w = xp.asarray(weights, vectors.dtype)
    return (vectors * w[:, None, None]).sum(0)
  raise ValueError(f"unknown combine {how!r}; known: {COMBINES}")


def chunk_windows(num_tokens: int, budget: int, stride: int) -> list[tuple[int, int]]:
  """Windows [start, end) of at most `budget` tokens every `stride` (<= budget, so every token
  is covered); the last ends at the text's end."""
  if not 1 <= stride <= budget:
    raise ValueError(f"--chunk_stride {stride} must be in [1, {budget}] (the tokens of a window "
                     "besides [CLS] and [SEP]): a larger stride would skip tokens")
  windows = []
  for start in range(0, max(num_tokens, 1), stride):
    windows.append((start, min(start + budget, num_tokens)))
    if start + budget >= num_tokens:
      break
  return windows


def combine_chunks(vectors: np.ndarray, owner: np.ndarray, tokens: np.ndarray, num_texts: int,
                   how: str) -> np.ndarray:
  """Per-chunk vectors [chunks, dim] -> [num_texts, dim]; owner (ascending) gives each chunk's
  text, tokens weigh weighted_mean. A one-chunk text keeps its vector; concat is refused (texts
  have different numbers of chunks)."""
  if how == "concat":
    raise ValueError("--combine concat cannot merge chunks (texts have different numbers of "
                     "chunks); use mean, max or weighted_mean (weighted by each chunk's tokens)")
  starts = np.searchsorted(owner, np.arange(num_texts + 1))
  out = np.array(vectors[starts[:-1]])  # the first chunk of each text
  for text in np.flatnonzero(np.diff(starts) > 1):
    rows = slice(starts[text], starts[text + 1])
    w = tokens[rows] / tokens[rows].sum() if how == "weighted_mean" else None
    out[text] = combine(vectors[rows][:, None], how, w)[0]
  return out
