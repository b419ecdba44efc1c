"""The held-out batches of the pretraining stream (PretrainData.eval_iterator).

Unlike the training stream, nothing is shuffled: the held-out examples are taken in source
order, shard after shard, and cycled when a pass over the shards yields fewer rows than the
batches asked for; NSP choices and masks are fixed (keyed by the row's number from the first
pass on), so every call yields the same batches.
"""
from typing import Callable, Iterator, Optional

import numpy as np

from bert_jax.data.stream import example_pools
from bert_jax.data.stream import masking


def masked_batch(parts: list[dict[str, np.ndarray]], keys: list[np.ndarray],
                 mask_spec: masking.MaskingSpec) -> dict[str, np.ndarray]:
  """Concatenates row chunks into one batch and masks it with the rows' `keys`."""
  batch = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
  masked = masking.mask_batch(batch["input_ids"], batch["input_mask"], np.concatenate(keys),
                              mask_spec)
  batch.update(masked)
  return batch


def batches(num_batches: int, *,
            one_pass: Callable[[], Iterator[Optional[example_pools.ExamplePool]]],
            build_rows, row_keys: Callable[[np.ndarray], np.ndarray],
            mask_spec: masking.MaskingSpec, batch_size: int,
            no_rows_error: Callable[[], Exception]) -> Iterator[dict[str, np.ndarray]]:
  """`num_batches` masked batches of `batch_size` held-out rows.

  Args:
    num_batches: batches to yield.
    one_pass: () -> each shard's held-out pool in shard order (None for a shard without
      held-out examples), read lazily: a pass stops at the shard that completes the last
      batch.
    build_rows: the row layout (ExamplePool.rows' `build`).
    row_keys: row numbers [n] (counted over every pass) -> their masking keys.
    mask_spec: the masking.
    batch_size: rows per batch.
    no_rows_error: () -> the error raised when a whole pass yields no row.

  Yields:
    Batches of the training stream's features.
  """
  parts, keys, pending, row, made = [], [], 0, 0, 0
  while made < num_batches:
    before = row
    for pool in one_pass():
      lo = 0
      while pool is not None and lo < pool.num_rows and made < num_batches:
        hi = min(pool.num_rows, lo + batch_size - pending)
        parts.append(pool.rows(lo, hi, build_rows))
        keys.append(row_keys(row + np.arange(hi - lo)))
        row += hi - lo
        pending += hi - lo
        lo = hi
        if pending == batch_size:
          yield masked_batch(parts, keys, mask_spec)
          parts, keys, pending, made = [], [], 0, made + 1
      if made == num_batches:
        return
    if row == before:
      raise no_rows_error()
