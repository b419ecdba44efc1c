"""Fine-tuning's batches: the bucket lengths of a run, each epoch's training batches, a
process's share of one, and the batches an evaluation runs over."""
import dataclasses
from typing import Optional, Union

import jax
import numpy as np

from bert_jax.batching import bucket_cost
from bert_jax.batching import length_buckets
from bert_jax.batching import packing as packing_lib


@dataclasses.dataclass(frozen=True)
class BatchPlan:
  """How a fine-tuning run cuts its batches, read once from its config.

  Attributes:
    seq_len: max_seq_length, the longest row (every row when neither bucketed nor packed).
    batch_size: the global training batch.
    packing: several examples to a row.
    length_bucketing: batches cut to bucket lengths (not with packing).
    buckets: length_buckets parsed: 'auto', 'all' or the lengths.
  """
  seq_len: int
  batch_size: int
  packing: bool
  length_bucketing: bool
  buckets: Union[str, tuple[int, ...]]

  @classmethod
  def from_config(cls, config) -> "BatchPlan":
    """The plan of a fine-tuning config; ValueError: length_buckets malformed."""
    seq_len = config.max_seq_length
    return cls(seq_len, config.batch_size, config.packing, config.length_bucketing,
               length_buckets.parse_buckets(config.length_buckets, seq_len))

  @property
  def bucketed(self) -> bool:
    """Batches cut to bucket lengths (length_bucketing without packing)."""
    return self.length_bucketing and not self.packing


def run_buckets(plan: BatchPlan, model_cfg, train_lengths: Optional[np.ndarray], eval_lengths,
                epochs: float) -> Optional[tuple[int, ...]]:
  """The bucket lengths of a length-bucketed run (None: not bucketed, or packed).

  `length_buckets` 'auto' keeps a length only where the padding it saves outweighs its
  compilations (bucket_cost.auto_buckets: length_buckets.choose_buckets at this platform's
  cost): training rows count `epochs` times, eval rows a third (a forward pass).
  Train and eval share the lengths, so the run compiles at most one train and one eval
  program per length.
  """
  if not plan.bucketed:
    return None
  if plan.buckets != "auto":
    return plan.buckets
  groups = [(x, 1.0 / 3.0) for x in eval_lengths]
  if train_lengths is not None:
    groups.append((train_lengths, epochs))
  return bucket_cost.auto_buckets(model_cfg, groups, plan.seq_len)


def epoch_batches(plan: BatchPlan, lengths: np.ndarray, n_train: int, seed: int,
                  epoch: int, sort_by_length: bool = True,
                  buckets: Optional[tuple[int, ...]] = None) -> list[length_buckets.Batch]:
  """The training batches of one epoch: a permutation seeded by (seed, epoch), remainder
  dropped; with length_bucketing (and no packing), sorted within windows (within each
  batch only, when not `sort_by_length`: the task's loss compares a batch's examples)
  and cut to bucket lengths (`buckets`; default every fixed length)."""
  order = np.random.default_rng([seed, epoch]).permutation(n_train)
  if not plan.bucketed:  # packed rows are max_seq_length long
    return length_buckets.sequential_batches(order, plan.batch_size, plan.seq_len,
                                             pad_last=False)
  return length_buckets.train_batches(
      lengths, order, plan.batch_size,
      buckets or length_buckets.bucket_lengths(plan.seq_len),
      np.random.default_rng([seed, epoch, 1]),
      length_buckets.WINDOW_BATCHES if sort_by_length else 1)


def train_batch(arrays: dict, keys, batch: length_buckets.Batch,
                pack: Optional[dict]) -> tuple[dict, int]:
  """This process's share of a global training batch, and the shape it has.

  Args:
    arrays: the training arrays (the same on every process).
    keys: the features to take.
    batch: the global batch.
    pack: None, or packing_lib.pack_batch's keyword arguments (seq_len, step,
      pad_id, position_offset): the global batch is packed on every process
      alike and each takes its share of rows and of examples.

  Returns:
    (host-local batch, its sequence length or, packed, its global row count).
  """
  pi, pc = jax.process_index(), jax.process_count()
  if pack is None:
    return length_buckets.cut(arrays, length_buckets.host_share(batch, pi, pc), keys), batch.length
  packed = packing_lib.pack_batch(length_buckets.cut(arrays, batch, keys), **pack)
  share = lambda x: x[pi * (len(x) // pc):(pi + 1) * (len(x) // pc)]  # noqa: E731
  return jax.tree.map(share, packed), len(packed["input_ids"])


def predict_batches(arrays: dict, batch_size: int, bucketing: bool,
                    buckets: Optional[tuple[int, ...]]) -> list[length_buckets.Batch]:
  """The global batches `evaluation.predict` runs over `arrays` (its arguments of the same
  names)."""
  n, seq_len = arrays["input_ids"].shape[0], arrays["input_ids"].shape[-1]  # [n, (k,) len]
  if bucketing:
    return length_buckets.eval_batches(length_buckets.row_lengths(arrays["input_mask"]),
                                       batch_size,
                                       buckets or length_buckets.bucket_lengths(seq_len))
  return length_buckets.sequential_batches(np.arange(n), batch_size, seq_len, pad_last=True)


def packing(plan: BatchPlan, mesh, tokenizer, model_cfg,
            buckets: Optional[tuple[int, ...]]) -> tuple[Optional[dict], int]:
  """(pack, shape_limit): packing_lib.pack_batch's keyword arguments (None: not packed), and the
  most training batch shapes the run compiles (packed row counts, or bucket lengths)."""
  if plan.packing:
    shards = mesh.shape["data"] * mesh.shape["fsdp"]
    pack = dict(seq_len=plan.seq_len, step=packing_lib.row_step(plan.batch_size, shards),
                pad_id=tokenizer.pad_id, position_offset=model_cfg.position_offset)
    return pack, -(-plan.batch_size // pack["step"])
  return None, len(buckets) if plan.length_bucketing else 1


def steps(config, task) -> tuple[int, int, int, Optional[np.ndarray]]:
  """(training rows, steps an epoch, steps in all, the training rows' lengths) of a run.

  Raises:
    ValueError: the training data gives no step (when the run trains).
  """
  n_train = len(task.train_arrays["input_ids"]) if task.train_arrays else 0
  steps_per_epoch = n_train // config.batch_size
  total_steps = int(steps_per_epoch * config.num_epochs)
  if not config.eval_only and total_steps <= 0:
    raise ValueError(f"{task.name}: {n_train} training rows give no step of batch_size "
                     f"{config.batch_size} over num_epochs {config.num_epochs}")
  train_lengths = length_buckets.row_lengths(task.train_arrays["input_mask"]) if n_train else None
  return n_train, steps_per_epoch, total_steps, train_lengths
