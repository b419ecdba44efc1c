"""The tokenizers of the family, from one cache: WordPiece, byte-level BPE, SentencePiece.

The kinds live in their own modules behind `tokenizer_base.Tokenizer`; the names re-exported
here are kept for the callers that import them from here.
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

  Building one traces TF graphs or reads a large vocab, so every caller takes it from here.
  The key is (kind, source, lowercase), the source being its files' paths with size and mtime
  (a rewritten file is reloaded) or the hash of WordPiece tokens given in id order. lowercase
  None: the kind's default (WordPiece uncased, BPE cased, SentencePiece its family's).
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
  """The tokenizer a checkpoint was trained with: a WordPiece vocab by its recorded tokens,
  any other by its recorded file. FileNotFoundError: the file is gone; ValueError: its tokens
  are not the checkpoint's vocab."""
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
  """The tokenizer in a directory or file, its kind told by the file names (cached)."""
  files = tokenizer_files.detect(path)
  return cached_tokenizer(files.kind, files.path, lowercase)


def load_tokenizer(data_config) -> Tokenizer:
  """The tokenizer a `config.data` section names: 'wordpiece' (vocab_file), 'sentencepiece'
  (spm_model) or a tokenizer path; `lowercase` applies to WordPiece and SentencePiece, a BPE
  takes its family's casing."""
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
