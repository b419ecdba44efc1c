"""Packed fine-tuning batches: several short examples to a row, one result per example.

A batch is packed first-fit decreasing (its examples are already drawn, so order inside it
changes nothing) and laid out as pretraining's packs (rows.pack_examples). Rows are rounded
up to a multiple of `row_step`, bounding compilations. Per-example arrays keep their [batch]
shape, and `cls_index` locates each example's [CLS] in the flattened hidden states, so a
sequence head's loss and metrics are exactly those unpacked.
"""
import numpy as np

from bert_jax.batching import length_buckets
from bert_jax.data.stream import rows as rows_lib

# Per-token inputs the packed model reads besides input_mask (which packing renumbers).
TOKEN_INPUTS = ("input_ids", "segment_ids")


def row_step(batch_size: int, shards: int) -> int:
  """Packed rows per batch are a multiple of this: batch_size / 8 rounded up to whole
  multiples of the mesh's batch shards (so at most 8 compilations)."""
  step = max(1, -(-batch_size // 8))
  return -(-step // shards) * shards


def pack_batch(batch: dict, seq_len: int, step: int, pad_id: int,
               position_offset: int = 0) -> dict:
  """One batch of unpacked examples ([batch, L] per token, [batch] per example) as packed rows.

  Rows are rounded up to a multiple of `step`; position_offset is the model's (RoBERTa starts at
  pad_token_id + 1). Returns per-token arrays [rows, seq_len] with input_mask numbering the
  examples and position_ids, per-example arrays unchanged, and cls_index int32 [batch].
  """
  lengths = length_buckets.row_lengths(batch["input_mask"])
  order, splits = first_fit_decreasing(lengths, seq_len)
  rows = len(splits) - 1
  token_keys = [k for k, v in batch.items() if np.ndim(v) == 2 and k != "input_mask"]
  packed = rows_lib.pack_examples({k: batch[k][order] for k in token_keys}, lengths[order],
                                  splits, seq_len, num_rows=-(-rows // step) * step,
                                  fill={"input_ids": pad_id})
  out = {k: v for k, v in batch.items() if np.ndim(v) != 2}
  out.update({k: packed[k] for k in token_keys})
  out["input_mask"] = packed["input_mask"]
  real = packed["input_mask"] > 0
  out["position_ids"] = np.where(real, packed["position_ids"] + position_offset,
                                 max(position_offset - 1, 0)).astype(np.int32)
  cls_index = np.empty(len(order), np.int32)
  cls_index[order] = packed["example_start"]
  out["cls_index"] = cls_index
  return out


def first_fit_decreasing(lengths: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
  """First-fit decreasing rows: order int64 [n] (examples row by row, ties by index) and
  splits int64 [rows + 1] (row r holds order[splits[r]:splits[r + 1]])."""
  lengths = np.asarray(lengths, np.int64)
  free, members = [], []
  for i in np.argsort(-lengths, kind="stable"):
    for r, room in enumerate(free):
      if lengths[i] <= room:
        break
    else:
      r = len(free)
      free.append(seq_len)
      members.append([])
    free[r] -= lengths[i]
    members[r].append(i)
  order = np.array([i for row in members for i in sorted(row)], np.int64)
  splits = np.cumsum([0] + [len(row) for row in members]).astype(np.int64)
  return order, splits
