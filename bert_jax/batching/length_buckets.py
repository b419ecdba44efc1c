"""Length-bucketed batches: each batch padded to the shortest of a few fixed lengths.

Most GLUE and embedding texts are a fraction of max_seq_length, so a batch is cut to the
smallest length of a small fixed set (`bucket_lengths`) that holds its longest row, and a
jitted step compiles at most once per length. A row may hold several sequences (pairs:
input_ids [n, 2, L]); its length is the longest, and per-token arrays are cut on the last axis.
"""
import dataclasses
import jax
import numpy as np

# Lengths a bucket may take (those up to the max length, and the max length itself): each at
# most 1.5x the one before, so a row of more than 8 tokens is padded to less than 1.5x that.
# 12 matters on a CPU: 69% of CoLA's training rows hold 5 to 12 tokens ([CLS] and [SEP] too).
_LENGTHS = (8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048)
# Training batches are formed within windows of this many batches of the permutation,
# sorted by length: rows of a batch are alike in length, batches still random.
WINDOW_BATCHES = 64


def bucket_lengths(max_len: int) -> tuple[int, ...]:
  """The fixed lengths for rows of at most `max_len` tokens (max_len itself the last)."""
  if max_len < 1:
    raise ValueError(f"max length must be positive, got {max_len}")
  return tuple(x for x in _LENGTHS if x < max_len) + (max_len,)


def choose_buckets(groups, max_len: int, shape_cost: float) -> tuple[int, ...]:
  """The subset of bucket_lengths(max_len) minimising padded row-tokens + lengths x shape_cost.

  shape_cost is what one more length's compilations cost, in row-tokens through the step.
  groups are (lengths [n], weight) pairs: weight is how often each row runs (training: epochs;
  eval: about 1/3 per evaluation). Exact (dynamic programming). Returns ascending lengths, at
  least one, the last holding the longest row.
  """
  candidates = bucket_lengths(max_len)
  weight = np.zeros(len(candidates))
  for lengths, w in groups:
    lengths = np.asarray(lengths, np.int64)
    if len(lengths) and int(lengths.max()) > max_len:
      raise ValueError(f"a row of {int(lengths.max())} tokens exceeds the max length {max_len}")
    idx = np.searchsorted(np.asarray(candidates), lengths, side="left")
    np.add.at(weight, idx, float(w))
  needed = np.nonzero(weight)[0]
  if not len(needed):
    return (candidates[0],)
  top = int(needed[-1])
  # best[j]: least cost of rows needing candidates <= j, with j chosen (the longest so far).
  best, prev = np.full(top + 1, np.inf), np.full(top + 1, -1)
  for j in range(top + 1):
    for i in range(-1, j):
      base = 0.0 if i < 0 else best[i]
      cost = base + weight[i + 1:j + 1].sum() * candidates[j] + shape_cost
      if cost < best[j]:
        best[j], prev[j] = cost, i
  out, j = [], top
  while j >= 0:
    out.append(candidates[j])
    j = int(prev[j])
  return tuple(sorted(out))


def parse_buckets(setting: str, max_len: int) -> "tuple[int, ...] | str":
  """The `length_buckets` config value: 'auto' or the lengths it names ('all': bucket_lengths);
  a ValueError unless ascending positive integers ending at most at max_len."""
  setting = str(setting).strip()
  if setting == "auto":
    return "auto"
  if setting == "all":
    return bucket_lengths(max_len)
  try:
    lengths = tuple(int(x) for x in setting.split(","))
  except ValueError:
    lengths = ()
  if (not lengths or any(b <= a for a, b in zip(lengths, lengths[1:])) or lengths[0] < 1
      or lengths[-1] != max_len):
    raise ValueError(f"length_buckets {setting!r}: give 'auto', 'all', or ascending lengths "
                     f"ending at max_seq_length, such as '16,32,{max_len}'")
  return lengths


def bucket_of(length: int, buckets: tuple[int, ...]) -> int:
  """The smallest of `buckets` (ascending) that holds `length` tokens."""
  i = int(np.searchsorted(np.asarray(buckets), length, side="left"))
  if i == len(buckets):
    raise ValueError(f"a row of {length} tokens exceeds the longest bucket {buckets[-1]}")
  return buckets[i]


def first_of_each_length(batches) -> list:
  """The first batch of each length in order of first use (what a run over `batches` compiles)."""
  seen, out = set(), []
  for b in batches:
    if b.length not in seen:
      seen.add(b.length)
      out.append(b)
  return out


def row_lengths(input_mask: np.ndarray) -> np.ndarray:
  """int64 [n]: the position after each row's last real token (the longest of its sequences)."""
  real = np.asarray(input_mask) > 0
  real = real.reshape(real.shape[0], -1, real.shape[-1]).any(axis=1)  # [n, L]
  last = real.shape[1] - np.argmax(real[:, ::-1], axis=1)
  return np.where(real.any(axis=1), last, 0).astype(np.int64)


@dataclasses.dataclass(frozen=True)
class Batch:
  """One bucketed batch: rows int64 [batch] (eval: -1 for padding), all cut to `length`."""
  rows: np.ndarray
  length: int


def train_batches(lengths: np.ndarray, order: np.ndarray, batch_size: int,
                  buckets: tuple[int, ...], rng: np.random.Generator,
                  window_batches: int = WINDOW_BATCHES) -> list[Batch]:
  """One epoch of bucketed training batches, len(order) // batch_size of them.

  The permutation `order` is cut into windows of `window_batches` batches, each sorted stably
  by length and cut into batches; the batches are shuffled with `rng`. window_batches=1 keeps
  each batch's rows as drawn (for losses that compare a batch's examples).
  """
  used = np.asarray(order, np.int64)[:len(order) // batch_size * batch_size]
  window = window_batches * batch_size
  batches = []
  for start in range(0, len(used), window):
    chunk = used[start:start + window]
    chunk = chunk[np.argsort(lengths[chunk], kind="stable")]
    for b in range(0, len(chunk), batch_size):
      rows = chunk[b:b + batch_size]
      batches.append(Batch(rows, bucket_of(int(lengths[rows].max()), buckets)))
  return [batches[i] for i in rng.permutation(len(batches))]


def sequential_batches(order: np.ndarray, batch_size: int, length: int,
                       pad_last: bool) -> list[Batch]:
  """Rows in `order`, `batch_size` at a time, every batch at `length`; pad_last fills the last
  batch with -1 rows (eval), else the remainder is dropped."""
  order = np.asarray(order, np.int64)
  if pad_last:
    total = max(1, -(-len(order) // batch_size)) * batch_size
    order = np.concatenate([order, np.full(total - len(order), -1, np.int64)])
  return [Batch(order[b:b + batch_size], length)
          for b in range(0, len(order) - batch_size + 1, batch_size)]


def eval_batches(lengths: np.ndarray, batch_size: int,
                 buckets: tuple[int, ...]) -> list[Batch]:
  """Every row once, sorted by length, ceil(n / batch_size) batches (at least one); the last is
  filled up with -1 rows."""
  batches = sequential_batches(np.argsort(lengths, kind="stable"), batch_size, buckets[-1],
                               pad_last=True)
  out = []
  for batch in batches:
    real = batch.rows[batch.rows >= 0]
    longest = int(lengths[real].max()) if len(real) else 1
    out.append(Batch(batch.rows, bucket_of(longest, buckets)))
  return out


def host_share(batch: Batch, process_index: int, process_count: int) -> Batch:
  """The rows of a global batch that one process feeds (its contiguous 1/count)."""
  per_host = len(batch.rows) // process_count
  return Batch(batch.rows[process_index * per_host:(process_index + 1) * per_host], batch.length)


def cut(arrays: dict, batch: Batch, keys) -> dict:
  """arrays[k][batch.rows] for k in keys, per-token arrays (rank >= 2) cut to batch.length on
  their last axis; padding rows (-1) are all zeros."""
  rows = batch.rows
  pad = rows < 0
  out = {}
  for k in keys:
    x = np.asarray(arrays[k])[np.where(pad, 0, rows)]
    if x.ndim >= 2:
      x = x[..., :batch.length]
    if pad.any():
      x = np.where(pad.reshape((-1,) + (1,) * (x.ndim - 1)), np.zeros((), x.dtype), x)
    out[k] = x
  return out


def scatter_outputs(chunks: list, batches: list[Batch], n: int):
  """Per-batch outputs (pytrees of [batch, ...] numpy) -> one pytree of [n, ...] in row order."""
  rows = np.concatenate([b.rows for b in batches])
  keep = rows >= 0

  def place(*xs):
    stacked = np.concatenate(xs)
    out = np.zeros((n,) + stacked.shape[1:], stacked.dtype)
    out[rows[keep]] = stacked[keep]
    return out
  return jax.tree.map(place, *chunks)
