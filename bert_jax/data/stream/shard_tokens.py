"""A shard's documents as tokens: read, held-out documents split off, tokenized on a thread
pool, empty ones dropped, long sentences cut; and the vocab checks (casing, [UNK] share)."""
from __future__ import annotations  # annotations naming tf are not evaluated (no TensorFlow)

import functools
import logging
import multiprocessing.pool
import os
from typing import Callable, Sequence

import numpy as np

from bert_jax.data.sources import registry as source_registry
from bert_jax.data.sources import shard_spec
from bert_jax.data.stream import segments
from bert_jax.runtime.optional_tensorflow import tf

# Sentences per tf-text call while tokenizing a shard, and the threads making the calls (and
# masking's: pretrain_data).
_TOKENIZE_BATCH = 4096
_THREADS = min(8, os.cpu_count() or 1)


# A corpus with more [UNK] than this is not one the vocab was made for (English text
# with bert-base-uncased: ~0.1%; a 10-token vocab: 92%).
MAX_UNKNOWN_RATE = 0.2


def check_casing(vocab: Sequence[str], lowercase: bool, name: str,
                 setting: str = "config.data.lowercase") -> None:
  """Refuses a cased vocab read lower-cased and an uncased one read with capitals (a ValueError
  naming the vocab and `setting`, the config key or flag to change)."""
  regular = [t for t in vocab if not (t.startswith("[") and t.endswith("]"))]
  capitalized = [t for t in regular if any(ch.isupper() for ch in t)]
  lower_words = sum(1 for t in regular if t.isalpha() and t.islower())
  flag = setting.startswith("--")
  if lowercase and len(capitalized) >= max(10, 0.01 * len(regular)):
    raise ValueError(
        f"{name} is a cased vocab ({len(capitalized)} of its {len(regular)} tokens have "
        f"capitals, e.g. {capitalized[:3]}) but " +
        (f"without {setting} the text is lower-cased and would never produce them; pass "
         f"{setting}" if flag else
         f"{setting}=True would never produce them; set {setting}=False"))
  if not lowercase and len(capitalized) <= 0.001 * len(regular) and lower_words >= 1000:
    raise ValueError(
        f"{name} is an uncased vocab ({len(capitalized)} of its {len(regular)} tokens have "
        f"capitals) but " + (f"{setting} keeps capitals" if flag else f"{setting}=False") +
        ": every capitalized word would become [UNK]; " +
        (f"leave out {setting}" if flag else f"set {setting}=True"))


def check_unknown_rate(tokens: np.ndarray, tokenizer, name: str) -> None:
  """Refuses (ValueError) a vocab that does not fit the corpus (most tokens [UNK])."""
  unk = getattr(tokenizer, "unk_id", None)
  if unk is None or len(tokens) < 100:
    return
  rate = float(np.mean(tokens == unk))
  if rate > MAX_UNKNOWN_RATE:
    raise ValueError(
        f"{name}: {rate:.0%} of its {len(tokens)} tokens are [UNK] with the "
        f"{tokenizer.vocab_size}-token vocab {tokenizer.vocab_file or ''}: the vocab does not "
        f"fit this corpus (build one with python -m bert_jax.build_vocab, or check "
        f"config.data.lowercase)")


# Sentences of a shard's start that check_vocab_fits tokenizes: enough for a stable share of
# [UNK], few enough to cost a fraction of a second before the pipeline starts.
_SAMPLE_SENTENCES = 2000


def check_vocab_fits(shard: shard_spec.ShardSpec, data_config, tokenizer) -> None:
  """check_unknown_rate on the first sentences of `shard`, before any pipeline starts.

  Inside tf.data the same error comes after a traceback per failed call; here it is one line.
  """
  source = source_registry.of_shard(shard)
  if source.tokenized:
    return
  sentences = source.read(shard, data_config).sentences
  name = source_registry.describe(shard)
  if int(tf.size(sentences)) > _SAMPLE_SENTENCES:
    sentences = sentences[:_SAMPLE_SENTENCES]
    name += f" (first {_SAMPLE_SENTENCES:,} sentences)"
  tokens, _ = tokenize(tokenizer, sentences)
  check_unknown_rate(tokens, tokenizer, name)


@functools.cache
def threads() -> multiprocessing.pool.ThreadPool:
  """The tokenizing and masking threads; daemon threads, so a dataset running at exit does not
  fail in concurrent.futures and hang the exit."""
  return multiprocessing.pool.ThreadPool(_THREADS)


def tokenize(tokenizer, sentences: tf.Tensor) -> tuple[np.ndarray, np.ndarray]:
  """Flat int32 token ids and int64 per-sentence counts, tokenized in chunks on a thread pool
  (the tokenizers release the GIL)."""
  n = int(tf.size(sentences))
  if n == 0:
    return np.zeros(0, np.int32), np.zeros(0, np.int64)
  def one(start):
    return tokenizer.ids_and_lengths(sentences[start:start + _TOKENIZE_BATCH])
  parts = threads().map(one, range(0, n, _TOKENIZE_BATCH))
  return (np.concatenate([v for v, _ in parts]).astype(np.int32),
          np.concatenate([k for _, k in parts]).astype(np.int64))


def select_docs(num_docs: int, split: str, every_nth: int, share: tuple[int, int] = (0, 1)
                ) -> np.ndarray:
  """The documents of `split` ('eval': every `every_nth`-th) of a shard, then every
  share[1]-th from the share[0]-th (a shard several hosts read)."""
  d = np.arange(num_docs)
  is_eval = (d % every_nth == every_nth - 1) if every_nth else np.zeros(num_docs, bool)
  docs = d[is_eval] if split == "eval" else d[~is_eval]
  part, parts = share
  return docs[part::parts]


def tokenized_shard(shard: shard_spec.ShardSpec, split: str, *, data_config, tokenizer,
                    seq_len: int, has_pairs: bool, select: Callable[[int], np.ndarray],
                    count: Callable[[str, int], None]) -> segments.TokenizedShard:
  """The selected documents of a shard, read and tokenized; count(name, n) is told what the
  reading found."""
  source = source_registry.of_shard(shard)
  if source.tokenized:
    part = source.read_tokens(shard)
    tokens, lengths, doc_splits = part.select(select(part.num_docs))
  else:
    raw = source.read(shard, data_config)
    if raw.invalid_utf8:
      count("invalid_utf8", raw.invalid_utf8)
    raw = raw.select(select(raw.num_docs))
    tokens, lengths = tokenize(tokenizer, raw.sentences)
    doc_splits = raw.doc_splits
  check_unknown_rate(tokens, tokenizer, source_registry.describe(shard))
  num_docs = len(doc_splits) - 1
  # Drop sentences without tokens, then documents without sentences.
  keep = lengths > 0
  doc_of = np.repeat(np.arange(num_docs), np.diff(doc_splits))
  per_doc = np.bincount(doc_of[keep], minlength=num_docs)
  count("empty_sentences", int((~keep).sum()))
  count("empty_documents", int((per_doc == 0).sum()))
  shard_tokens = segments.TokenizedShard(
      tokens, np.append(0, np.cumsum(per_doc[per_doc > 0])).astype(np.int64),
      sent_splits=np.append(0, np.cumsum(lengths[keep])).astype(np.int64))
  piece = (seq_len - 3) // 2 if has_pairs else seq_len - 3
  before = shard_tokens.num_sentences
  shard_tokens = segments.split_long_sentences(shard_tokens, max(1, piece))
  count("split_sentence_pieces", shard_tokens.num_sentences - before)
  logging.info("%s (%s): %d documents, %d sentences, %d tokens", source_registry.describe(shard),
               split, shard_tokens.num_docs, shard_tokens.num_sentences, len(shard_tokens.tokens))
  return shard_tokens
