"""BERT's WordPiece tokenizer on tensorflow-text ops (BERT, DistilBERT, ELECTRA).

The ids are Google BERT's `FullTokenizer`'s and `BertTokenizerFast`'s. Special-token literals
typed in the text (`[MASK]`, exactly so cased) are one id each, as in BertTokenizerFast (Google
splits them), so a text has one tokenization in pretraining, fine-tuning and fill-mask. The
uncased normalisation is regex / NFD / lower ops, because tf-text's
`lower_case_nfd_strip_accents` case-folds (`ß` -> `ss`), which BERT does not.

Host-side calls (`tokenize_to_ids`, `basic_tokenize`) run on tf-text where TensorFlow is
already loaded, else on `tokenizers` (wordpiece_rust.py), so a fine-tune from TSV files never
pays TensorFlow's import. The two agree on all shared real text (test_wordpiece_backends.py)
and differ only on characters re-categorised since Unicode 3.2.
The vocab needs no TensorFlow; the ops are built on first use.
"""
from __future__ import annotations  # annotations naming tf are not evaluated (no TensorFlow)

import functools
import os
import re
import sys
from typing import Optional, Sequence, Union

from etils import epath
import numpy as np

from bert_jax.data.tokenizers import tokenizer_base
from bert_jax.data.tokenizers import wordpiece_rust
from bert_jax.runtime import optional_tensorflow
from bert_jax.runtime.optional_tensorflow import tf
from bert_jax.runtime.optional_tensorflow import tf_text

SPECIAL_TOKENS = wordpiece_rust.SPECIAL_TOKENS
# BERT's WordPiece turns a longer word (in characters) into one [UNK].
MAX_CHARS_PER_WORD = wordpiece_rust.MAX_CHARS_PER_WORD
BACKENDS = ("tf-text", "tokenizers")
# Characters BERT's _clean_text removes: categories Cc, Cf, Co, Cs except tab,
# LF and CR (whitespace), and the replacement character U+FFFD.
_CLEAN_PATTERN = r"[^\P{C}\t\n\r]|\x{FFFD}"
# A special token typed in the raw text (RE2 syntax).
_SPECIAL_LITERAL = "|".join(re.escape(t) for t in SPECIAL_TOKENS)


def default_vocab_file() -> str:
  """The bundled bert-base-uncased vocab (used when a config leaves it empty)."""
  package = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
  return os.path.join(package, "assets", "bert-base-uncased-vocab.txt")


def host_backend() -> str:
  """'tf-text' where TensorFlow is already loaded and tensorflow-text imports, else 'tokenizers'."""
  if "tensorflow" in sys.modules and optional_tensorflow.available(text=True):
    return "tf-text"
  return "tokenizers"


def read_vocab(vocab_file: str) -> list[str]:
  """Reads a WordPiece vocab (one token per line, id = line number); FileNotFoundError /
  ValueError name the file (and line) of a missing file, empty or duplicate token, or special."""
  if not epath.Path(vocab_file).exists():
    raise FileNotFoundError(f"vocab file {vocab_file!r} does not exist")
  data = epath.Path(vocab_file).read_bytes()
  if data.startswith(b"\xef\xbb\xbf"):
    raise ValueError(f"vocab file {vocab_file!r} starts with a UTF-8 byte-order mark, which "
                     "would be part of its first token (line 1); save it without one")
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


class WordPieceTokenizer(tokenizer_base.Tokenizer):
  """BERT WordPiece tokenization; random replacements skip the specials and `[unusedN]`."""

  kind = "wordpiece"

  def __init__(self, vocab: Union[str, Sequence[str]], lowercase: bool = True,
               backend: Optional[str] = None):
    """Loads and validates the vocab (a file, or tokens in id order as a checkpoint carries them;
    [PAD], [UNK], [CLS], [SEP], [MASK] required); backend None: `host_backend()` on first use."""
    if backend not in (None, *BACKENDS):
      raise ValueError(f"WordPiece backend {backend!r}; expected one of {list(BACKENDS)}")
    self._backend = backend
    tokens = read_vocab(vocab) if isinstance(vocab, str) else list(vocab)
    self.vocab_file = vocab if isinstance(vocab, str) else None
    self.lowercase = bool(lowercase)
    missing = [t for t in SPECIAL_TOKENS if t not in set(tokens)]
    if missing:  # Tokens from a checkpoint (a file was checked by read_vocab).
      raise ValueError(f"the vocab lacks the special token(s) {missing}")
    self._set_vocab(tokens, dict(zip(("pad", "unk", "cls", "sep", "mask"), SPECIAL_TOKENS)),
                    not_regular=[t for t in tokens if t.startswith("[unused") and t.endswith("]")])
    self.is_continuation = np.array([t.startswith("##") and len(t) > 2 for t in tokens], bool)

  @functools.cached_property
  def backend(self) -> str:
    """'tf-text' or 'tokenizers': what tokenize_to_ids and basic_tokenize run on."""
    return self._backend or host_backend()

  @functools.cached_property
  def _rust(self) -> wordpiece_rust.RustWordPiece:
    return wordpiece_rust.RustWordPiece(self.inv_vocab, self.lowercase, SPECIAL_TOKENS)

  # The TensorFlow ops and constants, built on first use, eagerly (init_scope) also when the
  # first use is inside a traced function.

  @functools.cached_property
  def _fast(self):
    with tf.init_scope():
      # Words are split on bytes here; the 100-character rule is applied after.
      return tf_text.FastBertTokenizer(
          vocab=self.inv_vocab, suffix_indicator="##", max_bytes_per_word=4 * MAX_CHARS_PER_WORD,
          token_out_type=tf.int32, unknown_token="[UNK]", lower_case_nfd_strip_accents=False)

  @functools.cached_property
  def _is_continuation_tf(self):
    with tf.init_scope():
      return tf.constant(self.is_continuation)

  @functools.cached_property
  def _special_literals(self):
    with tf.init_scope():
      return tf.constant(SPECIAL_TOKENS)

  @functools.cached_property
  def _special_literal_ids(self):
    with tf.init_scope():
      return tf.constant([self.vocab[t] for t in SPECIAL_TOKENS], tf.int32)

  def normalize(self, texts: tf.Tensor) -> tf.Tensor:
    """Cleaning (and the uncased normalisation) on a [batch] string tensor."""
    texts = clean_text(texts)
    return uncased_normalize(texts) if self.lowercase else texts

  @functools.cached_property
  def tf_tokenize_compiled(self):
    """`tf_tokenize` as a tf.function traced once, for eager calls on [batch] strings."""
    # autograph=False: the function is graph code already (tf.cond), and autograph would
    # write a generated source file per converted function into the system temp directory.
    return tf.function(self.tf_tokenize, input_signature=[tf.TensorSpec([None], tf.string)],
                       autograph=False)

  def ids_and_lengths(self, texts: tf.Tensor) -> tuple[np.ndarray, np.ndarray]:
    ragged = self.tf_tokenize_compiled(texts)
    return ragged.flat_values.numpy(), ragged.row_lengths().numpy()

  def tokenize_to_ids(self, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each text, no special tokens (batched through the TF ops or in Rust)."""
    if not len(texts):
      return []
    if self.backend == "tokenizers":
      return self._rust.tokenize_to_ids(texts)
    out = []
    for i in range(0, len(texts), 65536):  # Bounded memory for huge lists.
      ragged = self.tf_tokenize_compiled(tf.constant(list(texts[i:i + 65536]), tf.string))
      values = ragged.flat_values.numpy().astype(np.int64).tolist()
      splits = ragged.row_splits.numpy().tolist()
      out.extend(values[a:b] for a, b in zip(splits[:-1], splits[1:]))
    return out

  def tf_tokenize(self, texts: tf.Tensor) -> tf.RaggedTensor:
    """Ragged int32 ids [batch, (pieces)] of a [batch] string tensor, graph-safe (tf.data maps);
    no special tokens but one id per special-token literal typed in a text."""
    norm = self.normalize(texts)
    # One scan of the batch picks the path. Nearly all batches hold neither a run of over 100
    # characters without a space (a word over 100 characters is inside one: BERT splits words
    # at every space, clean_text removed \f and \v) nor what may be a special-token literal
    # (in the normalised text in any case; it is matched exactly in the raw text after); they
    # need no offsets, and the tokenization without them costs a third.
    unusual = tf.reduce_any(tf.strings.regex_full_match(
        norm, rf"(?s).*(?:\S{{{MAX_CHARS_PER_WORD + 1}}}|(?i:{_SPECIAL_LITERAL})).*"))
    return tf.cond(unusual, lambda: self._tokenize_unusual(texts, norm),
                   lambda: self._fast.tokenize(norm))

  def _tokenize_unusual(self, texts: tf.Tensor, norm: tf.Tensor) -> tf.RaggedTensor:
    """tf_tokenize of texts (`norm` normalised) with special-token literals or long words."""
    has_literal = tf.reduce_any(tf.strings.regex_full_match(
        texts, f"(?s).*(?:{_SPECIAL_LITERAL}).*"))
    # With a literal, the parts between the literals are tokenized and joined after.
    parts, part_splits, literal_ids = tf.cond(
        has_literal, lambda: self._split_at_literals(texts),
        lambda: (norm, tf.range(tf.size(texts, tf.int64) + 1), tf.fill(tf.shape(texts), -1)))
    ids = self._tokenize_long_words(parts)
    return tf.cond(has_literal, lambda: self._join_parts(ids, part_splits, literal_ids),
                   lambda: ids)

  def _split_at_literals(self, texts: tf.Tensor):
    """The parts of each text around its special-token literals, normalised: (parts, literals as
    '', row splits [batch + 1], literal ids [parts] with -1 for text)."""
    # regex_split ends a string at a NUL; the cleaning removes any control character, so
    # \x01 stands in for it.
    texts = tf.strings.regex_replace(texts, r"\x00", "\x01")
    parts = tf_text.regex_split(texts, _SPECIAL_LITERAL,
                                keep_delim_regex_pattern=_SPECIAL_LITERAL)  # [batch, (parts)]
    flat = parts.flat_values  # [parts]
    match = tf.equal(flat[:, None], self._special_literals[None, :])  # [parts, 5]
    is_literal = tf.reduce_any(match, axis=1)
    literal_ids = tf.where(is_literal, tf.gather(self._special_literal_ids,
                                                 tf.argmax(tf.cast(match, tf.int32), 1)), -1)
    return self.normalize(tf.where(is_literal, "", flat)), parts.row_splits, literal_ids

  def _join_parts(self, ids: tf.RaggedTensor, part_splits: tf.Tensor,
                  literal_ids: tf.Tensor) -> tf.RaggedTensor:
    """Ids [batch, (pieces)] from the ids of the parts [parts, (pieces)] (literals empty)."""
    is_literal = literal_ids >= 0
    literals = tf.RaggedTensor.from_row_lengths(tf.boolean_mask(literal_ids, is_literal),
                                                tf.cast(is_literal, tf.int64))
    per_part = tf.concat([ids, literals], axis=1)  # a part is text or one literal
    return tf.RaggedTensor.from_row_splits(per_part, part_splits).merge_dims(1, 2)

  def _tokenize_long_words(self, norm: tf.Tensor) -> tf.RaggedTensor:
    """WordPiece ids of normalised text, words over 100 characters as one [UNK]."""
    ids, starts, ends = self._fast.tokenize_with_offsets(norm)
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
      norm = self.normalize(texts)
      ids, starts, ends = self._fast.tokenize_with_offsets(norm)
      word_start = tf.logical_not(tf.gather(self._is_continuation_tf, ids.flat_values))
      word_of_piece = tf.cumsum(tf.cast(word_start, tf.int64)) - 1
      num_words = tf.reduce_sum(tf.cast(word_start, tf.int64))
      begin = tf.boolean_mask(starts.flat_values, word_start)
      end = tf.math.unsorted_segment_max(ends.flat_values, word_of_piece, num_words)
      row = tf.boolean_mask(ids.value_rowids(), word_start)
      return tf.strings.substr(tf.gather(norm, row), begin, end - begin)
    return tf.function(words, input_signature=[tf.TensorSpec([None], tf.string)], autograph=False)

  def basic_tokenize(self, text: str) -> list[str]:
    """BERT's basic tokenization: the normalised words WordPiece sees (punctuation and CJK
    characters alone)."""
    if self.backend == "tokenizers":
      return self._rust.basic_tokenize(text)
    out = self._eager_words(tf.constant([text], tf.string)).numpy()
    return [w.decode("utf-8") for w in out]
