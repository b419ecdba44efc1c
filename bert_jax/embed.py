"""Sentence embeddings from a bert_jax checkpoint, one input line per text.

  python -m bert_jax.embed --checkpoint CKPT --input texts.txt --output emb.npy \
      [--pooling mean] [--normalize] [--layers -1,-2,-3,-4 --combine concat] \
      [--pairs] [--max_length 128] [--batch_size 32] \
      [--checkpoint CKPT2 ... --combine mean|max|concat|weighted_mean --weights 0.7,0.3] \
      [--chunk_stride 64]

CKPT is any checkpoint fine-tuning starts from: a bundle (`python -m
bert_jax.convert` output, a workdir's export/), a pretraining workdir or its
checkpoints/ (latest step).

Pooling: `cls` (the [CLS] vector), `pooler` (dense + tanh on [CLS], needs the
pooler), `mean` (average over real tokens only, [CLS] and [SEP] included as in
sentence-transformers), `max` (over real tokens), and sentence-transformers'
`mean_sqrt_len`, `weightedmean` (weighted by position) and `lasttoken`. By
default the checkpoint's own: a sentence-embedding fine-tuning export
(configs/sentence_embeddings.py) and a converted sentence-transformers model
record their pooling, normalisation and max_seq_length in bundle.json (a
converted one also its Dense layers after pooling, always applied, and its
prompts, the default one prepended unless --prompt_name or --prompt says
otherwise); other checkpoints get mean, not
normalised, 128 tokens. The header says which each option is and where it came
from ("from the checkpoint", "from --pooling", "the default"). `--layers` pools
several hidden layers (0 = embedding output, -1 = last layer; the
feature-based approach of the BERT paper).
`--pairs` reads `text_a<TAB>text_b` lines with segment ids 0 / 1. `--input -` reads the
lines from standard input.

Aggregation (bert_jax.inference.aggregate): `--combine` (mean, max, concat, or
weighted_mean with `--weights`) merges the several vectors of one text: its
--layers; its chunks with `--chunk_stride S` (a text longer than --max_length
is cut into windows of max_length tokens, [CLS] and [SEP] included, starting
every S tokens; concat is refused there and weighted_mean weights each chunk by
its tokens; a text that fits is one chunk, its vector unchanged); and with
several `--checkpoint`s (an ensemble: the texts through each, each with its own
tokenizer and defaults), the checkpoints' vectors, `--weights` one per
checkpoint. `--normalize` normalises each vector and the combined one.

Every text is [CLS] a [SEP] (b [SEP]) truncated to --max_length (longest
first for pairs, as BERT); truncation is counted and reported, and invalid
UTF-8 is replaced with U+FFFD, counted and reported. The forward pass is jitted
once per shape: texts are sorted by length and each batch of --batch_size is
cut to the shortest of a few fixed lengths (multiples of 8, each at most 1.5x
the last, up to --max_length) that holds its longest text, so short texts do
not pay for long ones (--nolength_bucketing: every batch at the longest text's
length, rounded up to a multiple of 8); the last batch is padded. Embeddings
come back in input order.
"""
import sys
from typing import Optional, Sequence

from absl import flags
import numpy as np

from bert_jax.checkpoints import bundle as bundle_lib
from bert_jax.checkpoints import loading
from bert_jax import cli
from bert_jax.inference import aggregate
from bert_jax.inference import embedding
from bert_jax.runtime import atomic_files
from bert_jax.runtime import compile_cache
from bert_jax.runtime import console
from bert_jax.runtime import text_files
from bert_jax.runtime import write_errors


def parse_args(argv: Optional[Sequence[str]] = None) -> flags.FlagValues:
  """The command line's flags (defined on use, on a FlagValues of their own), parsed."""
  fv = flags.FlagValues()
  flags.DEFINE_multi_string("checkpoint", None, "a bert_jax checkpoint (a bundle, a pretraining "
                            "workdir or its checkpoints/); several: an ensemble merged by "
                            "--combine", flag_values=fv, required=True)
  flags.DEFINE_string("input", None, "UTF-8 text file, one text (or pair) per line ('-': "
                      "standard input)", flag_values=fv, required=True)
  flags.DEFINE_string("output", None, "output .npy file, float32 [lines, dim]", flag_values=fv,
                      required=True)
  flags.DEFINE_enum("pooling", None, embedding.POOLINGS, "how token vectors become one "
                    "(default: the checkpoint's, else mean; see above)", flag_values=fv)
  flags.DEFINE_boolean("normalize", None, "L2-normalise the embeddings (default: the "
                       "checkpoint's, else not)", flag_values=fv)
  flags.DEFINE_string("layers", "-1",
                      "hidden states to pool, comma-separated (0 = embeddings, -1 = last)",
                      flag_values=fv)
  flags.DEFINE_enum("combine", "mean", embedding.COMBINES, "how to merge several --layers, the "
                    "chunks of a text and several --checkpoints", flag_values=fv)
  flags.DEFINE_list("weights", None, "weighted_mean's weights: one per --checkpoint (one "
                    "checkpoint: per layer)", flag_values=fv)
  flags.DEFINE_integer("chunk_stride", 0, "embed texts longer than --max_length in windows of "
                       "max_length tokens starting every this many tokens (0: truncate)",
                       flag_values=fv)
  flags.DEFINE_boolean("pairs", False, "lines are text_a<TAB>text_b", flag_values=fv)
  flags.DEFINE_string("prompt_name", None, "the checkpoint's prompt to prepend to every text, "
                      "by name ('' none; default: the prompt the checkpoint names its default, "
                      "as sentence-transformers' encode)", flag_values=fv)
  flags.DEFINE_string("prompt", None, "a text to prepend to every text, instead of "
                      "--prompt_name", flag_values=fv)
  flags.DEFINE_integer("max_length", None,
                       "tokens per text incl. [CLS]/[SEP] (default: the checkpoint's "
                       f"max_seq_length, else {embedding.DEFAULT_MAX_LENGTH}; at most the "
                       "model's max positions)", flag_values=fv)
  flags.DEFINE_integer("batch_size", 32, "texts per forward pass", flag_values=fv)
  flags.DEFINE_enum("dtype", "float32", ("float32", "bfloat16"), "compute dtype", flag_values=fv)
  flags.DEFINE_boolean("length_bucketing", True, "sort texts by length and cut each batch to "
                       "a fixed bucket length (one compilation per length)", flag_values=fv)
  flags.DEFINE_boolean("quiet", False, "no progress lines on stderr", flag_values=fv)
  flags.DEFINE_string("compile_cache", "auto", "JAX's persistent compilation cache, as the "
                      "training programs' compile_cache: 'auto' (JAX_COMPILATION_CACHE_DIR, else "
                      "the user's cache folder), a directory, or 'off'; a second run of the same "
                      "lengths loads its programs instead of compiling them", flag_values=fv)
  cli.parse(fv, argv, "bert_jax.embed", __doc__, paths=("checkpoint", "input", "output"),
            stdin=("input",))
  return fv


def _weights(values: Optional[Sequence[str]]) -> Optional[list[float]]:
  if not values:
    return None
  try:
    return [float(x) for x in values]
  except ValueError:
    raise ValueError(f"--weights {','.join(values)!r}: expected comma-separated numbers") from None


class _Stream:
  """A file seen by numpy as a stream: np.save writes a real file with C's fwrite, whose failure
  loses the cause ('N requested and M written'); through write() a full disk or a size
  limit is raised as itself."""

  def __init__(self, f):
    self.write = f.write


def main(argv: Optional[Sequence[str]] = None) -> int:
  args = parse_args(argv)
  compile_cache.enable(args.compile_cache)
  # Everything that can be wrong is checked before the input is read. A line within seconds
  # while a large checkpoint loads; a bad path fails in one line before it.
  with console.Heartbeat("bert_jax.embed", at_start=False, first=console.LOADING_SECONDS,
                         status=f"loading {', '.join(args.checkpoint)}"):
    checkpoints = [loading.load_pretrained(path) for path in args.checkpoint]
  weights = _weights(args.weights)
  members = (len(checkpoints), "--checkpoint") if len(checkpoints) > 1 else (
      len(args.layers.split(",")), "--layers")
  if args.combine == "weighted_mean" and members[0] > 1:
    aggregate.check_weights(weights, *members)
  elif weights:
    raise ValueError("--weights applies to --combine weighted_mean over several --checkpoint or "
                     "--layers (chunks are weighted by their tokens)")
  chosen = []
  for pretrained in checkpoints:
    layers = embedding.parse_layers(args.layers, pretrained.config.num_layers)
    chosen.append(embedding.settings(pretrained, pooling=args.pooling, normalize=args.normalize,
                                     max_length=args.max_length, prompt_name=args.prompt_name,
                                     prompt=args.prompt))
    embedding.check_options(pretrained, chosen[-1].pooling, layers, args.combine,
                            chosen[-1].max_length, args.batch_size, args.pairs, args.chunk_stride)
  max_length = chosen[0].max_length
  cli.check_output_file(args.output)
  inp = embedding.read_input(args.input, args.pairs)
  kind = "pairs" if args.pairs else "texts"
  how = [c.describe() if len(checkpoints) == 1 else f"{p.source}: {c.describe()}"
         for p, c in zip(checkpoints, chosen)]
  console.print_header("bert_jax.embed", f"embed {len(inp.texts):,} {kind}", [
      ("model", "; ".join(f"{bundle_lib.describe_arch(p.config)}, "
                          f"{console.count_params(p.params) / 1e6:.1f}M params, from "
                          f"{p.source}" for p in checkpoints)),
      ("data", f"{text_files.input_name(args.input)}: "
               f"{len(inp.texts):,} {kind}"
               + (f", windows every {args.chunk_stride} tokens" if args.chunk_stride else "")),
      ("steps", f"{-(-len(inp.texts) // args.batch_size):,} batch(es) of {args.batch_size} per "
                f"checkpoint, {args.dtype}"
                + (f", merged by {args.combine}" if len(checkpoints) > 1 else "")
                + f"; {'; '.join(how)}"),
      ("output", args.output)], file=sys.stderr)
  emb, all_stats = embedding.embed_ensemble(
      checkpoints, inp.texts, combine=args.combine, weights=weights, normalize=args.normalize,
      pooling=args.pooling, layers=layers, max_length=args.max_length, batch_size=args.batch_size,
      prompt_name=args.prompt_name, prompt=args.prompt,
      dtype=args.dtype, length_bucketing=args.length_bucketing, chunk_stride=args.chunk_stride,
      progress="" if args.quiet else "embedding")
  # Exactly this path (np.save would add .npy), written whole or not at all; a disk that
  # refuses it (full, a file-size limit) is one line naming the file, the earlier file kept.
  try:
    with atomic_files.replacing(args.output) as tmp, tmp.open("wb") as f:
      np.save(_Stream(f), emb)
  except write_errors.OutputWriteError as e:
    raise SystemExit(f"bert_jax.embed: {e}") from None
  stats = all_stats[0]
  print(f"embedded {stats.num_texts} {kind} -> {args.output} {list(emb.shape)} float32 "
        f"({'; '.join(how)}; layers {list(layers)}"
        + (f" combined by {args.combine}" if len(layers) > 1 else "")
        + (f"; {len(checkpoints)} checkpoints combined by {args.combine}"
           if len(checkpoints) > 1 else "")
        + (f"; {stats.chunks} windows of at most {max_length} tokens every {args.chunk_stride}, "
           f"combined by {args.combine}" if args.chunk_stride else "")
        + f"; padded lengths {stats.lengths}, one compilation each; "
        f"{sum(s.seconds for s in all_stats):.1f}s)", file=sys.stderr)
  if not args.chunk_stride:
    print(f"truncated {stats.truncated} of {stats.num_texts} {kind} to --max_length "
          f"{max_length}", file=sys.stderr)
  if inp.bad_utf8_lines:
    lines = inp.bad_utf8_lines
    shown = ", ".join(str(x) for x in lines[:10]) + (" ..." if len(lines) > 10 else "")
    print(f"warning: {len(lines)} lines had invalid UTF-8, replaced with U+FFFD "
          f"(lines {shown})", file=sys.stderr)
  return 0


if __name__ == "__main__":
  cli.run_tool(main, "bert_jax.embed")
