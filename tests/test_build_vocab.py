"""build_vocab's WordPiece learner: coverage against tf-text's learner, word splitting, and
the same vocab for the same input."""
import pathlib
import sys

import pytest

from bert_jax.data.tokenizers import vocab_builder
from bert_jax.runtime.cpu_tensorflow import tf

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
import build_vocab_speed  # noqa: E402  pylint: disable=g-import-not-at-top


def test_wordpiece_vocab_covers_the_corpus_as_tf_text_learner_did():
  # The first 3000 sentences of the built-in corpus: tf-text's learner takes seconds on them,
  # and both learners reach about 1000 tokens (tf-text's aims within 5% below the size).
  sentences = vocab_builder.read_sentences("builtin", "sentence_per_line", True, 3000)
  texts = [s.decode("utf-8") for s in sentences.numpy()]
  vocab = vocab_builder.build_wordpiece(sentences, 1000, num_unused=99, min_count=10)
  reference = build_vocab_speed.reference_vocab(sentences, 1000, num_unused=99, min_count=10)
  assert len(vocab) == len(set(vocab)) == 1000 and 950 <= len(reference) <= 1000
  assert vocab[:104] == reference[:104]  # the same specials in the same order
  unk, per_word = build_vocab_speed.coverage(vocab, texts)
  ref_unk, ref_per_word = build_vocab_speed.coverage(reference, texts)
  # Margins: at most 0.1 point more [UNK] words and 1% more pieces per word than tf-text's.
  assert unk <= ref_unk + 0.001, (unk, ref_unk)
  assert per_word <= ref_per_word * 1.01, (per_word, ref_per_word)


def test_wordpiece_learner_says_when_the_input_has_no_words():
  with pytest.raises(ValueError, match=r"no words to learn from \(2 sentences read\)"):
    vocab_builder.build_wordpiece(tf.constant(["", " \t "]), 300, num_unused=3)


def test_wordpiece_pieces_split_words_as_the_tokenizer_does():
  # Punctuation and CJK characters are words of their own; `##` marks continuations only.
  sentences = tf.constant(["foo,bar 中文 foo.bar!"] * 20)
  vocab = vocab_builder.build_wordpiece(sentences, 300, num_unused=3, min_count=2)
  assert {"foo", "bar", ",", ".", "!", "中", "文"} <= set(vocab)
  assert not any(t.startswith("##") and any(c in t for c in ",.!中文") for t in vocab)
  assert not any(len(t) > 1 and not t.startswith("##") and any(c in t for c in ",.!中文")
                 for t in vocab[8:])


def test_wordpiece_vocab_is_the_same_for_the_same_input():
  # The trainer alone numbers `##c` in a hash map's order, which differs from one call to the
  # next, and so does its order of equal counts: on these sentences three calls of it with the
  # specials alone as its first tokens do not give three equal vocabs.
  sentences = vocab_builder.read_sentences("builtin", "sentence_per_line", True, 10_000)
  first = vocab_builder.build_wordpiece(sentences, 2000, num_unused=0, min_count=2)
  for _ in range(2):
    assert vocab_builder.build_wordpiece(sentences, 2000, num_unused=0, min_count=2) == first
  singles = [t for t in first[5:] if len(t) == 1]
  assert first[5:5 + len(singles)] == sorted(singles)  # then the other pieces by use
