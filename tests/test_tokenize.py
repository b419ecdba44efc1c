"""Tokenizers, the tokenize CLI and vocab building, on tiny vocabs and tricky strings.

Ids are compared with transformers' BertTokenizerFast (the reference the
pipeline must match) on the same tiny vocab, and with hand-written pieces.
"""
import io
import random

import numpy as np
import pytest

from bert_jax import build_vocab
from bert_jax.data.tokenizers import tokenizer as tokenizer_lib
from bert_jax.data.tokenizers import vocab_builder
from bert_jax import tokenize as tokenize_cli

_SPECIALS = ["[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
_WORDS = ["hello", "world", "un", "##aff", "##able", "x", "##x", "e", "##e", "é", "##é", "中",
          "文", "字", "ab", "##c", "don", "'", "t", "!", "?", ".", ",", "tm", "™", "ß", "ss",
          "σ", "ς", "σας", "σασ", "##ας", "##ασ", "i", "##stanbul", "ca", "##fe", "##fé", "naive",
          "a", "b", "c", "d", "##b", "##d", "fi", "ﬁ", "ａ", "🙂", "Hello", "World", "É", "##É",
          "Ça", "va", "ΣΑΣ", "İ", "I"]
_TRICKY = [
    "Héllo, WORLD!",
    "unaffable UNAFFABLE",
    "ÇA VA? naïve café Café",
    "中文字abc 中 文",
    "don't stop!!!",
    "a\x00b\u200bc\ufeffd\u00ade",  # NUL, zero-width space, BOM, soft hyphen
    "tab\there\nnew\r\nline\u3000x\u00a0x\u2028x",  # whitespace kinds
    "x" * 100,
    "x" * 101,
    "é" * 60,
    "é" * 101,
    "hello " + "é" * 99 + " world",
    "™ ß ﬁ ａ",  # no NFKC folding: ™ is not 'tm', ß is not 'ss'
    "ΣΑΣ σας ΣΑΣ.",
    "İstanbul",
    "🙂🙂 x🙂",
    "\ufffd a \ufffd",
    "",
    "   ",
    "qqqq zzz",
]


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
  path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
  path.write_text("\n".join(_SPECIALS + _WORDS) + "\n", encoding="utf-8")
  return str(path)


def _load(vocab_file, lowercase):
  """Through load_tokenizer's cache, so the CLI test reuses the traced graph."""
  import ml_collections  # pylint: disable=g-import-not-at-top
  return tokenizer_lib.load_tokenizer(ml_collections.ConfigDict(
      {"tokenizer": "wordpiece", "vocab_file": vocab_file, "spm_model": "",
       "lowercase": lowercase}))


@pytest.fixture(scope="module")
def uncased(vocab_file):
  return _load(vocab_file, True)


@pytest.fixture(scope="module")
def cased(vocab_file):
  return _load(vocab_file, False)


@pytest.mark.parametrize("lowercase", [True, False], ids=["uncased", "cased"])
def test_ids_match_bert_tokenizer_fast_on_tricky_strings(vocab_file, uncased, cased, lowercase):
  transformers = pytest.importorskip("transformers")
  ref = transformers.BertTokenizerFast(vocab_file, do_lower_case=lowercase)
  tok = uncased if lowercase else cased
  expected = ref(_TRICKY, add_special_tokens=False)["input_ids"]
  got = tok.tokenize_to_ids(_TRICKY)
  for text, e, g in zip(_TRICKY, expected, got):
    assert g == e, (text, ref.convert_ids_to_tokens(e), tok.convert_ids_to_tokens(g))


# Special-token literals typed in text: one id each, as in BertTokenizerFast, matched in
# the raw text (`[mask]` and a literal broken by a removed character are not matched).
_LITERALS = ["the [MASK] sat", "hello[MASK]world", "[CLS] a [SEP] b [SEP]", "[PAD][UNK][MASK]",
             "[mask] [Mask] [ MASK ]", "a [MA\x00SK] b \x00 [MASK]\x00", "[[MASK]]",
             "é[MASK]\u0301x", "x" * 99 + "[MASK]" + "x" * 2, "x" * 101 + " [SEP] " + "é" * 101,
             " [MASK] ", "[UNK]"]


@pytest.mark.parametrize("lowercase", [True, False], ids=["uncased", "cased"])
def test_special_token_literals_are_one_id_as_bert_tokenizer_fast(vocab_file, uncased, cased,
                                                                  lowercase):
  transformers = pytest.importorskip("transformers")
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  ref = transformers.BertTokenizerFast(vocab_file, do_lower_case=lowercase)
  tok = uncased if lowercase else cased
  assert tok.tokenize("hello [MASK] world") == ["hello", "[MASK]", "world"]
  texts = _LITERALS + _TRICKY  # one batch with and without literals
  expected = ref(texts, add_special_tokens=False)["input_ids"]
  for batch in (texts, _LITERALS[:1], _TRICKY[5:6] + _LITERALS[5:6]):
    for text, g in zip(batch, tok.tokenize_to_ids(batch)):
      e = expected[texts.index(text)]
      assert g == e, (text, ref.convert_ids_to_tokens(e), tok.convert_ids_to_tokens(g))
  # do_not_convert: graph code already; autograph would leave a file in the temp directory.
  ds = tf.data.Dataset.from_tensor_slices(texts).batch(5).map(
      tf.autograph.experimental.do_not_convert(tok.tf_tokenize))
  assert [row for ragged in ds for row in ragged.to_list()] == expected


def test_hand_written_pieces(uncased, cased):
  assert uncased.tokenize("Héllo, WORLD!") == ["hello", ",", "world", "!"]
  assert uncased.tokenize("unaffable") == ["un", "##aff", "##able"]
  assert uncased.tokenize("中文字abc") == ["中", "文", "字", "ab", "##c"]
  assert uncased.tokenize("a\x00b\u200bc") == ["ab", "##c"]  # removed, not spaces
  assert uncased.tokenize("™ ß") == ["™", "ß"]
  assert uncased.tokenize("ΣΑΣ") == ["σασ"]  # per-character lower case, as the Rust normaliser
  assert uncased.tokenize("x" * 100) == ["x"] + ["##x"] * 99
  assert uncased.tokenize("x" * 101) == ["[UNK]"]
  assert uncased.tokenize("qqqq hello") == ["[UNK]", "hello"]
  # 100 characters, not bytes: 60 two-byte characters are still one word of pieces.
  assert cased.tokenize("é" * 60) == ["é"] + ["##é"] * 59
  assert cased.tokenize("Hello WORLD") == ["Hello", "[UNK]"]
  assert uncased.basic_tokenize("Héllo, WORLD! 中文 don't") == [
      "hello", ",", "world", "!", "中", "文", "don", "'", "t"]
  assert cased.basic_tokenize("Héllo, WORLD!") == ["Héllo", ",", "WORLD", "!"]


def test_tf_tokenize_in_a_dataset_map_and_surface(uncased):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tok = uncased
  ds = tf.data.Dataset.from_tensor_slices(_TRICKY).batch(4).map(
      tf.autograph.experimental.do_not_convert(tok.tf_tokenize))
  got = [row for ragged in ds for row in ragged.to_list()]
  assert got == tok.tokenize_to_ids(_TRICKY)
  assert (tok.pad_id, tok.unk_id, tok.cls_id, tok.sep_id, tok.mask_id) == (0, 2, 3, 4, 5)
  assert tok.vocab_size == len(_SPECIALS) + len(_WORDS) == len(tok.inv_vocab)
  assert tok.convert_tokens_to_ids(["hello", "nope"]) == [tok.vocab["hello"], tok.unk_id]
  assert tok.convert_ids_to_tokens([3, 4]) == ["[CLS]", "[SEP]"]
  assert tok.is_continuation[tok.vocab["##aff"]] and not tok.is_continuation[tok.vocab["un"]]
  assert tok.unk_id not in tok.regular_ids and tok.vocab["[unused0]"] not in tok.regular_ids


def test_vocab_validation_names_file_and_problem(tmp_path):
  bad = tmp_path / "bad.txt"
  bad.write_text("[PAD]\n[UNK]\n[CLS]\nhello\n", encoding="utf-8")
  with pytest.raises(ValueError, match=r"bad.txt.*lacks.*\[SEP\].*\[MASK\]"):
    tokenizer_lib.WordPieceTokenizer(str(bad))
  dup = tmp_path / "dup.txt"
  dup.write_text("\n".join(_SPECIALS + ["a", "b", "a"]) + "\n", encoding="utf-8")
  with pytest.raises(ValueError, match=r"dup.txt' line 9: duplicate token 'a'"):
    tokenizer_lib.WordPieceTokenizer(str(dup))
  empty = tmp_path / "empty_line.txt"
  empty.write_text("\n".join(_SPECIALS + ["a", "", "b"]) + "\n", encoding="utf-8")
  with pytest.raises(ValueError, match=r"empty_line.txt' line 8"):
    tokenizer_lib.WordPieceTokenizer(str(empty))
  with pytest.raises(FileNotFoundError, match="missing.txt"):
    tokenizer_lib.WordPieceTokenizer(str(tmp_path / "missing.txt"))


def test_tokenize_cli_prints_ids_per_line(vocab_file, uncased):
  lines = ["Héllo, WORLD!", "", "unaffable \xa0 x", "中文"]
  data = ("\n".join(lines) + "\n").encode("utf-8") + b"bad \xff byte\n"
  out = io.StringIO()
  assert tokenize_cli.run(["--vocab", vocab_file], io.BytesIO(data), out) == 5
  tok = uncased
  expected = [" ".join(map(str, ids)) for ids in tok.tokenize_to_ids(lines + ["bad \ufffd byte"])]
  assert out.getvalue().split("\n")[:-1] == expected
  assert out.getvalue().split("\n")[1] == ""  # an empty line stays a line
  out = io.StringIO()
  tokenize_cli.run(["--vocab", vocab_file, "--cased", "--tokens"], io.BytesIO(b"Hello world"),
                   out)
  assert out.getvalue() == "Hello world\n"


def test_tokenize_given_a_text_as_an_argument_says_where_it_reads(vocab_file, capsys):
  with pytest.raises(SystemExit) as e:
    tokenize_cli.run(["--vocab", vocab_file, "hello world"], io.BytesIO(b""), io.StringIO())
  assert e.value.code == 2
  assert ("got 1: ['hello world']; it reads the texts from standard input, one per line "
          "(echo 'a text' | python -m bert_jax.tokenize ...)") in capsys.readouterr().err


def _corpus(tmp_path, n=400, seed=0):
  rng = random.Random(seed)
  words = ("the quick brown fox jumps over lazy dogs while seven wizards quietly hum "
           "jazzy tunes about running jumping and sleeping animals").split()
  path = tmp_path / "corpus.txt"
  path.write_text("\n".join(" ".join(rng.choice(words) for _ in range(rng.randint(4, 12))) + "."
                            for _ in range(n)) + "\n", encoding="utf-8")
  return str(path)


def test_build_wordpiece_vocab_google_order(tmp_path):
  sentences = vocab_builder.read_sentences(_corpus(tmp_path), "sentence_per_line", True, 10**6)
  vocab = vocab_builder.build_wordpiece(sentences, vocab_size=200, num_unused=3, min_count=2)
  assert vocab[:8] == ["[PAD]", "[unused0]", "[unused1]", "[unused2]", "[UNK]", "[CLS]",
                       "[SEP]", "[MASK]"]
  assert len(vocab) <= 200 and len(set(vocab)) == len(vocab)
  path = tmp_path / "vocab.txt"
  path.write_text("\n".join(vocab) + "\n", encoding="utf-8")
  tok = tokenizer_lib.WordPieceTokenizer(str(path))
  ids = tok.tokenize_to_ids(["The QUICK brown fox jumps over the lazy dogs."])[0]
  assert tok.unk_id not in ids and len(ids) >= 10


def test_build_vocab_refuses_zero_max_sentences_and_an_input_without_words(tmp_path, capsys):
  corpus = _corpus(tmp_path, n=5)
  out = str(tmp_path / "vocab.txt")
  with pytest.raises(SystemExit) as e:  # bad usage: its line, status 2
    build_vocab.main(["--input", corpus, "--output", out, "--vocab_size", "300",
                      "--max_sentences", "0"])
  assert e.value.code == 2
  assert "--max_sentences=0: 0 is not a positive integer" in capsys.readouterr().err
  blank = tmp_path / "blank.txt"
  blank.write_text("\n \n\t\n", encoding="utf-8")
  with pytest.raises(SystemExit, match=r"blank\.txt': every matched file is empty or only "
                     "whitespace"):
    build_vocab.main(["--input", str(blank), "--output", out, "--vocab_size", "300"])
  assert not (tmp_path / "vocab.txt").exists()


def test_sentencepiece_model_has_the_wordpiece_surface(tmp_path):
  import sentencepiece as spm  # pylint: disable=g-import-not-at-top
  sentences = vocab_builder.read_sentences(_corpus(tmp_path, n=2000), "sentence_per_line", True,
                                           10**6)
  model = vocab_builder.build_sentencepiece(sentences, str(tmp_path / "sp.model"), vocab_size=60)
  tok = tokenizer_lib.SentencePieceTokenizer(model, lowercase=True)
  assert (tok.pad_id, tok.unk_id) == (0, 1)
  assert {tok.cls_id, tok.sep_id, tok.mask_id} == {2, 3, 4}
  texts = ["The Quick brown fox.", "lazy dogs while jumping", ""]
  proc = spm.SentencePieceProcessor(model_file=model)
  assert tok.tokenize_to_ids(texts) == [proc.encode(t.lower()) for t in texts]
  pieces = tok.tokenize("jumping animals")
  starts = [not tok.is_continuation[i] for i in tok.convert_tokens_to_ids(pieces)]
  assert starts == [p.startswith("\u2581") for p in pieces] and starts[0]
  assert tok.basic_tokenize("The QUICK fox") == ["the", "quick", "fox"]


def test_tokenize_to_ids_large_batch_is_consistent(uncased):
  tok = uncased
  rng = np.random.default_rng(0)
  pool = ["hello", "world", "unaffable", "中文", "x", "é", "!", "qq"]
  texts = [" ".join(rng.choice(pool, rng.integers(0, 8))) for _ in range(3000)]
  batch = tok.tokenize_to_ids(texts)
  assert batch[:50] == [tok.tokenize_to_ids([t])[0] for t in texts[:50]]


def test_build_vocab_says_why_it_wrote_fewer_tokens_than_asked(tmp_path, capsys):
  out = str(tmp_path / "vocab.txt")
  build_vocab.main(["--input", _corpus(tmp_path), "--output", out, "--vocab_size", "300",
                    "--num_unused", "3", "--min_count", "2"])
  written = len((tmp_path / "vocab.txt").read_text(encoding="utf-8").splitlines())
  captured = capsys.readouterr()
  line = captured.out.strip()
  # What it does, then each phase as it starts (stderr; stdout keeps the result).
  err = captured.err.splitlines()
  assert err[0] == "bert_jax.build_vocab: build a wordpiece vocab"
  assert err[4:6] == ["reading: 0/1 shards", err[5]] and err[5].startswith("reading: 1 shards in")
  assert err[6].startswith("learning the vocab from ") and err[6].endswith(" sentences ...")
  assert written < 300  # the corpus has far fewer distinct pieces than that
  assert line.startswith(f"wrote {written} tokens to {out} (--vocab_size 300 is a maximum: ")
  assert "--min_count 2" in line


@pytest.mark.parametrize("kind, output, existing", [
    ("wordpiece", "vocab.txt", "vocab.txt"),
    ("sentencepiece", "sp.model", "sp.vocab"),  # either of the two files it writes
])
def test_build_vocab_refuses_an_existing_output_unless_told_to_overwrite(tmp_path, capsys, kind,
                                                                         output, existing):
  out = tmp_path / output
  (tmp_path / existing).write_text("[PAD]\nkept\n", encoding="utf-8")
  args = ["--input", _corpus(tmp_path, n=2000), "--output", str(out), "--vocab_size", "60",
          "--type", kind, "--num_unused", "3", "--quiet"]
  with pytest.raises(SystemExit) as e:
    build_vocab.main(args)
  assert str(e.value.code) == (
      f"bert_jax.build_vocab: error: {tmp_path / existing} exists (a prepared corpus or a run may have been built with "
      "it): give another --output, or --overwrite to replace it")
  assert (tmp_path / existing).read_text(encoding="utf-8") == "[PAD]\nkept\n"
  build_vocab.main(args + ["--overwrite"])
  assert "kept" not in (tmp_path / existing).read_text(encoding="utf-8").split("\n")
  assert capsys.readouterr().out.startswith("wrote ")
