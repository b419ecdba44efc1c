"""A training stream's two numpy stages, the state they share, and its lifecycle: run by
tf.data or python_stream, closed at interpreter exit, free heap pages returned after each pool."""
from __future__ import annotations  # annotations naming tf are not evaluated (no TensorFlow)

import atexit
import ctypes
import threading
import time
import weakref
from typing import Callable

import numpy as np

from bert_jax.data.stream import shard_tokens
from bert_jax.data.stream import stream_plan
from bert_jax.runtime.optional_tensorflow import tf

# Rows per masking call (on shard_tokens.threads()).
MASK_ROWS = 1024


def _malloc_trim():
  try:
    return ctypes.CDLL(None).malloc_trim  # glibc; absent elsewhere (macOS, musl)
  except (OSError, AttributeError):
    return None


_MALLOC_TRIM = _malloc_trim()


def return_free_pages() -> None:
  """Gives the free pages inside malloc's heaps back to the OS (glibc's malloc_trim).

  A pool's temporaries leave free pages scattered through the heaps, which the train step's
  temporaries do not reuse, so peak RSS would grow by them. Called once per pool and stage,
  after the first pool (off the first batch's path).
  """
  if _MALLOC_TRIM is not None:
    _MALLOC_TRIM(0)


# Generators of PretrainData.train_iterator not yet closed. A tf.data iterator deleted during interpreter
# finalization waits for its in-flight numpy functions, which can no longer take the GIL: the
# exit would hang. atexit callbacks run before that, while those threads can still finish.
OPEN_ITERATORS = weakref.WeakSet()


# The numpy functions of every dataset: how many are running and when one last ended; refused
# once the interpreter exits (_close_open_iterators).
_CALLS = {"running": 0, "last": 0.0}
_CALLS_LOCK = threading.Lock()
_EXITING = threading.Event()


def _exit_safe(fn):
  """fn as a dataset's numpy function: counted while it runs, refused at exit."""
  def run(*args):
    with _CALLS_LOCK:
      _CALLS["running"] += 1
    try:
      if _EXITING.is_set():
        raise RuntimeError("the interpreter is exiting")
      return fn(*args)
    finally:
      with _CALLS_LOCK:
        _CALLS["running"] -= 1
        _CALLS["last"] = time.monotonic()
  return run


@atexit.register
def _close_open_iterators() -> None:
  for it in list(OPEN_ITERATORS):
    it.close()
  # Iterators of dataset() that the program did not delete: from now on their numpy functions
  # are refused (an error that parks each stage) and the running ones finish, so that when
  # finalization deletes the iterators (which waits for calls in flight) tf.data's threads
  # are parked, not waiting for the GIL.
  _EXITING.set()
  deadline = time.monotonic() + 60
  while time.monotonic() < deadline:
    with _CALLS_LOCK:
      if _CALLS["running"] == 0 and time.monotonic() - _CALLS["last"] > 0.2:
        break
    time.sleep(0.01)
  # No stage runs now: the thread pool is closed here, while the interpreter is whole (left
  # running, its finalizer ran after multiprocessing's modules were torn down and printed an
  # ignored AttributeError at the exit of a program that had imported TensorFlow late).
  if shard_tokens.threads.cache_info().currsize:
    shard_tokens.threads().close()


class PoolStages:
  """The two numpy stages of one stream from a start row, and what they share.

  `read_pool(k)` reads the k-th pool's shards into the stash and returns (epoch, pool, rows to
  drop); `pool_rows(epoch, pool, drop)` lays out and masks its rows. Pools after the first wait
  for `first_rows`, so the first batch gets all the cores. A stage's exception also goes to
  `on_failure` (tf.data hides it) and ends the stream. `start` is stream_plan.locate's.
  """

  def __init__(self, start: tuple[int, int, int], *, epoch_plan: Callable, read_shard: Callable,
               pool_of: Callable, masked_rows: Callable, features: dict,
               no_rows_error: Callable, on_failure: Callable):
    self._epoch_plan, self._read_shard, self._pool_of = epoch_plan, read_shard, pool_of
    self._masked_rows, self.features = masked_rows, features
    self._no_rows_error, self._on_failure = no_rows_error, on_failure
    self._drop = start[2]
    self._cursor = {"start": start[:2] + (0,), "at": start[:2] + (0,)}
    self._stash, self._progress = {}, {}  # read shards by (epoch, pool); epoch -> [pools, rows]
    self._lock = threading.Lock()
    self.first_rows = threading.Event()

  def read_pool(self, k) -> tuple[np.int64, np.int64, np.int64]:
    try:
      k = int(k)
      if k:
        self.first_rows.wait()
      epoch, index = stream_plan.stream_pool(self._cursor, k,
                                             lambda e: len(self._epoch_plan(e)))
      self._stash[epoch, index] = {i: self._read_shard(i)
                                   for i in self._epoch_plan(epoch)[index]}
      if k:
        return_free_pages()
      return np.int64(epoch), np.int64(index), np.int64(0 if k else self._drop)
    except Exception as e:  # pylint: disable=broad-except
      self._on_failure(e)
      self.first_rows.set()  # nothing waits on a stream that failed
      raise

  def pool_rows(self, epoch, index, drop) -> tuple[np.ndarray, ...]:
    try:
      first = not self.first_rows.is_set()
      epoch, index, drop = int(epoch), int(index), int(drop)
      plan = self._epoch_plan(epoch)
      pool = self._pool_of(epoch, index, plan[index], self._stash.pop((epoch, index)))
      n = pool.num_rows
      with self._lock:
        done = self._progress.setdefault(epoch, [0, 0])
        done[0] += 1
        done[1] += n
        if done[0] == len(plan) and done[1] == 0:
          raise self._no_rows_error()
      # Laid out and masked here, a pool at a time, in chunks on the threads, each chunk
      # written into the pool's output arrays (one copy of the pool's rows, not unmasked rows,
      # masked chunks and their concatenation). Rows are keyed by their row in the pool, so
      # the masks do not depend on the chunks or on how rows are batched; the per-batch stage
      # after rebatch is a slice in C++, not a numpy call competing for the GIL.
      out = {k: np.empty((max(n - drop, 0),) + shape, dtype)
             for k, (dtype, shape) in self.features.items()}

      def fill(lo):
        hi = min(lo + MASK_ROWS, n)
        rows = self._masked_rows(pool, epoch, index, lo, hi)
        for k, v in out.items():
          v[lo - drop:hi - drop] = rows[k]

      shard_tokens.threads().map(fill, range(drop, n, MASK_ROWS))
      pool = None  # freed before the trim
      if not first:
        return_free_pages()
      return tuple(out.values())
    except Exception as e:  # pylint: disable=broad-except
      self._on_failure(e)
      raise
    finally:
      self.first_rows.set()


def tf_dataset(read_stage, rows_stage, features: dict, batch_size: int) -> tf.data.Dataset:
  """The stream as tf.data: PoolStages' stages as numpy functions, rebatched to `batch_size`."""

  @tf.autograph.experimental.do_not_convert
  def read_pool(k):
    out = tf.numpy_function(_exit_safe(read_stage), [k], [tf.int64] * 3, stateful=True)
    for x in out:
      x.set_shape([])
    return tuple(out)

  @tf.autograph.experimental.do_not_convert
  def pool_rows(epoch, index, drop):
    out = tf.numpy_function(_exit_safe(rows_stage), [epoch, index, drop],
                            [tf.as_dtype(dtype) for dtype, _ in features.values()],
                            stateful=True)
    rows = {}
    for (name, (_, shape)), x in zip(features.items(), out):
      x.set_shape((None,) + shape)
      rows[name] = x
    return rows

  ds = tf.data.Dataset.counter()  # the stream's k-th pool
  # Two stages, each one pool at a time: pool i + 1 is read and tokenized (threads without
  # the GIL) while pool i's numpy stages run (on 68 MB, 1.25x the throughput of one stage);
  # the stream's first pool has the cores to itself (PoolStages.read_pool).
  ds = ds.map(read_pool, num_parallel_calls=1, deterministic=True)
  ds = ds.map(pool_rows, num_parallel_calls=1, deterministic=True)
  ds = ds.rebatch(batch_size, drop_remainder=True)
  return ds.prefetch(tf.data.AUTOTUNE)
