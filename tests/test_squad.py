"""SQuAD readers, run_squad features and n-best post-processing, on tiny fixtures."""
import json
import logging
import os
import types

import numpy as np
import pytest

from bert_jax.tasks.squad import data as squad_data
from bert_jax.tasks.squad import features as squad
from bert_jax.tasks.squad import metrics as squad_metrics
from bert_jax.tasks.squad import predictions as squad_predictions
from tests.fixtures import parity

_BUNDLED_VOCAB = os.path.join(os.path.dirname(squad.__file__), "..", "..", "assets",
                              "bert-base-uncased-vocab.txt")


class _TestTokenizer:
  """The WordPieceTokenizer protocol over the `tokenizers` library's BERT WordPiece (not
  bert_jax's)."""

  def __init__(self, vocab_file, lowercase=True):
    import tokenizers  # pylint: disable=g-import-not-at-top
    self._tok = tokenizers.BertWordPieceTokenizer(tokenizers.models.WordPiece.read_file(
        vocab_file), lowercase=lowercase)
    vocab = self._tok.get_vocab()
    self.pad_id, self.unk_id, self.cls_id, self.sep_id = (
        vocab[t] for t in ("[PAD]", "[UNK]", "[CLS]", "[SEP]"))

  def tokenize(self, text):
    return self._tok.encode(text, add_special_tokens=False).tokens

  def tokenize_to_ids(self, texts):
    return [self._tok.encode(t, add_special_tokens=False).ids for t in texts]

  def convert_ids_to_tokens(self, ids):
    return [self._tok.id_to_token(int(i)) for i in ids]

  def basic_tokenize(self, text):
    words = self._tok.pre_tokenizer.pre_tokenize_str(self._tok.normalizer.normalize_str(text))
    return [word for word, _ in words]


@pytest.fixture(scope="module")
def tokenizer():
  return _TestTokenizer(_BUNDLED_VOCAB)


def _squad_file(tmp_path, qas_by_context, version="1.1", name="squad.json"):
  data = {"version": version, "data": [{"title": "t", "paragraphs": [
      {"context": context, "qas": qas} for context, qas in qas_by_context]}]}
  path = tmp_path / name
  path.write_text(json.dumps(data), encoding="utf-8")
  return str(path)


_CONTEXT = "The leader was John Smith (1895-1943). He lived in Tokyo, Japan."


def _qa(qid, question, answer=None, context=_CONTEXT, impossible=None, start=None):
  qa = {"id": qid, "question": question, "answers": []}
  if answer is not None:
    qa["answers"] = [{"text": answer,
                      "answer_start": context.index(answer) if start is None else start}]
  if impossible is not None:
    qa["is_impossible"] = impossible
  return qa


# ---------------------------------------------------------------- reading


def test_split_context_like_run_squad():
  tokens, offsets = squad_data.split_context(" ab  c\u202fd\te")
  assert tokens == ["ab", "c", "d", "e"]
  assert offsets == [-1, 0, 0, 0, 0, 1, 1, 2, 2, 3]


def test_read_training_positions_and_skips(tmp_path, caplog):
  path = _squad_file(tmp_path, [(_CONTEXT, [
      _qa("q1", "Who led?", "John Smith"),
      _qa("q2", "Born?", "1895"),
      _qa("q3", "Where?", "Japan", start=3),  # answer_start points at "leader".
      _qa("q4", "Where?", "Japan", start=len(_CONTEXT) + 5),  # Past the end.
  ])])
  with caplog.at_level(logging.WARNING):
    examples, skipped = squad_data.read_squad_json(path, is_training=True)
  assert skipped == ["q3", "q4"]
  assert "skipped 2 of 4 training questions" in caplog.text
  assert "could not find answer 'Japan'" in caplog.text
  q1, q2 = examples
  assert q1.doc_tokens[q1.start_position:q1.end_position + 1] == ["John", "Smith"]
  assert q2.doc_tokens[q2.start_position] == "(1895-1943)."
  assert q2.start_position == q2.end_position
  # For evaluation nothing is located, so nothing is skipped.
  examples, skipped = squad_data.read_squad_json(path, is_training=False)
  assert len(examples) == 4 and skipped == []
  assert examples[2].answers == ["Japan"] and examples[2].start_position is None


def test_read_v2_impossible(tmp_path):
  path = _squad_file(tmp_path, [(_CONTEXT, [
      _qa("a", "Who?", "John Smith", impossible=False), _qa("b", "When?", impossible=True)])],
                     version="v2.0")
  examples, skipped = squad_data.read_squad_json(path, is_training=True)
  assert not skipped
  assert [(e.is_impossible, e.start_position, e.orig_answer_text) for e in examples] == [
      (False, 3, "John Smith"), (True, -1, "")]


def test_article_ranges_split_one_file(tmp_path):
  # Three articles of one question each; ':2' trains on the first two, '2:' scores the third.
  data = {"version": "1.1", "data": [
      {"title": f"t{i}", "paragraphs": [{"context": _CONTEXT,
                                         "qas": [_qa(f"q{i}", "Who?", "John Smith")]}]}
      for i in range(3)]}
  path = tmp_path / "three.json"
  path.write_text(json.dumps(data), encoding="utf-8")
  first = squad_data.read_squad_json(str(path), True, squad_data.article_slice(":2", "train_articles"))[0]
  rest = squad_data.read_squad_json(str(path), False, squad_data.article_slice("2:", "eval_articles"))[0]
  assert [e.qas_id for e in first] == ["q0", "q1"] and [e.qas_id for e in rest] == ["q2"]
  assert [a["title"] for a in squad_data.load_json(str(path), slice(2, None))["data"]] == ["t2"]
  assert squad_data.article_slice("", "eval_articles") == slice(None)
  with pytest.raises(ValueError, match=r"config.train_articles='1-2': expected 'start:stop'"):
    squad_data.article_slice("1-2", "train_articles")
  with pytest.raises(ValueError, match=r"three.json: articles 5:None select none of its 3"):
    squad_data.load_json(str(path), squad_data.article_slice("5:", "eval_articles"))


def test_read_errors(tmp_path):
  bad = tmp_path / "bad.json"
  bad.write_text("{not json", encoding="utf-8")
  with pytest.raises(ValueError, match="bad.json"):
    squad_data.read_squad_json(str(bad), is_training=False)
  bad.write_text(json.dumps({"data": [{"paragraphs": [{"qas": [{"id": "x", "question": "q"}]}]}]}),
                 encoding="utf-8")
  with pytest.raises(ValueError, match=r"bad.json: malformed SQuAD structure.*context"):
    squad_data.read_squad_json(str(bad), is_training=False)
  path = _squad_file(tmp_path, [(_CONTEXT, [_qa("q", "Who?")])])
  with pytest.raises(ValueError, match="question 'q' has no answer"):
    squad_data.read_squad_json(path, is_training=True)
  # A missing or non-integer answer_start: one error naming it (not a bare KeyError or int()
  # traceback).
  for start in ("missing", "12", 3.5, None):
    qa = _qa("q7", "Who led?", "John Smith")
    if start == "missing":
      del qa["answers"][0]["answer_start"]
    else:
      qa["answers"][0]["answer_start"] = start
    path = _squad_file(tmp_path, [(_CONTEXT, [_qa("q1", "Born?", "1895"), qa])])
    with pytest.raises(ValueError, match=r"\.json: question 'q7': answer_start must be an integer"):
      squad_data.read_squad_json(path, is_training=True)
  qa = _qa("q8", "Who led?", "John Smith")
  qa["answers"][0] = {"answer_start": 3}
  path = _squad_file(tmp_path, [(_CONTEXT, [qa])])
  with pytest.raises(ValueError, match=r"question 'q8': an answer needs a 'text' string"):
    squad_data.read_squad_json(path, is_training=False)


def test_read_tfds_records_through_tfds_load(tmp_path):
  """tfds.load('squad/v2.0') with the stored examples mocked (no prepared files needed)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  seen = {}

  def as_dataset(self, split, **kwargs):
    del kwargs
    seen["split"], seen["name"] = str(split), f"{self.name}/{self.builder_config.name}"
    records = [
        {"id": b"q1", "title": b"t", "context": _CONTEXT.encode(), "question": b"Who?",
         "answers": {"text": [b"John Smith"], "answer_start": [15]},
         "plausible_answers": {"text": [b""], "answer_start": [0]}, "is_impossible": False},
        {"id": b"q2", "title": b"t", "context": _CONTEXT.encode(), "question": b"When?",
         "answers": {"text": [b""], "answer_start": [0]},
         "plausible_answers": {"text": [b"1943"], "answer_start": [32]},
         "is_impossible": True},
    ]
    return tf.data.Dataset.from_generator(
        lambda: iter(records), output_signature=self.info.features.get_tensor_spec())

  with tfds.testing.mock_data(as_dataset_fn=as_dataset, data_dir=str(tmp_path)):
    examples, skipped = squad_data.read_squad_tfds("2.0", "validation", str(tmp_path),
                                                   is_training=True)
  assert seen == {"split": "validation", "name": "squad/v2.0"}
  assert not skipped
  assert [(e.qas_id, e.question_text, e.is_impossible) for e in examples] == [
      ("q1", "Who?", False), ("q2", "When?", True)]
  assert examples[0].doc_tokens[examples[0].start_position] == "John"


def test_record_from_tfds_and_eval_json():
  record = squad_data.record_from_tfds({
      "id": b"x", "question": b"Q?", "context": "caf\u00e9 au lait".encode(),
      "answers": {"text": np.array([b"caf\xc3\xa9", b"lait"], object),
                  "answer_start": np.array([0, 8], np.int32)}})
  assert record == {"id": "x", "question": "Q?", "context": "caf\u00e9 au lait",
                    "answers": [{"text": "caf\u00e9", "answer_start": 0},
                                {"text": "lait", "answer_start": 8}],
                    "is_impossible": False}
  examples, _ = squad_data._make_examples([record, dict(record, id="y", answers=[],
                                                        is_impossible=True)], False, "test")
  data = squad_data.to_eval_json(examples, "2.0")
  assert squad_metrics.dataset_version(data) == "2.0"
  result = squad_metrics.evaluate(data, {"x": "Lait.", "y": ""})
  assert result["exact"] == 100.0 and result["NoAns_total"] == 1


# ---------------------------------------------------------------- features


def test_features_by_hand(tokenizer):
  example = squad_data.SquadExample(
      qas_id="q", question_text="Who led?", doc_tokens=_CONTEXT.split(), answers=["1895"],
      orig_answer_text="1895", start_position=5, end_position=5)
  arrays, features = squad.convert_examples_to_features(
      tokenizer, [example], max_seq_length=40, doc_stride=8, max_query_length=8,
      is_training=True)
  assert len(features) == 1
  (feature,) = features
  expected_tokens = (["[CLS]", "who", "led", "?", "[SEP]"] +
                     tokenizer.tokenize(_CONTEXT) + ["[SEP]"])
  assert feature.tokens == expected_tokens
  # The answer span is narrowed from "(1895-1943)." to the piece "1895".
  start, end = arrays["start_positions"][0], arrays["end_positions"][0]
  assert feature.tokens[start:end + 1] == ["1895"]
  assert feature.token_to_orig_map[start] == 5
  n = len(expected_tokens)
  assert arrays["input_ids"][0, :n].tolist() == [tokenizer._tok.token_to_id(t)
                                                 for t in expected_tokens]
  assert arrays["input_ids"][0, n:].tolist() == [0] * (40 - n)
  assert arrays["input_mask"][0].tolist() == [1] * n + [0] * (40 - n)
  assert arrays["segment_ids"][0].tolist() == [0] * 5 + [1] * (n - 5) + [0] * (40 - n)
  assert arrays["input_ids"].dtype == np.int32


def test_windows_and_max_context(tokenizer):
  # Google's own example: 12 one-piece words, windows of 5 pieces, stride 3.
  words = "the man went to the store and bought a gallon of milk".split()
  example = squad_data.SquadExample(qas_id="q", question_text="milk", doc_tokens=words,
                                    answers=[], orig_answer_text="bought", start_position=7,
                                    end_position=7)
  # 1 question piece + 3 special tokens + 5 window pieces.
  arrays, features = squad.convert_examples_to_features(
      tokenizer, [example], max_seq_length=9, doc_stride=3, max_query_length=4,
      is_training=True)
  windows = [[f.tokens[i] for i in sorted(f.token_to_orig_map)] for f in features]
  assert windows == [words[0:5], words[3:8], words[6:11], words[9:12]]
  offset = 3  # [CLS] milk [SEP]
  # 'bought' (word 7) is in windows 1 (4 left, 0 right) and 2 (1 left, 3 right).
  assert features[1].token_is_max_context[offset + 4] is False
  assert features[2].token_is_max_context[offset + 1] is True
  # It is inside windows 1 and 2 only: elsewhere the target is [CLS].
  assert arrays["start_positions"].tolist() == [0, offset + 4, offset + 1, 0]
  assert arrays["example_index"].tolist() == [0, 0, 0, 0]
  assert arrays["feature_index"].tolist() == [0, 1, 2, 3]


def test_impossible_and_query_truncation(tokenizer):
  example = squad_data.SquadExample(qas_id="q", question_text="one two three four five",
                                    doc_tokens=["a", "b"], answers=[], is_impossible=True,
                                    orig_answer_text="", start_position=-1, end_position=-1)
  arrays, features = squad.convert_examples_to_features(
      tokenizer, [example], max_seq_length=16, doc_stride=4, max_query_length=3,
      is_training=True)
  assert features[0].tokens == ["[CLS]", "one", "two", "three", "[SEP]", "a", "b", "[SEP]"]
  assert arrays["start_positions"].tolist() == [0] and arrays["is_impossible"].tolist() == [1]
  with pytest.raises(ValueError, match="max_query_length"):
    squad.convert_examples_to_features(tokenizer, [example], max_seq_length=10,
                                       max_query_length=7)


def test_training_targets_spell_the_answers(tokenizer, tmp_path):
  """Every in-window target's pieces are the answer's pieces (after _improve_answer_span)."""
  context = ("Super Bowl 50 was an American football game to determine the champion of the "
             "National Football League (NFL) for the 2015 season. The American Football "
             "Conference (AFC) champion Denver Broncos defeated the National Football "
             "Conference (NFC) champion Carolina Panthers 24\u201310 to earn their third "
             "Super Bowl title.")
  answers = ["Denver Broncos", "Carolina Panthers", "2015", "24\u201310", "third",
             "National Football League", "AFC"]
  path = _squad_file(tmp_path, [(context, [
      _qa(f"q{i}", "What?", a, context=context) for i, a in enumerate(answers)])])
  examples, skipped = squad_data.read_squad_json(path, is_training=True)
  assert not skipped
  arrays, features = squad.convert_examples_to_features(
      tokenizer, examples, max_seq_length=48, doc_stride=16, max_query_length=8,
      is_training=True)
  in_window = 0
  for row, feature in enumerate(features):
    start, end = arrays["start_positions"][row], arrays["end_positions"][row]
    if start == 0:
      continue
    in_window += 1
    answer = examples[feature.example_index].orig_answer_text
    assert feature.tokens[start:end + 1] == tokenizer.tokenize(answer)
  assert in_window >= len(answers)  # Each answer lies whole in at least one window.


# ---------------------------------------------------------------- post-processing


def test_get_final_text_cases(tokenizer):
  basic = tokenizer.basic_tokenize
  assert squad_predictions.get_final_text("steve smith", "Steve Smith's", basic) == "Steve Smith"
  assert squad_predictions.get_final_text("1895", "(1895-1943).", basic) == "1895"
  assert squad_predictions.get_final_text("cafe", "Caf\u00e9!", basic) == "Caf\u00e9"
  # Not found: the whole original span.
  assert squad_predictions.get_final_text("zzz", "Steve Smith's", basic) == "Steve Smith's"


def test_get_final_text_matches_transformers(tokenizer):
  parity.require("transformers")
  from transformers.data.metrics import squad_metrics as hf_squad_metrics  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  originals = ["Steve Smith's", "(1895-1943).", "Caf\u00e9 au LAIT, s'il vous pla\u00eet",
               "U.S. President-elect", "\u00c5ngstr\u00f6m's units.", "\u4e2d\u6587 text"]
  for orig in originals:
    toks = tokenizer.basic_tokenize(orig)
    for _ in range(10):
      i = int(rng.integers(0, len(toks)))
      j = int(rng.integers(i, len(toks)))
      pred = " ".join(toks[i:j + 1])
      if rng.random() < 0.2:
        pred = pred[: max(1, len(pred) - 2)]
      assert squad_predictions.get_final_text(pred, orig, tokenizer.basic_tokenize) == (
          hf_squad_metrics.get_final_text(pred, orig, do_lower_case=True)), (pred, orig)
  # Edge cases: empty, leading / trailing spaces, across words, absent.
  for pred in ("", " smith", "smith ", "steve smith '", "h '", "x"):
    orig = "Steve Smith's"
    assert squad_predictions.get_final_text(pred, orig, tokenizer.basic_tokenize) == (
        hf_squad_metrics.get_final_text(pred, orig, do_lower_case=True)), pred


def test_per_context_basic_tokens_equal_direct_calls(tokenizer):
  """The batched basic tokenization of spans equals basic_tokenize of each span."""
  contexts = [
      "Caf\u00e9 CR\u00c8ME, (1895-1943). Steve Smith's \u4e2d\u6587text \u2603 snow",
      "non\u00a0breaking\u2009thin x\u0000y " + "a" * 120 + " U.S.-led \u00c5ngstr\u00f6m!",
      "",
  ]
  examples = [squad_data.SquadExample(qas_id=str(i), question_text="?",
                                      doc_tokens=squad_data.split_context(c)[0], answers=[])
              for i, c in enumerate(contexts)]
  calls = []

  class CountingTokenizer:
    def __getattr__(self, name):
      return getattr(tokenizer, name)

    def basic_tokenize(self, text):
      calls.append(text)
      return tokenizer.basic_tokenize(text)

  spans = squad_predictions._SpanBasicTokens(CountingTokenizer(), examples)
  assert len(calls) == len(contexts)  # One call per context, none per span.
  for ex in examples:
    for first in range(len(ex.doc_tokens)):
      for last in range(first, len(ex.doc_tokens)):
        direct = " ".join(tokenizer.basic_tokenize(" ".join(ex.doc_tokens[first:last + 1])))
        assert spans(ex, first, last) == direct, (first, last)
  assert len(calls) == len(contexts)

  class OddPiecesTokenizer(CountingTokenizer):
    def convert_ids_to_tokens(self, ids):  # Pieces that spell nothing: no per-token split.
      return ["##?" for _ in ids]

  calls.clear()
  spans = squad_predictions._SpanBasicTokens(OddPiecesTokenizer(), examples[:1])
  assert spans(examples[0], 1, 3) == " ".join(
      tokenizer.basic_tokenize(" ".join(examples[0].doc_tokens[1:4])))
  assert len(calls) == 2  # The context, then the span directly.


def _reference_predictions(examples, features, start_logits, end_logits, version_2):
  """transformers' port of Google's write_predictions, on our features."""
  parity.require("transformers")
  from transformers.data.metrics import squad_metrics as hf_squad_metrics  # pylint: disable=g-import-not-at-top

  class GoogleDetokenizer:
    # Google joins the pieces and drops every '##'.
    def convert_tokens_to_string(self, tokens):
      return " ".join(tokens).replace(" ##", "").replace("##", "")

  hf_features = [types.SimpleNamespace(unique_id=i, **vars(f)) for i, f in enumerate(features)]
  results = [types.SimpleNamespace(unique_id=i, start_logits=start_logits[i].tolist(),
                                   end_logits=end_logits[i].tolist())
             for i in range(len(features))]
  return hf_squad_metrics.compute_predictions_logits(
      examples, hf_features, results, n_best_size=20, max_answer_length=30,
      do_lower_case=True, output_prediction_file=None, output_nbest_file=None,
      output_null_log_odds_file=None, verbose_logging=False,
      version_2_with_negative=version_2, null_score_diff_threshold=0.0,
      tokenizer=GoogleDetokenizer())


@pytest.mark.parametrize("version_2", [False, True])
def test_postprocess_matches_reference_on_random_logits(tokenizer, tmp_path, version_2):
  context = ("Normandy is a region in France. The Normans gave their name to it in the "
             "10th and 11th centuries; their leader Rollo swore fealty to King Charles III "
             "of West Francia. Their descendants were Catholic, and spoke Norman French.")
  questions = ["Where is Normandy?", "Who was the leader?", "When?", "What language?",
               "Which king?"]
  path = _squad_file(tmp_path, [(context, [
      _qa(f"q{i}", q, context=context, impossible=True if version_2 else None) if i == 4
      else _qa(f"q{i}", q, context.split()[i * 3], context=context)
      for i, q in enumerate(questions)])],
                     version="v2.0" if version_2 else "1.1")
  examples, _ = squad_data.read_squad_json(path, is_training=False)
  _, features = squad.convert_examples_to_features(
      tokenizer, examples, max_seq_length=40, doc_stride=12, max_query_length=8)
  assert len(features) > len(examples)  # Several windows per question.
  rng = np.random.default_rng(1)
  for trial in range(3):
    start_logits = rng.normal(0, 3, (len(features), 40)).astype(np.float32)
    end_logits = rng.normal(0, 3, (len(features), 40)).astype(np.float32)
    predictions, nbest, null_odds = squad_predictions.postprocess_predictions(
        examples, features, start_logits, end_logits, tokenizer=tokenizer,
        version_2_with_negative=version_2)
    reference = _reference_predictions(examples, features, start_logits, end_logits,
                                       version_2)
    assert predictions == dict(reference), trial
    assert set(nbest) == set(predictions)
    for qid, entries in nbest.items():
      assert sum(e["probability"] for e in entries) == pytest.approx(1.0)
      assert len(entries) <= 20 + int(version_2)
      scores = [e["start_logit"] + e["end_logit"] for e in entries
                if not (version_2 and e["text"] == "")]
      assert scores == sorted(scores, reverse=True)
    assert bool(null_odds) == version_2


def test_v2_null_threshold_and_files(tokenizer, tmp_path):
  example = squad_data.SquadExample(qas_id="q", question_text="Who?",
                                    doc_tokens="John Smith was here".split(), answers=[])
  _, features = squad.convert_examples_to_features(tokenizer, [example], max_seq_length=16,
                                                   max_query_length=4)
  start = np.full((1, 16), -10.0, np.float32)
  end = np.full((1, 16), -10.0, np.float32)
  john = features[0].tokens.index("john")
  start[0, john], end[0, john + 1] = 2.0, 2.0  # "john smith" scores 4.
  start[0, 0], end[0, 0] = 3.0, 2.0  # null scores 5.
  for threshold, expected in ((0.0, ""), (1.5, "John Smith")):
    predictions, nbest, null_odds = squad_predictions.postprocess_predictions(
        [example], features, start, end, tokenizer=tokenizer, version_2_with_negative=True,
        null_score_diff_threshold=threshold)
    assert null_odds == {"q": pytest.approx(1.0)}
    assert predictions == {"q": expected}
  assert nbest["q"][0]["text"] == ""  # Best first: the null answer.
  assert nbest["q"][1]["text"] == "John Smith"
  paths = squad_predictions.write_prediction_files(str(tmp_path / "out"), predictions, nbest, null_odds)
  assert sorted(os.path.basename(p) for p in paths.values()) == [
      "nbest_predictions.json", "null_odds.json", "predictions.json"]
  assert json.load(open(paths["predictions"])) == {"q": "John Smith"}
  assert json.load(open(paths["null_odds"]))["q"] == pytest.approx(1.0)
  v1_predictions, _, v1_odds = squad_predictions.postprocess_predictions(
      [example], features, start, end, tokenizer=tokenizer)
  assert v1_predictions == {"q": "John Smith"} and v1_odds == {}
  with pytest.raises(ValueError, match="1 features but logits"):
    squad_predictions.postprocess_predictions([example], features, start[:, :4].repeat(2, 0), end,
                                              tokenizer=tokenizer)


def test_oracle_logits_recover_the_answers(tokenizer, tmp_path):
  """Train-style targets as logits -> post-processing -> EM 100 on the same questions."""
  context = ("Tesla was born on 10 July 1856 in Smiljan, in the Austrian Empire (modern-day "
             "Croatia). He moved to the United States in 1884, where he worked for Thomas "
             "Edison's company in New York City.")
  answers = ["10 July 1856", "Smiljan", "Croatia", "1884", "Thomas Edison",
             "New York City", "Austrian Empire"]
  path = _squad_file(tmp_path, [(context, [
      _qa(f"q{i}", "What?", a, context=context) for i, a in enumerate(answers)])])
  examples, _ = squad_data.read_squad_json(path, is_training=True)
  arrays, features = squad.convert_examples_to_features(
      tokenizer, examples, max_seq_length=32, doc_stride=8, max_query_length=8,
      is_training=True)
  rows = np.arange(len(features))
  start = np.full((len(features), 32), -5.0, np.float32)
  end = start.copy()
  start[rows, arrays["start_positions"]] = 5.0
  end[rows, arrays["end_positions"]] = 5.0
  predictions, _, _ = squad_predictions.postprocess_predictions(examples, features, start, end,
                                                                tokenizer=tokenizer)
  assert predictions["q4"] == "Thomas Edison"  # Not "Edison's": get_final_text trims.
  data = json.load(open(path))
  assert squad_metrics.evaluate(data, predictions) == {"exact_match": 100.0, "f1": 100.0}
