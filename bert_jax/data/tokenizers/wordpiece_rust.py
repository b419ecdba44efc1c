"""BERT's WordPiece on Hugging Face's `tokenizers` (Rust): the host side without TensorFlow.

The pipeline is transformers' BertTokenizerFast built from the vocab (BertNormalizer,
BertPreTokenizer, WordPiece), whose ids equal the tf-text ops' on all shared real text. The
special-token literals are matched in the raw text, before normalisation.

`read_tokenizer_json` reads the vocab and casing of that pipeline saved whole as one
tokenizer.json, which is how transformers 5 saves a BERT-family tokenizer (no vocab.txt).
"""
import json
from typing import Sequence

from etils import epath
import tokenizers

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")  # as wordpiece.SPECIAL_TOKENS
MAX_CHARS_PER_WORD = 100  # as wordpiece.MAX_CHARS_PER_WORD (that module imports this one)


class RustWordPiece:
  """The WordPiece pipeline of one vocab and casing in `tokenizers`."""

  def __init__(self, tokens: Sequence[str], lowercase: bool, special_tokens: Sequence[str]):
    """Builds the pipeline; special_tokens are matched as one token in the raw text."""
    model = tokenizers.models.WordPiece(
        vocab={t: i for i, t in enumerate(tokens)}, unk_token="[UNK]",
        continuing_subword_prefix="##", max_input_chars_per_word=MAX_CHARS_PER_WORD)
    tok = tokenizers.Tokenizer(model)
    tok.normalizer = tokenizers.normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=bool(lowercase),
        lowercase=bool(lowercase))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.BertPreTokenizer()
    tok.add_special_tokens([tokenizers.AddedToken(t, normalized=False, special=True)
                            for t in special_tokens])
    self._tok = tok

  def tokenize_to_ids(self, texts: Sequence[str]) -> list[list[int]]:
    """Token ids of each text, no special tokens (batched in Rust threads)."""
    return [e.ids for i in range(0, len(texts), 65536)  # bounded memory for huge lists
            for e in self._tok.encode_batch(list(texts[i:i + 65536]), add_special_tokens=False)]

  def basic_tokenize(self, text: str) -> list[str]:
    """The normalised words WordPiece sees (special literals are not matched here)."""
    norm = self._tok.normalizer.normalize_str(text)
    return [w for w, _ in self._tok.pre_tokenizer.pre_tokenize_str(norm)]


def read_tokenizer_json(path: str) -> tuple[list[str], bool]:
  """(tokens in id order, lowercase) of a tokenizer.json that is BERT's WordPiece pipeline.

  That pipeline is what this module builds from a vocab and a casing, so the two are the whole
  tokenizer. ValueError, naming the file and the part: anything else (another model,
  normalizer or pre-tokenizer, accents stripped other than with lowercasing, added tokens
  beyond BERT's special ones), which bert_jax's WordPiece would not tokenize the same.
  """
  try:
    saved = json.loads(epath.Path(path).read_text())
    model = saved["model"]
    kind = model.get("type")
  except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
    raise ValueError(f"{path} is not a tokenizer.json: {e}") from None
  if kind != "WordPiece":
    raise ValueError(f"{path} is a {kind} tokenizer; a WordPiece model needs a WordPiece "
                     "tokenizer.json (or vocab.txt)")

  def refuse(part: str, found) -> None:
    raise ValueError(f"{path}: {part} is {json.dumps(found)}, not BERT's WordPiece pipeline, "
                     "which bert_jax's WordPiece tokenizes as saved")

  norm = saved.get("normalizer") or {}
  lowercase = norm.get("lowercase")
  # bert_jax's lowercasing strips accents and its cased tokenizer keeps them, as BERT's do.
  if (norm.get("type") != "BertNormalizer" or not norm.get("clean_text")
      or not norm.get("handle_chinese_chars") or not isinstance(lowercase, bool)
      or norm.get("strip_accents") not in (None, lowercase)):
    refuse("the normalizer", norm)
  if (saved.get("pre_tokenizer") or {}).get("type") != "BertPreTokenizer":
    refuse("the pre-tokenizer", saved.get("pre_tokenizer"))
  shape = {k: model.get(k) for k in ("continuing_subword_prefix", "max_input_chars_per_word",
                                      "unk_token")}
  if shape != {"continuing_subword_prefix": "##", "max_input_chars_per_word": MAX_CHARS_PER_WORD,
               "unk_token": "[UNK]"}:
    refuse("the WordPiece model", shape)
  vocab = dict(model.get("vocab") or {})
  added = {t["content"]: t["id"] for t in saved.get("added_tokens") or ()}
  others = sorted(t for t in added if t not in SPECIAL_TOKENS)
  if others:
    raise ValueError(f"{path} adds the token(s) {others[:5]}, which bert_jax's WordPiece would "
                     f"split; it matches {', '.join(SPECIAL_TOKENS)} alone")
  if any(vocab.get(t, i) != i for t, i in added.items()):
    raise ValueError(f"{path}: its special tokens' ids differ from the vocab's")
  vocab.update(added)
  if sorted(vocab.values()) != list(range(len(vocab))):
    raise ValueError(f"{path}: the WordPiece vocab must map its tokens to the ids 0..n-1")
  return sorted(vocab, key=vocab.get), lowercase
