"""WordPiece's two host-side backends give the same ids: tf-text's ops and `tokenizers` (Rust).

The 'tokenizers' backend (bert_jax/data/tokenizers/wordpiece_rust.py) is what fine-tuning,
embed and fill_mask use in a process that has not loaded TensorFlow; 'tf-text' where it
has (wordpiece.host_backend). Here both run in one process on the same texts: tricky strings
and every character whose Unicode category has not changed since Unicode 3.2
(always), and the shared real text (GLUE, SQuAD, CoNLL, the corpus; skips
without the optional real-data folder). tests/test_without_tensorflow.py runs the programs
without TensorFlow.
"""
import functools
import json
import os
import pathlib
import subprocess
import sys
import unicodedata

import pytest

from bert_jax.data.tokenizers import wordpiece
from bert_jax.runtime import optional_tensorflow
from bert_jax.tasks.ner import data as ner
from bert_jax.tasks.squad import data as squad_data

ROOT = pathlib.Path(__file__).resolve().parents[1]

# Odd text that is not in the shared files: control and format characters, whitespace kinds,
# combining marks, scripts, CJK, full-width forms, long words, and special-token literals.
TRICKY = [
    "Héllo, WORLD! ÇA VA? naïve café Café Ångström Œuvre",
    "a\x00b\u200bc\ufeffd\u00ade\u200d\u2066x\u2069 \x7f\x1b[0m \ufffd",
    "tab\there\nnew\r\nline\u3000x\u00a0x\u2028x\u2029x\u0085x\x0bx\x0cx",
    "中文字abc 中 文 日本語のテキスト 한국어 텍스트 ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３",
    "ΣΑΣ σας ΣΑΣ. İstanbul ǅemal Straße ﬁnance ™ ℌ Ⅻ ½ x² ①",
    "عَرَبِيّ עִבְרִית हिन्दी ไทย ქართული Ελληνικά Русский 🙂🙂 x🙂 👍🏽 👨‍👩‍👧",
    "e\u0301 E\u0301\u0327 a\u20dd \u0345x",
    "x" * 100 + " " + "x" * 101 + " " + "é" * 101 + " " + "中" * 120,
    "[CLS] the [MASK] sat [SEP] [PAD][UNK] a[MASK]b [mask] [ MASK ] [[MASK]] [MASK]'s",
    "[MASK]", "", "   ", "\x00", "don't stop!!! ... --- (a) [b] {c} <d> \"e\" 'f' `g`",
]


@functools.cache  # one traced tf-text graph per vocab and casing
def _backends(vocab, lowercase):
  return (wordpiece.WordPieceTokenizer(vocab, lowercase, backend="tf-text"),
          wordpiece.WordPieceTokenizer(vocab, lowercase, backend="tokenizers"))


def assert_same_ids(lines, vocab, lowercase, words_of=()):
  """Both backends' ids of `lines`, and their basic_tokenize of `words_of`, are equal."""
  tf_text, rust = _backends(vocab, lowercase)
  a, b = tf_text.tokenize_to_ids(lines), rust.tokenize_to_ids(lines)
  bad = [(line, tf_text.convert_ids_to_tokens(x), rust.convert_ids_to_tokens(y))
         for line, x, y in zip(lines, a, b) if x != y]
  assert len(a) == len(b) == len(lines) and not bad, (len(bad), bad[:3])
  for text in words_of:
    assert tf_text.basic_tokenize(text) == rust.basic_tokenize(text), text


@pytest.mark.parametrize("lowercase", [True, False], ids=["uncased", "cased"])
def test_backends_agree_on_tricky_text(lowercase):
  vocab = wordpiece.default_vocab_file()
  assert_same_ids(TRICKY, vocab, lowercase, words_of=TRICKY)
  tok = _backends(vocab, lowercase)[1]
  assert tok.tokenize("the [MASK] sat")[1] == "[MASK]"
  assert tok.tokenize("x" * 101) == ["[UNK]"]
  if lowercase:
    assert tok.tokenize("Héllo ΣΑΣ") == ["hello", "σ", "##α", "##σ"]
    assert tok.tokenize("[mask]") == ["[", "mask", "]"]  # literals are matched before lower case


@pytest.mark.parametrize("lowercase", [True, False], ids=["uncased", "cased"])
def test_backends_agree_on_every_character_unchanged_since_unicode_3_2(lowercase):
  """Each character between letters, 16 to a line (232,000 of them).

  tf-text's Unicode tables are older than the Rust crate's (which transformers'
  BertTokenizerFast uses): characters added or re-categorised since (837 of all
  code points uncased, 418 cased, none in the shared real text) differ.
  """
  chars = [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000
           and unicodedata.ucd_3_2_0.category(chr(c)) == unicodedata.category(chr(c)) != "Cn"]
  assert len(chars) > 200_000
  lines = [" ".join(f"x{c}y" for c in chars[i:i + 16]) for i in range(0, len(chars), 16)]
  assert_same_ids(lines, wordpiece.default_vocab_file(), lowercase)


def test_backend_choice_and_bad_backend():
  # A process that has not loaded TensorFlow tokenizes in Rust and does not load it (a
  # fine-tune from TSV files, embed, the Encoder: TensorFlow's import is seconds of start-up) ...
  code = ("import sys; from bert_jax.data.tokenizers import tokenizer as t, wordpiece as w; "
          "tok = t.cached_tokenizer('wordpiece', w.default_vocab_file(), True); "
          "print(w.host_backend(), tok.backend, tok.tokenize_to_ids(['Hello, world!']), "
          "'tensorflow' in sys.modules)")
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                        timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)), cwd=ROOT)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stdout.split() == ["tokenizers", "tokenizers", "[[7592,", "1010,", "2088,",
                                 "999]]", "False"]
  # ... one that has (pretraining's tf.data pipeline, TFDS) runs the host-side calls on tf-text.
  assert optional_tensorflow.available(text=True)
  assert wordpiece.host_backend() == "tf-text"
  assert wordpiece.WordPieceTokenizer(wordpiece.default_vocab_file()).backend == "tf-text"
  with pytest.raises(ValueError, match=r"WordPiece backend 'rust'; expected one of"):
    wordpiece.WordPieceTokenizer(wordpiece.default_vocab_file(), backend="rust")


def _shared_text(data_dir):
  """(lines, SQuAD contexts): GLUE STS-B and MRPC fields, SQuAD contexts, questions and
  whitespace tokens, CoNLL words, corpus lines (every 40th)."""
  lines = []
  for task in ("STS-B", "MRPC"):
    for split in ("train", "dev"):
      rows = (data_dir / "glue" / task / f"{split}.tsv").read_text(encoding="utf-8-sig")
      for row in rows.split("\n")[1:]:
        fields = row.split("\t")
        lines += fields[7:9] if task == "STS-B" else fields[3:5]
  contexts = []
  for path in sorted((data_dir / "squad").glob("*.json")):
    for article in json.loads(path.read_text(encoding="utf-8"))["data"][:6]:
      for para in article["paragraphs"]:
        contexts.append(para["context"])
        lines += squad_data.split_context(para["context"])[0]  # the pieces of each doc token
        lines += [qa["question"] for qa in para["qas"]]
  lines += contexts
  lines += [w for s in ner.read_conll(str(data_dir / "ner" / "conll2003" / "valid.txt"))
            for w in s.words]
  for path in sorted((data_dir / "corpus").rglob("*.txt")) + sorted(
      (data_dir / "corpus").rglob("*.raw")):
    lines += path.read_text(encoding="utf-8", errors="replace").split("\n")[::40]
  return lines, contexts


@pytest.mark.slow
@pytest.mark.parametrize("name", ["bert-base-uncased", "bert-base-cased"])
def test_backends_agree_on_the_shared_real_text(shared_data, name):
  lines, contexts = _shared_text(shared_data)
  assert len(lines) > 100_000 and len(contexts) > 300
  assert_same_ids(lines, str(shared_data / "vocab" / name / "vocab.txt"),
                  name.endswith("-uncased"), words_of=contexts)
