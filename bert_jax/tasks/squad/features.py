"""SQuAD v1.1 / v2.0: readers, Google run_squad features, n-best post-processing.

As Google's run_squad.py: contexts are split on whitespace, a training answer is located by
answer_start (skipped and counted with a warning when the words do not hold it), windows of
`[CLS] question [SEP] context [SEP]` slide by doc_stride, and n-best spans are mapped back to
the text by get_final_text, with v2.0's null score against null_score_diff_threshold. Two
deliberate differences: a training question with several answers trains on its first, and an
answer_start outside the context is skipped like any unfound answer (Google's code raises).
BPE and SentencePiece tokenizers get their features from squad_offsets.py.
"""
import collections
import dataclasses
import json
import logging
import math
from typing import Optional, Sequence

from etils import epath
import numpy as np

from bert_jax.runtime import atomic_files

# Google's starting null score; also the null odds of a v2.0 question whose
# n-best holds no span at all (Google's code fails there).
_NO_NULL_SCORE = 1e6


@dataclasses.dataclass
class SquadExample:
  """One question on one context.

  Attributes:
    answers: every gold answer text (evaluation; empty when impossible).
    orig_answer_text: training target ('' when impossible, None for eval).
    start_position, end_position: the target's doc tokens (-1 when impossible).
    answer_start: the target's first character in `context` (None: impossible or eval).
  """
  qas_id: str
  question_text: str
  doc_tokens: list
  answers: list
  is_impossible: bool = False
  orig_answer_text: Optional[str] = None
  start_position: Optional[int] = None
  end_position: Optional[int] = None
  context: Optional[str] = None
  answer_start: Optional[int] = None


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


def _is_whitespace(c: str) -> bool:
  return c in (" ", "\t", "\r", "\n") or ord(c) == 0x202F


def split_context(context: str):
  """(doc_tokens, char_to_word_offset) as run_squad: whitespace-separated tokens and per
  character its token (whitespace maps to the token before it, -1 before the first)."""
  doc_tokens, char_to_word_offset = [], []
  previous_is_whitespace = True
  for c in context:
    if _is_whitespace(c):
      previous_is_whitespace = True
    else:
      if previous_is_whitespace:
        doc_tokens.append(c)
      else:
        doc_tokens[-1] += c
      previous_is_whitespace = False
    char_to_word_offset.append(len(doc_tokens) - 1)
  return doc_tokens, char_to_word_offset


def _make_examples(records, is_training: bool, source: str):
  """(SquadExamples, skipped ids) from records (id, question, context, answers, is_impossible)."""
  examples, skipped = [], []
  split_cache = {}
  for record in records:
    context = record["context"]
    if context not in split_cache:
      split_cache = {context: split_context(context)}  # Questions come grouped by context.
    doc_tokens, char_to_word_offset = split_cache[context]
    answers = record["answers"]
    for a in answers:
      if not isinstance(a, dict) or not isinstance(a.get("text"), str):
        raise ValueError(f"{source}: question {record['id']!r}: an answer needs a 'text' string, "
                         f"got {a!r}")
    is_impossible = bool(record.get("is_impossible", False))
    example = SquadExample(
        qas_id=record["id"], question_text=record["question"], doc_tokens=doc_tokens,
        answers=[a["text"] for a in answers], is_impossible=is_impossible, context=context)
    if is_training:
      if is_impossible:
        example.orig_answer_text, example.start_position, example.end_position = "", -1, -1
      else:
        if not answers:
          raise ValueError(f"{source}: question {record['id']!r} has no answer and is not "
                           "marked is_impossible")
        answer = answers[0]
        offset = answer.get("answer_start")
        if isinstance(offset, bool) or not isinstance(offset, int):
          raise ValueError(f"{source}: question {record['id']!r}: answer_start must be an integer "
                           f"character offset, got {offset!r}")
        text = answer["text"]
        end_char = offset + len(text) - 1
        found = False
        if text and 0 <= offset and end_char < len(char_to_word_offset):
          start, end = char_to_word_offset[offset], char_to_word_offset[end_char]
          actual = " ".join(doc_tokens[start:end + 1])
          found = start >= 0 and actual.find(" ".join(text.split())) != -1
        if not found:
          logging.warning("%s: could not find answer %r at answer_start %d of question %s; "
                          "skipped", source, text, offset, record["id"])
          skipped.append(record["id"])
          continue
        example.orig_answer_text, example.start_position, example.end_position = (
            text, start, end)
        example.answer_start = offset
    examples.append(example)
  if skipped:
    logging.warning("%s: skipped %d of %d training questions whose answer could not be "
                    "found in the context", source, len(skipped), len(examples) + len(skipped))
  return examples, skipped


def examples_from_texts(questions: Sequence[str], contexts: Sequence[str]) -> list[SquadExample]:
  """Prediction examples of questions[i] over contexts[i] (ids 'q0', ...); ValueError if the
  counts differ."""
  if len(questions) != len(contexts):
    raise ValueError(f"{len(questions)} questions but {len(contexts)} contexts; give one "
                     "context per question")
  records = [{"id": f"q{i}", "question": q, "context": c, "answers": []}
             for i, (q, c) in enumerate(zip(questions, contexts))]
  return _make_examples(records, False, "examples_from_texts")[0]


def _json_records(dataset: list):
  for article in dataset:
    for paragraph in article["paragraphs"]:
      for qa in paragraph["qas"]:
        yield {"id": qa["id"], "question": qa["question"], "context": paragraph["context"],
               "answers": qa.get("answers", []),
               "is_impossible": qa.get("is_impossible", False)}


def article_slice(text: str, key: str) -> slice:
  """A config value 'start:stop' (either may be empty; '' = all) as a slice; ValueError names
  `key`."""
  if not text:
    return slice(None)
  parts = text.split(":")
  if len(parts) != 2 or not all(p.strip().lstrip("-").isdigit() or not p.strip() for p in parts):
    raise ValueError(f"config.{key}={text!r}: expected 'start:stop' article numbers, e.g. "
                     "':18' or '18:'")
  return slice(*(int(p) if p.strip() else None for p in parts))


def load_json(path: str, articles: slice = slice(None)) -> dict:
  """A SQuAD JSON file with only `articles` of its 'data'; ValueError when unreadable, not
  SQuAD, or no article is selected."""
  try:
    data = json.loads(epath.Path(path).read_text(encoding="utf-8"))
  except (OSError, json.JSONDecodeError) as e:
    raise ValueError(f"cannot read SQuAD file {path}: {e}") from e
  if not isinstance(data, dict) or "data" not in data:
    raise ValueError(f"{path}: not a SQuAD file (no top-level 'data' list)")
  if articles != slice(None):
    n = len(data["data"])
    data = dict(data, data=data["data"][articles])
    if not data["data"]:
      raise ValueError(f"{path}: articles {articles.start}:{articles.stop} select none of its "
                       f"{n} articles")
  return data


def read_squad_json(path: str, is_training: bool, articles: slice = slice(None)):
  """(examples in file order, ids of training questions skipped because answer_start does not
  match) of a SQuAD JSON file; is_training locates each first answer."""
  data = load_json(path, articles)
  try:
    records = list(_json_records(data["data"]))
  except (KeyError, TypeError) as e:
    raise ValueError(f"{path}: malformed SQuAD structure, missing key {e}") from e
  examples, skipped = _make_examples(records, is_training, path)
  logging.info("SQuAD %s: %d questions, %d examples", path, len(records), len(examples))
  return examples, skipped


def read_squad_tfds(version: str, split: str, tfds_data_dir: str, is_training: bool):
  """A prepared TFDS `squad/v1.1` or `squad/v2.0` split (no download), as `read_squad_json`."""
  from bert_jax.runtime import cpu_tensorflow  # pylint: disable=g-import-not-at-top
  tfds = cpu_tensorflow.import_tfds()
  name = f"squad/v{version.lstrip('v')}"
  try:
    ds = tfds.load(name, split=split, data_dir=tfds_data_dir or None, download=False)
  except Exception as e:  # TFDS raises several types for missing data.
    raise FileNotFoundError(
        f"TFDS {name} split {split!r} is not prepared in data_dir {tfds_data_dir!r} "
        f"(nothing is downloaded at run time): {e}") from e
  records = (record_from_tfds(ex) for ex in tfds.as_numpy(ds))
  return _make_examples(records, is_training, f"TFDS {name}/{split}")


def record_from_tfds(features: dict) -> dict:
  """One TFDS squad example (numpy) as a question record."""
  def text(value):
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)

  answers = features["answers"]
  return {
      "id": text(features["id"]),
      "question": text(features["question"]),
      "context": text(features["context"]),
      "answers": [{"text": text(t), "answer_start": int(s)}
                  for t, s in zip(answers["text"], answers["answer_start"])],
      "is_impossible": bool(features.get("is_impossible", False)),
  }


def to_eval_json(examples: Sequence[SquadExample], version: str) -> dict:
  """A SQuAD JSON of the examples' questions and gold answers, for squad_eval."""
  qas = [{"id": ex.qas_id, "question": ex.question_text,
          "answers": [{"text": a} for a in ex.answers]} for ex in examples]
  if version.lstrip("v") == "2.0":
    for qa, ex in zip(qas, examples):
      qa["is_impossible"] = ex.is_impossible
  return {"version": "1.1" if version.lstrip("v") == "1.1" else "v2.0",
          "data": [{"title": "", "paragraphs": [{"context": "", "qas": qas}]}]}


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


def get_final_text(pred_text: str, orig_text: str, basic_tokenize) -> str:
  """Projects a de-tokenized prediction back onto the original text (run_squad's).

  If `pred_text` is found in the basic tokens of `orig_text` and both agree character by
  character without spaces, the matching slice of `orig_text` is returned, else `orig_text`.
  """
  return _project(pred_text, orig_text, " ".join(basic_tokenize(orig_text)))


def _project(pred_text: str, orig_text: str, tok_text: str) -> str:
  """get_final_text given tok_text: pred_text's ends mapped to orig_text through a character
  alignment without spaces."""
  start_position = tok_text.find(pred_text)
  if start_position == -1:
    return orig_text
  end_position = start_position + len(pred_text) - 1
  orig_chars = [i for i, c in enumerate(orig_text) if c != " "]  # non-space index -> index
  if len(orig_chars) != len(tok_text) - tok_text.count(" "):
    return orig_text
  if not (0 <= start_position <= end_position < len(tok_text)):
    return orig_text  # An empty prediction has no end character.
  if tok_text[start_position] == " " or tok_text[end_position] == " ":
    return orig_text
  ns_start = start_position - tok_text.count(" ", 0, start_position)
  ns_end = end_position - tok_text.count(" ", 0, end_position)
  return orig_text[orig_chars[ns_start]:orig_chars[ns_end] + 1]


class _SpanBasicTokens:
  """basic_tokenize of doc-token spans, with one tokenizer call per context.

  A context's basic tokens are split per doc token by counting word starts among its pieces
  (not '##'; an [UNK] is one word); where that does not check out, spans are tokenized directly.
  """

  def __init__(self, tokenizer, examples):
    self._tokenizer = tokenizer
    self._by_context = {}
    unique = list(dict.fromkeys(t for ex in examples for t in ex.doc_tokens))
    pieces = dict(zip(unique, tokenizer.tokenize_to_ids(unique))) if unique else {}
    id_to_token = {}
    for ids in pieces.values():
      for i in ids:
        id_to_token.setdefault(i, None)
    id_to_token = dict(zip(id_to_token, tokenizer.convert_ids_to_tokens(list(id_to_token))))
    unk_id = getattr(tokenizer, "unk_id", None)
    for ex in examples:
      key = " ".join(ex.doc_tokens)
      if key in self._by_context:
        continue
      words = tokenizer.basic_tokenize(key)
      per_token, at = [], 0
      for token in ex.doc_tokens:
        token_pieces = [id_to_token[i] for i in pieces[token]]
        count = sum(1 for p in token_pieces if not p.startswith("##"))
        token_words = words[at:at + count]
        at += count
        if (unk_id not in pieces[token] and
            "".join(token_words) != "".join(p[2:] if p.startswith("##") else p
                                            for p in token_pieces)):
          per_token = None
          break
        per_token.append(token_words)
      self._by_context[key] = per_token if per_token is not None and at == len(words) else None

  def __call__(self, example: SquadExample, first: int, last: int) -> str:
    """The basic tokens of doc tokens first..last joined by spaces."""
    per_token = self._by_context[" ".join(example.doc_tokens)]
    if per_token is None:
      orig_text = " ".join(example.doc_tokens[first:last + 1])
      return " ".join(self._tokenizer.basic_tokenize(orig_text))
    return " ".join(w for words in per_token[first:last + 1] for w in words)


def _best_indexes(logits, n_best_size):
  """Positions of the n largest logits, ties by position (a stable sort)."""
  return [int(i) for i in np.argsort(-np.asarray(logits), kind="stable")[:n_best_size]]


def _softmax(scores):
  if not scores:
    return []
  top = max(scores)
  exps = [math.exp(s - top) for s in scores]
  total = sum(exps)
  return [e / total for e in exps]


def postprocess_predictions(examples: Sequence[SquadExample],
                            features: Sequence[SquadFeature], start_logits, end_logits, *,
                            tokenizer, n_best_size: int = 20, max_answer_length: int = 30,
                            version_2_with_negative: bool = False,
                            null_score_diff_threshold: float = 0.0):
  """Answers from per-window start/end logits, as Google's write_predictions.

  Rows of padding (feature_index -1) must be dropped first. n_best_size is both the candidates
  per window and the entries kept; max_answer_length counts word pieces. v2.0 predicts '' when
  null score - best span score exceeds null_score_diff_threshold. Returns (predictions, nbest
  with probabilities, null_odds; empty for v1.1), each by question id.
  """
  start_logits = np.asarray(start_logits)
  end_logits = np.asarray(end_logits)
  if start_logits.shape[0] != len(features) or end_logits.shape != start_logits.shape:
    raise ValueError(f"{len(features)} features but logits of shapes {start_logits.shape} "
                     f"and {end_logits.shape}")
  if all(feature.offsets is not None for feature in features):
    span_basic_tokens = None  # Answers are cut from the context by character offsets.
  else:
    span_basic_tokens = _SpanBasicTokens(tokenizer, examples)
  by_example = collections.defaultdict(list)
  for feature_index, feature in enumerate(features):
    by_example[feature.example_index].append(feature_index)

  predictions, all_nbest, null_odds = {}, {}, {}
  for example_index, example in enumerate(examples):
    prelim, null = _candidate_spans(by_example[example_index], features, start_logits,
                                    end_logits, n_best_size, max_answer_length,
                                    version_2_with_negative)
    nbest = _nbest_answers(prelim, null, example, features, span_basic_tokens, n_best_size,
                           version_2_with_negative)
    probs = _softmax([s + e for _, s, e in nbest])
    all_nbest[example.qas_id] = [
        {"text": text, "probability": p, "start_logit": s, "end_logit": e}
        for (text, s, e), p in zip(nbest, probs)]
    if not version_2_with_negative:
      predictions[example.qas_id] = nbest[0][0]
    else:
      best_span = next((entry for entry in nbest if entry[0]), None)
      if best_span is None:  # Only the null answer is left.
        null_odds[example.qas_id] = _NO_NULL_SCORE
        predictions[example.qas_id] = ""
        continue
      score_diff = null[0] - best_span[1] - best_span[2]
      null_odds[example.qas_id] = score_diff
      predictions[example.qas_id] = "" if score_diff > null_score_diff_threshold else best_span[0]
  return predictions, all_nbest, null_odds


def _candidate_spans(feature_indexes, features, start_logits, end_logits, n_best_size: int,
                     max_answer_length: int, version_2_with_negative: bool):
  """(prelim, null) of one example: valid spans over its windows, best first (the null answer
  among them for v2.0), and (score, feature_index, start_logit, end_logit) of the window with
  the lowest null score (score _NO_NULL_SCORE, feature None: none)."""
  prelim = []
  null = (_NO_NULL_SCORE, None, 0.0, 0.0)
  for feature_index in feature_indexes:
    feature = features[feature_index]
    starts = start_logits[feature_index].tolist()
    ends = end_logits[feature_index].tolist()
    if version_2_with_negative and starts[0] + ends[0] < null[0]:
      null = (starts[0] + ends[0], feature_index, starts[0], ends[0])
    best_ends = _best_indexes(end_logits[feature_index], n_best_size)
    for start in _best_indexes(start_logits[feature_index], n_best_size):
      for end in best_ends:
        if start >= len(feature.tokens) or end >= len(feature.tokens):
          continue
        if start not in feature.token_to_orig_map or end not in feature.token_to_orig_map:
          continue
        if not feature.token_is_max_context.get(start, False):
          continue
        if end < start or end - start + 1 > max_answer_length:
          continue
        prelim.append((feature_index, start, end, starts[start], ends[end]))
  if version_2_with_negative and null[1] is not None:
    prelim.append((null[1], 0, 0, null[2], null[3]))
  prelim.sort(key=lambda p: p[3] + p[4], reverse=True)  # Stable, as Google's sorted().
  return prelim, null


def _nbest_answers(prelim, null, example, features, span_basic_tokens, n_best_size: int,
                   version_2_with_negative: bool) -> list[tuple[str, float, float]]:
  """The n best distinct answers (text, start_logit, end_logit) of an example's spans."""
  nbest, seen = [], set()
  for feature_index, start, end, start_logit, end_logit in prelim:
    if len(nbest) >= n_best_size:
      break
    feature = features[feature_index]
    if start == 0:  # The null answer.
      text = ""
    elif feature.offsets is not None:  # A span, cut from the context by offsets.
      text = example.context[feature.offsets[start][0]:feature.offsets[end][1]]
    else:  # A span, projected back through BERT's basic tokenization.
      tok_text = " ".join(feature.tokens[start:end + 1])
      tok_text = tok_text.replace(" ##", "").replace("##", "")
      tok_text = " ".join(tok_text.strip().split())
      first, last = feature.token_to_orig_map[start], feature.token_to_orig_map[end]
      orig_text = " ".join(example.doc_tokens[first:last + 1])
      text = _project(tok_text, orig_text, span_basic_tokens(example, first, last))
    if start > 0 and text in seen:
      continue
    seen.add(text)
    nbest.append((text, start_logit, end_logit))
  if version_2_with_negative and "" not in seen:
    nbest.append(("", null[2], null[3]))
  if not nbest:  # No valid span at all (Google's nonce answer).
    nbest.append(("empty", 0.0, 0.0))
  return nbest


def write_prediction_files(output_dir: str, predictions: dict, nbest: dict,
                           null_odds: Optional[dict] = None) -> dict:
  """Writes predictions.json, nbest_predictions.json and (null_odds not None) null_odds.json;
  returns file kind -> path."""
  out = epath.Path(output_dir)
  out.mkdir(parents=True, exist_ok=True)
  paths = {"predictions": str(out / "predictions.json"),
           "nbest": str(out / "nbest_predictions.json")}
  contents = {"predictions": predictions, "nbest": nbest}
  if null_odds is not None:
    paths["null_odds"] = str(out / "null_odds.json")
    contents["null_odds"] = null_odds
  for kind, path in paths.items():
    atomic_files.write_text(path, json.dumps(contents[kind], indent=4) + "\n")
  return paths
