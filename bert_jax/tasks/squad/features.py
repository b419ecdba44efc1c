"""SQuAD windows as Google's run_squad.py makes them: `[CLS] question [SEP] context [SEP]`
sliding by doc_stride, each token scored in the window that gives it most context.

BPE and SentencePiece tokenizers get their windows from offsets.py.
"""
import collections
import dataclasses
import logging
from typing import Optional, Sequence

import numpy as np

from bert_jax.tasks.squad.data import SquadExample

@dataclasses.dataclass
class SquadFeature:
  """Post-processing metadata of one window (row of the feature arrays).

  token_to_orig_map: row position -> doc token. token_is_max_context: whether this window gives
  the token its most context. offsets: row position -> context characters (squad_offsets
  features; None for WordPiece's).
  """
  example_index: int
  doc_span_index: int
  tokens: list
  token_to_orig_map: dict
  token_is_max_context: dict
  offsets: Optional[dict] = None


def _pieces(tokenizer, texts, cache):
  """Word-piece ids of each text, tokenizing unseen texts in one batch."""
  new = list(dict.fromkeys(t for t in texts if t not in cache))
  if new:
    for text, ids in zip(new, tokenizer.tokenize_to_ids(new)):
      cache[text] = list(ids)
  return [cache[t] for t in texts]


def _improve_answer_span(doc_pieces, start, end, answer_pieces):
  """The first (start, end) inside [start, end] whose pieces spell the answer's pieces."""
  target = " ".join(answer_pieces)
  for new_start in range(start, end + 1):
    for new_end in range(end, new_start - 1, -1):
      if " ".join(doc_pieces[new_start:new_end + 1]) == target:
        return new_start, new_end
  return start, end


def is_max_context(doc_spans, span_index, position):
  """Whether window `span_index` gives doc piece `position` its most context."""
  best_score, best_index = None, None
  for index, (start, length) in enumerate(doc_spans):
    end = start + length - 1
    if not start <= position <= end:
      continue
    score = min(position - start, end - position) + 0.01 * length
    if best_score is None or score > best_score:
      best_score, best_index = score, index
  return span_index == best_index


def convert_examples_to_features(tokenizer, examples: Sequence[SquadExample],
                                 max_seq_length: int = 384, doc_stride: int = 128,
                                 max_query_length: int = 64, is_training: bool = False):
  """Windows of `[CLS] question [SEP] context [SEP]`, as Google's run_squad.

  Returns (arrays, features): int32 input_ids, input_mask, segment_ids [f, max_seq_length];
  start_positions, end_positions [f] (0 for eval, impossible or out-of-window answers);
  is_impossible, weights, example_index, feature_index (-1 once padded); and the SquadFeature
  list aligned with the rows.
  """
  if max_seq_length <= max_query_length + 3:
    raise ValueError(f"max_seq_length ({max_seq_length}) must be greater than "
                     f"max_query_length ({max_query_length}) + 3")
  if doc_stride <= 0:
    raise ValueError(f"doc_stride must be positive, got {doc_stride}")
  cache = {}
  # Batch-tokenize everything once: questions, answers, and every doc token.
  question_pieces = _pieces(tokenizer, [ex.question_text for ex in examples], cache)
  _pieces(tokenizer, [t for ex in examples for t in ex.doc_tokens], cache)
  if is_training:
    answer_pieces = _pieces(tokenizer, [ex.orig_answer_text or "" for ex in examples], cache)
  id_to_token = {}

  def to_tokens(ids):
    unknown = [i for i in dict.fromkeys(ids) if i not in id_to_token]
    if unknown:
      id_to_token.update(zip(unknown, tokenizer.convert_ids_to_tokens(unknown)))
    return [id_to_token[i] for i in ids]

  rows = collections.defaultdict(list)
  features = []
  for example_index, example in enumerate(examples):
    query = question_pieces[example_index][:max_query_length]
    tok_to_orig_index, orig_to_tok_index, doc_ids = [], [], []
    for i, token in enumerate(example.doc_tokens):
      orig_to_tok_index.append(len(doc_ids))
      ids = cache[token]
      doc_ids.extend(ids)
      tok_to_orig_index.extend([i] * len(ids))
    doc_pieces = to_tokens(doc_ids)

    tok_start = tok_end = None
    if is_training and example.is_impossible:
      tok_start = tok_end = -1
    elif is_training:
      tok_start = orig_to_tok_index[example.start_position]
      if example.end_position < len(example.doc_tokens) - 1:
        tok_end = orig_to_tok_index[example.end_position + 1] - 1
      else:
        tok_end = len(doc_ids) - 1
      tok_start, tok_end = _improve_answer_span(
          doc_pieces, tok_start, tok_end, to_tokens(answer_pieces[example_index]))

    doc_spans = doc_windows(len(doc_ids), max_seq_length - len(query) - 3, doc_stride)

    query_tokens = to_tokens(query)
    for span_index, (span_start, span_length) in enumerate(doc_spans):
      token_to_orig_map, token_is_max_context = {}, {}
      offset = len(query) + 2  # [CLS] query [SEP]
      for i in range(span_length):
        piece = span_start + i
        token_to_orig_map[offset + i] = tok_to_orig_index[piece]
        token_is_max_context[offset + i] = is_max_context(doc_spans, span_index, piece)
      ids = ([tokenizer.cls_id] + query + [tokenizer.sep_id] +
             doc_ids[span_start:span_start + span_length] + [tokenizer.sep_id])
      tokens = (["[CLS]"] + query_tokens + ["[SEP]"] +
                doc_pieces[span_start:span_start + span_length] + ["[SEP]"])
      segments = [0] * offset + [1] * (span_length + 1)
      start_position = end_position = 0
      if is_training and not example.is_impossible:
        span_end = span_start + span_length - 1
        if span_start <= tok_start and tok_end <= span_end:
          start_position = tok_start - span_start + offset
          end_position = tok_end - span_start + offset
      append_row(rows, ids, segments, tokenizer.pad_id, max_seq_length,
                 start_position=start_position, end_position=end_position,
                 is_impossible=example.is_impossible, example_index=example_index)
      features.append(SquadFeature(
          example_index=example_index, doc_span_index=span_index, tokens=tokens,
          token_to_orig_map=token_to_orig_map, token_is_max_context=token_is_max_context))

  return rows_to_arrays(rows, max_seq_length), features


def doc_windows(n: int, max_tokens_for_doc: int, doc_stride: int) -> list:
  """(start, length) windows of at most max_tokens_for_doc of n doc pieces, doc_stride apart."""
  doc_spans = []
  start_offset = 0
  while start_offset < n:
    length = min(n - start_offset, max_tokens_for_doc)
    doc_spans.append((start_offset, length))
    if start_offset + length == n:
      break
    start_offset += min(length, doc_stride)
  return doc_spans


def append_row(rows: dict, ids: list, segments: list, pad_id: int, max_seq_length: int, *,
               start_position: int, end_position: int, is_impossible: bool, example_index: int):
  """Adds one window, padded to max_seq_length, to the per-row lists."""
  pad = max_seq_length - len(ids)
  rows["input_ids"].append(ids + [pad_id] * pad)
  rows["input_mask"].append([1] * len(ids) + [0] * pad)
  rows["segment_ids"].append(segments + [0] * pad)
  rows["start_positions"].append(start_position)
  rows["end_positions"].append(end_position)
  rows["is_impossible"].append(int(is_impossible))
  rows["example_index"].append(example_index)


def rows_to_arrays(rows: dict, max_seq_length: int) -> dict:
  """The feature arrays (see convert_examples_to_features) of per-row lists."""
  f = len(rows["example_index"])
  arrays = {
      "input_ids": np.array(rows["input_ids"], np.int32).reshape(f, max_seq_length),
      "input_mask": np.array(rows["input_mask"], np.int32).reshape(f, max_seq_length),
      "segment_ids": np.array(rows["segment_ids"], np.int32).reshape(f, max_seq_length),
      "start_positions": np.array(rows["start_positions"], np.int32),
      "end_positions": np.array(rows["end_positions"], np.int32),
      "is_impossible": np.array(rows["is_impossible"], np.int32),
      "weights": np.ones((f,), np.float32),
      "example_index": np.array(rows["example_index"], np.int32),
      "feature_index": np.arange(f, dtype=np.int32),
  }
  logging.info("SQuAD features: %d windows of %d tokens", f, max_seq_length)
  return arrays
