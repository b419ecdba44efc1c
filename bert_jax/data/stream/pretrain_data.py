"""Pretraining batches from raw text, on every host, deterministic and resumable.

The stream (`PretrainData.dataset`) is two numpy stages per pool of shards: read and tokenize
the pool's shards (shard_tokens.py), then make examples, rows and masks (segments.py, rows.py,
masking.py), rebatched to the host batch. Pool i + 1 is read while pool i's rows are made.
Whole pools are vectorised numpy, so the per-batch path stays in C++ and off the GIL.

Every random draw is keyed by (seed, host, epoch, pool, ...), so a host's stream is a pure
function of (config, seed, host) and `dataset(k)` starts at batch k directly: it counts the
rows of the pools before it (tokenized skipped shards are memoised under _SKIP_MEMO_BYTES;
prepared parts skip without tokenizing). `config.data.loader` picks the driver: tf.data, or
Python threads (python_stream.py), the same batches bit for bit; only source='prepared' runs
without TensorFlow. Hosts read disjoint shards (stream_plan.host_share); with
host_invariant_stream each builds the one-host stream and keeps its rows. Every
`eval_every_nth_document`-th document is held out for `eval_iterator`.
"""
from __future__ import annotations  # annotations naming tf are not evaluated (no TensorFlow)

import collections
import functools
import logging
import threading
from typing import Iterator, Optional, Sequence

import numpy as np

from bert_jax.data.sources import raw_docs
from bert_jax.data.sources import registry as source_registry
from bert_jax.data.sources import shard_spec
from bert_jax.data.sources import source_base
from bert_jax.data.stream import batch_schema
from bert_jax.data.stream import example_pools
from bert_jax.data.stream import held_out
from bert_jax.data.stream import masking
from bert_jax.data.stream import python_stream
from bert_jax.data.stream import rows as rows_lib
from bert_jax.data.stream import segments
from bert_jax.data.stream import shard_tokens
from bert_jax.data.stream import stateless_random
from bert_jax.data.stream import stream_plan
from bert_jax.data.stream import stream_stages
from bert_jax.data.tokenizers import tokenizer as tokenizer_lib
from bert_jax.runtime import optional_tensorflow
from bert_jax.runtime.optional_tensorflow import tf

MODES = ("nsp", "sop", "full_sentences")
# Drivers of the stream's numpy stages (config.data.loader): tf.data, Python threads
# (python_stream.py: no TensorFlow), or 'auto': tf.data where TensorFlow imports, else Python.
LOADERS = ("auto", "tf_data", "python")
# Modes whose rows are sentence pairs with a label (next sentence / swapped order).
PAIR_MODES = ("nsp", "sop")
# The epoch number that keys the held-out stream's random draws.
_EVAL_EPOCH = -1
# Tokenized shards kept while counting the rows a resume skips (a small corpus skipped through
# many epochs is tokenized once); dropped when the count is done.
_SKIP_MEMO_BYTES = 512 << 20


def _resolve_loader(data_config) -> str:
  """config.data.loader as 'tf_data' or 'python' (validated)."""
  loader = data_config.loader
  if loader not in LOADERS:
    raise ValueError(f"config.data.loader={loader!r}; expected one of {list(LOADERS)}")
  if loader == "auto":
    return "tf_data" if optional_tensorflow.available() else "python"
  if loader == "tf_data" and not optional_tensorflow.available():
    raise ValueError(f"config.data.loader='tf_data' needs TensorFlow, which is not installed "
                     f"here ({optional_tensorflow.INSTALL}); 'python' (or 'auto') reads "
                     f"config.data.source='prepared' without it")
  return loader


def check_config(data_config, seq_len: int) -> None:
  """The `config.data` checks that need no file, tokenizer or TensorFlow (a ValueError each)."""
  c = data_config
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
  if c.shuffle_mb < 0:
    raise ValueError(f"config.data.shuffle_mb={c.shuffle_mb} must be >= 0")
  raw_docs.block_bytes(c)


def _check_hosts(global_batch_size: int, process_index: int, process_count: int) -> None:
  if not 0 <= process_index < process_count:
    raise ValueError(f"process_index={process_index} not in [0, process_count={process_count})")
  if global_batch_size <= 0 or global_batch_size % process_count:
    raise ValueError(f"global batch size {global_batch_size} must be a positive multiple of "
                     f"the process count {process_count}")


def _checked_tokenizer(data_config, source: source_base.Source):
  """The tokenizer of `config.data`, checked against the source and the mode (one line)."""
  c = data_config
  if not source.tokenized:
    optional_tensorflow.require(f"config.data.source={c.source!r} (tokenizing raw text)")
  tok = tokenizer_lib.load_tokenizer(c)
  if tok.kind == "wordpiece":
    shard_tokens.check_casing(tok.inv_vocab, tok.lowercase, tok.vocab_file or "the vocab")
  if c.mode in PAIR_MODES and tok.num_special_tokens(pair=True) != 3:
    raise ValueError(f"config.data.mode={c.mode!r} lays pairs out as `cls A sep B sep`; the "
                     f"{tok.kind} tokenizer {tok.vocab_file!r} pairs differently (RoBERTa: "
                     f"`<s> A </s></s> B </s>`, no NSP): train it with RoBERTa's recipe "
                     "(configs/pretrain.py:VARIANT,recipe=roberta: objective 'mlm', "
                     "mode='full_sentences')")
  return tok


def _stream_hosts(host_invariant: bool, process_index: int, process_count: int,
                  per_host_batch_size: int) -> tuple[Optional[slice], int, int]:
  """(this host's rows of each batch built, or None for all; the host and host count the stream
  is built for). With host_invariant_stream every host builds the global batch."""
  if not host_invariant:
    return None, process_index, process_count
  rows = None
  if process_count > 1:
    rows = slice(process_index * per_host_batch_size, (process_index + 1) * per_host_batch_size)
  return rows, 0, 1


def _masking_spec(data_config, tok) -> masking.MaskingSpec:
  """config.data's dynamic masking with the tokenizer's special, regular and continuation ids."""
  c = data_config
  return masking.MaskingSpec(
      mask_prob=c.mask_prob, max_predictions=c.max_predictions_per_seq,
      unit=c.masking, mask_id=tok.mask_id,
      special_ids=np.array([tok.pad_id, tok.cls_id, tok.sep_id, tok.mask_id], np.int32),
      regular_ids=tok.regular_ids, is_continuation=tok.is_continuation)


class PretrainData:
  """The pretraining input pipeline of one host.

  has_pairs: rows are sentence pairs with real next_sentence_labels ('nsp': 1 = random next;
  'sop': 1 = swapped).
  """

  def __init__(self, data_config, *, seq_len: int, global_batch_size: int, seed: int,
               process_index: int = 0, process_count: int = 1,
               source: Optional[source_base.Source] = None):
    """Validates the config and the input up front (tokenizing only the first shard's start);
    ValueError / FileNotFoundError name the offending key, file or token."""
    c = data_config
    self._config = c
    check_config(c, seq_len)
    self.loader = _resolve_loader(c)
    _check_hosts(global_batch_size, process_index, process_count)
    self.source = source_registry.get(c.source) if source is None else source
    self.tokenizer = _checked_tokenizer(c, self.source)
    self.per_host_batch_size = global_batch_size // process_count
    self._host_rows, process_index, process_count = _stream_hosts(
        c.host_invariant_stream, process_index, process_count, self.per_host_batch_size)
    # A host that reads a share lists the shards without reading them and checks only its
    # own: listing checks that open every file would read the corpus on every host.
    shares = process_count > 1
    shards = source_registry.list_shards(self.source, c, read=not shares)
    self.source.check_tokenizer(c, self.tokenizer)

    self.vocab_size = self.tokenizer.vocab_size
    self.vocab_file = self.tokenizer.vocab_file
    self.lowercase = self.tokenizer.lowercase
    self.has_pairs = c.mode in PAIR_MODES
    # Rows of each batch the stream builds (the global batch with host_invariant_stream).
    self._stream_batch_size = global_batch_size // process_count
    self.seq_len, self.seed = seq_len, seed
    self.process_index, self.process_count = process_index, process_count
    positions, self._doc_share = stream_plan.host_share(len(shards), process_index,
                                                        process_count)
    self._shards = [shards[i] for i in positions]
    if shares:
      source_registry.check_shards(self.source, self._shards, c)
    if self._shards:  # a vocab that does not fit the corpus: one line, before any tf.data
      shard_tokens.check_vocab_fits(self._shards[0], c, self.tokenizer)
    self._mask_spec = _masking_spec(c, self.tokenizer)
    self._keys = {name: stateless_random.root_key(seed, name)
                  for name in ("order", "shuffle", "nsp", "mask", "evalmask")}
    self._eval_cache = {}
    self.stats = collections.Counter()
    # The first error raised inside a dataset's numpy functions (set from tf.data threads).
    self._lock = threading.Lock()
    self._counted = set()  # (shard, split) whose stats are counted (shards are read per epoch)
    self._failure = None
    logging.info("pretraining data: %d of %d shard(s) for host %d/%d (%s), mode %s%s",
                 len(self._shards), len(shards), process_index, process_count,
                 "shards by host" if self._doc_share[1] == 1 else
                 f"every {self._doc_share[1]}th document of the shard", c.mode,
                 ", packed" if c.packing else "")

  # -- Tokenized shards -----------------------------------------------------------

  def _tokenized(self, shard: shard_spec.ShardSpec, split: str) -> segments.TokenizedShard:
    """The documents of `split` of a shard, tokenized (stats count the first reading's finds)."""
    with self._lock:
      first = (shard.index, split) not in self._counted
      self._counted.add((shard.index, split))
    c = self._config
    select = functools.partial(shard_tokens.select_docs, split=split,
                               every_nth=c.eval_every_nth_document,
                               share=self._doc_share)
    return shard_tokens.tokenized_shard(
        shard, split, data_config=c, tokenizer=self.tokenizer, seq_len=self.seq_len,
        has_pairs=self.has_pairs, select=select,
        count=self._count if first else lambda name, n: None)

  def _count(self, name: str, n: int) -> None:
    with self._lock:
      self.stats[name] += n

  # -- Examples, pools, rows ---------------------------------------------------------

  def _examples(self, shard: shard_spec.ShardSpec, split: str, epoch: int,
                ts: Optional[segments.TokenizedShard] = None
                ) -> tuple[np.ndarray, segments.Examples]:
    ts = self._tokenized(shard, split) if ts is None else ts
    c = self._config
    key = (stateless_random.derive(self._keys["nsp"], epoch, shard.index, split == "eval",
                                   self.process_index) if self.has_pairs else None)
    return example_pools.shard_examples(ts, mode=c.mode, seq_len=self.seq_len, key=key,
                                        short_seq_prob=c.short_seq_prob,
                                        sep_id=self.tokenizer.sep_id, packing=c.packing)

  def _epoch_plan(self, epoch: int) -> list[list[int]]:
    """This host's pools of one training epoch (stream_plan.epoch_plan)."""
    return stream_plan.epoch_plan(self._shards, self._keys["order"], self.process_index, epoch,
                                  self._config.shuffle_mb,
                                  lambda shard: self.source.sized_shards)

  def _pool(self, epoch: int, index: int, shards: Sequence[int],
            memo: Optional[dict] = None) -> example_pools.ExamplePool:
    """Pool `index` of `epoch`, shuffled. memo (shard position -> TokenizedShard) holds shards
    already read, and is filled while under _SKIP_MEMO_BYTES (resume counting)."""
    parts = []
    for i in shards:
      ts = None
      if memo is not None:
        ts = memo.get(i)
        if ts is None:
          ts = self._tokenized(self._shards[i], "train")
          if memo.setdefault("bytes", 0) + ts.nbytes <= _SKIP_MEMO_BYTES:
            memo[i] = ts
            memo["bytes"] += ts.nbytes
      tokens, ex = self._examples(self._shards[i], "train", epoch, ts)
      if len(ex):
        parts.append((tokens, ex))
    if not parts:
      return example_pools.empty_pool(self._config.packing)
    key = None
    if self._config.shuffle_mb:
      key = stateless_random.derive(self._keys["shuffle"], self.process_index, epoch, index)
    return example_pools.make_pool(parts, key, self.seq_len, self._config.packing)

  def epoch_rows(self, epoch: int) -> int:
    """Rows of this host's training epoch `epoch` (reads and segments the epoch)."""
    memo = {}
    return sum(self._pool(epoch, p, shards, memo).num_rows
               for p, shards in enumerate(self._epoch_plan(epoch)))

  def build_rows(self, tokens, ex, pack_splits) -> dict[str, np.ndarray]:
    tok = self.tokenizer
    return rows_lib.build_rows(tokens, ex, self.seq_len, cls_id=tok.cls_id, sep_id=tok.sep_id,
                               pad_id=tok.pad_id, pack_splits=pack_splits)

  # -- Streams ----------------------------------------------------------------------

  def _no_rows_error(self) -> ValueError:
    part, parts = self._doc_share
    share = (f" (this host's share: every {parts}th document from the {part}th; fewer shards "
             f"than hosts)" if parts > 1 else "")
    return ValueError(
        f"no training examples for host {self.process_index}/{self.process_count}: the "
        f"{len(self._shards)} shard(s) of config.data.source={self._config.source!r} hold no "
        f"document with tokens{share} (after holding out every "
        f"{self._config.eval_every_nth_document}th document)")

  def _locate(self, rows: int) -> tuple[int, int, int]:
    """(epoch, pool, row in the pool) of training row `rows` of this host's stream."""
    memo = {}
    return stream_plan.locate(
        rows, self._epoch_plan,
        lambda epoch, p, shards: self._pool(epoch, p, shards, memo).num_rows,
        self._no_rows_error)

  def _fail(self, e: Exception) -> None:
    with self._lock:
      if self._failure is None:
        self._failure = e

  @property
  def _features(self) -> dict[str, tuple[type, tuple[int, ...]]]:
    """Name -> (dtype, shape of one row) of the features of a training batch."""
    return batch_schema.features(self.seq_len, self._config.max_predictions_per_seq,
                                 self._config.packing)

  def _masked_rows(self, pool: example_pools.ExamplePool, epoch: int, index: int, lo: int,
                   hi: int) -> dict[str, np.ndarray]:
    """Rows lo..hi of pool `index` of `epoch`, laid out and masked (keyed by row in the pool)."""
    rows = pool.rows(lo, hi, self.build_rows)
    keys = stateless_random.derive(self._keys["mask"], self.process_index, epoch, index,
                                   lo + np.arange(hi - lo))
    rows.update(masking.mask_batch(rows["input_ids"], rows["input_mask"], keys, self._mask_spec))
    return rows

  def _stages(self, start_position: int) -> stream_stages.PoolStages:
    """The two numpy stages of a stream from batch `start_position` (earlier rows counted here)."""
    if start_position < 0:
      raise ValueError(f"start_position={start_position} must be >= 0")
    self._failure = None
    return stream_stages.PoolStages(
        self._locate(int(start_position) * self._stream_batch_size),
        epoch_plan=self._epoch_plan,
        read_shard=lambda i: self._tokenized(self._shards[i], "train"),
        pool_of=self._pool, masked_rows=self._masked_rows, features=self._features,
        no_rows_error=self._no_rows_error, on_failure=self._fail)

  def dataset(self, start_position: int = 0) -> tf.data.Dataset:
    """The infinite training stream from batch `start_position`: exactly batches start_position,
    start_position + 1, ... of dataset(0) (batch_schema's features; with host_invariant_stream,
    whole global batches)."""
    stages = self._stages(start_position)
    return stream_stages.tf_dataset(stages.read_pool, stages.pool_rows, stages.features,
                                    self._stream_batch_size)

  def train_iterator(self, start_position: int = 0) -> Iterator[dict[str, np.ndarray]]:
    """`dataset(start_position)` as numpy batches, this host's rows.

    An error inside the pipeline (a vocab that does not fit, an epoch without examples) is raised
    as itself, not as a TensorFlow error; iterators still open at exit are closed.
    """
    if self.loader == "python":
      it = self._python_batches(start_position)
    else:
      it = self._numpy_batches(start_position)
    stream_stages.OPEN_ITERATORS.add(it)
    return _rows_of(it, self._host_rows)

  def _python_batches(self, start_position: int) -> Iterator[dict[str, np.ndarray]]:
    stages = self._stages(start_position)
    yield from python_stream.batches(stages.read_pool, stages.pool_rows, stages.first_rows,
                                     list(stages.features), self._stream_batch_size)

  def _numpy_batches(self, start_position: int) -> Iterator[dict[str, np.ndarray]]:
    ds = self.dataset(start_position)
    try:
      for batch in ds.as_numpy_iterator():
        yield batch
    except tf.errors.OpError:
      if self._failure is not None:
        raise self._failure from None
      raise

  def eval_iterator(self, num_batches: int) -> Iterator[dict[str, np.ndarray]]:
    """`num_batches` held-out batches, the same on every call (source order, fixed masks)."""
    if not self._config.eval_every_nth_document:
      raise ValueError("eval data needs config.data.eval_every_nth_document > 0")
    if num_batches not in self._eval_cache:
      self._eval_cache = {num_batches: list(self._eval_batches(num_batches))}
    return _rows_of(iter([dict(batch) for batch in self._eval_cache[num_batches]]),
                    self._host_rows)

  def _eval_batches(self, num_batches: int) -> Iterator[dict[str, np.ndarray]]:
    """The held-out examples of this host's shards in source order, cycled (held_out.py)."""
    c = self._config

    def one_pass():
      for shard in self._shards:
        tokens, ex = self._examples(shard, "eval", _EVAL_EPOCH)
        yield (example_pools.make_pool([(tokens, ex)], None, self.seq_len, c.packing)
               if len(ex) else None)

    return held_out.batches(
        num_batches, one_pass=one_pass, build_rows=self.build_rows,
        row_keys=functools.partial(stateless_random.derive, self._keys["evalmask"],
                                   self.process_index),
        mask_spec=self._mask_spec, batch_size=self._stream_batch_size,
        no_rows_error=lambda: ValueError(
            f"no held-out examples for host {self.process_index}/{self.process_count}: no "
            f"document is held out (every {c.eval_every_nth_document}th document of "
            f"each shard); lower config.data.eval_every_nth_document or add data"))


def _rows_of(batches: Iterator[dict[str, np.ndarray]], rows: Optional[slice]
             ) -> Iterator[dict[str, np.ndarray]]:
  """This host's `rows` of each batch (None: batches taken whole)."""
  if rows is None:
    return batches
  return ({k: v[rows] for k, v in b.items()} for b in batches)
