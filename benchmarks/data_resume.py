r"""Exact resume of the pretraining input at a deep position, and what the resume costs.

  python benchmarks/data_resume.py --input BOOK.txt \
      --vocab $DATA_DIR/vocab/bert-base-uncased/vocab.txt --batch_size 8 --position 10000

(the figures in benchmarks/README.md read War and Peace, Project Gutenberg's book 2600, as
plain text)

Reads the stream from batch 0 up to `--position + --check` (the reference), then
starts a fresh PretrainData at `--position` (what a restarted run does) and
compares its first `--check` batches with the reference bit for bit. Prints the
epochs crossed, the seconds to the first batch of the resumed stream (the resume
cost: counting the skipped rows) and of the reference. `--prepared_dir` reads
pre-tokenized TFRecords (bert_jax.prepare_data) instead of --input;
`--no_reference` only measures the resume cost.
"""
import argparse
import itertools
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def main():
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--input", help="glob of text files")
  p.add_argument("--prepared_dir", help="instead of --input: a prepare_data output")
  p.add_argument("--vocab", required=True)
  p.add_argument("--mode", choices=("nsp", "sop", "full_sentences"), default="nsp")
  p.add_argument("--seq_len", type=int, default=128)
  p.add_argument("--batch_size", type=int, default=8)
  p.add_argument("--position", type=int, default=10_000)
  p.add_argument("--check", type=int, default=20)
  p.add_argument("--no_reference", action="store_true")
  args = p.parse_args()
  if bool(args.input) == bool(args.prepared_dir):
    p.error("give one of --input and --prepared_dir")
  from bert_jax.data.stream import pretrain_data  # pylint: disable=g-import-not-at-top
  from configs import pretrain as pretrain_config  # pylint: disable=g-import-not-at-top
  c = pretrain_config.get_config("tiny").data
  if args.input:
    c.source, c.files = "files", args.input
  else:
    c.source, c.prepared_dir = "prepared", args.prepared_dir
  c.vocab_file, c.mode, c.eval_every_nth_document = args.vocab, args.mode, 0

  def make():
    return pretrain_data.PretrainData(c, seq_len=args.seq_len, global_batch_size=args.batch_size,
                                      seed=0)
  t0, c0 = time.perf_counter(), time.process_time()
  data = make()
  it = data.train_iterator(args.position)
  resumed = list(itertools.islice(it, args.check))
  it.close()
  resume_s, resume_cpu = time.perf_counter() - t0, time.process_time() - c0
  print(f"resume at batch {args.position:,} ({args.position * args.batch_size:,} rows): "
        f"{args.check} batches after {resume_s:.1f} s, {resume_cpu:.1f} CPU s (PretrainData "
        f"built, skipped rows counted)", flush=True)
  if args.no_reference:
    return
  rows0 = data.epoch_rows(0)
  print(f"epoch 0 has {rows0:,} rows ({rows0 / args.batch_size:,.1f} batches): the position is "
        f"in epoch {args.position * args.batch_size // rows0} or later", flush=True)
  t0, c0 = time.perf_counter(), time.process_time()
  it = make().train_iterator()
  reference = list(itertools.islice(it, args.position + args.check))[args.position:]
  it.close()
  print(f"reference stream from batch 0: {time.perf_counter() - t0:.1f} s, "
        f"{time.process_time() - c0:.1f} CPU s", flush=True)
  same = all(a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
             for a, b in zip(reference, resumed))
  print(f"bitwise identical: {same} ({args.check} batches from {args.position:,})")


if __name__ == "__main__":
  main()
