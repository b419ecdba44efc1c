"""Where a host's training stream goes: its share of the shards, each epoch's pools of them,
and the pool and row of any position (what a resume skips to). Pure functions of the shard
list, the hosts, the keys and, for positions, the rows each pool holds."""
from typing import Callable, Sequence

from bert_jax.data.sources import shard_spec
from bert_jax.data.stream import stateless_random


def host_share(num_shards: int, process_index: int, process_count: int
               ) -> tuple[list[int], tuple[int, int]]:
  """The shards one host reads (positions in the source's list) and its share of their
  documents, (part, parts): every parts-th training (and held-out) document from the part-th.

  With at least as many shards as hosts, host h reads shards h, h + P, ... whole. With fewer,
  host h reads one shard, h mod S, and takes its share of that shard's documents with the
  other hosts that read it (h, h + S, ...): so no host opens a shard it takes nothing from (a
  host reading the whole corpus every epoch is what costs on a pod), and the hosts' documents
  are still disjoint and together the whole corpus. One shard and P hosts: host h takes
  documents h, h + P, ...
  """
  if num_shards >= process_count:
    return list(range(process_index, num_shards, process_count)), (0, 1)
  shard = process_index % num_shards
  return [shard], (process_index // num_shards, len(range(shard, process_count, num_shards)))


def epoch_plan(shards: Sequence[shard_spec.ShardSpec], order_key, process_index: int,
               epoch: int, shuffle_mb: float,
               sized: Callable[[shard_spec.ShardSpec], bool]) -> list[list[int]]:
  """This host's pools of one training epoch, in stream order: lists of shard positions.

  Consecutive shards of the epoch's random order are pooled until a pool holds shuffle_mb MB
  of text (sizes from the shard list: no reading; a shard whose size is not bytes,
  `sized(shard)` False, fills a pool).
  """
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
  """(epoch, pool, row in the pool) of training row `rows` of a stream.

  Args:
    rows: the row's position in the stream.
    plan: epoch -> its pools (epoch_plan).
    pool_rows: (epoch, pool, its shards) -> the rows it holds.
    no_rows: the error for an epoch without rows (raised, not looped on).
  """
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
  """(epoch, pool) of a stream's k-th pool.

  cursor: "start" and "at", (epoch, pool, k) of the stream's first pool and of the last one
    located, from which this one is counted (a tuple replaced whole: no lock needed).
  pools_in: epoch -> its number of pools.
  """
  epoch, pool, j = cursor["at"] if k >= cursor["at"][2] else cursor["start"]
  pool += k - j
  while pool >= (n := pools_in(epoch)):
    pool -= n
    epoch += 1
  cursor["at"] = (epoch, pool, k)
  return epoch, pool
