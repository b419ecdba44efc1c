r"""Pre-tokenizes a pretraining corpus into numpy parts, for corpora read for many epochs.

  python -m bert_jax.prepare_data --config configs/pretrain.py:tiny \
      --config.data.source=files --config.data.files='corpus/*.txt' --out /data/corpus_tok

reads the source of `config.data` (files, in blocks of block_mb; TFDS; builtin)
with its tokenizer settings and writes one numpy part per source shard plus
prepared.json (bert_jax/data/sources/prepared_data.py describes the layout). Preparing
needs TensorFlow and tensorflow-text; training on the result does not (a GPU
host without them trains on data prepared elsewhere). Train on it
with the same tokenizer settings and

  --config.data.source=prepared --config.data.prepared_dir=/data/corpus_tok

which gives the same stream as the text (same shards, documents and held-out
split; the segments are still cut, shuffled and masked per epoch) without
tokenizing, also when a resume skips data. `--out` may be a gs:// path.
It prints a header and progress (KiB of source read, rate, ETA) on stdout;
--quiet: only the last line.
"""
import json
import os
import sys
import time
from typing import Optional, Sequence

from absl import flags

from bert_jax import cli
from bert_jax.runtime import atomic_files
from bert_jax.runtime import workdirs
from bert_jax.runtime import write_errors


def prepare(data_config, out_dir: str, quiet: bool = True) -> dict:
  """Writes the prepared form of `data_config`'s source to `out_dir`; returns prepared.json.

  quiet: False prints a header, then progress every 10 s (KiB of the source read) and a line
  per part.
  """
  from etils import epath  # pylint: disable=g-import-not-at-top
  from bert_jax.data.sources import prepared_data  # pylint: disable=g-import-not-at-top
  from bert_jax.data.sources import registry as source_registry  # pylint: disable=g-import-not-at-top
  from bert_jax.data.stream import shard_tokens  # pylint: disable=g-import-not-at-top
  from bert_jax.data.tokenizers import tokenizer as tokenizer_lib  # pylint: disable=g-import-not-at-top
  from bert_jax.runtime import console  # pylint: disable=g-import-not-at-top
  from bert_jax.runtime import optional_tensorflow  # pylint: disable=g-import-not-at-top
  source = source_registry.get(data_config.source)
  if source.tokenized:
    raise ValueError(f"config.data.source={data_config.source!r} is already tokenized; give "
                     "the text source")
  # Importing TensorFlow takes seconds (more on a busy machine): said before, not after.
  with console.Heartbeat("bert_jax.prepare_data: loading TensorFlow and the tokenizer",
                         enabled=not quiet, file=sys.stdout):
    optional_tensorflow.require("bert_jax.prepare_data (tokenizing raw text)")
    tokenizer = tokenizer_lib.load_tokenizer(data_config)
    shards = source_registry.list_shards(source, data_config)
  if epath.Path(out_dir, prepared_data.INFO_FILE).exists():
    raise ValueError(f"--out {out_dir} already holds a prepared corpus; give an empty directory")
  epath.Path(out_dir).mkdir(parents=True, exist_ok=True)
  if not quiet:
    console.print_header("bert_jax.prepare_data", "tokenize a corpus into numpy parts", [
        ("data", f"{source.describe(data_config)}, {len(shards):,} shard(s)"),
        ("vocab", f"{tokenizer.kind} {tokenizer.vocab_file}, {tokenizer.vocab_size:,} pieces"),
        ("out", f"{out_dir} (a part per shard, then {prepared_data.INFO_FILE})")])
  kib = [max(1, (shard.size or 0) // 1024) for shard in shards]
  progress = console.Progress("preparing", sum(kib), "KiB", enabled=not quiet, file=sys.stdout)
  parts, t0, total = [], time.time(), 0
  # A shard (a block of block_mb, or the whole built-in corpus) may take longer to tokenize
  # than a reader waits for a line: one says which shard is being read in the meantime.
  beat = console.Heartbeat("preparing", enabled=not quiet, file=sys.stdout, at_start=False,
                           status=lambda: f"shard {len(parts) + 1} of {len(shards)}")
  with beat:
    for shard, shard_kib in zip(shards, kib):
      raw = source_registry.read_documents(shard, data_config)
      tokens, lengths = shard_tokens.tokenize(tokenizer, raw.sentences)
      shard_tokens.check_unknown_rate(tokens, tokenizer, source_registry.describe(shard))
      name = prepared_data.part_file(shard.index)
      # Each part whole (atomic_files); a disk that refuses it is one line naming the part.
      with write_errors.writing(os.path.join(out_dir, name)):
        prepared_data.write_part(os.path.join(out_dir, name),
                                 prepared_data.Part(tokens, raw.doc_splits, lengths=lengths))
      parts.append({"file": name, "source": source_registry.describe(shard), "size": shard.size,
                    "documents": raw.num_docs, "sentences": len(lengths), "tokens": len(tokens),
                    "invalid_utf8": raw.invalid_utf8})
      total += len(tokens)
      if not quiet:
        print(f"  {source_registry.describe(shard)}: {raw.num_docs:,} documents, "
              f"{len(tokens):,} tokens ({time.time() - t0:.0f} s)", flush=True)
      progress.update(shard_kib)
      beat.touch()
  progress.close()
  info = {"version": prepared_data.VERSION,
          "tokenizer": prepared_data.tokenizer_identity(tokenizer),
          "source": {k: data_config[k] for k in ("source", "files", "format", "tfds_name",
                                                 "tfds_split", "block_mb")},
          "parts": parts}
  with write_errors.writing(os.path.join(out_dir, prepared_data.INFO_FILE)):
    atomic_files.write_text(epath.Path(out_dir, prepared_data.INFO_FILE),
                            json.dumps(info, indent=1))
  print(f"bert_jax.prepare_data: {len(parts)} parts, {total:,} tokens in {out_dir} "
        f"({time.time() - t0:.0f} s)", flush=True)
  return info


def main(argv: Optional[Sequence[str]] = None) -> None:
  """The command line (argv without the program name; None: sys.argv[1:])."""
  argv = list(sys.argv[1:] if argv is None else argv)
  flag_values = flags.FlagValues()
  config = cli.define_config(flag_values, "configs/pretrain.py:VARIANT (its data section)", argv,
                             "bert_jax.prepare_data", has="objective")
  out = flags.DEFINE_string("out", None, "Directory for the numpy parts and prepared.json.",
                            flag_values=flag_values)
  quiet = flags.DEFINE_boolean("quiet", False, "no header or progress, only the last line",
                               flag_values=flag_values)
  cli.parse(flag_values, argv, "bert_jax.prepare_data", __doc__, paths=("out",))
  if config.value is None or not out.value:
    cli.usage_error("bert_jax.prepare_data: --config and --out are required (--help lists the "
                    "flags)")
  cli.check_config_reads(config.value, argv, "bert_jax.prepare_data")
  cli.absolute_config_paths(config.value)
  try:  # two runs into one directory would write the same parts at once
    with workdirs.hold(out.value, "--out"):
      prepare(config.value.data, out.value, quiet=quiet.value)
  except (ValueError, FileNotFoundError) as e:  # bad input, as the training programs say it
    raise SystemExit(f"bert_jax.prepare_data: error: {e}") from None
  except (workdirs.WorkdirInUseError, write_errors.OutputWriteError) as e:
    raise SystemExit(f"bert_jax.prepare_data: {e}") from None


if __name__ == "__main__":
  main()
