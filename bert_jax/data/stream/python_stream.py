"""The pretraining stream's numpy stages driven by Python threads instead of tf.data.

The same read_pool / pool_rows stages run each on its own thread with a queue of one pool
between and after them, and rows are cut into batches as tf.data's rebatch cuts them: the same
batches bit for bit. A stage's error is raised by the iterator as itself; closing or deleting
the iterator stops and joins both threads.
"""
import itertools
import queue
import threading
from typing import Callable, Iterator, Sequence

import numpy as np

# How often a thread blocked on a full or empty queue looks whether the stream was closed.
_POLL_S = 0.05


class _Closed(Exception):
  """The stream was closed while a thread waited."""


def batches(read_pool: Callable[[int], tuple], pool_rows: Callable[..., tuple],
            first_rows: threading.Event, names: Sequence[str], batch_size: int
            ) -> Iterator[dict[str, np.ndarray]]:
  """The stream's batches (fresh arrays, not views of a pool), made on background threads.

  read_pool: k -> (epoch, pool, drop); pool_rows: (epoch, pool, drop) -> one array per feature
  in `names` order; first_rows: set once the first pool's rows are made (or a stage failed).
  """
  closed = threading.Event()
  pools, rows = queue.Queue(maxsize=1), queue.Queue(maxsize=1)

  def put(q: queue.Queue, item) -> None:
    while True:
      try:
        q.put(item, timeout=_POLL_S)
        return
      except queue.Full:
        if closed.is_set():
          raise _Closed() from None

  def get(q: queue.Queue):
    while True:
      try:
        return q.get(timeout=_POLL_S)
      except queue.Empty:
        if closed.is_set():
          raise _Closed() from None

  def run_reader() -> None:
    try:
      for k in itertools.count():
        while k and not first_rows.wait(_POLL_S):
          if closed.is_set():
            return
        if closed.is_set():
          return
        put(pools, (None, read_pool(k)))
    except _Closed:
      pass
    except BaseException as e:  # pylint: disable=broad-except  (raised by the consumer)
      _put_error(put, pools, e)

  def run_rows() -> None:
    try:
      while True:
        error, pool = get(pools)
        if error is not None:
          put(rows, (error, None))
          return
        put(rows, (None, pool_rows(*pool)))
    except _Closed:
      pass
    except BaseException as e:  # pylint: disable=broad-except
      _put_error(put, rows, e)

  threads = [threading.Thread(target=run_reader, name="bert_jax-read-pools", daemon=True),
             threading.Thread(target=run_rows, name="bert_jax-pool-rows", daemon=True)]
  for t in threads:
    t.start()
  try:
    pending, have = [], 0  # pieces of the next batch: tuples of arrays, and their rows
    while True:
      error, arrays = get(rows)
      if error is not None:
        raise error
      n, lo = len(arrays[0]), 0
      while lo < n:
        take = min(batch_size - have, n - lo)
        pending.append(tuple(a[lo:lo + take] for a in arrays))
        have, lo = have + take, lo + take
        if have == batch_size:
          yield {name: np.concatenate([p[i] for p in pending]) for i, name in enumerate(names)}
          pending, have = [], 0
  finally:
    closed.set()
    for t in threads:
      t.join()


def _put_error(put, q: queue.Queue, e: BaseException) -> None:
  try:
    put(q, (e, None))
  except _Closed:
    pass
