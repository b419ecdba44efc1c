"""Tiny tokenizer files of the family, trained into tmp dirs: shared fixtures.

A byte-level BPE (RoBERTa's special tokens) with `tokenizers`; unigram models
with ALBERT's and DeBERTa-v3's pieces with `sentencepiece`. conftest.py offers the
fixtures to every test module.
"""
import random

import pytest

_WORDS = ("the quick brown fox jumps over lazy dogs while seven wizards quietly hum jazzy tunes "
          "about running jumping and sleeping animals in 1,000 towns 9, 12, café naïve "
          "Ärger straße").split()
# Texts where the fast tokenizers' steps show: added tokens in the text (with
# and without whitespace around them), trailing / leading / repeated spaces,
# quotes ALBERT rewrites, accents, case, digits before commas, unknown characters.
_TRICKY = [
    "The quick brown fox.",
    "the <unk> cat [UNK] <mask> x [MASK] y",
    "  leading and trailing  ",
    "trailing ",
    " ",
    "",
    "tabs\tand\nnew\r\nlines\u3000ideographic\u00a0nbsp",
    "``quoted'' and \"plain\"",
    "Café NAÏVE ÄRGER Straße ΣΑΣ σας",
    "1,000, 9, 12,5 towns, 1,666.58",  # ALBERT: "666" is "6 66" or "66 6" at equal score
    "a(b) - c.d",
    "\u200bzero\u200bwidth \ufeffbom",
    "中文字 🙂 unknown ☃ chars",
    "ﬁ ａｂｃ ½ ™",
    "<s>bos</s> <pad> [CLS] [SEP] [PAD]",
    "jumping" * 20,
]


def _corpus(n=400, seed=0):
  rng = random.Random(seed)
  return [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 12))) + "."
          for _ in range(n)] + _TRICKY


@pytest.fixture(scope="session")
def bpe_dir(tmp_path_factory):
  """A tiny byte-level BPE (vocab.json + merges.txt) trained with `tokenizers`."""
  tokenizers = pytest.importorskip("tokenizers")
  out = tmp_path_factory.mktemp("bpe")
  bpe = tokenizers.ByteLevelBPETokenizer()
  bpe.train_from_iterator(_corpus(), vocab_size=400, min_frequency=2,
                          special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
                          show_progress=False)
  bpe.save_model(str(out))
  return out


def _train_spm(path, vocab_size=180, **kw):
  import sentencepiece as spm  # pylint: disable=g-import-not-at-top
  spm.SentencePieceTrainer.train(
      sentence_iterator=iter(_corpus(800)), model_prefix=str(path)[:-len(".model")],
      vocab_size=vocab_size, model_type="unigram", character_coverage=0.98, hard_vocab_limit=False,
      minloglevel=2, num_threads=1, **kw)
  return str(path)


@pytest.fixture(scope="session")
def albert_dir(tmp_path_factory):
  """A tiny unigram model with ALBERT's pieces: <pad> <unk> [CLS] [SEP] [MASK], user-defined '('."""
  out = tmp_path_factory.mktemp("albert")
  _train_spm(out / "spiece.model", pad_id=0, pad_piece="<pad>", unk_id=1, unk_piece="<unk>",
             bos_id=-1, eos_id=-1, control_symbols=["[CLS]", "[SEP]", "[MASK]"],
             user_defined_symbols=["(", ")", "-"])
  return out


@pytest.fixture(scope="session")
def deberta_dir(tmp_path_factory):
  """A tiny unigram model with DeBERTa-v3's pieces: [PAD] [CLS] [SEP] [UNK], byte fallback."""
  out = tmp_path_factory.mktemp("deberta")
  _train_spm(out / "spm.model", pad_id=0, pad_piece="[PAD]", bos_id=1, bos_piece="[CLS]",
             eos_id=2, eos_piece="[SEP]", unk_id=3, unk_piece="[UNK]", byte_fallback=True,
             vocab_size=450)
  return out


def reference_tokenizer(kind, directory):
  """transformers' fast tokenizer for a family's files: RoBERTa, ALBERT or DeBERTa-v2."""
  transformers = pytest.importorskip("transformers")
  if kind == "roberta":
    return transformers.RobertaTokenizerFast(vocab_file=str(directory / "vocab.json"),
                                             merges_file=str(directory / "merges.txt"))
  if kind == "albert":
    return transformers.AlbertTokenizerFast(vocab_file=str(directory / "spiece.model"))
  return transformers.DebertaV2TokenizerFast(vocab_file=str(directory / "spm.model"))
