"""The tokenizers of the family, from one cache: WordPiece, byte-level BPE, SentencePiece.

  tok = tokenizer.cached_tokenizer("wordpiece", "vocab.txt", lowercase=True)
  tok = tokenizer.tokenizer_from_path("tokenizers/roberta-base")   # kind from the files
  tok = tokenizer.load_tokenizer(config.data)                       # a pretraining config
  tok = tokenizer.for_checkpoint(pretrained)                        # what a checkpoint used

The kinds live in their own modules (`wordpiece`, `byte_bpe`,
`sentencepiece_tokenizer`) behind one surface (`tokenizer_base.Tokenizer`);
`tokenizer_files` tells the kind of a directory. The names below are kept for
the callers that import them from here.
"""
import hashlib
import os
from typing import Optional, Sequence, Union

from etils import epath

from bert_jax.data.tokenizers import byte_bpe
from bert_jax.data.tokenizers import sentencepiece_tokenizer
from bert_jax.data.tokenizers import tokenizer_base
from bert_jax.data.tokenizers import tokenizer_files
from bert_jax.data.tokenizers import wordpiece

# Kept for the callers that import these from here.
SPECIAL_TOKENS = wordpiece.SPECIAL_TOKENS
MAX_CHARS_PER_WORD = wordpiece.MAX_CHARS_PER_WORD
Tokenizer = tokenizer_base.Tokenizer
WordPieceTokenizer = wordpiece.WordPieceTokenizer
ByteLevelBPETokenizer = byte_bpe.ByteLevelBPETokenizer
SentencePieceTokenizer = sentencepiece_tokenizer.SentencePieceTokenizer
default_vocab_file = wordpiece.default_vocab_file
read_vocab = wordpiece.read_vocab
clean_text = wordpiece.clean_text
uncased_normalize = wordpiece.uncased_normalize


def _stamp(path: str):
  try:
    if "://" not in path:
      st = os.stat(path)
      return (st.st_size, st.st_mtime_ns)
    st = epath.Path(path).stat()
    return (st.length, st.mtime)
  except (FileNotFoundError, NotADirectoryError):
    return None


_TOKENIZERS: dict = {}
_MAX_TOKENIZERS = 8


def cached_tokenizer(kind: str, source: Union[str, Sequence[str]],
                     lowercase: Optional[bool]) -> Tokenizer:
  """The one tokenizer cache: built once per process, shared while its source is unchanged.

  Building a tokenizer traces its TF graphs or reads a large vocab (seconds),
  so every caller (the pretraining pipeline, fine-tuning, embed, fill_mask, the
  tokenize CLI) takes it from here. The key is (kind, source, lowercase), where
  the source is its files' paths and stamps (size, mtime: a rewritten file is
  loaded again) or the hash of a vocab's tokens.

  Args:
    kind: 'wordpiece', 'bpe' or 'sentencepiece'.
    source: a vocab.txt / vocab.json (merges.txt beside it) / .model path, or
      WordPiece vocab tokens in id order.
    lowercase: uncased normalisation; None: the kind's default (WordPiece
      uncased, BPE cased, SentencePiece its family's).

  Returns:
    A WordPieceTokenizer, ByteLevelBPETokenizer or SentencePieceTokenizer.
  """
  if kind not in tokenizer_files.KINDS:
    raise ValueError(f"tokenizer kind {kind!r}; expected one of {list(tokenizer_files.KINDS)}")
  if kind == "bpe" and lowercase:
    raise ValueError("byte-level BPE (RoBERTa) is cased: it has no lower-casing")
  if isinstance(source, str):
    files = tokenizer_files.detect(source) if kind == "bpe" else None
    paths = [source] + ([files.merges] if files and files.merges else [])
    source_key = ("file", tuple((p, _stamp(p)) for p in paths))
  else:
    if kind != "wordpiece":
      raise ValueError("a tokenizer from vocab tokens is WordPiece only")
    source = list(source)
    source_key = ("tokens", hashlib.sha256("\n".join(source).encode("utf-8")).hexdigest())
  key = (kind, source_key, None if lowercase is None else bool(lowercase))
  if key in _TOKENIZERS:
    _TOKENIZERS[key] = _TOKENIZERS.pop(key)  # most recently used last
  else:
    if len(_TOKENIZERS) >= _MAX_TOKENIZERS:
      _TOKENIZERS.pop(next(iter(_TOKENIZERS)))  # least recently used
    if kind == "wordpiece":
      tok = WordPieceTokenizer(source, lowercase=True if lowercase is None else bool(lowercase))
    elif kind == "bpe" and not files.merges:  # one tokenizer.json
      tok = byte_bpe.TokenizerJsonBPE(source)
    elif kind == "bpe":
      tok = ByteLevelBPETokenizer(source, files.merges)
    else:
      tok = SentencePieceTokenizer(source, lowercase=lowercase)
    _TOKENIZERS[key] = tok
  return _TOKENIZERS[key]


def for_checkpoint(pretrained) -> Tokenizer:
  """The tokenizer a checkpoint was trained with (from the shared cache).

  A checkpoint records a WordPiece vocab by its tokens, and any other tokenizer
  by its file (a bundle's tokenizer/ copy, or the file a pretraining run read).

  Args:
    pretrained: a `loading.Pretrained`.

  Returns:
    The tokenizer.

  Raises:
    FileNotFoundError: the recorded tokenizer file is gone.
    ValueError: its tokens are not the checkpoint's vocab.
  """
  if pretrained.tokenizer_file is None:
    return cached_tokenizer("wordpiece", pretrained.vocab, pretrained.lowercase)
  path = pretrained.tokenizer_file
  if not epath.Path(path).exists():
    raise FileNotFoundError(f"{pretrained.source}: its tokenizer {path} does not exist (the "
                            "checkpoint records the file it was trained with)")
  files = tokenizer_files.detect(path)
  tok = cached_tokenizer(files.kind, files.path,
                         pretrained.lowercase if files.kind == "sentencepiece" else None)
  if tuple(tok.inv_vocab) != tuple(pretrained.vocab):
    raise ValueError(f"{pretrained.source}: tokenizer {path} has other tokens than the "
                     f"checkpoint's vocab ({len(tok.inv_vocab)} vs {len(pretrained.vocab)})")
  return tok


def tokenizer_from_path(path: str, lowercase: Optional[bool] = None) -> Tokenizer:
  """The tokenizer in a directory or file, its kind told by the file names (cached).

  Args:
    path: a tokenizer directory (vocab.txt; vocab.json + merges.txt; *.model) or one of
      those files.
    lowercase: None: the kind's default (see `cached_tokenizer`).

  Returns:
    The tokenizer.
  """
  files = tokenizer_files.detect(path)
  return cached_tokenizer(files.kind, files.path, lowercase)


def load_tokenizer(data_config) -> Tokenizer:
  """The tokenizer a `config.data` section names (from the shared cache).

  `tokenizer` is 'wordpiece' (`vocab_file`, casing `lowercase`),
  'sentencepiece' (`spm_model`, casing `lowercase`) or the path of a tokenizer
  directory or file, whose kind is told by its file names; such a WordPiece
  vocab takes the casing `lowercase`, BPE and SentencePiece their family's.

  Args:
    data_config: ConfigDict with tokenizer, vocab_file, spm_model, lowercase.

  Returns:
    The tokenizer.
  """
  name = data_config.tokenizer
  if name == "wordpiece":
    path = data_config.vocab_file or default_vocab_file()
    return cached_tokenizer("wordpiece", path, data_config.lowercase)
  if name == "sentencepiece":
    if not data_config.spm_model:
      raise ValueError("config.data.tokenizer='sentencepiece' needs config.data.spm_model")
    return cached_tokenizer("sentencepiece", data_config.spm_model, data_config.lowercase)
  if not name or not epath.Path(name).exists():
    raise ValueError(f"config.data.tokenizer={name!r}: expected 'wordpiece', 'sentencepiece' or "
                     f"the path of a tokenizer directory or file (no such path)")
  files = tokenizer_files.detect(name)
  return cached_tokenizer(files.kind, files.path,
                          data_config.lowercase if files.kind == "wordpiece" else None)
