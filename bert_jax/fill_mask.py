"""Top-k predictions for each [MASK] with a checkpoint that has the MLM head.

  python -m bert_jax.fill_mask --checkpoint CKPT [--top_k 5] [--json] \
      "The capital of France is [MASK]."
  python -m bert_jax.fill_mask --checkpoint CKPT --input TEXTS.txt --json > out.json

CKPT is a checkpoint with the MLM head: a bundle (a pretraining run's export/,
or a converted BertForPreTraining / BertForMaskedLM), a pretraining workdir or
its checkpoints/ (latest step). The texts are the positional arguments and the
lines of --input (one text per line; empty lines skipped). They run in batches
of --batch_size, with progress on stderr when there is more than one batch
(--quiet: none).

The literal `[MASK]` marks masked positions (several per text are allowed), for every
tokenizer; the tokenizer's own mask token (RoBERTa's `<mask>`) does too. Predictions print
as the text each token stands for (RoBERTa's `Ġparis` as `paris`); --json gives the
vocabulary's piece (`token`) and that text (`token_str`, transformers' fill-mask field).
bert_jax.inference.mask_filling says how texts are encoded and scored.
"""
import json
import sys
from typing import Optional, Sequence

from absl import flags

from bert_jax.checkpoints import bundle as bundle_lib
from bert_jax.checkpoints import folder as checkpoint_folder
from bert_jax.checkpoints import loading
from bert_jax import cli
from bert_jax.data.tokenizers import tokenizer as tokenizer_lib
from bert_jax.inference import mask_filling
from bert_jax.runtime import console
from bert_jax.runtime import text_files


def main(argv: Optional[Sequence[str]] = None) -> int:
  """The command line: [flags] [TEXT...] (argv without the program name)."""
  args = flags.FlagValues()
  flags.DEFINE_string("checkpoint", None, "a bert_jax checkpoint with the MLM head",
                      flag_values=args, required=True)
  flags.DEFINE_string("input", None, "a text file: one text with [MASK] per line (besides "
                      "TEXT...; '-': standard input)", flag_values=args)
  flags.DEFINE_integer("top_k", 5, "predictions per [MASK]", flag_values=args)
  flags.DEFINE_integer("batch_size", 64, "texts per forward pass", flag_values=args)
  flags.DEFINE_boolean("json", False, "print one JSON list instead of text", flag_values=args)
  flags.DEFINE_boolean("quiet", False, "no header or progress lines on stderr", flag_values=args)
  texts = cli.parse(args, argv, "bert_jax.fill_mask", __doc__, positional=("[TEXT...]",),
                    paths=("checkpoint", "input"), stdin=("input",))
  texts = list(texts)
  if args.input:
    try:
      lines = text_files.read_utf8(args.input, "--input").splitlines()
    except FileNotFoundError:
      raise
    except OSError as e:
      raise ValueError(f"--input {args.input}: {checkpoint_folder.one_line_cause(e)}") from None
    texts += [line.strip() for line in lines if line.strip()]
  source = text_files.input_name(args.input)
  if not texts:
    raise ValueError("no text: give TEXT... with [MASK], or --input FILE (one text per line)"
                     + (f"; {source} has none" if args.input else ""))
  if args.batch_size < 1:
    raise ValueError(f"--batch_size must be >= 1 (got {args.batch_size})")
  for n, text in enumerate(texts, 1):
    if mask_filling.MASK not in text:
      raise ValueError(f"text {n} ({text!r}) has no {mask_filling.MASK}")
  # A line within every 9 s (none when it all takes less) while the checkpoint loads, and
  # while a run of one batch tokenizes and compiles: its progress lines need two batches.
  with console.Heartbeat("bert_jax.fill_mask", enabled=not args.quiet, at_start=False,
                         first=console.LOADING_SECONDS,
                         status=f"loading {args.checkpoint}"):
    pretrained = loading.load_pretrained(args.checkpoint)
  mask_filling.require_mlm(pretrained, args.checkpoint)
  if not 1 <= args.top_k <= pretrained.config.vocab_size:
    raise ValueError(f"--top_k {args.top_k} must be in [1, {pretrained.config.vocab_size}]")
  if not args.quiet:
    what = f"top {args.top_k} tokens for each {mask_filling.MASK}"
    console.print_header("bert_jax.fill_mask", what, [
        ("model", f"{bundle_lib.describe_arch(pretrained.config)}, "
                  f"{console.count_params(pretrained.params) / 1e6:.1f}M params, from "
                  f"{pretrained.source}"),
        ("data", f"{len(texts)} text(s)" + (f" ({source})" if args.input else "")
                 + f", batches of {args.batch_size}")], file=sys.stderr)
  one_batch = len(texts) <= args.batch_size
  with console.Heartbeat("bert_jax.fill_mask", enabled=not args.quiet and one_batch,
                         at_start=False,
                         status="tokenizing, compiling the model and filling the masks"):
    tokenizer = tokenizer_lib.for_checkpoint(pretrained)
    result = mask_filling.fill_mask(pretrained, texts, args.top_k, tokenizer=tokenizer,
                                    batch_size=args.batch_size,
                                    progress="" if args.quiet else "filling masks")
  if args.json:
    text_of = lambda token: tokenizer.token_text(tokenizer.vocab[token])
    print(json.dumps([{"text": t, "masks": [[{"token": tok, "token_str": text_of(tok), "prob": p}
                                             for tok, p in m] for m in r]}
                      for t, r in zip(texts, result)]))
    return 0
  mask_filling.print_predictions(texts, result, tokenizer)
  return 0


if __name__ == "__main__":
  cli.run_tool(main, "bert_jax.fill_mask")
