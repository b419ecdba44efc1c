"""Pretraining batches from raw text, on every host, deterministic and resumable.

The stream is a `tf.data.Dataset` (`PretrainData.dataset`):

    Dataset.counter(): the stream's k-th pool
      -> map(read pool), one at a time                    tf.numpy_function:
           the k-th pool's (epoch, pool) of this host's plan of shards in epoch order;
           read shards (data/sources/, one module per source: files in blocks of block_mb,
           gs:// through tf.io.gfile, TFDS ranges, builtin, prepared numpy parts), tf-text
           tokenization in batches of 4096 sentences on a thread pool (tokenizer.py)
      -> map(pool rows), one at a time                    tf.numpy_function:
           examples: NSP / SOP pairs or full sentences (segments.py), shuffled
           within the pool, laid out as rows (rows.py), dynamic masking
           (masking.py; rows keyed by their row in the pool)
      -> rebatch(per-host batch) (the first pool starts at the resume row)
      -> prefetch(AUTOTUNE)

Pool i + 1 is read and tokenized while pool i's rows are made (the stream's
first pool has the cores to itself, for the earliest first batch). Segments,
rows and masking are vectorised numpy (index arithmetic over whole pools), run
inside the graph by tf.numpy_function; masking a pool at once instead of a map
over batches leaves the per-batch path in C++ (a numpy call per batch competed
with the next pool for the GIL); tokenization is tf-text's kernels (WordPiece)
or the Rust BPE, which release the GIL. After each pool but the first, each
stage returns the heaps' free pages to the OS (glibc's malloc_trim): what a
pool frees would otherwise stay resident beside the train step's buffers.

Pools: epoch e visits this host's shards in a random order keyed by (seed,
host, e); consecutive shards of that order form a pool until it holds
`shuffle_mb` MB of source text (one shard per pool when 0, or for TFDS and
builtin shards), so the pool plan is known from the shard sizes alone and
memory stays bounded (a pool is at most shuffle_mb + block_mb of text). A
pool's examples are permuted with a key of (seed, host, e, pool) (not when
shuffle_mb is 0); NSP sampling is keyed by (seed, e, shard, host, sentence)
and masking by (seed, host, e, pool, row in the pool). Nothing carries
random state, so the stream of a host is a pure function of (config, seed,
host) and `dataset(k)` starts at batch k directly: it counts the rows of the
pools before position k (segmenting them without building rows or masks)
and starts the plan at the pool that holds row k * batch. For raw text that
means tokenizing the skipped shards once (their tokens are kept for the
count while they fit `_SKIP_MEMO_BYTES`, so a small corpus skipped through
many epochs tokenizes once); prepared parts skip without tokenizing.

Without TensorFlow: `config.data.loader` picks the driver of the two numpy
stages. 'tf_data' is the dataset above; 'python' runs the same two stage
functions (stream_stages.PoolStages) on two Python threads with a queue of one pool between
and after them, and cuts batches as rebatch does (python_stream.py): the same
batches bit for bit, from any start position. 'auto' (the default) is tf_data
where TensorFlow imports and python where it does not; only
source='prepared' needs no TensorFlow (optional_tensorflow.py: raw text
sources are refused up front, in one line, on such a host).

Hosts read disjoint data, and only their own (stream_plan.host_share): with at least
as many shards as hosts, host h reads shards h, h + P, ...; with S < P shards, host h
reads shard h mod S alone and takes its share of that shard's documents with the
other hosts that read it (of the training and of the held-out documents
separately). With several hosts the shards are listed without reading them and each
host checks only its own (source_base.Source.list_shards_unread), so no host opens a
file it takes nothing from, at start-up or later. With `host_invariant_stream`, every
host builds the stream of one host (the whole global batch) and keeps its own rows of
each batch instead: the stream is then the same for any number of hosts, and by design
every host reads and tokenizes the whole corpus (what one host would read), so it
suits a corpus that one host can read at the pace of the whole job.
Every `eval_every_nth_document`-th document of each shard is held out for
`eval_iterator`.
"""
from __future__ import annotations  # annotations naming tf are not evaluated (no TensorFlow)

import collections
import functools
import logging
import threading
from typing import Iterator, Optional, Sequence

import numpy as np

from bert_jax.data.stream import batch_schema
from bert_jax.data.stream import example_pools
from bert_jax.data.stream import held_out
from bert_jax.data.stream import masking
from bert_jax.data.stream import python_stream
from bert_jax.data.sources import raw_docs
from bert_jax.data.sources import source_base
from bert_jax.data.stream import rows as rows_lib
from bert_jax.data.stream import segments
from bert_jax.data.sources import shard_spec
from bert_jax.data.stream import shard_tokens
from bert_jax.data.sources import registry as source_registry
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
  """The `config.data` checks that need no file, tokenizer or TensorFlow (one line each).

  Raises:
    ValueError: naming the key and what it must be.
  """
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
                     f"`<s> A </s></s> B </s>`, no NSP): use mode='full_sentences'")
  return tok


def _stream_hosts(host_invariant: bool, process_index: int, process_count: int,
                  per_host_batch_size: int) -> tuple[Optional[slice], int, int]:
  """(this host's rows of each batch the stream builds, or None: all of them; the host and
  host count the stream is built for).

  With host_invariant_stream every host builds the whole global batch and keeps its rows:
  the stream is then the same for any process count (exact replays across host counts), and
  every host reads the whole corpus, as one host would.
  """
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

  Attributes:
    vocab_size: tokens in the vocab.
    vocab_file: the vocab (or SentencePiece model) in use.
    lowercase: uncased tokenization.
    has_pairs: rows are sentence pairs whose next_sentence_labels are real (modes
      'nsp': 1 = random next, and 'sop': 1 = swapped order).
    per_host_batch_size: rows per batch on this host.
    tokenizer: the tokenizer.
    source: the Source of config.data.source.
  """

  def __init__(self, data_config, *, seq_len: int, global_batch_size: int, seed: int,
               process_index: int = 0, process_count: int = 1,
               source: Optional[source_base.Source] = None):
    """Validates the config and the input up front (tokenizing only the first shard's start).

    Args:
      data_config: the `config.data` ConfigDict of configs/pretrain.py.
      seq_len: tokens per row.
      global_batch_size: rows per step over all hosts.
      seed: the data seed.
      process_index: this host.
      process_count: hosts.
      source: config.data.source's Source where the caller has it already (else looked up).

    Raises:
      ValueError / FileNotFoundError naming the offending key, file or token.
    """
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
    """The documents of `split` of a shard, tokenized (shard_tokens.tokenized_shard; stats
    count what the first reading of each shard and split found)."""
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
    """Pool `index` of `epoch` (its shard positions `shards`), shuffled.

    memo: shard position -> TokenizedShard: the pool's shards already read (the
      dataset's first stage), or read and filled while its total stays under
      _SKIP_MEMO_BYTES (resume counting).
    """
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
    """Rows lo..hi of `pool`, pool `index` of `epoch`, laid out and masked (keyed by their
    row in the pool)."""
    rows = pool.rows(lo, hi, self.build_rows)
    keys = stateless_random.derive(self._keys["mask"], self.process_index, epoch, index,
                                   lo + np.arange(hi - lo))
    rows.update(masking.mask_batch(rows["input_ids"], rows["input_mask"], keys, self._mask_spec))
    return rows

  def _stages(self, start_position: int) -> stream_stages.PoolStages:
    """The two numpy stages of a stream from batch `start_position` (the rows before it are
    counted here), for tf.data (`dataset`) or python_stream."""
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
    """The infinite training stream of this host from batch `start_position`, as tf.data
    (with host_invariant_stream, of whole global batches: train_iterator keeps this host's
    rows).

    Args:
      start_position: batches this host has already consumed; the stream is
        exactly batches start_position, start_position + 1, ... of dataset(0).
        The rows before it are counted here, before the dataset is returned.

    Returns:
      A dataset of batch dicts: input_ids, input_mask, segment_ids int32
      [b, L]; masked_lm_positions, masked_lm_ids int32 [b, P];
      masked_lm_weights float32 [b, P]; next_sentence_labels int32 [b]; with
      packing also position_ids int32 [b, L].
    """
    stages = self._stages(start_position)
    return stream_stages.tf_dataset(stages.read_pool, stages.pool_rows, stages.features,
                                    self._stream_batch_size)

  def train_iterator(self, start_position: int = 0) -> Iterator[dict[str, np.ndarray]]:
    """`dataset(start_position)` as numpy batches (see `dataset`).

    With `loader` 'python' the same stages run on Python threads
    (python_stream.py), without TensorFlow; the batches are the same.
    An error raised inside the pipeline (a vocab that does not fit a shard, an
    epoch without examples) is raised here as itself, not as a TensorFlow error.
    Iterators still open at interpreter exit are closed by an atexit hook.
    With host_invariant_stream, each batch is this host's rows of the global batch.
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
    """`num_batches` batches of held-out documents, the same on every call.

    The held-out examples are taken in source order (cycled if there are
    too few) with fixed NSP choices and masks.

    Args:
      num_batches: batches to yield.

    Returns:
      An iterator of batches shaped as train_iterator's (this host's rows of them).
    """
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
  """This host's `rows` of each batch, where the stream builds the global batch (None: the
  stream builds this host's batches, taken whole)."""
  if rows is None:
    return batches
  return ({k: v[rows] for k, v in b.items()} for b in batches)
