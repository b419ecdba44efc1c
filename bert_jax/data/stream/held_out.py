"""The held-out batches of the pretraining stream (PretrainData.eval_iterator).

Nothing is shuffled: held-out examples are taken in source order and cycled when a pass yields
too few rows; NSP choices and masks are keyed by the row's number, so every call yields the
same batches.
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

  one_pass() gives each shard's held-out pool in shard order (None for a shard without any),
  lazily: a pass stops at the shard that completes the last batch. row_keys maps row numbers
  (counted over every pass) to masking keys; no_rows_error() is raised when a pass yields no row.
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
