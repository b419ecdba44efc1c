"""BERT's WordPiece on Hugging Face's `tokenizers` (Rust): the host side without TensorFlow.

The pipeline is transformers' BertTokenizerFast built from the vocab (BertNormalizer,
BertPreTokenizer, WordPiece), whose ids equal the tf-text ops' on all shared real text. The
special-token literals are matched in the raw text, before normalisation.
"""
from typing import Sequence

import tokenizers

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
