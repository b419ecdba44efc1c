r"""Prints the token ids of each input line, with the pipeline's own ops (WordPiece without
TensorFlow: `tokenizers`, the same ids).

  python -m bert_jax.tokenize --vocab VOCAB [--cased] < texts > ids
  python -m bert_jax.tokenize --spm_model M.model [--cased] < texts
  python -m bert_jax.tokenize --tokenizer DIR_OR_FILE [--cased] < texts

`--tokenizer` takes a tokenizer directory or file of any kind of the family
(vocab.txt: WordPiece; vocab.json + merges.txt: RoBERTa's byte-level BPE;
*.model: SentencePiece, ALBERT's spiece.model or DeBERTa's spm.model), with
that family's casing unless --cased is given.

One output line per input line (split at '\n' only): the ids, space-separated,
no special tokens; an empty line for a line without tokens. Invalid UTF-8 is
replaced by U+FFFD (which BERT's cleaning then drops). `--tokens` prints the
pieces instead of ids.
"""
import os
import sys
from typing import BinaryIO, Optional, Sequence, TextIO

from absl import flags

from bert_jax import cli

_BATCH_LINES = 16384


def _parse(argv: Optional[Sequence[str]]) -> flags.FlagValues:
  fv = flags.FlagValues()
  flags.DEFINE_string("vocab", None, "WordPiece vocab file (one token per line)", flag_values=fv)
  flags.DEFINE_string("spm_model", None, "SentencePiece model file", flag_values=fv)
  flags.DEFINE_string("tokenizer", None, "tokenizer directory or file (kind from its file names)",
                      flag_values=fv)
  flags.mark_flags_as_mutual_exclusive(["vocab", "spm_model", "tokenizer"], required=True,
                                       flag_values=fv)
  flags.DEFINE_boolean("cased", False, "cased vocab: no lower-casing or accent stripping",
                       flag_values=fv)
  flags.DEFINE_boolean("tokens", False, "print pieces instead of ids", flag_values=fv)
  cli.parse(fv, argv, "bert_jax.tokenize", __doc__, paths=("vocab", "spm_model", "tokenizer"),
            input_hint="it reads the texts from standard input, one per line (echo 'a text' | "
                       "python -m bert_jax.tokenize ...)")
  return fv


def run(argv: Optional[Sequence[str]], stdin: BinaryIO, stdout: TextIO) -> int:
  """Tokenizes stdin to stdout.

  Args:
    argv: command-line arguments (without the program name).
    stdin: binary input.
    stdout: text output.

  Returns:
    Number of lines written.
  """
  args = _parse(argv)
  from bert_jax.data.stream import shard_tokens  # pylint: disable=g-import-not-at-top
  from bert_jax.data.tokenizers import tokenizer as tokenizer_lib  # pylint: disable=g-import-not-at-top
  if args.tokenizer:
    tok = tokenizer_lib.tokenizer_from_path(args.tokenizer, False if args.cased else None)
  else:
    tok = tokenizer_lib.cached_tokenizer("wordpiece" if args.vocab else "sentencepiece",
                                         args.vocab or args.spm_model, lowercase=not args.cased)
    if args.vocab:  # the casing pretraining and fine-tuning check, before any text is read
      shard_tokens.check_casing(tok.inv_vocab, tok.lowercase, args.vocab, "--cased")
  data = stdin.read()
  if not data:
    return 0
  lines = data.decode("utf-8", "replace").split("\n")
  if data.endswith(b"\n"):
    lines.pop()
  for i in range(0, len(lines), _BATCH_LINES):
    for ids in tok.tokenize_to_ids(lines[i:i + _BATCH_LINES]):
      out = tok.convert_ids_to_tokens(ids) if args.tokens else map(str, ids)
      stdout.write(" ".join(out) + "\n")
  stdout.flush()
  return len(lines)


def main(argv: Optional[Sequence[str]] = None) -> None:
  if sys.stdin is None:  # started with standard input closed (`<&-`)
    sys.exit("bert_jax.tokenize: error: standard input is closed: pipe or redirect the texts in, one a line")
  try:
    run(argv, sys.stdin.buffer, sys.stdout)
  except (ValueError, FileNotFoundError) as e:
    sys.exit(f"bert_jax.tokenize: error: {e}")
  except BrokenPipeError:
    # The reader stopped early (`| head`): what it wanted was written. Python's own flush
    # of stdout at exit would fail again, so stdout goes to /dev/null first.
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(141)  # 128 + SIGPIPE, as a shell reports a writer the pipe ended


if __name__ == "__main__":
  main()
