"""Packed fine-tuning batches: several short examples to a row, one result per example.

A batch of `batch_size` examples (one per row, [batch, L]) is packed first-fit
decreasing (`first_fit_decreasing`: the longest example first, each into the
first row with room; the batch's examples are already drawn, so their order
inside the batch changes nothing a result depends on) and laid out as the
pretraining path lays out its packs (bert_jax.data.stream.rows.pack_examples): its
`input_mask` numbers a row's examples 1..k for block-diagonal attention,
`position_ids` restart at each example. The number of rows is rounded up to a
multiple of `row_step`, so the step compiles at most batch_size / row_step times.

Example-level arrays (labels, weights) keep their [batch] shape and order, and
`cls_index` int [batch] locates each example's [CLS] in the flattened
[rows * seq_len] hidden states: a sequence head gathers there, so its loss and
metrics are per example exactly as unpacked. Per-token arrays ([batch, L]:
input_ids, segment_ids, per-token labels of a token head) are packed the same
way, so a token head reads its own tokens from sequence_output [rows, seq_len]
with labels laid out alike.
"""
import numpy as np

from bert_jax.data.stream import length_buckets
from bert_jax.data.stream import rows as rows_lib

# Per-token inputs the packed model reads besides input_mask (which packing renumbers).
TOKEN_INPUTS = ("input_ids", "segment_ids")


def row_step(batch_size: int, shards: int) -> int:
  """Packed rows per batch are a multiple of this: batch_size / 8 rounded up to whole
  multiples of the mesh's batch shards (at most 8 row counts, so 8 compilations)."""
  step = max(1, -(-batch_size // 8))
  return -(-step // shards) * shards


def pack_batch(batch: dict, seq_len: int, step: int, pad_id: int,
               position_offset: int = 0) -> dict:
  """One batch of unpacked examples as packed rows.

  Args:
    batch: arrays of one example per row: per-token [batch, L] (input_ids,
      input_mask, segment_ids, ...) and per-example [batch] (labels, weights).
    seq_len: tokens per packed row (>= L is not needed: each example's real
      tokens must fit).
    step: the number of rows is rounded up to a multiple of this.
    pad_id: input_ids of padding positions.
    position_offset: added to the restarting positions (the model's
      position_offset: RoBERTa's first token is at pad_token_id + 1).

  Returns:
    Per-token arrays [rows, seq_len] (input_mask numbering the examples,
    position_ids), per-example arrays unchanged, and cls_index int32 [batch]:
    each example's first token as row * seq_len + column.
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
  """Rows of seq_len tokens for examples of `lengths` tokens, first-fit decreasing.

  Args:
    lengths: int [n] tokens of each example (each <= seq_len).
    seq_len: tokens per row.

  Returns:
    order int64 [n] (the examples row by row; ties keep their index order) and
    splits int64 [rows + 1]: row r holds examples order[splits[r]:splits[r + 1]].
  """
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
