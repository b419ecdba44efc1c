"""Pretraining batches from raw text, on every host, deterministic and resumable.

    shards (files / TFDS ranges / builtin)          sources.py
      -> this host's documents (train or held out)
      -> tokenized sentences                         tokenizer.py (WordPiece / BPE / SentencePiece)
      -> examples: NSP pairs or full sentences       segments.py
      -> pools of >= shuffle_buffer examples, shuffled
      -> rows (optionally packed)                    rows.py
      -> batches of per-host size, masked            masking.py

The stream of a host is a pure function of (config, seed, host): epoch e
visits this host's shards in a random order keyed by (seed, host, e);
examples of consecutive shards are pooled until a pool holds `shuffle_buffer`
examples and the pool is permuted with a key of (seed, host, e, pool); NSP
sampling is keyed by (seed, e, shard, host, sentence) and masking by
(seed, host, e, row index in the epoch). Nothing carries random state, so
`train_iterator(k)` rebuilds batch k directly: it segments (without masking)
the pools before position k to count their rows, and tokenized shards stay
cached in memory (token_cache_mb), so for a corpus that fits there a resume
costs no tokenization at all (the builtin corpus: ~30 ms per skipped epoch).
A resume on a corpus larger than the cache re-tokenizes (without masking) the
shards it skips.

Hosts read disjoint data: with at least as many shards as hosts, host h takes
shards h, h + P, ...; otherwise every host reads every shard and takes every
P-th document (of the training and of the held-out documents separately).
Every `eval_every_nth_document`-th document of each shard is held out for
`eval_iterator`.
"""
import collections
import concurrent.futures
import logging
import os
import queue
import threading
from typing import Iterator, Optional, Sequence

import numpy as np

from bert_jax.cpu_tensorflow import tf
from bert_jax.data import masking
from bert_jax.data import rows as rows_lib
from bert_jax.data import segments
from bert_jax.data import sources
from bert_jax.data import stateless_random
from bert_jax.data import tokenizer as tokenizer_lib

MODES = ("nsp", "sop", "full_sentences")
# Modes whose rows are sentence pairs with a label (next sentence / swapped order).
PAIR_MODES = ("nsp", "sop")
# Sentences per tf-text call while tokenizing a shard, and threads making the calls.
_TOKENIZE_BATCH = 4096
_TOKENIZE_THREADS = min(8, os.cpu_count() or 1)
# The epoch number that keys the held-out stream's random draws.
_EVAL_EPOCH = -1


class _ExamplePool:
  """Examples of consecutive shards, shuffled, laid out as rows."""

  def __init__(self, tokens: np.ndarray, ex: segments.Examples,
               pack_splits: Optional[np.ndarray]):
    self.tokens = tokens
    self.ex = ex
    self.pack_splits = pack_splits
    self.num_rows = len(ex) if pack_splits is None else len(pack_splits) - 1

  def rows(self, lo: int, hi: int, data: "PretrainData") -> dict[str, np.ndarray]:
    if self.pack_splits is None:
      return data.build_rows(self.tokens, self.ex.take(np.arange(lo, hi)), None)
    e_lo, e_hi = self.pack_splits[lo], self.pack_splits[hi]
    return data.build_rows(self.tokens, self.ex.take(np.arange(e_lo, e_hi)),
                           self.pack_splits[lo:hi + 1] - e_lo)


# A corpus with more [UNK] than this is not one the vocab was made for (English text
# with bert-base-uncased: ~0.1%; a 10-token vocab: 92%).
MAX_UNKNOWN_RATE = 0.2


def check_casing(vocab: Sequence[str], lowercase: bool, name: str) -> None:
  """Refuses a cased vocab read lower-cased, and an uncased one read with capitals.

  Raises:
    ValueError: naming the vocab, what it is, and the setting to change.
  """
  regular = [t for t in vocab if not (t.startswith("[") and t.endswith("]"))]
  capitalized = [t for t in regular if any(ch.isupper() for ch in t)]
  lower_words = sum(1 for t in regular if t.isalpha() and t.islower())
  if lowercase and len(capitalized) >= max(10, 0.01 * len(regular)):
    raise ValueError(
        f"{name} is a cased vocab ({len(capitalized)} of its {len(regular)} tokens have "
        f"capitals, e.g. {capitalized[:3]}) but config.data.lowercase=True would never produce "
        "them; set config.data.lowercase=False")
  if not lowercase and len(capitalized) <= 0.001 * len(regular) and lower_words >= 1000:
    raise ValueError(
        f"{name} is an uncased vocab ({len(capitalized)} of its {len(regular)} tokens have "
        f"capitals) but config.data.lowercase=False: "
        "every capitalized word would become [UNK]; set config.data.lowercase=True")


def check_unknown_rate(tokens: np.ndarray, tokenizer, name: str) -> None:
  """Refuses a vocab that does not fit the corpus (most tokens [UNK]).

  Raises:
    ValueError: naming the shard, the rate and the vocab's size.
  """
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


class PretrainData:
  """The pretraining input pipeline of one host.

  Attributes:
    vocab_size: tokens in the vocab.
    vocab_file: the vocab (or SentencePiece model) in use.
    lowercase: uncased tokenization.
    has_pairs: rows are sentence pairs whose next_sentence_labels are real (modes
      'nsp': 1 = random next, and 'sop': 1 = swapped order).
    per_host_batch_size: rows per batch on this host.
    tokenizer: the tokenizer.
  """

  def __init__(self, data_config, *, seq_len: int, global_batch_size: int, seed: int,
               process_index: int = 0, process_count: int = 1):
    """Validates the config and the input up front (no tokenization yet).

    Args:
      data_config: the `config.data` ConfigDict of configs/pretrain.py.
      seq_len: tokens per row.
      global_batch_size: rows per step over all hosts.
      seed: the data seed.
      process_index: this host.
      process_count: hosts.

    Raises:
      ValueError / FileNotFoundError naming the offending key, file or token.
    """
    c = data_config
    self._config = c
    if c.mode not in MODES:
      raise ValueError(f"config.data.mode={c.mode!r}; expected one of {list(MODES)}")
    if c.packing and c.mode in PAIR_MODES:
      raise ValueError("config.data.packing=True is supported with mode='full_sentences' only "
                       "(a packed row would need one next_sentence_label per example)")
    min_len = 5 if c.mode in PAIR_MODES else 4
    if seq_len < min_len:
      raise ValueError(f"seq_len={seq_len} is too short for mode {c.mode!r} (>= {min_len})")
    if not 1 <= c.max_predictions_per_seq <= seq_len:
      raise ValueError(f"config.data.max_predictions_per_seq={c.max_predictions_per_seq} must be "
                       f"in [1, seq_len={seq_len}]")
    if not 0.0 < c.mask_prob < 1.0:
      raise ValueError(f"config.data.mask_prob={c.mask_prob} must be in (0, 1)")
    if not 0.0 <= c.short_seq_prob <= 1.0:
      raise ValueError(f"config.data.short_seq_prob={c.short_seq_prob} must be in [0, 1]")
    if c.eval_every_nth_document < 0 or c.eval_every_nth_document == 1:
      raise ValueError(f"config.data.eval_every_nth_document={c.eval_every_nth_document}: use 0 "
                       f"(no held-out data) or N >= 2")
    for key in ("shuffle_buffer", "token_cache_mb", "prefetch_batches"):
      if c[key] < 0:
        raise ValueError(f"config.data.{key}={c[key]} must be >= 0")
    if not 0 <= process_index < process_count:
      raise ValueError(f"process_index={process_index} not in [0, process_count={process_count})")
    if global_batch_size <= 0 or global_batch_size % process_count:
      raise ValueError(f"global batch size {global_batch_size} must be a positive multiple of "
                       f"the process count {process_count}")
    self.tokenizer = tokenizer_lib.load_tokenizer(c)
    if self.tokenizer.kind == "wordpiece":
      check_casing(self.tokenizer.inv_vocab, self.tokenizer.lowercase,
                   self.tokenizer.vocab_file or "the vocab")
    if c.mode in PAIR_MODES and self.tokenizer.num_special_tokens(pair=True) != 3:
      raise ValueError(f"config.data.mode={c.mode!r} lays pairs out as `cls A sep B sep`; the "
                       f"{self.tokenizer.kind} tokenizer {self.tokenizer.vocab_file!r} pairs "
                       f"differently (RoBERTa: `<s> A </s></s> B </s>`, no NSP): use "
                       f"mode='full_sentences'")
    shards = sources.list_shards(c)

    self.vocab_size = self.tokenizer.vocab_size
    self.vocab_file = self.tokenizer.vocab_file
    self.lowercase = self.tokenizer.lowercase
    self.has_pairs = c.mode in PAIR_MODES
    self.per_host_batch_size = global_batch_size // process_count
    self.seq_len = seq_len
    self.seed = seed
    self.process_index, self.process_count = process_index, process_count
    self._docs_by_host = len(shards) < process_count
    self._shards = shards if self._docs_by_host else shards[process_index::process_count]
    tok = self.tokenizer
    self._mask_spec = masking.MaskingSpec(
        mask_prob=c.mask_prob, max_predictions=c.max_predictions_per_seq,
        unit=c.masking, mask_id=tok.mask_id,
        special_ids=np.array([tok.pad_id, tok.cls_id, tok.sep_id, tok.mask_id], np.int32),
        regular_ids=tok.regular_ids, is_continuation=tok.is_continuation)
    self._keys = {name: stateless_random.root_key(seed, name)
                  for name in ("order", "shuffle", "nsp", "mask", "evalmask")}
    self._token_cache = collections.OrderedDict()
    self._token_cache_bytes = 0
    # The training stream (prefetch thread) and eval share the token cache.
    self._cache_lock = threading.RLock()
    self._eval_cache = {}
    self.stats = collections.Counter()
    logging.info("pretraining data: %d shard(s) for host %d/%d (%s), mode %s%s", len(self._shards),
                 process_index, process_count,
                 "documents by host" if self._docs_by_host else "shards by host", c.mode,
                 ", packed" if c.packing else "")

  # -- Tokenized shards -----------------------------------------------------------

  def _select_docs(self, num_docs: int, split: str) -> np.ndarray:
    n = self._config.eval_every_nth_document
    d = np.arange(num_docs)
    is_eval = (d % n == n - 1) if n else np.zeros(num_docs, bool)
    docs = d[is_eval] if split == "eval" else d[~is_eval]
    if self._docs_by_host:
      docs = docs[self.process_index::self.process_count]
    return docs

  def _tokenize(self, sentences: tf.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Token ids (flat int32) and per-sentence counts of a string tensor.

    Chunks go through the tokenizer on a thread pool (WordPiece's TF kernels
    and the BPE's Rust release the GIL), so all cores tokenize.
    """
    n = int(tf.size(sentences))
    if n == 0:
      return np.zeros(0, np.int32), np.zeros(0, np.int64)
    def one(start):
      return self.tokenizer.ids_and_lengths(sentences[start:start + _TOKENIZE_BATCH])
    with concurrent.futures.ThreadPoolExecutor(_TOKENIZE_THREADS) as pool:
      parts = list(pool.map(one, range(0, n, _TOKENIZE_BATCH)))
    return (np.concatenate([v for v, _ in parts]).astype(np.int32),
            np.concatenate([k for _, k in parts]).astype(np.int64))

  def _tokenized(self, shard: sources.ShardSpec, split: str) -> segments.TokenizedShard:
    with self._cache_lock:
      return self._tokenized_locked(shard, split)

  def _tokenized_locked(self, shard: sources.ShardSpec,
                        split: str) -> segments.TokenizedShard:
    key = (shard.index, split)
    if key in self._token_cache:
      self._token_cache.move_to_end(key)
      return self._token_cache[key]
    raw = sources.read_documents(shard, self._config)
    if raw.invalid_utf8:
      self.stats["invalid_utf8"] += raw.invalid_utf8
    raw = raw.select(self._select_docs(raw.num_docs, split))
    tokens, lengths = self._tokenize(raw.sentences)
    check_unknown_rate(tokens, self.tokenizer, sources.describe(shard))
    # Drop sentences without tokens, then documents without sentences.
    keep = lengths > 0
    doc_of = np.repeat(np.arange(raw.num_docs), np.diff(raw.doc_splits))
    per_doc = np.bincount(doc_of[keep], minlength=raw.num_docs)
    self.stats["empty_sentences"] += int((~keep).sum())
    self.stats["empty_documents"] += int((per_doc == 0).sum())
    shard_tokens = segments.TokenizedShard(
        tokens, np.append(0, np.cumsum(lengths[keep])).astype(np.int64),
        np.append(0, np.cumsum(per_doc[per_doc > 0])).astype(np.int64))
    piece = (self.seq_len - 3) // 2 if self.has_pairs else self.seq_len - 3
    before = shard_tokens.num_sentences
    shard_tokens = segments.split_long_sentences(shard_tokens, max(1, piece))
    self.stats["split_sentence_pieces"] += shard_tokens.num_sentences - before
    logging.info("%s (%s): %d documents, %d sentences, %d tokens", sources.describe(shard), split,
                 shard_tokens.num_docs, shard_tokens.num_sentences, len(shard_tokens.tokens))
    budget = self._config.token_cache_mb * (1 << 20)
    if shard_tokens.nbytes <= budget:
      self._token_cache[key] = shard_tokens
      self._token_cache_bytes += shard_tokens.nbytes
      while self._token_cache_bytes > budget:
        _, old = self._token_cache.popitem(last=False)
        self._token_cache_bytes -= old.nbytes
    return shard_tokens

  # -- Examples, pools, rows ---------------------------------------------------------

  def _examples(self, shard: sources.ShardSpec, split: str,
                epoch: int) -> tuple[np.ndarray, segments.Examples]:
    ts = self._tokenized(shard, split)
    tok = self.tokenizer
    if self.has_pairs:
      key = stateless_random.derive(self._keys["nsp"], epoch, shard.index, split == "eval",
                         self.process_index)
      pairs = segments.nsp_examples if self._config.mode == "nsp" else segments.sop_examples
      return ts.tokens, pairs(
          ts, key=key, max_num_tokens=self.seq_len - 3,
          short_seq_prob=self._config.short_seq_prob)
    return segments.sentence_examples(ts, max_len=self.seq_len, sep_id=tok.sep_id,
                                      cross_documents=not self._config.packing)

  def _make_pool(self, parts, key) -> _ExamplePool:
    offsets = np.cumsum([0] + [len(t) for t, _ in parts])
    tokens = np.concatenate([t for t, _ in parts])
    ex = segments.Examples.concatenate([e.shift(o) for (_, e), o in zip(parts, offsets)])
    if key is not None:
      ex = ex.take(stateless_random.permutation(key, len(ex)))
    pack = segments.pack_rows(ex.row_len, self.seq_len) if self._config.packing else None
    return _ExamplePool(tokens, ex, pack)

  def _epoch_pools(self, epoch: int) -> Iterator[_ExamplePool]:
    """This host's pools of one training epoch, in stream order."""
    order_key = stateless_random.derive(self._keys["order"], self.process_index, epoch)
    order = stateless_random.permutation(order_key, len(self._shards))
    shuffle = self._config.shuffle_buffer
    parts, count, index = [], 0, 0
    for i in order:
      tokens, ex = self._examples(self._shards[i], "train", epoch)
      if len(ex):
        parts.append((tokens, ex))
        count += len(ex)
      if parts and count >= shuffle:
        key = self._shuffle_key(epoch, index) if shuffle else None
        yield self._make_pool(parts, key)
        parts, count, index = [], 0, index + 1
    if parts:
      yield self._make_pool(parts, self._shuffle_key(epoch, index) if shuffle else None)

  def _shuffle_key(self, epoch: int, pool: int):
    return stateless_random.derive(self._keys["shuffle"], self.process_index, epoch, pool)

  def build_rows(self, tokens, ex, pack_splits) -> dict[str, np.ndarray]:
    tok = self.tokenizer
    return rows_lib.build_rows(tokens, ex, self.seq_len, cls_id=tok.cls_id, sep_id=tok.sep_id,
                               pad_id=tok.pad_id, pack_splits=pack_splits)

  def _masked_batch(self, parts: list[dict[str, np.ndarray]], keys: list[np.ndarray]):
    """Concatenates row chunks into one batch and masks it."""
    batch = {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
    masked = masking.mask_batch(batch["input_ids"], batch["input_mask"], np.concatenate(keys),
                                self._mask_spec)
    batch.update(masked)
    return batch

  # -- Streams ----------------------------------------------------------------------

  def _train_batches(self, start_position: int) -> Iterator[dict[str, np.ndarray]]:
    b = self.per_host_batch_size
    skip = start_position * b
    parts, keys, pending = [], [], 0
    epoch = 0
    while True:
      epoch_rows = 0
      for pool in self._epoch_pools(epoch):
        n = pool.num_rows
        if skip >= n:
          skip -= n
          epoch_rows += n
          continue
        lo, skip = skip, 0
        while lo < n:
          hi = min(n, lo + b - pending)
          parts.append(pool.rows(lo, hi, self))
          keys.append(stateless_random.derive(self._keys["mask"], self.process_index, epoch,
                                   epoch_rows + np.arange(lo, hi)))
          pending += hi - lo
          lo = hi
          if pending == b:
            yield self._masked_batch(parts, keys)
            parts, keys, pending = [], [], 0
        epoch_rows += n
      if epoch_rows == 0:
        raise ValueError(
            f"no training examples for host {self.process_index}/{self.process_count}: the "
            f"{len(self._shards)} shard(s) of config.data.source={self._config.source!r} hold no "
            f"document with tokens (after holding out every "
            f"{self._config.eval_every_nth_document}th document)")
      epoch += 1

  def train_iterator(self, start_position: int = 0) -> Iterator[dict[str, np.ndarray]]:
    """The infinite training stream of this host from batch `start_position`.

    Args:
      start_position: batches this host has already consumed; the stream is
        exactly batches start_position, start_position + 1, ... of
        train_iterator(0).

    Returns:
      An iterator of batches (numpy): input_ids, input_mask, segment_ids int32
      [b, L]; masked_lm_positions, masked_lm_ids int32 [b, P];
      masked_lm_weights float32 [b, P]; next_sentence_labels int32 [b]; with
      packing also position_ids int32 [b, L].
    """
    if start_position < 0:
      raise ValueError(f"start_position={start_position} must be >= 0")
    gen = self._train_batches(int(start_position))
    if self._config.prefetch_batches:
      return _prefetch(gen, self._config.prefetch_batches)
    return gen

  def eval_iterator(self, num_batches: int) -> Iterator[dict[str, np.ndarray]]:
    """`num_batches` batches of held-out documents, the same on every call.

    The held-out examples are taken in source order (cycled if there are
    too few) with fixed NSP choices and masks.

    Args:
      num_batches: batches to yield.

    Returns:
      An iterator of batches shaped as train_iterator's.
    """
    if not self._config.eval_every_nth_document:
      raise ValueError("eval data needs config.data.eval_every_nth_document > 0")
    if num_batches not in self._eval_cache:
      self._eval_cache = {num_batches: list(self._eval_batches(num_batches))}
    return iter([dict(batch) for batch in self._eval_cache[num_batches]])

  def _eval_batches(self, num_batches: int):
    b = self.per_host_batch_size
    parts, keys, pending, row, made = [], [], 0, 0, 0
    while made < num_batches:
      before = row
      for shard in self._shards:
        tokens, ex = self._examples(shard, "eval", _EVAL_EPOCH)
        pool = self._make_pool([(tokens, ex)], None) if len(ex) else None
        lo = 0
        while pool is not None and lo < pool.num_rows and made < num_batches:
          hi = min(pool.num_rows, lo + b - pending)
          parts.append(pool.rows(lo, hi, self))
          keys.append(stateless_random.derive(self._keys["evalmask"], self.process_index,
                                   row + np.arange(hi - lo)))
          row += hi - lo
          pending += hi - lo
          lo = hi
          if pending == b:
            yield self._masked_batch(parts, keys)
            parts, keys, pending, made = [], [], 0, made + 1
        if made == num_batches:
          return
      if row == before:
        raise ValueError(
            f"no held-out examples for host {self.process_index}/{self.process_count}: no "
            f"document is held out (every {self._config.eval_every_nth_document}th document of "
            f"each shard); lower config.data.eval_every_nth_document or add data")


class _End:
  pass


def _prefetch(gen: Iterator, size: int) -> Iterator:
  """Runs `gen` in a background thread, `size` items ahead."""
  q = queue.Queue(maxsize=size)
  stop = threading.Event()

  def work():
    try:
      for item in gen:
        while not stop.is_set():
          try:
            q.put(item, timeout=0.1)
            break
          except queue.Full:
            pass
        if stop.is_set():
          return
      q.put(_End())
    except BaseException as e:  # pylint: disable=broad-except
      q.put(e)

  thread = threading.Thread(target=work, daemon=True, name="bert_jax-data")
  thread.start()

  def consume():
    try:
      while True:
        item = q.get()
        if isinstance(item, _End):
          return
        if isinstance(item, BaseException):
          raise item
        yield item
    finally:
      stop.set()
  return consume()
