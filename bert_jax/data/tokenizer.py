"""WordPiece and SentencePiece tokenizers on tensorflow-text ops.

`WordPieceTokenizer` gives the ids of Google BERT's `FullTokenizer` and of
Hugging Face's `BertTokenizerFast`:

  clean     drop control / format / private-use characters and U+FFFD (tab, CR
            and LF are whitespace), as BERT's `_clean_text`
  uncased   NFD, drop non-spacing marks (accents), lower-case: the order of
            the Rust `BertNormalizer`
  split     whitespace, punctuation and CJK characters (tf-text's
            FastBertTokenizer, which does this without its own normaliser)
  wordpiece greedy longest-match-first with `##` continuations; a word longer
            than 100 characters (not bytes) becomes one [UNK]

tf-text's built-in `lower_case_nfd_strip_accents` uses NFKC case folding
(`™` -> `tm`, `ß` -> `ss`), which BERT does not do, so the uncased
normalisation is done here with regex / NFD / lower ops instead.

The same graph ops serve the tf.data pipeline (`tf_tokenize`), the Python
helpers used by GLUE / SQuAD feature code, and `python -m bert_jax.tokenize`.
"""
import functools
import hashlib
import os
from typing import Iterable, Sequence, Union

import numpy as np
import tensorflow_text as tf_text

from bert_jax.cpu_tensorflow import tf

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# BERT's WordPiece turns a longer word (in characters) into one [UNK].
MAX_CHARS_PER_WORD = 100
# Characters BERT's _clean_text removes: categories Cc, Cf, Co, Cs except tab,
# LF and CR (whitespace), and the replacement character U+FFFD.
_CLEAN_PATTERN = r"[^\P{C}\t\n\r]|\x{FFFD}"


def default_vocab_file() -> str:
  """The bundled bert-base-uncased vocab (used when a config leaves it empty)."""
  return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                      "assets", "bert-base-uncased-vocab.txt")


def read_vocab(vocab_file: str) -> list[str]:
  """Reads a WordPiece vocab (one token per line, id = line number).

  Args:
    vocab_file: path of the vocab file.

  Returns:
    The tokens in id order.

  Raises:
    FileNotFoundError / ValueError: a missing file, an empty token, a duplicate,
      or a missing special token, naming the file (and line).
  """
  if not tf.io.gfile.exists(vocab_file):
    raise FileNotFoundError(f"vocab file {vocab_file!r} does not exist")
  with tf.io.gfile.GFile(vocab_file, "rb") as f:
    data = f.read()
  try:
    text = data.decode("utf-8")
  except UnicodeDecodeError as e:
    raise ValueError(f"vocab file {vocab_file!r} is not valid UTF-8: {e}") from None
  tokens = text.split("\n")
  if tokens and tokens[-1] == "":
    tokens.pop()
  tokens = [t[:-1] if t.endswith("\r") else t for t in tokens]
  seen = {}
  for i, token in enumerate(tokens):
    if not token.strip():
      raise ValueError(f"vocab file {vocab_file!r} line {i + 1}: empty or whitespace token")
    if token in seen:
      raise ValueError(f"vocab file {vocab_file!r} line {i + 1}: duplicate token {token!r} "
                       f"(first on line {seen[token] + 1})")
    seen[token] = i
  missing = [t for t in SPECIAL_TOKENS if t not in seen]
  if missing:
    raise ValueError(f"vocab file {vocab_file!r} lacks the special token(s) {missing}; a BERT "
                     f"vocab needs all of {list(SPECIAL_TOKENS)}")
  return tokens


def clean_text(texts: tf.Tensor) -> tf.Tensor:
  """BERT's `_clean_text` on a string tensor (control characters removed)."""
  return tf.strings.regex_replace(texts, _CLEAN_PATTERN, "")


def uncased_normalize(texts: tf.Tensor) -> tf.Tensor:
  """BERT's uncased normalisation: NFD, accents (Mn) removed, lower case."""
  texts = tf_text.normalize_utf8(texts, "NFD")
  texts = tf.strings.regex_replace(texts, r"\p{Mn}", "")
  # ICU lower-cases a word-final capital sigma to 'ς'; BertTokenizerFast (per
  # character) gives 'σ'.
  texts = tf.strings.regex_replace(texts, "\u03a3", "\u03c3")
  return tf.strings.lower(texts, encoding="utf-8")


class _TokenizerBase:
  """What both tokenizers share: special ids, id <-> token maps, batch helpers."""

  vocab: dict[str, int]
  inv_vocab: list[str]
  lowercase: bool

  def _set_vocab(self, tokens: Sequence[str]):
    self.inv_vocab = list(tokens)
    self.vocab = {t: i for i, t in enumerate(self.inv_vocab)}
    self.vocab_size = len(self.inv_vocab)
    self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
        self.vocab[t] for t in SPECIAL_TOKENS)
    self.special_ids = np.array([self.vocab[t] for t in SPECIAL_TOKENS], np.int32)
    # Ids a random replacement may take: everything but specials and [unusedN].
    regular = [i for i, t in enumerate(self.inv_vocab)
               if t not in SPECIAL_TOKENS and not (t.startswith("[unused") and t.endswith("]"))]
    self.regular_ids = np.array(regular, np.int32)

  def normalize(self, texts: tf.Tensor) -> tf.Tensor:
    """Cleaning (and the uncased normalisation) on a [batch] string tensor."""
    texts = clean_text(texts)
    return uncased_normalize(texts) if self.lowercase else texts

  def tf_tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
    raise NotImplementedError

  @functools.cached_property
  def tf_tokenize_compiled(self):
    """`tf_tokenize` as a tf.function traced once, for eager calls on [batch] strings."""
    return tf.function(self.tf_tokenize,
                       input_signature=[tf.TensorSpec([None], tf.string)])

  def tokenize_to_ids(self, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each text, no special tokens (batched through the TF ops).

    Args:
      texts: strings.

    Returns:
      One list of ids per text.
    """
    if not len(texts):
      return []
    out = []
    for i in range(0, len(texts), 65536):  # Bounded memory for huge lists.
      ragged = self.tf_tokenize_compiled(tf.constant(list(texts[i:i + 65536]), tf.string))
      values = ragged.flat_values.numpy().astype(np.int64).tolist()
      splits = ragged.row_splits.numpy().tolist()
      out.extend(values[a:b] for a, b in zip(splits[:-1], splits[1:]))
    return out

  def tokenize(self, text: str) -> list[str]:
    """The pieces of one text (e.g. ['un', '##aff', '##able'])."""
    return self.convert_ids_to_tokens(self.tokenize_to_ids([text])[0])

  def convert_tokens_to_ids(self, tokens: Iterable[str]) -> list[int]:
    """Ids of tokens; unknown tokens map to [UNK]."""
    return [self.vocab.get(t, self.unk_id) for t in tokens]

  def convert_ids_to_tokens(self, ids: Iterable[int]) -> list[str]:
    """Tokens of ids."""
    return [self.inv_vocab[int(i)] for i in ids]


class WordPieceTokenizer(_TokenizerBase):
  """BERT WordPiece tokenization with tf-text's FastBertTokenizer.

  Attributes:
    vocab: token -> id.
    inv_vocab: id -> token.
    vocab_size: number of tokens.
    vocab_file: the vocab path.
    lowercase: uncased normalisation (lower case, accents stripped).
    pad_id, unk_id, cls_id, sep_id, mask_id: special token ids.
    special_ids: int32 array of the five special ids.
    regular_ids: int32 ids a random MLM replacement is drawn from.
    is_continuation: bool [vocab_size], True for `##` pieces (whole-word masking).
  """

  def __init__(self, vocab: Union[str, Sequence[str]], lowercase: bool = True):
    """Loads and validates the vocab.

    Args:
      vocab: a vocab file (one token per line) or the tokens in id order (as a
        checkpoint carries them); must hold [PAD], [UNK], [CLS], [SEP], [MASK].
      lowercase: True for an uncased vocab.
    """
    tokens = read_vocab(vocab) if isinstance(vocab, str) else list(vocab)
    self.vocab_file = vocab if isinstance(vocab, str) else None
    self.lowercase = bool(lowercase)
    self._set_vocab(tokens)
    self.is_continuation = np.array([t.startswith("##") and len(t) > 2 for t in tokens], bool)
    # Words are split on bytes here; the 100-character rule is applied after.
    self._fast = tf_text.FastBertTokenizer(
        vocab=tokens, suffix_indicator="##", max_bytes_per_word=4 * MAX_CHARS_PER_WORD,
        token_out_type=tf.int32, unknown_token="[UNK]", lower_case_nfd_strip_accents=False)
    self._is_continuation_tf = tf.constant(self.is_continuation)

  def _pieces_with_offsets(self, texts: tf.Tensor):
    """Normalised text, ragged piece ids and byte offsets into the normalised text."""
    norm = self.normalize(texts)
    ids, starts, ends = self._fast.tokenize_with_offsets(norm)
    return norm, ids, starts, ends

  def tf_tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
    """Tokenizes a [batch] string tensor to ragged int32 ids [batch, (pieces)].

    Graph-safe: usable inside tf.data maps and tf.function.

    Args:
      texts: [batch] tf.string.

    Returns:
      tf.RaggedTensor [batch, (pieces)] of int32 ids, no special tokens.
    """
    norm, ids, starts, ends = self._pieces_with_offsets(texts)
    flat = ids.flat_values  # [pieces]
    rows = ids.value_rowids()  # [pieces]
    is_cont = tf.gather(self._is_continuation_tf, flat)
    word_start = tf.logical_not(is_cont)
    word_of_piece = tf.cumsum(tf.cast(word_start, tf.int64)) - 1  # [pieces]
    num_words = tf.reduce_sum(tf.cast(word_start, tf.int64))
    w_begin = tf.boolean_mask(starts.flat_values, word_start)  # [words]
    w_end = tf.math.unsorted_segment_max(ends.flat_values, word_of_piece, num_words)
    w_row = tf.boolean_mask(rows, word_start)
    # Only words over 100 bytes can be over 100 characters: count those exactly.
    cand = tf.where(w_end - w_begin > MAX_CHARS_PER_WORD)[:, 0]
    words = tf.strings.substr(tf.gather(norm, tf.gather(w_row, cand)),
                              tf.gather(w_begin, cand),
                              tf.gather(w_end - w_begin, cand))
    too_long = tf.strings.length(words, unit="UTF8_CHAR") > MAX_CHARS_PER_WORD
    word_too_long = tf.scatter_nd(cand[:, None], too_long, tf.reshape(num_words, [1]))
    piece_too_long = tf.gather(word_too_long, word_of_piece)
    keep = tf.logical_not(piece_too_long & is_cont)
    new_flat = tf.where(piece_too_long, tf.constant(self.unk_id, tf.int32), flat)
    return tf.RaggedTensor.from_value_rowids(
        tf.boolean_mask(new_flat, keep), tf.boolean_mask(rows, keep), nrows=ids.nrows())

  @functools.cached_property
  def _eager_words(self):
    def words(texts):
      norm, ids, starts, ends = self._pieces_with_offsets(texts)
      word_start = tf.logical_not(tf.gather(self._is_continuation_tf, ids.flat_values))
      word_of_piece = tf.cumsum(tf.cast(word_start, tf.int64)) - 1
      num_words = tf.reduce_sum(tf.cast(word_start, tf.int64))
      begin = tf.boolean_mask(starts.flat_values, word_start)
      end = tf.math.unsorted_segment_max(ends.flat_values, word_of_piece, num_words)
      row = tf.boolean_mask(ids.value_rowids(), word_start)
      return tf.strings.substr(tf.gather(norm, row), begin, end - begin)
    return tf.function(words, input_signature=[tf.TensorSpec([None], tf.string)])

  def basic_tokenize(self, text: str) -> list[str]:
    """BERT's basic tokenization of one text: the normalised words WordPiece sees.

    Args:
      text: a string.

    Returns:
      Words (punctuation and CJK characters are words of their own).
    """
    out = self._eager_words(tf.constant([text], tf.string)).numpy()
    return [w.decode("utf-8") for w in out]


class SentencePieceTokenizer(_TokenizerBase):
  """A SentencePiece model with the WordPieceTokenizer surface.

  The model must hold the pieces [PAD], [UNK], [CLS], [SEP] and [MASK] (as
  `bert_jax.build_vocab --type sentencepiece` makes them). With `lowercase`
  the text is cleaned and lower-cased before the model's own normalisation.

  Attributes: as WordPieceTokenizer; `vocab_file` is the .model path and
  `is_continuation` marks pieces that do not start a word (no leading '▁').
  """

  def __init__(self, model_file: str, lowercase: bool = True):
    """Loads and validates the model.

    Args:
      model_file: a SentencePiece .model file.
      lowercase: lower-case (and strip accents) before encoding.
    """
    import sentencepiece  # pylint: disable=g-import-not-at-top
    if not tf.io.gfile.exists(model_file):
      raise FileNotFoundError(f"SentencePiece model {model_file!r} does not exist")
    with tf.io.gfile.GFile(model_file, "rb") as f:
      proto = f.read()
    sp = sentencepiece.SentencePieceProcessor()
    try:
      sp.LoadFromSerializedProto(proto)
    except Exception as e:  # pylint: disable=broad-except
      raise ValueError(f"{model_file!r} is not a SentencePiece model: {e}") from None
    tokens = [sp.IdToPiece(i) for i in range(sp.GetPieceSize())]
    missing = [t for t in SPECIAL_TOKENS if t not in tokens]
    if missing:
      raise ValueError(f"SentencePiece model {model_file!r} lacks the special piece(s) {missing}; "
                       f"build one with `python -m bert_jax.build_vocab --type sentencepiece`")
    self.vocab_file = model_file
    self.lowercase = bool(lowercase)
    self._sp = sp
    self._set_vocab(tokens)
    specials = set(SPECIAL_TOKENS)
    self.is_continuation = np.array(
        [not t.startswith("\u2581") and t not in specials for t in tokens], bool)
    self._tf_sp = tf_text.SentencepieceTokenizer(model=proto, out_type=tf.int32)

  def tf_tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
    """Tokenizes a [batch] string tensor to ragged int32 ids [batch, (pieces)]."""
    ids = self._tf_sp.tokenize(self.normalize(texts))
    return ids if isinstance(ids, tf.RaggedTensor) else tf.RaggedTensor.from_tensor(ids)

  def basic_tokenize(self, text: str) -> list[str]:
    """The normalised text split on whitespace."""
    return self.normalize(tf.constant([text])).numpy()[0].decode("utf-8").split()


def _stamp(path: str):
  try:
    st = tf.io.gfile.stat(path)
    return (st.length, st.mtime_nsec)
  except tf.errors.NotFoundError:
    return None


_TOKENIZERS: dict = {}
_MAX_TOKENIZERS = 8


def cached_tokenizer(kind: str, source: Union[str, Sequence[str]],
                     lowercase: bool) -> _TokenizerBase:
  """The one tokenizer cache: built once per process, shared while its source is unchanged.

  Building a tokenizer traces its TF graphs (seconds), so every caller (the
  pretraining pipeline, fine-tuning, embed, fill_mask, the tokenize CLI) takes
  it from here. The key is (kind, source, lowercase), where the source is a
  file's path and stamp (size, mtime: a rewritten file is loaded again) or the
  hash of a vocab's tokens.

  Args:
    kind: 'wordpiece' or 'sentencepiece'.
    source: a vocab file / SentencePiece model path, or WordPiece vocab tokens in id order.
    lowercase: uncased normalisation.

  Returns:
    A WordPieceTokenizer or SentencePieceTokenizer.
  """
  if kind not in ("wordpiece", "sentencepiece"):
    raise ValueError(f"tokenizer kind {kind!r}; expected 'wordpiece' or 'sentencepiece'")
  if isinstance(source, str):
    source_key = ("file", source, _stamp(source))
  else:
    if kind != "wordpiece":
      raise ValueError("a tokenizer from vocab tokens is WordPiece only")
    source = list(source)
    source_key = ("tokens", hashlib.sha256("\n".join(source).encode("utf-8")).hexdigest())
  key = (kind, source_key, bool(lowercase))
  if key in _TOKENIZERS:
    _TOKENIZERS[key] = _TOKENIZERS.pop(key)  # most recently used last
  else:
    if len(_TOKENIZERS) >= _MAX_TOKENIZERS:
      _TOKENIZERS.pop(next(iter(_TOKENIZERS)))  # least recently used
    cls = WordPieceTokenizer if kind == "wordpiece" else SentencePieceTokenizer
    _TOKENIZERS[key] = cls(source, lowercase=bool(lowercase))
  return _TOKENIZERS[key]


def load_tokenizer(data_config) -> _TokenizerBase:
  """The tokenizer a `config.data` section names (from the shared cache).

  Args:
    data_config: ConfigDict with tokenizer, vocab_file, spm_model, lowercase.

  Returns:
    A WordPieceTokenizer or SentencePieceTokenizer.
  """
  if data_config.tokenizer == "wordpiece":
    path = data_config.vocab_file or default_vocab_file()
    return cached_tokenizer("wordpiece", path, data_config.lowercase)
  if data_config.tokenizer == "sentencepiece":
    if not data_config.spm_model:
      raise ValueError("config.data.tokenizer='sentencepiece' needs config.data.spm_model")
    return cached_tokenizer("sentencepiece", data_config.spm_model, data_config.lowercase)
  raise ValueError(f"config.data.tokenizer={data_config.tokenizer!r}; expected 'wordpiece' or "
                   f"'sentencepiece'")
