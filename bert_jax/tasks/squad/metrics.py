"""SQuAD metrics: the official v1.1 and v2.0 scores (the same numbers as their scripts).

One deliberate difference: a question without a prediction scores 0 and is reported on
stderr in both versions (the official v2.0 script leaves it out of the totals, then fails on
its HasAns/NoAns breakdown).
"""
import collections
import math
import re
import string
import sys
from typing import Optional

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(s: str) -> str:
  """Lower text and remove punctuation, articles and extra whitespace."""
  s = s.lower()
  s = "".join(ch for ch in s if ch not in _PUNCTUATION)
  s = _ARTICLES.sub(" ", s)
  return " ".join(s.split())


def _tokens(s: str) -> list:
  return normalize_answer(s).split() if s else []


def exact_match_score(prediction: str, ground_truth: str) -> int:
  """1 if the normalised strings are equal, else 0."""
  return int(normalize_answer(prediction) == normalize_answer(ground_truth))


def f1_score(prediction: str, ground_truth: str) -> float:
  """Token-level F1 of the normalised answers (v2.0): with no tokens on a side, 1 if both are
  empty, else 0."""
  pred_toks = _tokens(prediction)
  gold_toks = _tokens(ground_truth)
  if not pred_toks or not gold_toks:
    return float(pred_toks == gold_toks)
  return _token_f1(pred_toks, gold_toks)


def f1_score_v1(prediction: str, ground_truth: str) -> float:
  """Token-level F1 as v1.1 defines it: 0 without common tokens, also when both sides normalise
  to nothing (gold "the", predicted "a")."""
  return _token_f1(normalize_answer(prediction).split(), normalize_answer(ground_truth).split())


def _token_f1(pred_toks, gold_toks) -> float:
  common = collections.Counter(pred_toks) & collections.Counter(gold_toks)
  num_same = sum(common.values())
  if num_same == 0:
    return 0.0
  precision = num_same / len(pred_toks)
  recall = num_same / len(gold_toks)
  return 2 * precision * recall / (precision + recall)


def _questions(dataset):
  for article in dataset:
    for paragraph in article["paragraphs"]:
      for qa in paragraph["qas"]:
        yield qa


def dataset_version(dataset_json: dict) -> str:
  """'1.1' or '2.0' from a SQuAD JSON's "version" (or its is_impossible flags)."""
  version = str(dataset_json.get("version", "")).lstrip("v")
  if version in ("1.1", "2.0"):
    return version
  if version:
    raise ValueError(f"unknown SQuAD version {dataset_json['version']!r}; known: 1.1, v2.0")
  return "2.0" if any("is_impossible" in qa for qa in _questions(dataset_json["data"])) else "1.1"


def _max_over_gold(fn, prediction, gold_answers):
  return max(fn(prediction, gold) for gold in gold_answers)


def evaluate_v1(dataset: list, predictions: dict) -> dict:
  """The official v1.1 evaluation: {"exact_match": %, "f1": %} over every question."""
  exact = f1 = total = 0
  for qa in _questions(dataset):
    total += 1
    if qa["id"] not in predictions:
      print(f"Unanswered question {qa['id']} will receive score 0.", file=sys.stderr)
      continue
    gold_answers = [a["text"] for a in qa["answers"]]
    prediction = predictions[qa["id"]]
    exact += _max_over_gold(exact_match_score, prediction, gold_answers)
    f1 += _max_over_gold(f1_score_v1, prediction, gold_answers)
  if total == 0:
    raise ValueError("the dataset has no questions")
  return {"exact_match": 100.0 * exact / total, "f1": 100.0 * f1 / total}


def _best_threshold(predictions, scores, na_probs, has_answer):
  """The official find_best_thresh, with percentages over every question of the dataset (the
  official script divides by the predicted ones only, over 100 with predictions missing)."""
  current = best = sum(1 for qid in scores if not has_answer[qid])
  best_thresh = 0.0
  for qid in sorted(na_probs, key=lambda k: na_probs[k]):
    if qid not in scores:
      continue
    if has_answer[qid]:
      diff = scores[qid]
    else:
      diff = -1 if predictions[qid] else 0
    current += diff
    if current > best:
      best = current
      best_thresh = na_probs[qid]
  return 100.0 * best / len(has_answer), best_thresh


def evaluate_v2(dataset: list, predictions: dict, na_probs: Optional[dict] = None,
                na_prob_thresh: float = 1.0) -> dict:
  """The official v2.0 evaluation (an ordered dict with the official keys, in percent).

  predictions "" mean no answer; na_probs adds best_exact / best_f1 and their thresholds;
  questions whose na_prob exceeds na_prob_thresh are predicted no-answer.
  """
  has_answer, exact_raw, f1_raw = {}, {}, {}
  for qa in _questions(dataset):
    qid = qa["id"]
    has_answer[qid] = bool(qa["answers"])
    gold_answers = [a["text"] for a in qa["answers"] if normalize_answer(a["text"])]
    if not gold_answers:
      gold_answers = [""]  # Unanswerable: only the empty answer is right.
    if qid not in predictions:
      print(f"Missing prediction for {qid}; it will receive score 0.", file=sys.stderr)
      prediction = None
    else:
      prediction = predictions[qid]
    if prediction is None:
      exact_raw[qid] = f1_raw[qid] = 0
    else:
      exact_raw[qid] = _max_over_gold(exact_match_score, prediction, gold_answers)
      f1_raw[qid] = _max_over_gold(f1_score, prediction, gold_answers)
  if not has_answer:
    raise ValueError("the dataset has no questions")
  answered = {qid: p for qid, p in predictions.items() if qid in has_answer}
  if na_probs is None:
    probs = {qid: 0.0 for qid in has_answer}
  else:
    missing = [qid for qid in answered if qid not in na_probs]
    if missing:
      raise ValueError(f"na_prob file lacks {len(missing)} predicted question ids, "
                       f"e.g. {missing[:3]}")
    probs = na_probs

  def thresholded(raw):
    out = {}
    for qid, score in raw.items():
      if qid in answered and probs[qid] > na_prob_thresh:
        out[qid] = float(not has_answer[qid])
      else:
        out[qid] = score
    return out

  exact, f1 = thresholded(exact_raw), thresholded(f1_raw)

  def summary(qids):
    return [("exact", 100.0 * sum(exact[q] for q in qids) / len(qids)),
            ("f1", 100.0 * sum(f1[q] for q in qids) / len(qids)),
            ("total", len(qids))]

  result = collections.OrderedDict(summary(list(has_answer)))
  missing = sum(1 for qid in has_answer if qid not in predictions)
  if missing:
    print(f"{missing} of {len(has_answer)} questions have no prediction; each scores 0",
          file=sys.stderr)
    result["missing_predictions"] = missing
  has_ans_qids = [q for q, v in has_answer.items() if v]
  no_ans_qids = [q for q, v in has_answer.items() if not v]
  if has_ans_qids:
    result.update((f"HasAns_{k}", v) for k, v in summary(has_ans_qids))
  if no_ans_qids:
    result.update((f"NoAns_{k}", v) for k, v in summary(no_ans_qids))
  if na_probs is not None:
    preds = {qid: predictions.get(qid, "") for qid in has_answer}
    scored = {qid: probs[qid] for qid in answered}
    raw_exact = {qid: exact_raw[qid] for qid in answered}
    raw_f1 = {qid: f1_raw[qid] for qid in answered}
    result["best_exact"], result["best_exact_thresh"] = _best_threshold(
        preds, raw_exact, scored, has_answer)
    result["best_f1"], result["best_f1_thresh"] = _best_threshold(
        preds, raw_f1, scored, has_answer)
  return result


def evaluate(dataset_json: dict, predictions: dict, na_probs: Optional[dict] = None,
             na_prob_thresh: float = 1.0) -> dict:
  """Scores predictions with the evaluation of the dataset's version (na_probs: v2.0 only)."""
  if dataset_version(dataset_json) == "1.1":
    return evaluate_v1(dataset_json["data"], predictions)
  return evaluate_v2(dataset_json["data"], predictions, na_probs, na_prob_thresh)


def check_dataset(dataset_json: dict, version: str, path: str) -> None:
  """Refuses in one line a SQuAD file whose questions cannot be scored: not the
  data/paragraphs/qas layout, no questions, a question without an id or answers, a v1.1
  question without an answer."""
  try:
    qas = list(_questions(dataset_json["data"]))
  except (KeyError, TypeError) as e:
    raise ValueError(f"{path}: not SQuAD's data/paragraphs/qas layout (at {e})") from None
  if not qas:
    raise ValueError(f"{path}: the dataset has no questions")
  for n, qa in enumerate(qas, 1):
    qid = qa.get("id") if isinstance(qa, dict) else None
    if qid is None:
      raise ValueError(f"{path}: question {n} has no 'id'")
    answers = qa.get("answers")
    if not isinstance(answers, list) or not all(
        isinstance(a, dict) and isinstance(a.get("text"), str) for a in answers):
      raise ValueError(f"{path}: question {qid!r} has no 'answers' list of {{\"text\": ...}}")
    if version == "1.1" and not answers:
      raise ValueError(f"{path}: v1.1 question {qid!r} has no answers")


def check_na_probs(na_probs, path: str) -> None:
  """Refuses a na_prob file that is not an object id -> finite number, in one line."""
  if not isinstance(na_probs, dict):
    raise ValueError(f"{path}: must hold a JSON object question id -> no-answer probability")
  bad = [(k, v) for k, v in na_probs.items()
         if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)]
  if bad:
    raise ValueError(f"{path}: {len(bad)} value(s) are not finite numbers, e.g. "
                     f"{bad[0][0]!r}: {bad[0][1]!r}")
