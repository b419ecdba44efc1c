r"""Input pipeline throughput vs the input path of Hugging Face's run_mlm_flax.py.

  python benchmarks/input_pipeline.py --input BOOK.txt \
      --vocab $DATA_DIR/vocab/bert-base-uncased/vocab.txt --seq_len 128 --batch_size 256 \
      --mode full_sentences

(the figures in benchmarks/README.md read War and Peace, Project Gutenberg's book 2600, as
plain text)

Both pipelines read the same text from scratch in the same run (a single
process on this machine, all its cores available to both):

  bert_jax   PretrainData.dataset (config.data.source='files'), the tf.data
             pipeline: read, tf-text tokenization, segments (`--mode`),
             shuffle, rows, dynamic masking, batches, prefetch. "epoch 1" is
             one pass over the text starting from nothing (tokenization
             included), counted in the batches that end inside it (the batch
             straddling two passes waits for the next pass's first pool);
             "epoch 2" is the next pass (read and tokenized again,
             new segments for nsp, new shuffle and masks; prepared while
             epoch 1 is consumed).
  run_mlm    transformers' examples/flax/language-modeling/run_mlm_flax.py input
             path without the `datasets` library: the fast Rust BertTokenizer on
             batches of 1000 lines (return_special_tokens_mask, [CLS]/[SEP] per
             line, as its tokenize_function), group_texts into blocks of seq_len
             (per batch of 1000 lines, remainder dropped), a random permutation,
             then per batch: tokenizer.pad(pad_to_multiple_of=16) and
             FlaxDataCollatorForLanguageModeling's numpy 80/10/10 masking.

The table gives sequences, seconds and sequences/s per pass, the fraction of
real (non-pad) tokens per row, real tokens/s, and masked tokens per row; then the ratio of
bert_jax's first pass to run_mlm's pass, and last `sequences/s: N` (bert_jax,
first pass). --repeats runs everything several times and reports the median
(the machine may be shared).
"""
import argparse
import glob
import itertools
import os
import statistics
import sys
import time

import numpy as np

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _ROOT)


def _parse():
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--input", required=True, help="glob of text files")
  p.add_argument("--vocab", help="WordPiece vocab file")
  p.add_argument("--tokenizer", help="instead of --vocab: a tokenizer directory of the family "
                 "(config.data.tokenizer; bert_jax only, so with --skip_hf)")
  p.add_argument("--seq_len", type=int, default=128)
  p.add_argument("--batch_size", type=int, default=256)
  p.add_argument("--mode", choices=("nsp", "full_sentences"), default="full_sentences")
  p.add_argument("--format", choices=("sentence_per_line", "document_per_line"),
                 default="sentence_per_line")
  p.add_argument("--cased", action="store_true")
  p.add_argument("--packing", action="store_true")
  p.add_argument("--masking", choices=("token", "whole_word", "ngram"), default="token")
  p.add_argument("--max_predictions", type=int, default=0,
                 help="masked positions per row (default: round(seq_len * 0.15) + 1)")
  p.add_argument("--repeats", type=int, default=1)
  p.add_argument("--skip_hf", action="store_true", help="only run bert_jax")
  p.add_argument("--stats", action="store_true",
                 help="also check the batches of one pass: masking rates, specials, cap, "
                      "whole words, NSP labels and layout, IsNext continuity in the source")
  args = p.parse_args()
  if bool(args.vocab) == bool(args.tokenizer):
    p.error("give one of --vocab and --tokenizer")
  if args.tokenizer and not args.skip_hf:
    p.error("--tokenizer runs bert_jax only: add --skip_hf")
  return args


def _pipeline_config(args):
  from configs import pretrain as pretrain_config  # pylint: disable=g-import-not-at-top
  c = pretrain_config.get_config("tiny").data
  c.source, c.files, c.format = "files", args.input, args.format
  if args.tokenizer:
    c.tokenizer = args.tokenizer
  else:
    c.vocab_file = args.vocab
  c.lowercase, c.mode, c.packing = not args.cased, args.mode, args.packing
  c.masking = args.masking
  c.max_predictions_per_seq = args.max_predictions or round(args.seq_len * 0.15) + 1
  c.eval_every_nth_document = 0
  return c


def pass_stats(args):
  """Properties of one full pass of batches (and of the NSP examples behind them)."""
  from bert_jax.data.stream import pretrain_data  # pylint: disable=g-import-not-at-top
  data = pretrain_data.PretrainData(_pipeline_config(args), seq_len=args.seq_len,
                                    global_batch_size=args.batch_size, seed=0)
  rows = data.epoch_rows(0)
  batches = list(itertools.islice(data.train_iterator(), rows // args.batch_size))
  tok = data.tokenizer
  cat = lambda k: np.concatenate([b[k] for b in batches])  # noqa: E731
  masked_ids, mask, w, pos, labels = (cat("input_ids"), cat("input_mask"),
                                      cat("masked_lm_weights"), cat("masked_lm_positions"),
                                      cat("masked_lm_ids"))
  n, length = masked_ids.shape
  original = masked_ids.copy()
  r, k = np.nonzero(w > 0)
  original[r, pos[r, k]] = labels[r, k]
  selected = np.zeros_like(mask, bool)
  selected[r, pos[r, k]] = True
  special = np.isin(original, [tok.cls_id, tok.sep_id, tok.pad_id])
  maskable = (mask > 0) & ~special
  new, old = masked_ids[selected], original[selected]
  print(f"stats over {n} rows, {int(maskable.sum())} maskable tokens:")
  print(f"  selected {selected.sum() / maskable.sum():.4f} of maskable tokens "
        f"(target {data._config.mask_prob}); "  # pylint: disable=protected-access
        f"[MASK] {np.mean(new == tok.mask_id):.4f}, random "
        f"{np.mean((new != tok.mask_id) & (new != old)):.4f}, unchanged {np.mean(new == old):.4f}")
  print(f"  specials or padding selected: {int((selected & ~maskable).sum())}; most predictions "
        f"in a row: {int((w > 0).sum(1).max())} (cap {w.shape[1]})")
  if args.masking != "token":
    cont = maskable & tok.is_continuation[original] & np.concatenate(
        [np.zeros((n, 1), bool), maskable[:, :-1]], axis=1)
    prev_sel = np.concatenate([np.zeros((n, 1), bool), selected[:, :-1]], axis=1)
    print(f"  words split by whole-word masking: {int((cont & (selected != prev_sel)).sum())}")
  if data.has_pairs:
    nsl = cat("next_sentence_labels")
    seps = (original == tok.sep_id).sum(1)
    seg = cat("segment_ids")
    first_sep = np.argmax(original == tok.sep_id, axis=1)
    layout_ok = (np.all(original[:, 0] == tok.cls_id) and np.all(seps == 2)
                 and np.all(seg == ((np.arange(length) > first_sep[:, None]) & (mask > 0))))
    print(f"  IsNext {np.mean(nsl == 0):.4f} of rows; [CLS] A [SEP] B [SEP] layout and segment "
          f"ids {'ok' if layout_ok else 'WRONG'}")
    # IsNext continuity in the source, on the examples of the first pass.
    shard = data._shards[0]  # pylint: disable=protected-access
    ts = data._tokenized(shard, "train")  # pylint: disable=protected-access
    _, ex = data._examples(shard, "train", 0)  # pylint: disable=protected-access
    doc_start = ts.sent_splits[ts.doc_splits[:-1]]
    a_doc = np.searchsorted(doc_start, ex.a_start, side="right")
    b_doc = np.searchsorted(doc_start, ex.b_start, side="right")
    nxt = ex.label == 0
    ok = np.all((a_doc == b_doc)[nxt]) and np.all((ex.b_start >= ex.a_start + ex.a_len)[nxt])
    print(f"  {shard.name}: {len(ex)} examples, IsNext {nxt.mean():.4f}; every IsNext B starts "
          f"after its A in the same document: {ok}; random B from another document: "
          f"{np.mean((a_doc != b_doc)[~nxt]):.4f}")


def run_bert_jax(args):
  """Two passes of PretrainData from a fresh instance; returns stats per pass."""
  from bert_jax.data.stream import pretrain_data  # pylint: disable=g-import-not-at-top
  c = _pipeline_config(args)

  def make():
    return pretrain_data.PretrainData(c, seq_len=args.seq_len, global_batch_size=args.batch_size,
                                      seed=0)
  # Rows per pass, counted on a separate instance (not timed).
  counter = make()
  rows = [counter.epoch_rows(e) for e in (0, 1)]
  del counter
  t0 = time.perf_counter()
  data = make()
  it = data.train_iterator()
  out = []
  # Pass e is the batches that end inside it: the batch straddling passes 1 and 2 waits for
  # pass 2's first pool (its whole tokenization) and is counted in pass 2.
  ends = np.cumsum(rows) // args.batch_size
  for e in range(len(rows)):
    start = time.perf_counter() if e else t0
    batches = list(itertools.islice(it, int(ends[e] - (ends[e - 1] if e else 0))))
    seconds = time.perf_counter() - start
    ids = np.concatenate([b["input_ids"] for b in batches])
    real = (np.concatenate([b["input_mask"] for b in batches]) > 0).mean()
    masked = np.concatenate([b["masked_lm_weights"] for b in batches]).sum(axis=1).mean()
    out.append(dict(name=f"bert_jax epoch {e + 1}", seqs=len(ids), seconds=seconds,
                    real=real, masked=masked))
  it.close()
  return out


def run_hf(args):
  """run_mlm_flax.py's input path over the same text; returns its stats."""
  import transformers  # pylint: disable=g-import-not-at-top
  t0 = time.perf_counter()
  tokenizer = transformers.BertTokenizerFast(args.vocab, do_lower_case=not args.cased)
  lines = []
  for path in sorted(glob.glob(args.input)):
    with open(path, encoding="utf-8", errors="replace") as f:
      lines += f.read().split("\n")  # datasets' "text" builder: one example per line
  max_len = args.seq_len
  blocks = {"input_ids": [], "token_type_ids": [], "attention_mask": [],
            "special_tokens_mask": []}
  for i in range(0, len(lines), 1000):  # datasets.map(batched=True) default batch size
    enc = tokenizer(lines[i:i + 1000], return_special_tokens_mask=True)
    concatenated = {k: list(itertools.chain(*enc[k])) for k in blocks}  # group_texts
    total = len(concatenated["input_ids"])
    if total >= max_len:
      total = (total // max_len) * max_len
    for k, t in concatenated.items():
      blocks[k] += [t[j:j + max_len] for j in range(0, total, max_len)]
  n = len(blocks["input_ids"])
  t_tokenized = time.perf_counter()
  rng = np.random.default_rng(0)
  perm = rng.permutation(n)
  mask_id = tokenizer.convert_tokens_to_ids(tokenizer.mask_token)
  seqs, real, masked = 0, [], []
  for s in range(0, n - args.batch_size + 1, args.batch_size):  # generate_batch_splits
    idx = perm[s:s + args.batch_size]
    samples = [{k: blocks[k][int(i)] for k in blocks} for i in idx]
    batch = tokenizer.pad(samples, pad_to_multiple_of=16, return_tensors="np")
    special = batch.pop("special_tokens_mask").astype(bool)
    inputs = batch["input_ids"]
    labels = inputs.copy()  # FlaxDataCollatorForLanguageModeling.mask_tokens
    prob = np.full(labels.shape, 0.15)
    prob[special] = 0.0
    masked_indices = rng.binomial(1, prob).astype(bool)
    labels[~masked_indices] = -100
    replaced = rng.binomial(1, np.full(labels.shape, 0.8)).astype(bool) & masked_indices
    inputs[replaced] = mask_id
    random_idx = rng.binomial(1, np.full(labels.shape, 0.5)).astype(bool)
    random_idx &= masked_indices & ~replaced
    random_words = rng.integers(tokenizer.vocab_size, size=labels.shape, dtype="i4")
    inputs[random_idx] = random_words[random_idx]
    batch["input_ids"], batch["labels"] = inputs, labels
    seqs += len(inputs)
    real.append(batch["attention_mask"].mean())
    masked.append(masked_indices.sum(axis=1).mean())
  seconds = time.perf_counter() - t0
  print(f"run_mlm_flax path: {t_tokenized - t0:.2f} s tokenize + group_texts, "
        f"{seconds - (t_tokenized - t0):.2f} s pad + mask", flush=True)
  return [dict(name="run_mlm_flax path", seqs=seqs, seconds=seconds, real=float(np.mean(real)),
               masked=float(np.mean(masked)))]


def main():
  args = _parse()
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  if args.stats:
    pass_stats(args)
  runs = []
  for _ in range(args.repeats):
    r = run_bert_jax(args)
    if not args.skip_hf:
      r += run_hf(args)
    runs.append(r)
  print(f"input {args.input}, mode {args.mode}{' packed' if args.packing else ''}, seq_len "
        f"{args.seq_len}, batch {args.batch_size}, {os.cpu_count()} cores, "
        f"median of {args.repeats}")
  print(f"{'pipeline':<20} {'sequences':>9} {'seconds':>8} {'seq/s':>9} {'real tok':>8} "
        f"{'tokens/s':>9} {'masked/row':>10}")
  med = {}
  for k, first in enumerate(runs[0]):
    seconds = statistics.median(r[k]["seconds"] for r in runs)
    med[first["name"]] = first["seqs"] / seconds
    tokens = first["seqs"] * first["real"] * args.seq_len / seconds
    print(f"{first['name']:<20} {first['seqs']:>9} {seconds:>8.2f} {first['seqs'] / seconds:>9.0f}"
          f" {first['real']:>8.3f} {tokens:>9.0f} {first['masked']:>10.2f}")
  ours = med["bert_jax epoch 1"]
  if not args.skip_hf:
    hf = med["run_mlm_flax path"]
    print(f"run_mlm_flax sequences/s: {hf:.0f}")
    print(f"ratio bert_jax / run_mlm_flax (first pass): {ours / hf:.2f}")
  print(f"sequences/s: {ours:.0f}")


if __name__ == "__main__":
  main()
