"""NER: CoNLL reading and its errors, first-piece labels and windows, conlleval scores
(equal to seqeval's), and one short fine-tuning run end to end."""
import json
import os
import warnings

import flax.linen as nn
import jax
import numpy as np
import pytest

from bert_jax.checkpoints import bundle
from bert_jax.checkpoints import loading
from bert_jax.data.tokenizers import tokenizer as tokenizer_lib
from bert_jax import finetune
from bert_jax.finetuning import setup as finetune_setup
from bert_jax.tasks.ner import conlleval
from bert_jax.tasks.ner import data as ner
from bert_jax.tasks import task as task_lib
from tests.fixtures.finetuning import conll
from tests.fixtures.finetuning import random_bundle
from tests.fixtures.repo import load_config

# (gold, predicted) sentence lists: IOB1 (CoNLL-2003's I- starts) and IOB2 edge cases.
EDGE_CASES = [
    # IOB1: I- starts a chunk after O, B- only between two chunks of one type.
    ([["I-PER", "I-PER", "B-PER", "O", "I-LOC"]], [["I-PER", "I-PER", "I-PER", "O", "I-LOC"]]),
    # IOB2, a type change inside a run, chunks at both sentence ends.
    ([["B-ORG", "I-ORG", "I-LOC", "O", "B-MISC"]], [["B-ORG", "I-ORG", "B-LOC", "O", "B-MISC"]]),
    # I- after O in the prediction (conlleval: a chunk start), B- after B- of one type.
    ([["O", "B-PER", "I-PER"], ["B-LOC", "B-LOC"]], [["O", "I-PER", "I-PER"], ["B-LOC", "I-LOC"]]),
    # A chunk does not run over a sentence boundary; one-word sentences.
    ([["I-PER"], ["I-PER"], ["O"]], [["I-PER"], ["I-PER"], ["I-PER"]]),
    # No gold entity; no predicted entity; nothing at all.
    ([["O", "O"]], [["B-PER", "O"]]),
    ([["B-PER", "O"]], [["O", "O"]]),
    ([["O"]], [["O"]]),
]


def test_conlleval_chunks_read_iob1_and_iob2_alike():
  assert conlleval.chunks(["I-PER", "I-PER", "B-PER", "O", "I-LOC"]) == [
      ("PER", 0, 1), ("PER", 2, 2), ("LOC", 4, 4)]
  assert conlleval.chunks(["B-PER", "I-PER", "B-PER", "O", "B-LOC"]) == [
      ("PER", 0, 1), ("PER", 2, 2), ("LOC", 4, 4)]
  assert conlleval.chunks(["B-PER", "I-LOC", "I-LOC", "O", "O", "I-ORG"]) == [
      ("PER", 0, 0), ("LOC", 1, 2), ("ORG", 5, 5)]
  scores = conlleval.evaluate([["B-PER", "I-PER", "O", "B-LOC"]], [["B-PER", "O", "O", "B-LOC"]])
  # Gold PER(0-1), LOC(3); predicted PER(0-0) wrong (ends early), LOC right.
  assert scores["precision"] == 0.5 and scores["recall"] == 0.5 and scores["f1"] == 0.5
  assert scores["accuracy"] == 0.75
  assert scores["f1_PER"] == 0.0 and scores["f1_LOC"] == 1.0
  with pytest.raises(ValueError, match="sentence 0: 2 gold tags but 1 predicted"):
    conlleval.evaluate([["O", "O"]], [["O"]])


def test_entity_scores_equal_seqeval():
  seqeval = pytest.importorskip(
      "seqeval.metrics", reason="needs seqeval (pip install -e .[test]) to compare with")
  rng = np.random.default_rng(0)
  tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "I-MISC", "B-MISC"]
  cases = list(EDGE_CASES)
  for _ in range(300):  # random IOB1 / IOB2 mixes, several sentences each
    gold = [list(rng.choice(tags, rng.integers(1, 8))) for _ in range(rng.integers(1, 4))]
    pred = [[t if rng.random() < 0.6 else str(rng.choice(tags)) for t in s] for s in gold]
    cases.append((gold, pred))
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # seqeval warns on sentences without entities
    for gold, pred in cases:
      ours = conlleval.evaluate(gold, pred)
      theirs = {"precision": seqeval.precision_score(gold, pred, zero_division=0),
                "recall": seqeval.recall_score(gold, pred, zero_division=0),
                "f1": seqeval.f1_score(gold, pred, zero_division=0),
                "accuracy": seqeval.accuracy_score(gold, pred)}
      for key, value in theirs.items():
        assert ours[key] == pytest.approx(value, abs=1e-12), (gold, pred, key)


def _write(path, text):
  path.write_text(text, encoding="utf-8")
  return str(path)


def _piece_tokenizer(tmp_path):
  tokens = list(tokenizer_lib.SPECIAL_TOKENS) + ["new", "york", "is", "big", "##ger", "paris"]
  return tokenizer_lib.WordPieceTokenizer(_write(tmp_path / "vocab.txt", "\n".join(tokens)), True)


def test_read_conll_docstart_columns_and_errors(tmp_path):
  good = _write(tmp_path / "good.txt", "-DOCSTART- -X- O O\n\nNew NNP I-NP I-LOC\n"
                "York NNP I-NP I-LOC\n\n\nis VBZ I-VP O\n-DOCSTART- -X- O O\nParis NNP I-NP B-LOC\n")
  sentences = ner.read_conll(good)
  assert [s.words for s in sentences] == [["New", "York"], ["is"], ["Paris"]]
  assert [s.tags for s in sentences] == [["I-LOC", "I-LOC"], ["O"], ["B-LOC"]]
  assert sentences[0].lines == [3, 4]
  assert ner.label_list(sentences, good) == ["O", "B-LOC", "I-LOC"]
  assert ner.scheme_of(sentences) == "IOB1"  # I-LOC starts New York
  unlabeled = ner.read_conll(_write(tmp_path / "u.txt", "New\nYork\n\nis\n"))
  assert unlabeled[0].tags is None and unlabeled[1].words == ["is"]
  cases = [("cols.txt", "New NNP I-LOC\nYork I-LOC\n", r"cols.txt:2: 2 columns, but .* has 3"),
           ("tag.txt", "New I-LOC\nYork LOC\n", r"tag.txt:2: tag 'LOC' is not IOB"),
           ("iobes.txt", "New S-LOC\n", r"iobes.txt:1: tag 'S-LOC' is not IOB"),
           ("empty.txt", "", r"empty.txt: no sentences"),
           ("blank.txt", "-DOCSTART- -X- O O\n\n\n", r"blank.txt: no sentences")]
  for name, text, message in cases:
    with pytest.raises(ValueError, match=message):
      ner.read_conll(_write(tmp_path / name, text))
  with pytest.raises(ValueError, match=r"train needs tags|a training file needs tags"):
    ner.label_list(unlabeled, "train")
  with pytest.raises(FileNotFoundError, match="nope.txt"):
    ner.read_conll(str(tmp_path / "nope.txt"))


def test_schemes_convert_keeping_entities_and_roundtrip():
  iob1 = ["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-ORG", "B-ORG", "I-ORG", "O"]
  iob2 = ["B-PER", "I-PER", "B-PER", "O", "B-LOC", "B-ORG", "B-ORG", "I-ORG", "O"]
  assert ner.convert(iob1, "IOB2") == iob2 and ner.convert(iob2, "IOB1") == iob1
  assert ner.convert(iob1, "IOB1") == iob1 and ner.convert(iob2, "IOB2") == iob2
  with pytest.raises(ValueError, match="scheme 'IOBES' not in"):
    ner.convert(iob1, "IOBES")
  sentence = lambda tags: ner.Sentence(["w"] * len(tags), tags, [])  # noqa: E731
  assert ner.scheme_of([sentence(iob1)]) == "IOB1" and ner.scheme_of([sentence(iob2)]) == "IOB2"
  assert ner.scheme_of([sentence(["O"])]) is None
  assert ner.scheme_of([ner.Sentence(["w"], None, [])]) is None
  # Any sequence, well formed or not (B- after O in IOB1, I- after O in IOB2), keeps
  # conlleval's entities both ways; well-formed ones come back unchanged.
  rng = np.random.default_rng(0)
  tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
  for _ in range(500):
    seq = [str(t) for t in rng.choice(tags, rng.integers(1, 9))]
    one, two = ner.convert(seq, "IOB1"), ner.convert(seq, "IOB2")
    assert conlleval.chunks(one) == conlleval.chunks(two) == conlleval.chunks(seq), seq
    assert ner.convert(two, "IOB1") == one and ner.convert(one, "IOB2") == two
    assert ner.scheme_of([sentence(two)]) in ("IOB2", None)
    assert ner.scheme_of([sentence(one)]) in ("IOB1", None)


def _twin_files(tmp_path, rng):
  """IOB1 train.txt (no B- tag) and valid.txt (one B-LOC), and their IOB2 twins in iob2/."""
  _write(tmp_path / "train.txt", conll(rng, 8))
  _write(tmp_path / "valid.txt", conll(rng, 4, adjacent=True))
  (tmp_path / "iob2").mkdir()
  for name in ("train.txt", "valid.txt"):
    sentences = ner.read_conll(str(tmp_path / name))
    _write(tmp_path / "iob2" / name, "\n\n".join(
        "\n".join(f"{w} X {t}" for w, t in zip(s.words, ner.convert(s.tags, "IOB2")))
        for s in sentences) + "\n")


@pytest.mark.parametrize("label_scheme", ["IOB1", "IOB2"])
def test_iob1_files_train_on_the_closure_and_score_in_iob1(tmp_path, label_scheme):
  """IOB1 whose training file lacks B-LOC and B-PER: valid's B-LOC is a label, the model
  learns label_scheme's targets, and the predictions are written and scored in IOB1."""
  init, loaded, tok = _random_init(tmp_path)
  _twin_files(tmp_path, np.random.default_rng(3))
  task = finetune_setup.build_task(
      _ner_config(tmp_path, init, test_file="", label_scheme=label_scheme), tok, loaded.config)
  labels = task.model.export_info["labels"]
  assert labels == ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"]
  assert task.data_stats["train_scheme"] == task.data_stats["valid_scheme"] == "IOB1"
  assert task.model.export_info["scheme"] == label_scheme
  assert "B-PER" not in (tmp_path / "train.txt").read_text()
  learned_b_per = (task.train_arrays["label_ids"] == labels.index("B-PER")).any()
  assert learned_b_per == (label_scheme == "IOB2")  # every PER starts with B-PER in IOB2
  # Logits that pick each word's label: the written file is the IOB1 input, f1 1.
  valid = ner.read_conll(str(tmp_path / "valid.txt"))
  arrays = task.eval_sets[0].arrays
  logits = np.eye(len(labels))[arrays["label_ids"]] * (arrays["label_weights"][..., None] > 0)
  scores = task.eval_sets[0].score({"logits": logits}, str(tmp_path / "out"))
  assert scores["f1"] == 1.0
  blocks = (tmp_path / "out" / "predictions" / "valid.txt").read_text().strip().split("\n\n")
  assert [[line.split()[2] for line in b.splitlines()] for b in blocks] == [s.tags for s in valid]
  with pytest.raises(ValueError, match=r"bad config: label_scheme 'BIO' not in \['IOB1', 'IOB2'\]"):
    finetune_setup.make_task_model(_ner_config(tmp_path, init, label_scheme="BIO"), loaded.config)


def test_training_targets_do_not_depend_on_the_files_scheme(tmp_path):
  """The same CoNLL data in IOB1 and in IOB2 trains on the same targets, IOB1's by default (the
  reference learns the IOB1 file's tags; training on an IOB2-converted copy's B-/I- targets scores
  about 9 F1 below it), and an IOB2 file's predictions are written in IOB2."""
  init, loaded, tok = _random_init(tmp_path)
  _twin_files(tmp_path, np.random.default_rng(4))
  tasks = [finetune_setup.build_task(_ner_config(d, init, test_file=""), tok, loaded.config)
           for d in (tmp_path, tmp_path / "iob2")]
  for key in ("input_ids", "label_ids", "label_weights"):
    np.testing.assert_array_equal(tasks[0].train_arrays[key], tasks[1].train_arrays[key])
  assert tasks[1].data_stats["train_scheme"] == "IOB2"
  labels = tasks[0].model.export_info["labels"]
  train = ner.read_conll(str(tmp_path / "train.txt"))
  first = ner.encode(tok, train, labels, 8)["label_ids"]  # the IOB1 file's own tags
  np.testing.assert_array_equal(tasks[0].train_arrays["label_ids"], first)
  arrays = tasks[1].eval_sets[0].arrays
  logits = np.eye(len(labels))[arrays["label_ids"]] * (arrays["label_weights"][..., None] > 0)
  tasks[1].eval_sets[0].score({"logits": logits}, str(tmp_path / "out2"))
  written = (tmp_path / "out2" / "predictions" / "valid.txt").read_text().strip().split("\n\n")
  valid2 = ner.read_conll(str(tmp_path / "iob2" / "valid.txt"))
  assert [[line.split()[2] for line in b.splitlines()] for b in written] == [
      s.tags for s in valid2]


def test_first_piece_labels_and_windows_predict_every_word_once(tmp_path):
  tok = _piece_tokenizer(tmp_path)
  labels = ["O", "B-LOC", "I-LOC"]
  # 'bigger' is two pieces (big ##ger); the 7-piece sentence splits at word boundaries.
  sentences = [ner.Sentence(["New", "York", "is", "bigger", "Paris", "is", "big"],
                            ["B-LOC", "I-LOC", "O", "O", "B-LOC", "O", "O"], list(range(7))),
               ner.Sentence(["Paris"], ["B-LOC"], [9])]
  arrays = ner.encode(tok, sentences, labels, max_seq_length=6)  # 4 pieces a window
  ids = lambda *ws: [tok.vocab[w] for w in ws]  # noqa: E731
  cls, sep = tok.cls_id, tok.sep_id
  assert arrays["input_ids"].tolist() == [
      [cls] + ids("new", "york", "is") + [sep, 0],
      [cls] + ids("big", "##ger", "paris", "is") + [sep],
      [cls] + ids("big") + [sep, 0, 0, 0],
      [cls] + ids("paris") + [sep, 0, 0, 0]]
  assert arrays["sentence_index"].tolist() == [0, 0, 0, 1]
  assert arrays["word_index"][1].tolist() == [-1, 3, -1, 4, 5, -1]  # ##ger carries no label
  assert arrays["label_weights"][1].tolist() == [0, 1, 0, 1, 1, 0]
  assert arrays["label_ids"][0].tolist() == [0, 1, 2, 0, 0, 0]
  assert arrays["input_mask"].sum(1).tolist() == [5, 6, 3, 3]
  # Logits that pick each first piece's gold label give back every word's tag once.
  logits = np.eye(3)[arrays["label_ids"]] * (arrays["label_weights"][..., None] > 0)
  assert ner.predicted_tags(logits, arrays, sentences, labels) == [s.tags for s in sentences]


def _ner_config(data_dir, init, **overrides):
  c = load_config("ner", None)
  c.data_dir, c.init_checkpoint = str(data_dir), init
  c.max_seq_length, c.batch_size, c.eval_batch_size = 8, 8, 8
  c.num_epochs, c.log_every, c.learning_rate = 1.0, 1, 1e-3
  for k, v in overrides.items():
    c[k] = v
  return c


def _random_init(tmp_path):
  """A random 1-layer bundle, its loaded checkpoint and tokenizer."""
  init = random_bundle(tmp_path / "init")
  loaded = loading.load_pretrained(init)
  return init, loaded, tokenizer_lib.cached_tokenizer("wordpiece", loaded.vocab, loaded.lowercase)


def test_bad_ner_data_fails_before_training_naming_file_and_line(tmp_path):
  init, loaded, tok = _random_init(tmp_path)
  rng = np.random.default_rng(0)
  _write(tmp_path / "train.txt", conll(rng, 8))
  _write(tmp_path / "valid.txt", conll(rng, 4) + "\nw5 X B-ORG\n")
  with pytest.raises(ValueError, match=r"valid.txt:\d+: tag 'B-ORG' is not in the training "
                                       r"file's labels \['O', 'B-LOC', 'B-PER', 'I-LOC', "
                                       r"'I-PER'\] \(entity type 'ORG' never occurs in it\)"):
    finetune_setup.build_task(_ner_config(tmp_path, init), tok, loaded.config)
  _write(tmp_path / "valid.txt", "")
  with pytest.raises(ValueError, match="valid.txt: no sentences"):
    finetune.finetune(_ner_config(tmp_path, init), str(tmp_path / "w"))
  assert not (tmp_path / "w" / "eval_results.json").exists()
  with pytest.raises(ValueError, match="data_dir is required for NER"):
    finetune_setup.make_task_model(_ner_config("", init), loaded.config)
  # An unlabeled test file is predicted, not scored.
  _write(tmp_path / "valid.txt", conll(rng, 4))
  _write(tmp_path / "test.txt", conll(rng, 3, labeled=False))
  task = finetune_setup.build_task(_ner_config(tmp_path, init), tok, loaded.config)
  test = task.eval_sets[1]
  logits = np.zeros(test.arrays["input_ids"].shape + (5,), np.float32)
  assert test.score({"logits": logits}, str(tmp_path / "out")) == {}
  lines = (tmp_path / "out" / "predictions" / "test.txt").read_text().splitlines()
  assert all(len(l.split()) == 2 and l.split()[1] == "O" for l in lines if l)


@pytest.mark.slow
def test_ner_end_to_end(tmp_path):
  init = random_bundle(tmp_path / "init")
  rng = np.random.default_rng(1)
  data = tmp_path / "conll"
  data.mkdir()
  for name, n in (("train.txt", 24), ("valid.txt", 6), ("test.txt", 5)):  # IOB1; only valid
    _write(data / name, conll(rng, n, adjacent=name != "train.txt"))  # and test have B-LOC
  workdir = tmp_path / "run"
  results = finetune.finetune(_ner_config(data, init), str(workdir))
  written = json.loads((workdir / "eval_results.json").read_text())
  assert written == results
  for prefix in ("", "test_"):
    assert {prefix + k for k in ("f1", "precision", "recall", "accuracy")} <= set(written)
  # The scores are conlleval's over the written predictions, which hold every valid word.
  for split, prefix in (("valid", ""), ("test", "test_")):
    gold_sentences = ner.read_conll(str(data / f"{split}.txt"))
    blocks = (workdir / "predictions" / f"{split}.txt").read_text().strip().split("\n\n")
    rows = [[line.split() for line in block.splitlines()] for block in blocks]
    assert [[r[0] for r in s] for s in rows] == [s.words for s in gold_sentences]
    assert [[r[1] for r in s] for s in rows] == [s.tags for s in gold_sentences]
    assert all(ner.convert([r[2] for r in s], "IOB1") == [r[2] for r in s] for s in rows)  # IOB1
    scores = conlleval.evaluate([[r[1] for r in s] for s in rows], [[r[2] for r in s] for s in rows])
    for key in ("f1", "precision", "recall", "accuracy"):
      assert written[prefix + key] == pytest.approx(scores[key])
    gold_tags = [t for s in gold_sentences for t in s.tags]  # the baseline: every word O
    assert written[prefix + "all_o_baseline_accuracy"] == gold_tags.count("O") / len(gold_tags)
  records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
  losses = [r["seed0_train_loss"] for r in records if "seed0_train_loss" in r]
  assert losses and all(np.isfinite(losses))
  exported = bundle.load_bundle(os.path.join(workdir, "export"))
  assert exported.params["token_classifier"]["kernel"].shape == (16, 5)
  # The export carries its labels: the Python API tags as the run predicted.
  from bert_jax import Encoder  # pylint: disable=g-import-not-at-top
  enc = Encoder.load(os.path.join(workdir, "export"))
  assert enc.info["labels"] == ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"]
  assert (enc.info["scheme"], enc.info["train_scheme"]) == ("IOB1", "IOB1")  # learned, file
  valid = ner.read_conll(str(data / "valid.txt"))
  blocks = (workdir / "predictions" / "valid.txt").read_text().strip().split("\n\n")
  written = [[line.split()[2] for line in block.splitlines()] for block in blocks]
  texts = [" ".join(s.words) for s in valid[:-1]] + [valid[-1].words]  # strings or word lists
  assert enc.tag(texts, scheme="IOB1", batch_size=4) == written
  assert enc.tag(texts, batch_size=4) == [ner.convert(tags, "IOB2") for tags in written]
  with pytest.raises(ValueError, match="scheme 'BIO' not in"):
    enc.tag(texts, scheme="BIO")
  with pytest.raises(ValueError, match="not an NER fine-tuning export"):
    Encoder.load(init).tag(["w1 w2"])


def test_loss_is_the_mean_over_labeled_pieces_of_the_whole_batch(tmp_path):
  init, loaded, tok = _random_init(tmp_path)
  rng = np.random.default_rng(2)
  _write(tmp_path / "train.txt", conll(rng, 8))
  _write(tmp_path / "valid.txt", conll(rng, 2))
  task = finetune_setup.build_task(_ner_config(tmp_path, init, test_file=""), tok, loaded.config)
  batch = {k: task.train_arrays[k][:4] for k in task_lib.MODEL_INPUTS + task.label_keys}
  params = nn.unbox(jax.jit(task_lib.init_fn(task.model, 8))(jax.random.PRNGKey(0)))
  logits = np.asarray(jax.jit(task_lib.predict_fn(task.model))(params, batch)["logits"])  # [4, 8, 5]
  log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  ce = -np.take_along_axis(log_probs, batch["label_ids"][..., None], -1)[..., 0]
  w = batch["label_weights"]
  want = (ce * w).sum() / w.sum()  # pieces per window differ, so not a mean of window means
  assert want != pytest.approx(np.mean((ce * w).sum(1) / w.sum(1)))
  objective = task_lib.objective(task)
  sums = jax.jit(lambda p, b: objective.sums(p, b, None, True))
  denominators = objective.denominators(batch)
  whole = objective.loss(sums(params, batch), denominators)
  halves = [sums(params, {k: v[i::2] for k, v in batch.items()}) for i in (0, 1)]
  split = objective.loss(jax.tree.map(lambda a, b: a + b, *halves), denominators)
  assert float(whole) == pytest.approx(want, rel=1e-5)
  assert float(split) == pytest.approx(want, rel=1e-5)


def test_the_closing_line_sets_each_baseline_against_its_own_metric():
  # The all-O baseline is a word accuracy (its entity F1 is 0): the line shows the run's
  # accuracy beside its F1, so the two accuracies stand side by side.
  results = {"f1": 0.6904, "accuracy": 0.9488, "all_o_baseline_accuracy": 0.8325,
             "f1_LOC": 0.7568}
  assert task_lib.baseline_line(results, "f1") == (
      "f1 0.6904, accuracy 0.9488 against the baseline: all_o_baseline_accuracy 0.8325")
  assert task_lib.baseline_line({"dev_f1": 0.5, "dev_accuracy": 0.9,
                                 "dev_all_o_baseline_accuracy": 0.8}, "dev_f1") == (
      "dev_f1 0.5000, dev_accuracy 0.9000 against the baseline: dev_all_o_baseline_accuracy "
      "0.8000")
  # A baseline that names no metric of its own (GLUE's majority class) stands alone.
  assert task_lib.baseline_line({"accuracy": 0.8, "majority_baseline": 0.6}, "accuracy") == (
      "accuracy 0.8000 against the baseline: majority_baseline 0.6000")
  assert task_lib.baseline_line({"accuracy": 0.8}, "accuracy") == ""

