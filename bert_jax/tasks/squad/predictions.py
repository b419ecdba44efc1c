"""SQuAD answers from start and end logits: n-best spans mapped back to the text by
get_final_text (Google's run_squad.py), with v2.0's null score against
null_score_diff_threshold, and the prediction files written.
"""
import collections
import json
import math
from typing import Optional, Sequence

from etils import epath
import numpy as np

from bert_jax.runtime import atomic_files
from bert_jax.tasks.squad.data import SquadExample
from bert_jax.tasks.squad.features import SquadFeature

# Google's starting null score; also the null odds of a v2.0 question whose
# n-best holds no span at all (Google's code fails there).
_NO_NULL_SCORE = 1e6


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
