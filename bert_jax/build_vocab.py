r"""Builds a WordPiece vocab or a SentencePiece model from a corpus.

  python -m bert_jax.build_vocab --input 'corpus/*.txt' --output vocab.txt \
      --vocab_size 30522 [--cased] [--format document_per_line]
  python -m bert_jax.build_vocab --input builtin --output spm.model \
      --type sentencepiece --vocab_size 8000

--input is a glob (comma-separated globs allowed) of .txt / .gz files read as
the pretraining pipeline reads them (config.data.format), or `builtin` for the
built-in corpus. The text is cleaned (and lower-cased, accents stripped unless
--cased) exactly as the tokenizer does before learning.

WordPiece (`tokenizers`' WordPiece trainer: merges of the most frequent
adjacent pieces, BPE-style, written with BERT's `##` continuation prefix; words
split on whitespace and punctuation, CJK characters alone, as the tokenizer
splits them): the special tokens come first in Google's order, [PAD],
[unused0] .. [unusedN-1], [UNK], [CLS], [SEP], [MASK] (with the default 99
unused tokens these get Google's ids 0, 1-99, 100, 101, 102, 103), then the
learned tokens: the single characters (the 1000 most common) sorted, then the
other pieces by how often the tokenizer uses them on the input (of 1.4 times as
many as fit, the most used are kept). --vocab_size is a maximum: learning stops
early when no pair of adjacent pieces is seen --min_count times or more.
SentencePiece (unigram): [PAD]=0, [UNK]=1, then [CLS], [SEP], [MASK] as
control pieces; `--output X.model` writes X.model and X.vocab.
Use the result with config.data.vocab_file / config.data.spm_model. An existing --output
is refused before any text is read, unless --overwrite is given.
"""
import logging
import os
import sys
from typing import Optional, Sequence

from absl import flags

from bert_jax import cli
from bert_jax.data.tokenizers import vocab_builder
from bert_jax.runtime import atomic_files


def _parse(argv: Optional[Sequence[str]]) -> flags.FlagValues:
  fv = flags.FlagValues()
  flags.DEFINE_string("input", None, "glob(s) of text files, or 'builtin'", flag_values=fv,
                      required=True)
  flags.DEFINE_string("output", None, "vocab.txt (wordpiece) or X.model", flag_values=fv,
                      required=True)
  flags.DEFINE_enum("type", "wordpiece", ("wordpiece", "sentencepiece"), "what to build",
                    flag_values=fv)
  flags.DEFINE_integer("vocab_size", 30522, "tokens (pieces) in the vocab, specials included",
                       flag_values=fv)
  flags.DEFINE_boolean("cased", False, "keep case and accents", flag_values=fv)
  flags.DEFINE_enum("format", "sentence_per_line", ("sentence_per_line", "document_per_line"),
                    "layout of the input files (as config.data.format)", flag_values=fv)
  flags.DEFINE_integer("num_unused", 99, "[unusedN] tokens (wordpiece)", flag_values=fv)
  flags.DEFINE_integer("max_sentences", 5_000_000, "learn from at most this many sentences",
                       lower_bound=1, flag_values=fv)
  flags.DEFINE_integer("min_count", 10,
                       "wordpiece: a new piece (two adjacent pieces merged) must be seen at "
                       "least this many times (--vocab_size is a maximum)", flag_values=fv)
  flags.DEFINE_boolean("quiet", False, "no header or progress lines on stderr", flag_values=fv)
  flags.DEFINE_boolean("overwrite", False, "replace an existing --output (by default it is "
                       "refused: a prepared corpus or a run may have been built with it)",
                       flag_values=fv)
  cli.parse(fv, argv, "bert_jax.build_vocab", __doc__, paths=("output",))
  return fv


def main(argv: Optional[Sequence[str]] = None) -> None:
  args = _parse(argv)
  try:
    written = ([args.output] if args.type == "wordpiece" else
               [vocab_builder.sentencepiece_prefix(args.output) + x for x in (".model", ".vocab")])
    existing = [p for p in written if os.path.exists(p)]
    if existing and not args.overwrite:
      raise FileExistsError(f"{existing[0]} exists (a prepared corpus or a run may have been "
                            "built with it): give another --output, or --overwrite to replace it")
    if args.input != "builtin":  # a glob that matches nothing: one line before TensorFlow loads
      from bert_jax.data.sources import source_files  # pylint: disable=g-import-not-at-top
      source_files.check_local_globs(args.input)
    from bert_jax.runtime import console  # pylint: disable=g-import-not-at-top
    from bert_jax.runtime import optional_tensorflow  # pylint: disable=g-import-not-at-top
    optional_tensorflow.require("bert_jax.build_vocab (reading and normalising raw text)")
    if not args.quiet:
      console.print_header("bert_jax.build_vocab", f"build a {args.type} vocab", [
          ("data", f"{args.input} ({args.format}, {'cased' if args.cased else 'uncased'}), at "
                   f"most {args.max_sentences:,} sentences"),
          ("steps", f"read and clean the text, then learn {args.vocab_size:,} tokens"),
          ("output", args.output)], file=sys.stderr)
    sentences = vocab_builder.read_sentences(args.input, args.format, not args.cased,
                                             args.max_sentences, quiet=args.quiet)
    learning = console.Heartbeat(f"learning the vocab from {int(sentences.shape[0]):,} "
                                 "sentences", enabled=not args.quiet)
    if args.type == "wordpiece":
      with learning:
        vocab = vocab_builder.build_wordpiece(sentences, args.vocab_size, args.num_unused,
                                              args.min_count)
      atomic_files.write_text(args.output, "".join(t + "\n" for t in vocab))
      print(f"wrote {len(vocab):,} tokens to {args.output}" + (
          "" if len(vocab) == args.vocab_size else
          f" (--vocab_size {args.vocab_size:,} is a maximum: the WordPiece learner stops "
          "when no pair of adjacent pieces is seen --min_count "
          f"{args.min_count} times or more)"))
    else:
      with learning:
        path = vocab_builder.build_sentencepiece(sentences, args.output, args.vocab_size)
      print(f"wrote {path}")
  except (ValueError, FileNotFoundError, OSError) as e:
    logging.debug("build_vocab failed", exc_info=True)
    sys.exit(f"bert_jax.build_vocab: error: {e}")


if __name__ == "__main__":
  main()
