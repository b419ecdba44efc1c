"""SentencePiece models with the conventions of ALBERT, DeBERTa-v2/v3 and bert_jax.

The unigram segmentation is the `sentencepiece` library's; around it run the steps of
transformers' fast tokenizers (AlbertTokenizerFast, DebertaV2TokenizerFast), so the ids are
theirs: added tokens split out of the raw text, the family's normalisation, the model's
charsmap, spaces collapsed, and '▁' prepended to each segment. A word starts at a '▁' piece;
unknown characters become the unk piece (no byte fallback, as the fast tokenizers).

sentencepiece adds scores in float32, the fast tokenizers in float64, so near-equal
segmentations can differ ('666'); a word whose two best are that close is decided among its
16 best in float64, with the fast tokenizers' tie rule.
"""
import dataclasses
import functools
import os
import re
import sys
import unicodedata
from typing import Optional, Sequence

from etils import epath
import numpy as np

from bert_jax.data.tokenizers import tokenizer_base
from bert_jax.data.tokenizers import wordpiece
from bert_jax.runtime.optional_tensorflow import tf

_SPACE = "\u2581"
# Rust's char::is_whitespace (Unicode White_Space), which the fast tokenizers strip.
_WHITESPACE = ("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
               "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
_SPACE_RUNS = re.compile(" {2,}")
_WORDS = re.compile(f"{_SPACE}[^{_SPACE}]*")
# Two best segmentations closer than this (relative) are decided in float64.
_NEAR_TIE = 1e-4
_MAX_CACHED_WORDS = 1 << 20
_PIECE_NORMAL, _PIECE_UNKNOWN, _PIECE_CONTROL, _PIECE_USER, _PIECE_BYTE = 1, 2, 3, 4, 6


@dataclasses.dataclass(frozen=True)
class Conventions:
  """What a model family does around the SentencePiece model.

  specials: role -> piece (a mask piece the model lacks is appended: DeBERTa-v3's [MASK] =
  128000). normalized_added: roles matched in the normalised text (DeBERTa's unk).
  split_digit_comma: ALBERT's score penalty on pieces ending in digit + ','. strip: 'before'
  the charsmap (DeBERTa), 'after' it (bert_jax), or ''.
  """
  name: str
  specials: dict
  lowercase: bool
  mask_lstrip: bool = False
  normalized_added: tuple = ()
  split_digit_comma: bool = False
  strip: str = ""


CONVENTIONS = {
    "albert": Conventions(
        "albert", {"pad": "<pad>", "unk": "<unk>", "cls": "[CLS]", "sep": "[SEP]",
                   "mask": "[MASK]"}, lowercase=True, mask_lstrip=True, split_digit_comma=True),
    "deberta_v2": Conventions(
        "deberta_v2", {"pad": "[PAD]", "unk": "[UNK]", "cls": "[CLS]", "sep": "[SEP]",
                       "mask": "[MASK]"}, lowercase=False, strip="before",
        normalized_added=("unk",)),
    "bert_jax": Conventions(
        "bert_jax", dict(zip(("pad", "unk", "cls", "sep", "mask"), wordpiece.SPECIAL_TOKENS)),
        lowercase=True, strip="after"),
}
# The file names Hugging Face gives each family's model.
_CONVENTIONS_BY_FILE_NAME = {"spiece.model": "albert", "spm.model": "deberta_v2"}


def conventions_for(model_file: str) -> str:
  """The family by file name: spiece.model ALBERT, spm.model DeBERTa-v2, else bert_jax."""
  return _CONVENTIONS_BY_FILE_NAME.get(os.path.basename(model_file), "bert_jax")


@functools.cache
def _lowercase_table() -> dict[int, str]:
  """Per-character lower case (the Rust `Lowercase` normaliser: 'Σ' -> 'σ' everywhere)."""
  return {c: chr(c).lower() for c in range(sys.maxunicode + 1)
          if not 0xD800 <= c <= 0xDFFF and chr(c).lower() != chr(c)}


@functools.cache
def _marks() -> "re.Pattern":
  """Every character of general category M (the `StripAccents` normaliser)."""
  chars = [chr(c) for c in range(sys.maxunicode + 1)
           if not 0xD800 <= c <= 0xDFFF and unicodedata.category(chr(c)).startswith("M")]
  return re.compile("[" + "".join(re.escape(c) for c in chars) + "]")


def _added_pattern(tokens: set, lstrip: set) -> "Optional[re.Pattern]":
  """A regex splitting text around the tokens (longest first), keeping them; a token in
  `lstrip` also takes the whitespace before it."""
  if not tokens:
    return None
  ws = f"[{re.escape(_WHITESPACE)}]*"
  alternatives = [(ws if t in lstrip else "") + re.escape(t)
                  for t in sorted(tokens, key=len, reverse=True)]
  return re.compile("(" + "|".join(alternatives) + ")")


def _split(pattern: "Optional[re.Pattern]", text: str) -> list[tuple[bool, str]]:
  """(is_added, part) items of a text; added tokens without their stripped whitespace."""
  if pattern is None:
    return [(False, text)] if text else []
  return [(True, part.lstrip(_WHITESPACE)) if i % 2 else (False, part)
          for i, part in enumerate(pattern.split(text)) if i % 2 or part]


def _check_number_comma(piece: str) -> bool:
  return len(piece) < 2 or piece[-1] != "," or not piece[-2].isdigit()


class SentencePieceTokenizer(tokenizer_base.Tokenizer):
  """A SentencePiece unigram model with its family's special tokens and normalisation."""

  kind = "sentencepiece"

  def __init__(self, model_file: str, lowercase: Optional[bool] = None,
               conventions: Optional[str] = None):
    """Loads and validates a unigram .model; lowercase and conventions None: the family's
    default and the family by file name."""
    import sentencepiece  # pylint: disable=g-import-not-at-top
    from sentencepiece import sentencepiece_model_pb2  # pylint: disable=g-import-not-at-top
    name = conventions or conventions_for(model_file)
    if name not in CONVENTIONS:
      raise ValueError(f"SentencePiece conventions {name!r}; expected one of {list(CONVENTIONS)}")
    conv = CONVENTIONS[name]
    if not epath.Path(model_file).exists():
      raise FileNotFoundError(f"SentencePiece model {model_file!r} does not exist")
    proto = sentencepiece_model_pb2.ModelProto()
    try:
      proto.ParseFromString(epath.Path(model_file).read_bytes())
    except Exception as e:  # pylint: disable=broad-except
      raise ValueError(f"{model_file!r} is not a SentencePiece model: {e}") from None
    if not proto.pieces or proto.trainer_spec.model_type != 1:
      raise ValueError(f"{model_file!r} is not a SentencePiece unigram model")
    tokens = [p.piece for p in proto.pieces]
    specials = dict(conv.specials)
    if specials["mask"] not in tokens and name == "deberta_v2":
      tokens.append(specials["mask"])
    missing = [t for t in specials.values() if t not in tokens]
    if missing:
      raise ValueError(f"SentencePiece model {model_file!r} lacks the special piece(s) {missing} "
                       f"of the {name} conventions" + (
                           "; build one with `python -m bert_jax.build_vocab --type "
                           "sentencepiece`" if name == "bert_jax" else ""))
    self.vocab_file = model_file
    self.conventions = conv
    self.lowercase = conv.lowercase if lowercase is None else bool(lowercase)
    self._set_vocab(tokens, specials, not_regular=[
        p.piece for p in proto.pieces
        if p.type in (_PIECE_UNKNOWN, _PIECE_CONTROL, _PIECE_BYTE)])
    self.is_continuation = np.array(
        [not t.startswith(_SPACE) and t not in set(specials.values()) for t in tokens], bool)

    # The charsmap alone: no dummy prefix, no whitespace rules, spaces stay spaces.
    self._charsmap = sentencepiece.SentencePieceNormalizer(
        model_proto=proto.SerializeToString(), add_dummy_prefix=False,
        escape_whitespaces=False, remove_extra_whitespaces=False)
    # Added tokens: control and user-defined pieces, the unk piece, the mask token;
    # most are matched in the raw text, some in the normalised text, where they are
    # matched in their own normalised form (DeBERTa lower-cased: '[UNK]' as '[unk]'),
    # as the fast tokenizers' added vocabulary normalises a normalized token's content.
    added = {p.piece for p in proto.pieces
             if p.type in (_PIECE_CONTROL, _PIECE_USER, _PIECE_UNKNOWN)} | set(specials.values())
    in_normalized = {specials[role] for role in conv.normalized_added}
    lstrip = {specials["mask"]} if conv.mask_lstrip else set()
    self._added_ids = {t: self.vocab[t] for t in added}
    normalized_forms = dict(zip(self.normalize_segments(sorted(in_normalized)),
                                sorted(in_normalized)))
    self._added_ids.update({form: self.vocab[t] for form, t in normalized_forms.items()})
    self._raw_added = _added_pattern(added - in_normalized, lstrip)
    self._normalized_added = _added_pattern(set(normalized_forms), lstrip)
    # float64 scores as the fast tokenizers hold them (ALBERT's penalty added in float64).
    self._scores = [p.score - (100 if conv.split_digit_comma and not _check_number_comma(p.piece)
                               else 0) for p in proto.pieces]
    # The segmentation model: text already normalised and '▁'-joined; user-defined
    # and byte pieces scored like the others (as the fast tokenizers' unigram
    # vocab holds them), no byte fallback.
    spec = proto.normalizer_spec
    spec.name, spec.precompiled_charsmap = "identity", b""
    spec.add_dummy_prefix = spec.remove_extra_whitespaces = spec.escape_whitespaces = False
    proto.trainer_spec.byte_fallback = False
    for p in proto.pieces:
      if p.type in (_PIECE_USER, _PIECE_BYTE):
        p.type = _PIECE_NORMAL
      if conv.split_digit_comma and not _check_number_comma(p.piece):
        p.score -= 100
    self._sp = sentencepiece.SentencePieceProcessor()
    self._sp.LoadFromSerializedProto(proto.SerializeToString())
    self._word_ids: dict[str, list[int]] = {}

  # -- Normalisation ---------------------------------------------------------------

  def _family_normalize(self, texts: list[str]) -> list[str]:
    """The family's steps before the charsmap, on text segments."""
    name = self.conventions.name
    if name == "bert_jax":
      out = wordpiece.clean_text(tf.constant(texts, tf.string))
      if self.lowercase:
        out = wordpiece.uncased_normalize(out)
      return [t.decode("utf-8") for t in out.numpy()]
    if name == "albert":
      texts = [t.replace("``", '"').replace("''", '"') for t in texts]
      if self.lowercase:  # ALBERT's keep_accents=False, do_lower_case=True
        marks = _marks()
        texts = [marks.sub("", unicodedata.normalize("NFKD", t)) for t in texts]
    if self.lowercase:
      table = _lowercase_table()
      texts = [t.translate(table) for t in texts]
    if self.conventions.strip == "before":
      texts = [t.strip(_WHITESPACE) for t in texts]
    return texts

  def normalize_segments(self, texts: list[str]) -> list[str]:
    """Text segments (no added tokens in them) as the model's words see them, spaces kept."""
    if not texts:
      return []
    texts = [self._charsmap.normalize(t) for t in self._family_normalize(texts)]
    texts = [_SPACE_RUNS.sub(" ", t) for t in texts]
    if self.conventions.strip == "after":
      texts = [t.strip(" ") for t in texts]
    return texts

  # -- Text to ids ------------------------------------------------------------------

  def tokenize_to_ids(self, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each text, no special tokens."""
    items = [_split(self._raw_added, text) for text in texts]  # per text: [(is_added, str)]
    segments = [part for text_items in items for is_added, part in text_items if not is_added]
    normalized = iter(self.normalize_segments(segments))
    words = []  # '▁'-joined text segments for the model
    for text_items in items:
      for j, (is_added, part) in enumerate(text_items):
        if is_added:
          continue
        sub = _split(self._normalized_added, next(normalized))
        for k, (sub_added, sub_part) in enumerate(sub):
          if not sub_added:
            w = sub_part.replace(" ", _SPACE)
            sub[k] = (False, len(words))
            words.append(w if w.startswith(_SPACE) else _SPACE + w)
        text_items[j] = (None, sub)
    encoded = self._segment(words)
    out = []
    for text_items in items:
      ids = []
      for is_added, part in text_items:
        for sub_added, v in ([(True, part)] if is_added else part):
          ids.extend([self._added_ids[v]] if sub_added else encoded[v])
      out.append(ids)
    return out

  def _segment(self, texts: list[str]) -> list[list[int]]:
    """Ids of '▁'-joined texts, word by word (cached)."""
    words = [_WORDS.findall(t) for t in texts]
    cache = self._word_ids  # shared by the pipeline's threads: read once per word here
    known = {w: cache.get(w) for ws in words for w in ws}
    new = [w for w, ids in known.items() if ids is None]
    if new:
      if len(cache) + len(new) > _MAX_CACHED_WORDS:
        cache.clear()
      nbest = self._sp.nbest_encode(new, nbest_size=2, return_type="proto")
      for w, ids, best in zip(new, self._sp.encode(new), nbest):
        scores = [n.score for n in best.nbests]
        if len(scores) > 1 and abs(scores[0] - scores[1]) <= _NEAR_TIE * max(1.0, abs(scores[0])):
          ids = self._decide_near_tie(w, ids)
        known[w] = cache[w] = ids
    return [[i for w in ws for i in known[w]] for ws in words]

  def _decide_near_tie(self, word: str, ids: list[int]) -> list[int]:
    """The fast tokenizers' choice among a word's best segmentations (float64 scores)."""
    best_key = None
    for cand in self._sp.nbest_encode(word, nbest_size=16, return_type="proto").nbests:
      cand_ids = [p.id for p in cand.pieces]
      if self.unk_id in cand_ids:  # unknown characters: sentencepiece's choice stands
        return ids
      score = 0.0
      for i in cand_ids:  # left to right, as the fast tokenizers' Viterbi adds
        score += self._scores[i]
      key = (score, [-p.begin for p in reversed(cand.pieces)])
      if best_key is None or key > best_key:
        best_key, ids = key, cand_ids
    return ids

  def tokenize_with_offsets(self, texts: Sequence[str]) -> list[tuple[list[int], list[tuple]]]:
    """(ids, (start, end) character offsets) of each text, no special tokens.

    Each whitespace-separated word is tokenized alone (a '▁'-word's pieces do not depend on its
    neighbours). Where normalisation changed a word's length, its first piece spans the whole
    word and the others are empty at its end. The ids equal the whole text's except for a
    trailing space (ALBERT's last '▁') and a literal '[UNK]' after a space in DeBERTa text.
    """
    words = [[(m.start(), m.end()) for m in re.finditer(r"\S+", t)] for t in texts]
    key = lambda t, s, e: t[s:e] if s == 0 else " " + t[s:e]  # noqa: E731
    unique = list(dict.fromkeys(key(t, s, e) for t, ws in zip(texts, words) for s, e in ws))
    pieces = dict(zip(unique, self.tokenize_to_ids(unique))) if unique else {}
    out = []
    for text, ws in zip(texts, words):
      ids, spans = [], []
      for s, e in ws:
        word_ids = pieces[key(text, s, e)]
        lengths = [len(self.inv_vocab[i].lstrip(_SPACE)) for i in word_ids]
        if self.unk_id in word_ids or sum(lengths) != e - s:
          spans.extend([(s, e)] + [(e, e)] * (len(word_ids) - 1))
        else:
          at = s
          for n in lengths:
            spans.append((at, at + n))
            at += n
        ids.extend(word_ids)
      out.append((ids, spans))
    return out

  def token_text(self, token_id: int) -> str:
    text = self.inv_vocab[int(token_id)].replace(_SPACE, " ")
    return text[1:] if text.startswith(" ") else text  # the word's start, as decode drops it

  def basic_tokenize(self, text: str) -> list[str]:
    """The normalised text split on whitespace (SQuAD's answer alignment)."""
    return " ".join(self.normalize_segments([text])).split()
