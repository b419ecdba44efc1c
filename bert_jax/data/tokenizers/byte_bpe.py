"""RoBERTa's byte-level BPE (vocab.json + merges.txt) with the `tokenizers` library.

tensorflow-text has no byte-level BPE op, so this runs Hugging Face's Rust BPE set up as
`RobertaTokenizerFast` (GPT-2's pre-tokenizer, no prefix space; `<mask>` takes the whitespace
before it). A pair is `<s> A </s></s> B </s>`, one segment id; words start at 'Ġ' pieces.
"""
import json
from typing import Sequence

from etils import epath
import numpy as np

from bert_jax.data.tokenizers import tokenizer_base

# Role -> token, as roberta-base names them.
SPECIAL_TOKENS = {"cls": "<s>", "pad": "<pad>", "sep": "</s>", "unk": "<unk>", "mask": "<mask>"}


def _read(path: str, what: str) -> str:
  if not epath.Path(path).exists():
    raise FileNotFoundError(f"BPE {what} {path!r} does not exist")
  data = epath.Path(path).read_bytes()
  try:
    return data.decode("utf-8")
  except UnicodeDecodeError as e:
    raise ValueError(f"BPE {what} {path!r} is not valid UTF-8: {e}") from None


class ByteLevelBPETokenizer(tokenizer_base.Tokenizer):
  """Byte-level BPE with RoBERTa's special tokens and pair layout (vocab_file: vocab.json)."""

  kind = "bpe"
  pair_separators = 2
  pair_segment_ids = False

  def __init__(self, vocab_file: str, merges_file: str):
    """Loads and validates vocab.json (ids 0..n-1) and merges.txt (after a `#version` line)."""
    import tokenizers  # pylint: disable=g-import-not-at-top
    try:
      vocab = json.loads(_read(vocab_file, "vocab"))
    except json.JSONDecodeError as e:
      raise ValueError(f"BPE vocab {vocab_file!r} is not JSON: {e}") from None
    if not isinstance(vocab, dict) or sorted(vocab.values()) != list(range(len(vocab))):
      raise ValueError(f"BPE vocab {vocab_file!r} must map tokens to the ids 0..n-1")
    missing = [t for t in SPECIAL_TOKENS.values() if t not in vocab]
    if missing:
      raise ValueError(f"BPE vocab {vocab_file!r} lacks the special token(s) {missing}")
    merges = []
    for i, line in enumerate(_read(merges_file, "merges").split("\n")):
      if line.startswith("#version") or not line.strip():
        continue
      pair = line.split(" ")
      if len(pair) != 2:
        raise ValueError(f"BPE merges {merges_file!r} line {i + 1}: expected two tokens, "
                         f"got {line[:80]!r}")
      merges.append((pair[0], pair[1]))
    model = tokenizers.models.BPE(vocab=vocab, merges=merges, dropout=None,
                                  continuing_subword_prefix="", end_of_word_suffix="",
                                  fuse_unk=False)
    tok = tokenizers.Tokenizer(model)
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    tok.add_special_tokens([tokenizers.AddedToken(t, lstrip=role == "mask", normalized=False)
                            for role, t in SPECIAL_TOKENS.items()])
    self._tok = tok
    # For offsets, a copy whose post-processor trims the spaces ('Ġ') at a piece's ends as
    # RobertaTokenizerFast's does (trim_offsets); the ids path stays without that step.
    self._tok_offsets = tokenizers.Tokenizer.from_str(tok.to_str())
    self._tok_offsets.post_processor = tokenizers.processors.ByteLevel(
        add_prefix_space=False, trim_offsets=True)
    self.vocab_file = vocab_file
    self.merges_file = merges_file
    self.lowercase = False
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
      tokens[i] = t
    self._set_vocab(tokens, SPECIAL_TOKENS)
    specials = set(SPECIAL_TOKENS.values())
    self.is_continuation = np.array(
        [not t.startswith("\u0120") and t not in specials for t in tokens], bool)

  def tokenize_to_ids(self, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each text, no special tokens (batched in Rust threads)."""
    return [e.ids for e in self._tok.encode_batch(list(texts), add_special_tokens=False)]

  def tokenize_with_offsets(self, texts: Sequence[str]) -> list[tuple[list[int], list[tuple]]]:
    """(ids, (start, end) character offsets) of each text, no special tokens; a span leaves out
    only the spaces its 'Ġ's stand for (RobertaTokenizerFast's trim_offsets)."""
    return [(list(e.ids), [tuple(o) for o in e.offsets])
            for e in self._tok_offsets.encode_batch(list(texts), add_special_tokens=False)]

  def decode(self, ids: Sequence[int]) -> str:
    """The text of ids (bytes joined back, specials kept)."""
    return self._tok.decode(list(ids), skip_special_tokens=False)

  def token_text(self, token_id: int) -> str:
    return self.decode([token_id])


# Role -> token of a tokenizer.json with BERT's special tokens (ModernBERT's).
BRACKET_SPECIAL_TOKENS = {"cls": "[CLS]", "pad": "[PAD]", "sep": "[SEP]", "unk": "[UNK]",
                          "mask": "[MASK]"}


class TokenizerJsonBPE(ByteLevelBPETokenizer):
  """A byte-level BPE saved whole as one tokenizer.json (ModernBERT's), used as saved.

  Special tokens are BERT's where the vocab has them (`[CLS] A [SEP] B [SEP]`), else RoBERTa's.
  """

  def __init__(self, tokenizer_file: str):  # pylint: disable=super-init-not-called
    """Loads and validates a tokenizer.json whose model is BPE, ids 0..n-1."""
    import tokenizers  # pylint: disable=g-import-not-at-top
    text = _read(tokenizer_file, "tokenizer")
    try:
      model_type = json.loads(text).get("model", {}).get("type")
    except (json.JSONDecodeError, AttributeError) as e:
      raise ValueError(f"BPE tokenizer {tokenizer_file!r} is not a tokenizer.json: {e}") from None
    if model_type != "BPE":
      raise ValueError(f"tokenizer {tokenizer_file!r} is a {model_type} model; bert_jax reads "
                       "a tokenizer.json of a BPE model only")
    tok = tokenizers.Tokenizer.from_str(text)
    vocab = tok.get_vocab(with_added_tokens=True)
    if sorted(vocab.values()) != list(range(len(vocab))):
      raise ValueError(f"BPE tokenizer {tokenizer_file!r} must map tokens to the ids 0..n-1")
    specials = (BRACKET_SPECIAL_TOKENS if all(t in vocab for t in BRACKET_SPECIAL_TOKENS.values())
                else SPECIAL_TOKENS)
    missing = [t for t in specials.values() if t not in vocab]
    if missing:
      raise ValueError(f"BPE tokenizer {tokenizer_file!r} lacks the special token(s) {missing}")
    self.pair_separators = 1 if specials is BRACKET_SPECIAL_TOKENS else 2
    self._tok = tok
    # For offsets, a copy that trims the spaces ('Ġ') at a piece's ends, as
    # ByteLevelBPETokenizer's does.
    self._tok_offsets = tokenizers.Tokenizer.from_str(text)
    self._tok_offsets.post_processor = tokenizers.processors.ByteLevel(
        add_prefix_space=False, trim_offsets=True)
    self.vocab_file = tokenizer_file
    self.merges_file = ""
    self.lowercase = False
    tokens = [None] * len(vocab)
    for t, i in vocab.items():
      tokens[i] = t
    added = {t.content for t in tok.get_added_tokens_decoder().values() if t.special}
    self._set_vocab(tokens, specials, not_regular=added)
    self.is_continuation = np.array(
        [not t.startswith("\u0120") and t not in added for t in tokens], bool)
