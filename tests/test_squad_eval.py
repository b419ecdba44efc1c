"""bert_jax.squad_eval: the official SQuAD v1.1 / v2.0 scores, on hand-made cases."""
import json
import types

import numpy as np
import pytest

from bert_jax import squad_eval
from bert_jax.tasks.squad import metrics as squad_metrics
from tests.fixtures import parity


def _dataset(qas, version):
  return {"version": version,
          "data": [{"title": "t", "paragraphs": [{"context": "c", "qas": qas}]}]}


def _q(qid, *answers, impossible=None):
  qa = {"id": qid, "question": "?", "answers": [{"text": a, "answer_start": 0} for a in answers]}
  if impossible is not None:
    qa["is_impossible"] = impossible
  return qa


def test_normalize_answer():
  assert squad_metrics.normalize_answer("The  Denver Broncos!") == "denver broncos"
  assert squad_metrics.normalize_answer("an apple, a pear & the fig.") == "apple pear fig"
  # Punctuation goes before articles, so "a-the" becomes the word "athe".
  assert squad_metrics.normalize_answer("Theory of a-the") == "theory of athe"
  assert squad_metrics.normalize_answer("Athens") == "athens"
  assert squad_metrics.normalize_answer("  \t ") == ""


def test_exact_and_f1_by_hand():
  assert squad_metrics.exact_match_score("the Denver Broncos", "Denver Broncos!") == 1
  assert squad_metrics.exact_match_score("Denver", "Denver Broncos") == 0
  # P = 1/1, R = 1/2 -> F1 = 2/3.
  assert squad_metrics.f1_score("Denver", "Denver Broncos") == pytest.approx(2 / 3)
  # Tokens as bags: "broncos broncos" vs "denver broncos": 1 common, P = R = 1/2.
  assert squad_metrics.f1_score("Broncos broncos", "Denver Broncos") == pytest.approx(0.5)
  assert squad_metrics.f1_score("Carolina", "Denver Broncos") == 0.0
  # v2 empty answers: 1 only when both are empty.
  assert squad_metrics.f1_score("", "") == 1.0
  assert squad_metrics.f1_score("", "Denver") == 0.0
  assert squad_metrics.f1_score("the", "") == 1.0  # "the" normalises to nothing.
  # v1.1's F1 has no such rule: no common tokens -> 0.
  assert squad_metrics.f1_score_v1("the", "a") == 0.0
  assert squad_metrics.f1_score_v1("Denver", "Denver Broncos") == pytest.approx(2 / 3)


def test_v1_evaluation_by_hand(capsys):
  data = _dataset([_q("1", "Denver Broncos", "Broncos"), _q("2", "1895"),
                   _q("3", "Santa Clara, California", "Santa Clara")], "1.1")
  predictions = {"1": "the broncos", "2": "in 1895 or 1896"}
  # q1: EM 1 (matches "Broncos"), F1 1. q2: EM 0, F1: P 1/4, R 1 -> 0.4. q3 missing: 0.
  result = squad_metrics.evaluate(data, predictions)
  assert result == {"exact_match": pytest.approx(100 / 3), "f1": pytest.approx(140 / 3)}
  assert "Unanswered question 3" in capsys.readouterr().err


def test_v2_evaluation_by_hand():
  data = _dataset([
      _q("a", "Denver Broncos", impossible=False),
      _q("b", "1895", "the year 1895", impossible=False),
      _q("c", impossible=True),
      _q("d", impossible=True),
  ], "v2.0")
  predictions = {"a": "Denver", "b": "1895", "c": "", "d": "Denver"}
  result = squad_metrics.evaluate(data, predictions)
  # a: EM 0, F1 2/3; b: 1, 1; c: 1, 1; d: 0, 0.
  assert list(result) == ["exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total",
                          "NoAns_exact", "NoAns_f1", "NoAns_total"]
  assert result["exact"] == pytest.approx(50.0)
  assert result["f1"] == pytest.approx(100 * (2 / 3 + 2) / 4)
  assert result["HasAns_exact"] == pytest.approx(50.0)
  assert result["HasAns_f1"] == pytest.approx(100 * (2 / 3 + 1) / 2)
  assert result["NoAns_exact"] == result["NoAns_f1"] == pytest.approx(50.0)
  assert (result["total"], result["HasAns_total"], result["NoAns_total"]) == (4, 2, 2)

  # With na probabilities: above na_prob_thresh the answer counts as "no answer".
  na_probs = {"a": 0.1, "b": 0.2, "c": 0.9, "d": 0.8}
  result = squad_metrics.evaluate(data, predictions, na_probs, na_prob_thresh=0.5)
  # d is now right (no answer); a and b keep their answers.
  assert result["exact"] == pytest.approx(75.0)
  # Best threshold sweep (ascending na_prob): start at 2 (all no-answer right);
  # a: +0 (EM) -> 2; b: +1 -> 3; d: -1 (answered wrongly) -> 2; c: 0 -> 2.
  assert result["best_exact"] == pytest.approx(75.0)
  assert result["best_exact_thresh"] == pytest.approx(0.2)
  # F1: a: +2/3 -> 2.67 (best, thresh 0.1); b: +1 -> 3.67 (best, 0.2); d: -1; c: 0.
  assert result["best_f1"] == pytest.approx(100 * (2 + 2 / 3 + 1) / 4)
  assert result["best_f1_thresh"] == pytest.approx(0.2)


def test_v2_best_thresholds_count_missing_predictions_as_zero(capsys):
  data = _dataset([
      _q("a", "Denver Broncos", impossible=False),
      _q("b", "1895", impossible=False),
      _q("c", impossible=True),
      _q("d", impossible=True),
  ], "v2.0")
  predictions = {"a": "Denver", "d": "Denver"}  # b and c have none
  result = squad_metrics.evaluate(data, predictions, {"a": 0.1, "d": 0.8})
  assert result["exact"] == 0.0 and result["missing_predictions"] == 2
  assert "2 of 4 questions have no prediction" in capsys.readouterr().err
  # Over all 4 questions, b and c scoring 0 at every threshold: start at 1 (d is the
  # predicted no-answer question); a: +0 -> 1; d: -1 -> 0. Before: 2 / 2 predicted = 100%.
  assert result["best_exact"] == pytest.approx(25.0)
  assert result["best_exact_thresh"] == 0.0
  # F1: a: +2/3 -> 1.67 (best, at 0.1); d: -1.
  assert result["best_f1"] == pytest.approx(100 * (1 + 2 / 3) / 4)
  assert result["best_f1_thresh"] == pytest.approx(0.1)
  assert result["best_exact"] <= 100 and result["best_f1"] <= 100


def test_v2_gold_answers_that_normalise_to_nothing_mean_no_answer():
  data = _dataset([_q("a", "The", impossible=False)], "v2.0")
  assert squad_metrics.evaluate(data, {"a": ""})["exact"] == 100.0
  assert squad_metrics.evaluate(data, {"a": "the"})["exact"] == 100.0  # Also normalises to "".
  assert squad_metrics.evaluate(data, {"a": "x"})["exact"] == 0.0


def test_version_detection():
  assert squad_metrics.dataset_version({"version": "1.1", "data": []}) == "1.1"
  assert squad_metrics.dataset_version({"version": "v2.0", "data": []}) == "2.0"
  assert squad_metrics.dataset_version(_dataset([_q("a", "x")], "")) == "1.1"
  assert squad_metrics.dataset_version(_dataset([_q("a", impossible=True)], "")) == "2.0"
  with pytest.raises(ValueError, match="unknown SQuAD version 'v3'"):
    squad_metrics.dataset_version({"version": "v3", "data": []})


def _hf_examples(data):
  return [types.SimpleNamespace(qas_id=qa["id"], answers=qa["answers"])
          for article in data["data"] for p in article["paragraphs"] for qa in p["qas"]]


def test_v2_matches_transformers_port_of_the_official_script():
  """transformers' squad_metrics ports evaluate-v2.0.py; compare on random data."""
  parity.require("transformers")
  from transformers.data.metrics import squad_metrics as hf_squad_metrics  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  words = ["the", "a", "denver", "broncos", "won", "Super", "Bowl", "50", "in", "2016", ",", "."]
  qas, predictions, na_probs = [], {}, {}
  for i in range(300):
    impossible = rng.random() < 0.4
    num_golds = 0 if impossible else int(rng.integers(1, 4))
    golds = [" ".join(rng.choice(words, int(rng.integers(1, 5)))) for _ in range(num_golds)]
    qas.append(_q(str(i), *golds, impossible=impossible))
    if rng.random() < 0.3:
      predictions[str(i)] = ""
    elif golds and rng.random() < 0.5:
      predictions[str(i)] = golds[0]
    else:
      predictions[str(i)] = " ".join(rng.choice(words, int(rng.integers(1, 5))))
    na_probs[str(i)] = float(np.round(rng.random(), 2))  # Ties in the threshold sweep.
  data = _dataset(qas, "v2.0")
  for thresh in (1.0, 0.5):
    ours = squad_metrics.evaluate(data, predictions, na_probs, thresh)
    reference = hf_squad_metrics.squad_evaluate(_hf_examples(data), predictions, na_probs, thresh)
    assert list(ours) == list(reference)
    for key in reference:
      assert ours[key] == pytest.approx(reference[key], abs=1e-9), key


def test_cli_v1_and_v2(tmp_path, capsys):
  data_v1 = tmp_path / "dev-v1.1.json"
  data_v1.write_text(json.dumps(_dataset([_q("1", "Denver Broncos"), _q("2", "1895")], "1.1")))
  preds = tmp_path / "predictions.json"
  preds.write_text(json.dumps({"1": "Denver Broncos", "2": "1896"}))
  squad_eval.main([str(data_v1), str(preds)])
  assert json.loads(capsys.readouterr().out) == {"exact_match": 50.0, "f1": 50.0}

  data_v2 = tmp_path / "dev-v2.0.json"
  data_v2.write_text(json.dumps(_dataset([_q("1", "Denver Broncos", impossible=False),
                                          _q("2", impossible=True)], "v2.0")))
  preds.write_text(json.dumps({"1": "Denver Broncos", "2": "x"}))
  na = tmp_path / "null_odds.json"
  na.write_text(json.dumps({"1": -3.0, "2": 2.0}))
  squad_eval.main([str(data_v2), str(preds), "--na_prob_file", str(na),
                   "--na_prob_thresh", "1.0"])
  out = json.loads(capsys.readouterr().out)
  assert out["exact"] == 100.0 and out["total"] == 2  # "2" has na 2.0 > 1.0: no answer.
  assert out["best_exact"] == 100.0 and out["best_exact_thresh"] == -3.0
  squad_eval.main([str(data_v2), str(preds), "-n", str(na), "-t", "5"])
  assert json.loads(capsys.readouterr().out)["exact"] == 50.0
  with pytest.raises(SystemExit, match="cannot read prediction file"):
    squad_eval.main([str(data_v2), str(tmp_path / "missing.json")])
  # A prediction that is not a string, a data file without `data` (were: tracebacks).
  preds.write_text(json.dumps({"1": "Denver Broncos", "2": 1895}))
  with pytest.raises(SystemExit, match=r"1 prediction\(s\) are not strings, e.g. '2': 1895"):
    squad_eval.main([str(data_v1), str(preds)])
  data_v1.write_text(json.dumps({"version": "1.1", "articles": []}))
  with pytest.raises(SystemExit, match=r"dev-v1.1.json is not a SQuAD file \(no top-level 'data'"):
    squad_eval.main([str(data_v1), str(preds)])


def test_cli_unscorable_inputs_are_one_line(tmp_path):
  """No questions, a question without `answers`, a non-numeric na_prob: one line each, no
  traceback."""
  preds = tmp_path / "predictions.json"
  preds.write_text(json.dumps({"1": "Denver Broncos"}))
  data = tmp_path / "dev.json"
  data.write_text(json.dumps(_dataset([], "1.1")))
  with pytest.raises(SystemExit, match=r"dev\.json: the dataset has no questions"):
    squad_eval.main([str(data), str(preds)])
  no_answers = _q("1", "Denver Broncos")
  del no_answers["answers"]
  data.write_text(json.dumps(_dataset([no_answers], "1.1")))
  with pytest.raises(SystemExit, match=r"dev\.json: question '1' has no 'answers' list"):
    squad_eval.main([str(data), str(preds)])
  data.write_text(json.dumps(_dataset([_q("1", "Denver Broncos", impossible=False)], "v2.0")))
  na = tmp_path / "null_odds.json"
  na.write_text(json.dumps({"1": "abc"}))
  with pytest.raises(SystemExit, match=r"null_odds\.json: 1 value\(s\) are not finite numbers, "
                     r"e\.g\. '1': 'abc'"):
    squad_eval.main([str(data), str(preds), "--na_prob_file", str(na)])
