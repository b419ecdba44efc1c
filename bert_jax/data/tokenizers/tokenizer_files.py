"""Which tokenizer a directory (or file) holds, from its file names.

  vocab.txt                 WordPiece (BERT, DistilBERT, ELECTRA)
  vocab.json + merges.txt   byte-level BPE (RoBERTa)
  tokenizer.json            a BPE saved whole (ModernBERT), where none of the others is
  *.model                   SentencePiece (spiece.model: ALBERT, spm.model: DeBERTa-v2/v3)
"""
import dataclasses

from etils import epath

KINDS = ("wordpiece", "bpe", "sentencepiece")
_EXPECTED = ("vocab.txt (WordPiece), vocab.json + merges.txt (byte-level BPE) or one *.model "
             "(SentencePiece)")


@dataclasses.dataclass(frozen=True)
class TokenizerFiles:
  """A tokenizer's kind and file; merges is merges.txt for 'bpe' from vocab.json, else ''."""
  kind: str
  path: str
  merges: str = ""


def _of_file(p: epath.Path) -> TokenizerFiles:
  if p.name.endswith(".model"):
    return TokenizerFiles("sentencepiece", str(p))
  if p.name == "tokenizer.json":
    return TokenizerFiles("bpe", str(p))
  if p.name.endswith(".json"):
    merges = p.parent / "merges.txt"
    if not merges.exists():
      raise FileNotFoundError(f"BPE vocab {p} needs merges.txt beside it ({merges} does not exist)")
    return TokenizerFiles("bpe", str(p), str(merges))
  return TokenizerFiles("wordpiece", str(p))


def detect(path: str) -> TokenizerFiles:
  """The tokenizer in a directory or file. FileNotFoundError: no such path; ValueError: a
  directory with no tokenizer files, or several kinds."""
  p = epath.Path(path)
  if not p.exists():
    raise FileNotFoundError(f"tokenizer path {path!r} does not exist")
  if not p.is_dir():
    return _of_file(p)
  found = []
  if (p / "vocab.txt").exists():
    found.append(TokenizerFiles("wordpiece", str(p / "vocab.txt")))
  if (p / "vocab.json").exists() and (p / "merges.txt").exists():
    found.append(TokenizerFiles("bpe", str(p / "vocab.json"), str(p / "merges.txt")))
  found += [TokenizerFiles("sentencepiece", str(m)) for m in sorted(p.glob("*.model"))]
  # Most releases save a tokenizer.json beside their own files: read it only alone.
  if not found and (p / "tokenizer.json").exists():
    found.append(TokenizerFiles("bpe", str(p / "tokenizer.json")))
  if not found:
    raise ValueError(f"tokenizer directory {path!r} holds no tokenizer files: expected {_EXPECTED}")
  if len(found) > 1:
    names = ", ".join(epath.Path(f.path).name for f in found)
    raise ValueError(f"tokenizer directory {path!r} holds several tokenizers ({names}); "
                     f"give the path of the one to use")
  return found[0]
