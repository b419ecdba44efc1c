"""Sentence-embedding training (configs/sentence_embeddings.py): files, losses, end to end.

Losses are checked against sentence-transformers' definitions written out
element by element in numpy; the end-to-end run checks that the Spearman in
eval_results.json is that of the cosine of `bert_jax.embed`'s vectors from the
exported bundle, which records the pooling and normalisation embed then uses.
"""
import json

import numpy as np
import pytest
from scipy import stats

from bert_jax.checkpoints import bundle
from bert_jax.checkpoints import loading
from bert_jax.data.tokenizers import tokenizer as tokenizer_lib
from bert_jax import finetune
from bert_jax.finetuning import setup as finetune_setup
from bert_jax.inference import embedding
from bert_jax.modeling.model_config import BertConfig
from bert_jax.tasks.sentence_embeddings import pairs as sentence_pairs
from tests.fixtures.repo import load_config
from tests.fixtures.tiny_encoder import random_params

CONFIG = BertConfig(vocab_size=35, hidden_size=16, num_layers=1, num_heads=2,
                    intermediate_size=32, max_position_embeddings=32)


def _random_bundle(path) -> str:
  """A 1-layer bundle of words w0..w29 with params of unit scale (distinct sentence vectors)."""
  vocab = path.parent / f"{path.name}_vocab.txt"
  tokens = list(tokenizer_lib.SPECIAL_TOKENS) + [f"w{i}" for i in range(30)]
  vocab.write_text("\n".join(tokens) + "\n", encoding="utf-8")
  bundle.save_bundle(str(path), random_params(CONFIG), CONFIG, str(vocab), True)
  return str(path)


def _sentence(rng):
  return " ".join(f"w{i}" for i in rng.integers(0, 30, rng.integers(1, 12)))


def _scored(rng, n):
  return "".join(f"{_sentence(rng)}\t{_sentence(rng)}\t{rng.uniform(0, 5):.2f}\n" for _ in range(n))


def _se_config(init, train, evaluation, **overrides):
  c = load_config("sentence_embeddings", None)
  c.init_checkpoint, c.train_file, c.eval_file = init, str(train), str(evaluation)
  c.max_seq_length, c.batch_size, c.eval_batch_size = 8, 8, 8  # one bucket: one compilation
  c.log_every, c.learning_rate = 1, 1e-3
  for k, v in overrides.items():
    c[k] = v
  return c


def test_losses_match_sentence_transformers_definitions():
  rng = np.random.default_rng(0)
  u, v, w = (rng.normal(size=(5, 4)).astype(np.float32) for _ in range(3))
  scores = np.array([0.1, 0.9, 0.5, 0.5, 0.3], np.float32)
  cos = lambda a, b: (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)  # noqa: E731
  c = cos(u, v) * 20
  terms = [c[i] - c[j] for i in range(5) for j in range(5) if scores[i] < scores[j]]
  want = np.log(1 + np.sum(np.exp(np.array(terms, np.float64))))
  emb = np.stack([u, v], 1)
  got = sentence_pairs.loss_fn("cosent", 20.0, 5.0)(emb, {"scores": scores})
  np.testing.assert_allclose(got, np.full(5, want), rtol=1e-5)
  got = sentence_pairs.loss_fn("cosine", 20.0, 5.0)(emb, {"scores": scores})
  np.testing.assert_allclose(got, (cos(u, v) - scores) ** 2, rtol=1e-5)
  # mnrl: anchor i against every positive and negative of the batch, positive i the target.
  cands = np.concatenate([v, w])
  logits = 20 * np.stack([cos(u[i][None].astype(np.float64), cands) for i in range(5)])
  want = [np.log(np.exp(logits[i]).sum()) - logits[i, i] for i in range(5)]
  got = sentence_pairs.loss_fn("mnrl", 20.0, 5.0)(np.stack([u, v, w], 1), {})
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
  got = sentence_pairs.loss_fn("triplet", 20.0, 5.0)(np.stack([u, v, w], 1), {})
  dist = lambda a, b: np.linalg.norm(a - b + 1e-6, axis=-1)  # noqa: E731
  np.testing.assert_allclose(got, np.maximum(dist(u, v) - dist(u, w) + 5, 0), rtol=1e-5)


def test_files_layouts_and_errors_name_the_line(tmp_path):
  release = tmp_path / "sts.tsv"
  release.write_text("main-news\tMSRpar\t2012\t0001\t4.0\tA b.\tA c.\tlicense\n"
                     "main-news\tMSRpar\t2012\t0002\t1.5\tD e.\tF g.\n")
  rows = sentence_pairs.read_scored_pairs(str(release))
  assert rows.texts == [("A b.", "A c."), ("D e.", "F g.")] and rows.scores.tolist() == [4.0, 1.5]
  simple = tmp_path / "pairs.tsv"
  simple.write_text("sentence1\tsentence2\tscore\na\tb\t0.5\n\nc\td\t1\n")
  rows = sentence_pairs.read_scored_pairs(str(simple))
  assert rows.texts == [("a", "b"), ("c", "d")] and rows.scores.tolist() == [0.5, 1.0]
  simple.write_text("a\tb\t0.5\nc\td\thigh\n")
  with pytest.raises(ValueError, match=r"pairs.tsv:2: score 'high' is not a number"):
    sentence_pairs.read_scored_pairs(str(simple))
  simple.write_text("a\tb\t0.5\nc\td\n")
  with pytest.raises(ValueError, match=r"pairs.tsv:2: expected s1<TAB>s2<TAB>score \(3 columns\)"):
    sentence_pairs.read_scored_pairs(str(simple))
  with pytest.raises(FileNotFoundError, match="no file .*missing.tsv"):
    sentence_pairs.read_scored_pairs(str(tmp_path / "missing.tsv"))
  tuples = tmp_path / "tuples.tsv"
  tuples.write_text("a\tb\tc\nd\te\n")
  with pytest.raises(ValueError, match=r"tuples.tsv:2: 2 columns, but the first line has 3"):
    sentence_pairs.read_tuples(str(tuples), need_negative=False)
  tuples.write_text("a\tb\nd\te\n")
  with pytest.raises(ValueError, match="triplet loss needs 'anchor<TAB>positive<TAB>negative'"):
    sentence_pairs.read_tuples(str(tuples), need_negative=True)
  # A scored-pair file given to mnrl or triplet: its scores are not negatives.
  for text in ("sentence1\tsentence2\tscore\na\tb\t0.5\nc\td\t1\n", "a\tb\t4\nc\td\t1.25\n"):
    tuples.write_text(text)
    for need_negative in (False, True):
      with pytest.raises(ValueError, match=r"tuples.tsv: its third column is a score on every "
                                           r"line .* loss=cosent or cosine"):
        sentence_pairs.read_tuples(str(tuples), need_negative=need_negative)
  tuples.write_text("a\tb\t4\nc\td\tthe 3 cats\n")  # a number among sentences is a sentence
  assert sentence_pairs.read_tuples(str(tuples), need_negative=True).texts[0] == ("a", "b", "4")


def test_bad_config_and_scores_fail_before_training(tmp_path):
  init = _random_bundle(tmp_path / "init")
  loaded = loading.load_pretrained(init)
  tok = tokenizer_lib.cached_tokenizer("wordpiece", loaded.vocab, loaded.lowercase)
  rng = np.random.default_rng(0)
  (tmp_path / "train.tsv").write_text(_scored(rng, 8) + "w1\tw2\t7\n")
  (tmp_path / "eval.tsv").write_text(_scored(rng, 4))
  cfg = _se_config(init, tmp_path / "train.tsv", tmp_path / "eval.tsv")
  with pytest.raises(ValueError, match=r"train.tsv: 1 score\(s\) outside \[0, score_max 5\]"):
    finetune_setup.build_task(cfg, tok, loaded.config)
  with pytest.raises(ValueError, match="bad config: loss 'l2' not in"):
    finetune_setup.build_task(_se_config(init, "t", "e", loss="l2"), tok, loaded.config)
  cfg = _se_config(init, tmp_path / "train.tsv", tmp_path / "eval.tsv")
  cfg.optimizer.grad_accum_steps, cfg.batch_size = 2, 16
  with pytest.raises(ValueError, match="loss cosent compares the examples of a whole batch"):
    finetune.finetune(cfg, str(tmp_path / "w"))
  # Tuples: anchor / positive / negative rows of [n, 3, len], counted by input_ids.
  (tmp_path / "triplets.tsv").write_text("w1 w2\tw1 w3\tw9\nw4\tw4 w5\tw6 w7 w8\n")
  task = finetune_setup.build_task(
      _se_config(init, tmp_path / "triplets.tsv", tmp_path / "eval.tsv", loss="triplet"), tok,
      loaded.config)
  assert task.train_arrays["input_ids"].shape == (2, 3, 8) and task.label_keys == ()
  assert task.train_arrays["input_mask"].sum(-1).tolist() == [[4, 4, 3], [3, 4, 5]]


@pytest.mark.slow
def test_cosent_end_to_end_and_embed_uses_the_bundle(tmp_path):
  init = _random_bundle(tmp_path / "init")
  rng = np.random.default_rng(1)
  (tmp_path / "train.tsv").write_text(_scored(rng, 24))
  (tmp_path / "eval.tsv").write_text(_scored(rng, 12))
  workdir = tmp_path / "run"
  results = finetune.finetune(_se_config(init, tmp_path / "train.tsv", tmp_path / "eval.tsv",
                                         pooling="cls"), str(workdir))
  assert json.loads((workdir / "eval_results.json").read_text()) == results
  info = json.loads((workdir / "export" / bundle.INFO_FILE).read_text())
  assert info["task"] == "sentence_embeddings"
  assert info["embedding"] == {"pooling": "cls", "normalize": True}
  # embed's defaults come from the bundle; its vectors give eval_results' Spearman.
  exported = loading.load_pretrained(str(workdir / "export"))
  rows = sentence_pairs.read_scored_pairs(str(tmp_path / "eval.tsv"))
  flat = [t for pair in rows.texts for t in pair]
  emb, _ = embedding.embed(exported, flat, max_length=8)
  np.testing.assert_allclose(np.linalg.norm(emb, axis=-1), 1.0, rtol=1e-5)  # normalised
  cos = (emb[0::2] * emb[1::2]).sum(-1)  # the cosines of training's eval: [CLS] pooling used
  assert results["spearman"] == pytest.approx(stats.spearmanr(cos, rows.scores)[0], abs=1e-5)
  written = np.loadtxt(workdir / "predictions" / "eval_cosine.txt")
  np.testing.assert_allclose(written, cos, atol=1e-5)
  # The baseline: the init checkpoint's scores before training (zero-shot), the same pooling.
  before, _ = embedding.embed(loading.load_pretrained(str(init)), flat, max_length=8,
                              pooling="cls", normalize=True)
  cos_before = (before[0::2] * before[1::2]).sum(-1)
  assert results["zero_shot_spearman"] == pytest.approx(
      stats.spearmanr(cos_before, rows.scores)[0], abs=1e-5)
  assert results["zero_shot_spearman"] != pytest.approx(results["spearman"], abs=1e-6)
