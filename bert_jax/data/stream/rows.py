"""Fixed-length rows from example spans: ids, masks, segment and position ids.

Unpacked, one example per row: `[CLS] A [SEP] B [SEP]` (NSP) or
`[CLS] A [SEP]` (no closing [SEP] when A already ends with a document's
[SEP]), padded with [PAD]. Packed, several `[CLS] A [SEP]` examples share a
row; `input_mask` numbers them 1..k (0 for padding) and `position_ids` restart
at 0 for each. All of it is index arithmetic over [rows, seq_len] arrays.
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
  """Per-example rows: ids [n, L], length [n], segment ids [n, L].

  Only the real tokens are written (scatters over the spans), not [n, L] index arrays.
  """
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
  """Lays examples out as rows.

  Args:
    tokens: int32 [T], the array the example spans index.
    ex: examples in row order (each fits seq_len).
    seq_len: L.
    cls_id, sep_id, pad_id: special ids.
    pack_splits: int64 [rows + 1] when packing (row r holds examples
      pack_splits[r]:pack_splits[r + 1]); None for one example per row.

  Returns:
    input_ids, input_mask, segment_ids int32 [rows, L]; next_sentence_labels
    int32 [rows]; with packing also position_ids int32 [rows, L].
  """
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
  """Lays out per-example token features several examples to a row.

  Args:
    features: name -> [n, L0] per-token arrays of each example, its tokens first
      (L0 >= length); e.g. input_ids, segment_ids, per-token labels.
    length: int [n] tokens of each example.
    pack_splits: int64 [rows + 1]: row r holds examples pack_splits[r]:pack_splits[r + 1]
      (segments.pack_rows); each row's examples fit in seq_len.
    seq_len: tokens per packed row.
    num_rows: rows of the result (>= rows; the extra rows are all padding);
      default: rows.
    fill: name -> the value of padding positions (default 0).

  Returns:
    Each feature [num_rows, seq_len], and
      input_mask int32 [num_rows, seq_len]: 1..k numbering a row's examples, 0 padding
        (the block-diagonal attention of layers.attention_mask);
      position_ids int32 [num_rows, seq_len]: restarting at 0 for each example;
      example_start int64 [n]: flat index (row * seq_len + column) of each example's
        first token, e.g. its [CLS].
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
