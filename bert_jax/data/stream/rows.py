"""Fixed-length rows from example spans: ids, masks, segment and position ids.

Unpacked: `[CLS] A [SEP] B [SEP]` or `[CLS] A [SEP]`, padded. Packed: several examples per
row, `input_mask` numbering them 1..k (0 padding) and `position_ids` restarting at 0 for each.
"""
from typing import Optional

import numpy as np

from bert_jax.data.stream import segments


def _spans(ids: np.ndarray, tokens: np.ndarray, start: np.ndarray, span_len: np.ndarray,
           first_col: np.ndarray) -> None:
  """ids[r, first_col[r] + j] = tokens[start[r] + j] for j < span_len[r], for every row r."""
  row = np.repeat(np.arange(len(span_len)), span_len)
  within = np.arange(len(row)) - np.repeat(np.cumsum(span_len) - span_len, span_len)
  ids[row, np.repeat(first_col, span_len) + within] = tokens[np.repeat(start, span_len) + within]


def _example_rows(tokens: np.ndarray, ex: segments.Examples, seq_len: int, cls_id: int,
                  sep_id: int, pad_id: int):
  """Per-example rows: ids [n, L], length [n], segment ids [n, L] (only real tokens scattered)."""
  n = len(ex)
  la, lb = ex.a_len, ex.b_len
  s1 = ex.final_sep.astype(np.int64)
  has_b = (lb > 0).astype(np.int64)
  b_col = 1 + la + s1  # first column of B
  length = b_col + lb + has_b  # [n]
  ids = np.full((n, seq_len), pad_id, np.int32)
  ids[:, 0] = cls_id
  _spans(ids, tokens, ex.a_start, la, np.ones(n, np.int64))
  _spans(ids, tokens, ex.b_start, lb, b_col)
  r = np.flatnonzero(s1)
  ids[r, la[r] + 1] = sep_id
  r = np.flatnonzero(has_b)
  ids[r, b_col[r] + lb[r]] = sep_id
  p = np.arange(seq_len)[None, :]
  segment = ((p >= b_col[:, None]) & (p < length[:, None])).astype(np.int32)
  return ids, length, segment


def build_rows(tokens: np.ndarray, ex: segments.Examples, seq_len: int, *, cls_id: int,
               sep_id: int, pad_id: int,
               pack_splits: Optional[np.ndarray] = None) -> dict[str, np.ndarray]:
  """Lays examples out as rows of seq_len: input_ids, input_mask, segment_ids, and
  next_sentence_labels; with pack_splits (row r holds examples pack_splits[r]:pack_splits[r + 1])
  also position_ids."""
  ids, length, segment = _example_rows(tokens, ex, seq_len, cls_id, sep_id, pad_id)
  p = np.arange(seq_len)[None, :]
  if pack_splits is None:
    return {"input_ids": ids, "input_mask": (p < length[:, None]).astype(np.int32),
            "segment_ids": segment, "next_sentence_labels": ex.label.astype(np.int32)}
  packed = pack_examples({"input_ids": ids}, length, pack_splits, seq_len,
                         fill={"input_ids": pad_id})
  rows = len(pack_splits) - 1
  return {"input_ids": packed["input_ids"], "input_mask": packed["input_mask"],
          "segment_ids": np.zeros((rows, seq_len), np.int32),
          "next_sentence_labels": np.zeros(rows, np.int32),
          "position_ids": packed["position_ids"]}


def pack_examples(features: dict[str, np.ndarray], length: np.ndarray, pack_splits: np.ndarray,
                  seq_len: int, num_rows: Optional[int] = None,
                  fill: Optional[dict] = None) -> dict[str, np.ndarray]:
  """Lays out per-token features (name -> [n, L0], each example's tokens first) several
  examples to a row.

  pack_splits is segments.pack_rows'; num_rows (default: rows) may add all-padding rows; fill
  gives padding values (default 0). Returns each feature [num_rows, seq_len] plus input_mask
  (1..k per example, 0 padding: layers.attention_mask's block diagonal), position_ids, and
  example_start int64 [n] (flat index of each example's first token).
  """
  rows = len(pack_splits) - 1
  num_rows = rows if num_rows is None else num_rows
  if num_rows < rows:
    raise ValueError(f"{rows} packed rows do not fit num_rows {num_rows}")
  length = np.asarray(length, np.int64)
  if len(length) and length.max() > seq_len:
    raise ValueError(f"an example of {length.max()} tokens does not fit rows of {seq_len}")
  per_row = np.diff(pack_splits)
  row_of = np.repeat(np.arange(rows), per_row)  # [n]
  first = np.repeat(pack_splits[:-1], per_row)
  number = np.arange(len(length)) - first + 1  # 1-based example number in its row
  offset = np.cumsum(length) - length
  offset = offset - offset[first]  # start of each example in its row
  start = row_of * seq_len + offset  # [n]
  width = max((x.shape[1] for x in features.values()), default=seq_len)
  p = np.arange(min(width, seq_len))[None, :]
  valid = p < length[:, None]  # [n, P]
  target = (start[:, None] + p)[valid]  # flat indices into [num_rows * seq_len]
  fill = fill or {}
  out = {}
  for name, x in features.items():
    flat = np.full(num_rows * seq_len, fill.get(name, 0), x.dtype)
    flat[target] = x[:, :p.shape[1]][valid]
    out[name] = flat.reshape(num_rows, seq_len)
  mask = np.zeros(num_rows * seq_len, np.int32)
  mask[target] = np.broadcast_to(number[:, None], valid.shape)[valid]
  pos = np.zeros(num_rows * seq_len, np.int32)
  pos[target] = np.broadcast_to(p, valid.shape)[valid]
  out["input_mask"] = mask.reshape(num_rows, seq_len)
  out["position_ids"] = pos.reshape(num_rows, seq_len)
  out["example_start"] = start
  return out
