"""Several vectors of one text -> one: layers, chunks of a long text, checkpoints of an ensemble.

  COMBINES         mean, max, concat (side by side) and weighted_mean (weights normalised
                   to sum 1)
  combine          [members, texts, dim] -> [texts, dim] (concat: [texts, members * dim]);
                   numpy on the host, jax.numpy inside a jitted function, the same code
  check_weights    --weights for weighted_mean: one positive number per member
  chunk_windows    token windows [start, end) of a long text: `budget` tokens every `stride`
  combine_chunks   per-chunk vectors -> per-text vectors (a text of one chunk keeps its vector)

bert_jax.embed uses them for `--layers`, `--chunk_stride` and several `--checkpoint`s.
"""
from typing import Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np

COMBINES = ("mean", "max", "concat", "weighted_mean")


def check_weights(weights: Optional[Sequence[float]], members: int, what: str) -> np.ndarray:
  """float64 [members] weights summing to 1.

  Args:
    weights: one positive weight per member.
    members: how many vectors are combined.
    what: the members' name for messages ('--checkpoint', '--layers').

  Raises:
    ValueError: missing weights, another count, or a weight that is not positive.
  """
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
  """Merges the members of each text.

  Args:
    vectors: [members, texts, dim] (numpy, or jax inside jit).
    how: one of COMBINES.
    weights: [members] summing to 1, for weighted_mean (`check_weights`).

  Returns:
    [texts, dim], or [texts, members * dim] for concat (member 0 first).
  """
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
  """Windows [start, end) of at most `budget` tokens starting every `stride` tokens.

  The last window ends at the text's end (it may be shorter); a text of at most
  `budget` tokens is one window. stride <= budget, so every token is in a window.
  """
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
  """Per-chunk vectors -> per-text vectors.

  Args:
    vectors: [chunks, dim].
    owner: int [chunks], the text of each chunk (ascending, every text present).
    tokens: [chunks] the text tokens of each chunk: the weights of weighted_mean.
    num_texts: the number of texts.
    how: mean, max or weighted_mean (concat is refused: texts have different
      numbers of chunks).

  Returns:
    [num_texts, dim]; a text of one chunk gets that chunk's vector unchanged.
  """
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
