"""SQuAD with byte-level BPE and SentencePiece tokenizers: offset features, end to end."""
import json

import pytest

from bert_jax.checkpoints import bundle
from bert_jax.checkpoints import loading
from bert_jax.data.tokenizers import tokenizer as tokenizer_lib
from bert_jax import finetune
from bert_jax.modeling.model_config import BertConfig
from bert_jax.tasks.squad import data as squad_data
from bert_jax.tasks.squad import offsets as squad_offsets
from bert_jax.tasks.squad import predictions as squad_predictions
from tests.fixtures.finetuning import squad_config
from tests.fixtures.finetuning import squad_json
from tests.fixtures.tiny_encoder import random_params
from tests.tokenizer_fixtures import reference_tokenizer

_CONTEXT = ("The quick brown fox jumps over lazy dogs while seven wizards quietly hum "
            "jazzy tunes (about running animals) in 1,000 towns.")
_QAS = [("who jumps over the dogs?", "quick brown fox"), ("how many wizards?", "seven"),
        ("what do they hum?", "jazzy tunes"), ("how many towns?", "1,000 towns")]


def _examples():
  records = [{"id": f"q{i}", "question": q, "context": _CONTEXT,
              "answers": [{"text": a, "answer_start": _CONTEXT.index(a)}]}
             for i, (q, a) in enumerate(_QAS)]
  return squad_data._make_examples(records, True, "test")[0]  # pylint: disable=protected-access


@pytest.mark.parametrize("kind", ["roberta", "albert"])
def test_offset_features_are_the_fast_tokenizers_rows_and_cut_the_gold_answers(
    kind, bpe_dir, albert_dir):
  directory = bpe_dir if kind == "roberta" else albert_dir
  tok = tokenizer_lib.tokenizer_from_path(str(directory))
  fast = reference_tokenizer(kind, directory)
  examples = _examples()
  arrays, features = squad_offsets.convert_examples_to_features(
      tok, examples, max_seq_length=160, doc_stride=32, max_query_length=16, is_training=True)
  assert len(features) == len(examples)  # one window each
  for row, (ex, f) in enumerate(zip(examples, features)):
    want = fast(ex.question_text, _CONTEXT, return_offsets_mapping=True)
    n = len(want["input_ids"])
    assert arrays["input_ids"][row, :n].tolist() == want["input_ids"]
    assert arrays["input_mask"][row].sum() == n
    start, end = int(arrays["start_positions"][row]), int(arrays["end_positions"][row])
    assert 0 < start <= end < n - 1
    assert _CONTEXT[f.offsets[start][0]:f.offsets[end][1]] == ex.orig_answer_text
    if kind == "roberta":  # RobertaTokenizerFast's offset_mapping (trim_offsets) exactly
      assert [f.offsets[p] for p in sorted(f.offsets)] == [
          tuple(o) for o in want["offset_mapping"][n - 1 - len(f.offsets):n - 1]]


def test_roberta_offsets_equal_transformers_next_to_tabs_newlines_and_no_break_spaces(bpe_dir):
  """A piece of only a tab, newline or U+00A0 keeps its character as its span (not an empty
  one): RobertaTokenizerFast (trim_offsets) trims only the ordinary space."""
  from tests.tokenizer_fixtures import _TRICKY  # pylint: disable=g-import-not-at-top
  tok = tokenizer_lib.tokenizer_from_path(str(bpe_dir))
  fast = reference_tokenizer("roberta", bpe_dir)
  texts = ["the\tfox", "the\nfox", "the\u00a0fox", "the \t fox\n\nran", "x  \u00a0 y ",
           "\tjumps\r\nover\u00a0\u00a0lazy\u3000dogs\u2009.", " \n", "a <mask>\tb"] + _TRICKY
  for text, (ids, spans) in zip(texts, tok.tokenize_with_offsets(texts)):
    want = fast(text, add_special_tokens=False, return_offsets_mapping=True)
    assert ids == want["input_ids"], text
    assert spans == [tuple(o) for o in want["offset_mapping"]], text
  # A SQuAD answer next to such whitespace is cut exactly as the fast tokenizer's rows cut it.
  context = "seven\twizards hum\njazzy tunes in\u00a01,000 towns."
  records = [{"id": f"q{i}", "question": "what?", "context": context,
              "answers": [{"text": a, "answer_start": context.index(a)}]}
             for i, a in enumerate(["wizards", "seven", "jazzy tunes", "1,000 towns"])]
  examples = squad_data._make_examples(records, True, "test")[0]  # pylint: disable=protected-access
  arrays, features = squad_offsets.convert_examples_to_features(
      tok, examples, max_seq_length=64, doc_stride=32, max_query_length=16, is_training=True)
  for row, (ex, f) in enumerate(zip(examples, features)):
    want = fast(ex.question_text, context, return_offsets_mapping=True)
    n = len(want["input_ids"])
    assert [f.offsets[p] for p in sorted(f.offsets)] == [
        tuple(o) for o in want["offset_mapping"][n - 1 - len(f.offsets):n - 1]]
    start, end = int(arrays["start_positions"][row]), int(arrays["end_positions"][row])
    assert context[f.offsets[start][0]:f.offsets[end][1]] == ex.orig_answer_text


def test_offset_windows_hold_the_answer_where_it_fits_and_predictions_cut_the_context(bpe_dir):
  tok = tokenizer_lib.tokenizer_from_path(str(bpe_dir))
  examples = _examples()
  arrays, features = squad_offsets.convert_examples_to_features(
      tok, examples, max_seq_length=24, doc_stride=5, max_query_length=8, is_training=True)
  assert len(features) > 2 * len(examples)  # several windows each
  start_logits = arrays["start_positions"][:, None] == range(24)
  end_logits = arrays["end_positions"][:, None] == range(24)
  for i, ex in enumerate(examples):
    rows = [r for r, f in enumerate(features) if f.example_index == i]
    assert any(arrays["start_positions"][r] > 0 for r in rows)  # some window holds it
  preds, _, _ = squad_predictions.postprocess_predictions(
      examples, features, start_logits * 10.0, end_logits * 10.0, tokenizer=tok,
      n_best_size=5, max_answer_length=10)
  assert preds == {ex.qas_id: ex.orig_answer_text for ex in examples}


@pytest.mark.slow
def test_squad_finetunes_a_roberta_checkpoint_end_to_end(tmp_path, bpe_dir):
  """A tiny random checkpoint with RoBERTa's tokenizer fine-tunes on SQuAD; answers are
  context text."""
  tok = tokenizer_lib.tokenizer_from_path(str(bpe_dir))
  config = BertConfig(vocab_size=tok.vocab_size, hidden_size=16, num_layers=1, num_heads=2,
                      intermediate_size=32, max_position_embeddings=64)
  init = str(tmp_path / "init")
  bundle.save_bundle(init, random_params(config, heads=()), config, tok.inv_vocab, False,
                     tokenizer_file=str(bpe_dir / "vocab.json"))
  assert tokenizer_lib.for_checkpoint(loading.load_pretrained(init)).kind == "bpe"
  squad_dir = tmp_path / "squad"
  squad_dir.mkdir()
  for name, copies in (("train-v1.1.json", 2), ("dev-v1.1.json", 1)):
    (squad_dir / name).write_text(json.dumps(squad_json("1.1", False, copies)),
                                  encoding="utf-8")
  results = finetune.finetune(squad_config(str(squad_dir), init, num_epochs=1.0),
                              str(tmp_path / "ft"))
  assert set(results) == {"exact_match", "f1", "zero_shot_exact_match", "zero_shot_f1"}
  preds = json.loads((tmp_path / "ft" / "predictions.json").read_text())
  gold = json.loads((squad_dir / "dev-v1.1.json").read_text())
  contexts = [p["context"] for a in gold["data"] for p in a["paragraphs"]]
  assert len(preds) == 5 and all(t and any(t in c for c in contexts) for t in preds.values())
  # The Python API answers from the export with the same offset features.
  from bert_jax import Encoder  # pylint: disable=g-import-not-at-top
  records = [(qa["id"], qa["question"], p["context"]) for article in gold["data"]
             for p in article["paragraphs"] for qa in p["qas"]]
  answers = Encoder.load(str(tmp_path / "ft" / "export")).answer(
      [r[1] for r in records], [r[2] for r in records], batch_size=4)
  assert answers == [preds[r[0]] for r in records]


@pytest.mark.parametrize("kind", ["albert", "deberta"])
def test_sentencepiece_offsets_come_with_the_whole_text_ids(kind, albert_dir, deberta_dir):
  """Word-by-word ids equal the whole text's; spans are in order and inside the text, and a
  piece spells its characters (case aside) in words of known characters."""
  from tests.tokenizer_fixtures import _TRICKY  # pylint: disable=g-import-not-at-top
  tok = tokenizer_lib.tokenizer_from_path(str(albert_dir if kind == "albert" else deberta_dir))
  # Not here: trailing spaces (ALBERT's whole text ends in a '▁' piece) and DeBERTa's literal
  # '[UNK]' after a space (matched after the normalisation: the whole text keeps a '▁' before it).
  texts = [t for t in _TRICKY if t == t.rstrip() and "[UNK]" not in t] + [_CONTEXT]
  for text, (ids, spans), whole in zip(texts, tok.tokenize_with_offsets(texts),
                                       tok.tokenize_to_ids(texts)):
    assert ids == whole, text
    assert len(spans) == len(ids)
    assert all(0 <= s <= e <= len(text) for s, e in spans)
    assert [s for s, _ in spans] == sorted(s for s, _ in spans), text
  text = "the brown jumps over lazy dogs in 1,000 towns while seven wizards hum" + (" (a)" if kind == "albert" else "")
  ids, spans = tok.tokenize_with_offsets([text])[0]
  assert tok.unk_id not in ids and "".join(text[s:e] for s, e in spans) == text.replace(" ", "")
  for i, (s, e) in zip(ids, spans):
    assert text[s:e].lower() == tok.inv_vocab[i].lstrip("\u2581"), (s, e)
