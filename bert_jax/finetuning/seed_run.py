"""The training of one fine-tuning seed: epochs of batches from a position, logs,
checkpoints (periodic, at the end of training, on a stop signal)."""
import contextlib
import dataclasses
import functools
import json
import re
import sys
import time
from typing import Any, Optional

from etils import epath
import jax
import numpy as np

from bert_jax.batching import length_buckets
from bert_jax.checkpoints import run_checkpoints as ckpt_lib
from bert_jax.finetuning import batches as finetune_batches
from bert_jax.finetuning import evaluation
from bert_jax.runtime import ahead_compile
from bert_jax.runtime import atomic_files
from bert_jax.runtime import console
from bert_jax.runtime import stop_signals
from bert_jax.runtime import workdirs
from bert_jax.tasks import task as task_lib
from bert_jax.training import loop as training_loop
from bert_jax.training import sharding
from bert_jax.training import train_core


@dataclasses.dataclass(frozen=True)
class TrainData:
  """What a seed's epochs are cut from: the arrays a batch carries (`keys` of the task's
  training arrays), each row's length, the row count, the steps of a seed and how batches
  are cut (`plan`); with packing, how rows are packed (`pack`) and the most packed-row counts
  the step compiles for."""
  keys: tuple
  lengths: Optional[np.ndarray]
  n_train: int
  total_steps: int
  plan: finetune_batches.BatchPlan
  pack: Optional[dict] = None
  shape_limit: Optional[int] = None


@dataclasses.dataclass
class SeedRun:
  """The training of each seed: epochs of batches from a position, logs, checkpoints,
  signals, then its evaluation (`scorer`).

  `train` returns the trained state; after a stop signal (or `preempt_at`) it has saved
  a checkpoint at the step it stopped before and sets `stopped_by`.
  """
  config: Any
  train_step: ahead_compile.AheadCompiled
  schedule: Any  # the learning rate at a step, jitted (one program, not one per operation)
  ckpts: Optional[ckpt_lib.TrainCheckpoints]
  scorer: evaluation.Scorer
  out: evaluation.RunOutput
  data: TrainData
  meta: dict  # what every checkpoint's meta holds (model description, config)
  preempt_at: Optional[tuple[int, int]] = None
  stopped_by: Optional[str] = None
  # The log window the resumed checkpoint recorded (Loop.window_record), for the first seed.
  window: Optional[dict] = None
  compiled_lengths: set = dataclasses.field(default_factory=set)  # the train step's shapes

  @property
  def total_steps(self) -> int:
    return self.data.total_steps

  @property
  def is_writer(self) -> bool:
    return self.out.is_writer

  def save(self, seed: int, state, epoch: int, batch: int, per_seed: list, loop) -> None:
    """Checkpoints `state` with the position of the next batch (numbered across seeds).

    A seed's step 0 has the number of the previous seed's end of training: that checkpoint
    is kept (resumed, it evaluates the previous seed again, to the same results)."""
    step = int(state.step)
    number = (seed - self.config.seed) * self.total_steps + step
    if number in self.ckpts.all_steps():
      return
    loop.check(state, step)  # never a non-finite state
    window = loop.window_record()  # (a stop mid-window: the resumed run logs all of it)
    self.ckpts.save(number, state,
                    dict(self.meta, seed=seed, epoch=epoch, batch=batch, per_seed=per_seed,
                         **({"window": window} if window else {})))

  def compile_ahead(self, state, batches: list, start: int, steps: int) -> None:
    """Queues the programs this seed will need next (bert_jax.runtime.ahead_compile): the
    train step of each length of `batches[start:start + steps]` after the first one (packed
    rows: their counts are known only once packed), then the eval step of each eval length.
    They compile while the steps before them run."""
    scorer, state_spec = self.scorer, ahead_compile.spec(state)
    if self.data.pack is None:
      for b in length_buckets.first_of_each_length(batches[start:start + steps])[1:]:
        self.train_step.ahead(state_spec, sharding.global_batch_spec(
            length_buckets.cut(scorer.task.train_arrays, b, self.data.keys), scorer.mesh))
    for eval_set in scorer.task.eval_sets:
      eval_batches = finetune_batches.predict_batches(eval_set.arrays, scorer.batch_size,
                                                      scorer.bucketing, scorer.buckets)
      for b in length_buckets.first_of_each_length(eval_batches):
        scorer.predict_step.ahead(state_spec.params, sharding.global_batch_spec(
            length_buckets.cut(eval_set.arrays, b, task_lib.MODEL_INPUTS), scorer.mesh))

  def train(self, seed: int, state, position: tuple[int, int], per_seed: list, stop):
    c, data, task, out = self.config, self.data, self.scorer.task, self.out
    mesh, rules = self.scorer.mesh, self.scorer.rules
    step = int(state.step)
    first_epoch, skip = position
    loop = training_loop.Loop(self.ckpts, stop, "stop", self.is_writer)
    loop.resume_window(self.window)
    self.window = None
    # The ETA counts the later seeds' steps and every evaluation still to come, at the mean
    # of those done (the zero-shot one included); before any, it names them.
    later_seeds = 0 if c.eval_only else c.seed + c.seeds - 1 - seed
    mean_eval = out.split.mean("eval")
    out.logger.plan_after(
        later_seeds * self.total_steps, (later_seeds + 1) * (mean_eval or 0.0),
        "" if mean_eval is not None else
        "the evaluation" if not later_seeds else f"{later_seeds + 1} evaluations")
    # Between log lines (and while the first step compiles, and during the last save) a line
    # says where training is.
    first_step = step

    def status():
      if step == first_step:
        return "compiling the train step"
      if step < self.total_steps:
        return f"training, step {step} of {self.total_steps}"
      return f"step {step} of {self.total_steps}, saving the end of training"
    beat = console.Heartbeat(f"seed {seed}", enabled=self.is_writer, file=sys.stdout,
                             at_start=False, status=status)
    with beat:
      with out.split.phase("train"):
        for epoch in range(first_epoch, 0 if c.eval_only else int(np.ceil(c.num_epochs))):
          epoch_start, epoch_first_step = time.time(), step
          batches = list(finetune_batches.epoch_batches(
              data.plan, data.lengths, data.n_train, seed, epoch, task.sort_by_length,
              self.scorer.buckets))
          start = skip if epoch == first_epoch else 0
          # The later shapes are queued once the first step's program is lowered (see
          # ahead_compile): queue_ahead is called once, by the first step or after the loop.
          queue_ahead = functools.partial(self.compile_ahead, state, batches, start,
                                          self.total_steps - step)
          for index in range(start, len(batches)):
            if step >= self.total_steps:
              break
            if loop.stop_requested(preempt=(seed, step) == self.preempt_at):
              self.stopped_by = loop.stopped_by
              self.save(seed, state, epoch, index, per_seed, loop)
              loop.stopped(f"seed {seed} step {step}", beat)
              return state
            batch, shape = finetune_batches.train_batch(task.train_arrays, data.keys,
                                                        batches[index], data.pack)
            # The run's first compile: a stop signal there exits at once (nothing to save yet).
            first = (stop_signals.first_compile(stop=stop) if not self.compiled_lengths
                     else None)
            self.compiled_lengths.add(shape)
            with sharding.mesh_context(mesh, rules):
              batch = sharding.host_to_global(batch, mesh)
              with first or contextlib.nullcontext():
                program = self.train_step.program(state, batch, then=queue_ahead)
              queue_ahead = None
              state, metrics = program(state, batch)
            step += 1
            loop.add(metrics)
            if training_loop.due(step, c.log_every, self.total_steps):
              window = loop.take_window(state, step)
              out.logger.log(step, {
                  "loss": float(window.sums["loss"] / window.sums["steps"]),
                  "learning_rate": float(self.schedule(step - 1)),
                  "examples_per_second": window.timed("examples") / window.seconds},
                  prefix=f"seed{seed}_train_",
                  steps_per_sec=(window.steps - window.carried_steps) / window.seconds)
              beat.touch()
            if training_loop.due(step, c.checkpoint_every) and step < self.total_steps:
              self.save(seed, state, epoch, index + 1, per_seed, loop)
          if queue_ahead is not None:  # no step ran (the epoch was done): the eval programs
            queue_ahead()
          jax.block_until_ready(state.step)
          seconds = time.time() - epoch_start
          examples = (step - epoch_first_step) * c.batch_size
          out.logger.log(step, {"epoch_seconds": seconds, "epoch_examples_per_second":
                                examples / max(seconds, 1e-9)}, prefix=f"seed{seed}_train_")
          if self.is_writer:
            print(f"seed {seed}: epoch {epoch + 1} took {seconds:.1f}s ({examples} examples, "
                  f"{examples / max(seconds, 1e-9):.1f} examples/s, compilations included)",
                  flush=True)
            beat.touch()
      if self.ckpts is not None:  # the trained state outlives a stop during the evaluation
        self.save(seed, state, int(np.ceil(c.num_epochs)), 0, per_seed, loop)
    return state

  def run_seeds(self, first_seed: int, state, how: str, position: tuple[int, int],
                per_seed: list, fresh_state, stop) -> tuple[Any, Optional[dict]]:
    """Trains and evaluates each seed from `first_seed` (its state and position given; the
    later seeds' from `fresh_state(seed)`), appending each seed's results to `per_seed`.

    Returns:
      (the last seed's trained state, None), or (state, what `finetune` returns when stopped).
    """
    c = self.config
    runs = 1 if c.eval_only else c.seeds
    for seed in range(first_seed, c.seed + runs):
      if seed != first_seed:  # the first seed's state is the one made or resumed
        state, _, _, how = fresh_state(seed)
        position = (0, 0)
      if self.is_writer:
        print(f"seed {seed}: {how}; " + ("eval_only: no training, evaluating" if c.eval_only
                                          else "compiling the train step, then training"),
              flush=True)
      state = self.train(seed, state, position, per_seed, stop)
      if self.stopped_by:
        return state, {"stopped_by": self.stopped_by, "seed": seed, "step": int(state.step)}
      if self.is_writer and self.compiled_lengths:
        what, on = (("packed row counts", "packing on: ") if self.data.pack
                    else ("sequence lengths", ""))
        print(f"seed {seed}: {on}the train step is compiled for {len(self.compiled_lengths)} "
              f"{what} (at most {self.data.shape_limit}): {sorted(self.compiled_lengths)}",
              flush=True)
      try:
        per_seed.append(evaluation.evaluate_seed(self.scorer, seed, state, self.out, stop,
                                                 self.ckpts))
      except evaluation.EvaluationStopped as e:
        return state, evaluation.stopped_in_evaluation(str(e), self.ckpts, seed,
                                                       int(state.step), self.is_writer)
    return state, None


def jitted_steps(config, task, task_model, optimizer, state_shardings, mesh, rules):
  """The train and predict steps, jitted on the state's shardings (initial_state's, from the
  init function's shapes); each compiles per batch shape, those known ahead in a background
  thread (SeedRun.compile_ahead). `optimizer`: finetune_setup.optimizer's (tx, schedule,
  init_fn, prng_impl)."""
  tx, schedule, _, impl = optimizer
  batch_shard = sharding.batch_sharding(mesh)
  trace_context = lambda: sharding.mesh_context(mesh, rules)  # noqa: E731
  train_step = ahead_compile.AheadCompiled(jax.jit(
      train_core.make_train_step(task_lib.objective(task), tx, schedule,
                                 config.optimizer.grad_accum_steps, prng_impl=impl),
      in_shardings=(state_shardings, batch_shard), out_shardings=(state_shardings, None),
      donate_argnums=(0,)), trace_context)
  predict_step = ahead_compile.AheadCompiled(jax.jit(
      task_lib.predict_fn(task_model), in_shardings=(state_shardings.params, batch_shard)),
      trace_context)
  return train_step, predict_step


# A fine-tune's metrics records: a training step's (`seed0_train_loss`, ...), an epoch's
# (`seed0_train_epoch_seconds`, ...) and an evaluation's (`seed0_eval_accuracy`, ...).
_RECORD_KEY = re.compile(r"seed(\d+)_(train_epoch|train|eval)_")


def drop_records_after(workdir: str, seed: int, step: int, batch: int) -> None:
  """Rewrites workdir/metrics.jsonl without the records logged after the checkpoint that a run
  resumes (`seed` at `step`, `batch` the next batch of its epoch): those are logged again.

  Kept: every earlier seed's records, and this seed's training steps up to `step`; its epoch
  record at `step` only when the checkpoint is at the start of an epoch (the end of training
  among them: a save within the epoch comes before that epoch's record), its evaluation never
  (it follows the end of training's save). A torn last line is dropped.
  """
  path = epath.Path(workdir) / workdirs.METRICS
  if not path.exists():
    return
  text = path.read_text()
  kept = []
  for line in text.splitlines():
    try:
      record = json.loads(line)
      step_of = int(record["step"])
    except (ValueError, KeyError, TypeError):
      continue
    kinds = {m.groups() for m in map(_RECORD_KEY.match, record) if m}
    if len(kinds) != 1:  # not one of a fine-tune's records: by its step alone
      keep = step_of <= step
    else:
      (of_seed, kind), = kinds
      keep = (int(of_seed) < seed if int(of_seed) != seed else
              kind == "train" and step_of <= step or
              kind == "train_epoch" and (step_of < step or step_of == step and batch == 0))
    if keep:
      kept.append(line + "\n")
  if "".join(kept) != text:
    atomic_files.write_text(path, "".join(kept))
