"""SQuAD features for byte-level BPE and SentencePiece tokenizers, by character offsets.

As transformers' run_qa.py: the context is tokenized whole with each token's characters; a
training answer becomes the first and last context tokens overlapping it, and a predicted
span is cut from the context by its tokens' offsets. Rows are the tokenizer's pair layout,
windowed and scored for max context as WordPiece's features are.
"""
import collections
from typing import Sequence

from bert_jax.tasks.squad import data as squad_data
from bert_jax.tasks.squad import features as squad


def answer_tokens(spans: Sequence[tuple], start_char: int, end_char: int):
  """(first, last) token whose non-empty span overlaps characters [start_char, end_char), or None."""
  hits = [i for i, (s, e) in enumerate(spans) if s < e and s < end_char and e > start_char]
  return (hits[0], hits[-1]) if hits else None


def convert_examples_to_features(tokenizer, examples: Sequence[squad_data.SquadExample],
                                 max_seq_length: int = 384, doc_stride: int = 128,
                                 max_query_length: int = 64, is_training: bool = False):
  """As `squad.convert_examples_to_features`; each SquadFeature also has `offsets`."""
  specials = tokenizer.num_special_tokens(pair=True)
  if max_seq_length <= max_query_length + specials:
    raise ValueError(f"max_seq_length ({max_seq_length}) must be greater than "
                     f"max_query_length ({max_query_length}) + {specials}")
  if doc_stride <= 0:
    raise ValueError(f"doc_stride must be positive, got {doc_stride}")
  if any(ex.context is None for ex in examples):
    raise ValueError("SQuAD offset features need each example's context text")
  questions = tokenizer.tokenize_to_ids([ex.question_text.lstrip() for ex in examples])
  contexts = list(dict.fromkeys(ex.context for ex in examples))
  encoded = dict(zip(contexts, tokenizer.tokenize_with_offsets(contexts)))
  rows = collections.defaultdict(list)
  features = []
  for example_index, example in enumerate(examples):
    query = questions[example_index][:max_query_length]
    doc_ids, spans = encoded[example.context]
    tok_start = tok_end = -1
    if is_training and not example.is_impossible:
      found = answer_tokens(spans, example.answer_start,
                            example.answer_start + len(example.orig_answer_text))
      if found is not None:
        tok_start, tok_end = found
    doc_spans = squad.doc_windows(len(doc_ids), max_seq_length - len(query) - specials,
                                  doc_stride)
    for span_index, (span_start, span_length) in enumerate(doc_spans):
      window = doc_ids[span_start:span_start + span_length]
      ids, segments = tokenizer.build_inputs(query, window)
      offset = len(ids) - span_length - 1  # row position of the window's first token
      positions = range(offset, offset + span_length)
      token_to_orig_map = {p: span_start + i for i, p in enumerate(positions)}
      token_is_max_context = {p: squad.is_max_context(doc_spans, span_index, span_start + i)
                              for i, p in enumerate(positions)}
      offsets = {p: spans[span_start + i] for i, p in enumerate(positions)}
      start_position = end_position = 0
      if tok_start >= 0 and span_start <= tok_start and tok_end < span_start + span_length:
        start_position, end_position = tok_start - span_start + offset, tok_end - span_start + offset
      squad.append_row(rows, ids, segments, tokenizer.pad_id, max_seq_length,
                       start_position=start_position, end_position=end_position,
                       is_impossible=example.is_impossible, example_index=example_index)
      features.append(squad.SquadFeature(
          example_index=example_index, doc_span_index=span_index,
          tokens=tokenizer.convert_ids_to_tokens(ids), token_to_orig_map=token_to_orig_map,
          token_is_max_context=token_is_max_context, offsets=offsets))
  return squad.rows_to_arrays(rows, max_seq_length), features


def converter(tokenizer):
  """The feature conversion of a tokenizer: Google's run_squad for WordPiece, else offsets."""
  return (squad.convert_examples_to_features if tokenizer.kind == "wordpiece"
          else convert_examples_to_features)
