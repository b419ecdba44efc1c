"""Where a host's training stream goes: its shards, each epoch's pools, and the pool and row
of any position (what a resume skips to); pure functions of their inputs."""
from typing import Callable, Sequence

from bert_jax.data.sources import shard_spec
from bert_jax.data.stream import stateless_random


def host_share(num_shards: int, process_index: int, process_count: int
               ) -> tuple[list[int], tuple[int, int]]:
  """The shards one host reads and its share (part, parts) of their documents.

  With P hosts and S >= P shards host h reads shards h, h + P, ... whole. With fewer it reads
  shard h mod S alone and splits its documents with the other hosts reading it (h, h + S, ...),
  so no host opens a shard it takes nothing from, and the shares are disjoint and complete.
  """
  if num_shards >= process_count:
    return list(range(process_index, num_shards, process_count)), (0, 1)
  shard = process_index % num_shards
  return [shard], (process_index // num_shards, len(range(shard, process_count, num_shards)))


def epoch_plan(shards: Sequence[shard_spec.ShardSpec], order_key, process_index: int,
               epoch: int, shuffle_mb: float,
               sized: Callable[[shard_spec.ShardSpec], bool]) -> list[list[int]]:
  """This host's pools of one epoch: consecutive shards of the epoch's random order, pooled
  until shuffle_mb MB of text by listed size (a shard not `sized` fills a pool)."""
  key = stateless_random.derive(order_key, process_index, epoch)
  order = stateless_random.permutation(key, len(shards))
  budget = shuffle_mb * (1 << 20)
  pools, pool, size = [], [], 0
  for i in order:
    shard = shards[i]
    pool.append(int(i))
    size += shard.size if sized(shard) else budget
    if size >= budget:
      pools.append(pool)
      pool, size = [], 0
  if pool:
    pools.append(pool)
  return pools


def locate(rows: int, plan: Callable[[int], list[list[int]]],
           pool_rows: Callable[[int, int, list[int]], int],
           no_rows: Callable[[], Exception]) -> tuple[int, int, int]:
  """(epoch, pool, row in the pool) of stream row `rows`; plan: epoch -> pools; pool_rows:
  (epoch, pool, shards) -> rows; no_rows is raised for an epoch without rows."""
  if rows == 0:
    return 0, 0, 0
  epoch = 0
  while True:
    epoch_rows = 0
    for p, shards in enumerate(plan(epoch)):
      n = pool_rows(epoch, p, shards)
      if rows < n:
        return epoch, p, rows
      rows -= n
      epoch_rows += n
    if epoch_rows == 0:
      raise no_rows()
    epoch += 1


def stream_pool(cursor: dict, k: int, pools_in: Callable[[int], int]) -> tuple[int, int]:
  """(epoch, pool) of a stream's k-th pool, counted from cursor's "start" or "at" (a tuple
  replaced whole: no lock needed); pools_in: epoch -> its pool count."""
  epoch, pool, j = cursor["at"] if k >= cursor["at"][2] else cursor["start"]
  pool += k - j
  while pool >= (n := pools_in(epoch)):
    pool -= n
    epoch += 1
  cursor["at"] = (epoch, pool, k)
  return epoch, pool
