r"""Fine-tuning entry point (GLUE, SQuAD, NER, and every task in bert_jax/tasks).

  python -m bert_jax.finetune --config configs/glue.py:task=mrpc --workdir DIR \
      --config.init_checkpoint=CKPT --config.data_dir=GLUE_DIR
  python -m bert_jax.finetune --config configs/squad.py:version=1.1 --workdir DIR \
      --config.init_checkpoint=CKPT --config.data_dir=SQUAD_DIR
  python -m bert_jax.finetune --config configs/ner.py --workdir DIR \
      --config.init_checkpoint=CKPT --config.data_dir=CONLL_DIR
  python -m bert_jax.finetune --config configs/sentence_embeddings.py --workdir DIR \
      --config.init_checkpoint=CKPT --config.train_file=F --config.eval_file=E \
      --config.loss=cosent

CKPT is any bert_jax checkpoint: a pretraining workdir (or its checkpoints/),
a params bundle, or a Hugging Face / Google checkpoint converted with
`python -m bert_jax.convert`; its model config and vocab come with it. Only
params are taken from it: the pooler is kept when present, task heads start
fresh (`--config.eval_only=true` instead evaluates the checkpoint's own head,
e.g. the export/ of an earlier fine-tuning run).

One linear program, on the training core that pretraining uses: mesh -> checkpoint
(config, vocab, params) -> task data (every split read and encoded first, so
bad data fails fast) -> per seed: optimizer -> initial state (the shared
initialisation policy) -> jit(train_step) -> epochs -> padded eval of every
example. With length_bucketing (GLUE's default) each training and eval batch is
cut to the shortest of a few fixed lengths that holds its longest row
(bert_jax.data.length_buckets; the step compiles once per length, logged);
with packing each training batch's examples share rows (bert_jax.tasks.packing).
Writes workdir/eval_results.json (dev metrics; the mean over `seeds`
with `<metric>_std` when seeds > 1; per-seed values in
eval_results_per_seed.json), prediction files (GLUE: predictions/<TASK>.tsv,
MNLI also AX.tsv; SQuAD: predictions.json, nbest_predictions.json,
null_odds.json; NER: predictions/valid.txt, test.txt; sentence embeddings:
predictions/eval_cosine.txt), metrics.jsonl,
TensorBoard logs, and the fine-tuned bundle in workdir/export (prediction files and export are of the last seed).

Preemption: the training state is saved to workdir/finetune_checkpoints every
`checkpoint_every` steps, at the end of each seed's training (before its evaluation) and
on SIGTERM / SIGINT (the run then stops after the save, with exit status 128 + the
signal's number: 143 and 130); a signal during an evaluation stops it within a batch,
the end-of-training checkpoint kept; one that arrives while the results and the export
are written lets them finish. So a signal at any moment leaves either the finished
export or a checkpoint, and the same command resumes from the newest checkpoint (seed,
epoch, batch within it, dropout key, the finished seeds' results) to the uninterrupted
run's results, bitwise on the CPU. A checkpoint saved with other settings is refused in
one line (RESUME_MAY_CHANGE lists what may change).

The workdir records its run in run.json (bert_jax.training.workdir_owner): given again
once the run has finished, the same command prints the results and does nothing else;
another config is refused in one line unless `--config.start_over=True` sets the earlier
run's files aside (before_start_over/) first.
"""
import dataclasses
import functools
import json
import time
from typing import Any, Optional, Sequence

from etils import epath
import flax.linen as nn
import jax
from jax.experimental import multihost_utils
import ml_collections
import numpy as np
import optax

from bert_jax import cli
from bert_jax.data import length_buckets
from bert_jax.data import tokenizer as tokenizer_lib
from bert_jax.modeling import bundle
from bert_jax.modeling import flops
from bert_jax.modeling import model as model_lib
from bert_jax.runtime import atomic_files
from bert_jax.runtime import compile_cache
from bert_jax.runtime import json_file
from bert_jax.runtime import optional_tensorflow
from bert_jax.runtime import stop_signals
from bert_jax.runtime import time_split
from bert_jax.runtime import train_log
from bert_jax.runtime import workdir_layout
from bert_jax.tasks import packing
from bert_jax.tasks import registry as task_registry
from bert_jax.tasks import task as task_lib
from bert_jax.training import ahead_compile
from bert_jax.training import checkpoint as ckpt_lib
from bert_jax.training import loop as training_loop
from bert_jax.training import config_sections
from bert_jax.training import optimizer as opt_lib
from bert_jax.training import sharding
from bert_jax.training import train_core
from bert_jax.training import workdir_owner

time_split.compile_clock()  # compilations from here on count in the run's time split


def check_config(config, mesh) -> None:
  """Fails fast, with the offending key named, on configs that cannot run."""
  def bad(msg):
    raise ValueError(f"bad config: {msg}")
  if not config.init_checkpoint:
    bad("init_checkpoint is required (a bundle, a pretraining workdir or its checkpoints dir; "
        "convert Hugging Face / Google checkpoints with python -m bert_jax.convert)")
  if config.data_source == "tfds":
    optional_tensorflow.require_tfds("bad config: data_source='tfds'")
  train_core.check_batch_config(config, mesh, ("batch_size", "eval_batch_size"))
  config_sections.check_model(config.model)
  config_sections.check_minimums(config, config_sections.MINIMUMS)
  if config.max_train_examples < 0:
    bad(f"max_train_examples must be >= 0 (0: all), got {config.max_train_examples}")
  train_core.check_attention_impl(config.model)
  if config.num_epochs <= 0 and not config.eval_only:
    bad(f"num_epochs must be positive, got {config.num_epochs}")
  opt_lib.check_config(config.optimizer, config.learning_rate)
  if not 0 <= config.warmup_fraction <= 1:
    bad(f"warmup_fraction must be in [0, 1], got {config.warmup_fraction}")
  if config.layerwise_lr_decay <= 0:
    bad(f"layerwise_lr_decay must be positive (1.0: off), got {config.layerwise_lr_decay}")
  if config.seeds <= 0:
    bad(f"seeds must be positive, got {config.seeds}")
  if config.log_every < 1:
    bad(f"log_every must be >= 1 (steps between metrics lines), got {config.log_every}")
  try:
    length_buckets.parse_buckets(config.length_buckets, config.max_seq_length)
  except ValueError as e:
    bad(str(e))
  if config.packing and config.optimizer.grad_accum_steps != 1:
    bad(f"packing needs optimizer.grad_accum_steps 1 (got {config.optimizer.grad_accum_steps}): "
        "packed rows do not split into microbatches; --config.packing=False to accumulate")
  task_registry.check_config(config)


def check_eval_head(task_model: task_lib.TaskModel, pretrained: ckpt_lib.Pretrained,
                    seq_len: int) -> None:
  """Eval-only needs the task's own head in the checkpoint, with the task's outputs.

  Runs before any data is read (abstract shapes only).

  Raises:
    ValueError: the head is missing, or has another number of outputs.
  """
  head = task_model.head
  if not head:  # a model without a head (sentence embeddings) evaluates the encoder as it is
    return
  if head not in pretrained.params:
    raise ValueError(f"eval_only: {pretrained.source} has no {head!r} head (its heads: "
                     f"{list(bundle.heads_of(pretrained.params))}); evaluate a checkpoint "
                     f"fine-tuned on {task_model.name} (the export/ folder of a fine-tuning "
                     "workdir)")
  shapes = jax.eval_shape(lambda: nn.unbox(task_lib.init_fn(task_model, seq_len)(
      jax.random.PRNGKey(0))))
  want = tuple(shapes[head]["kernel"].shape)
  got = tuple(np.shape(pretrained.params[head]["kernel"]))
  if want != got:
    raise ValueError(f"eval_only: {pretrained.source} has a {head!r} head with {got[-1]} "
                     f"outputs (kernel {got}) but task {task_model.name} needs {want[-1]} "
                     f"(kernel {want})")


def run_buckets(config, model_cfg, train_lengths: Optional[np.ndarray], eval_lengths,
                epochs: float) -> Optional[tuple[int, ...]]:
  """The bucket lengths of a length-bucketed run (None: not bucketed, or packed).

  `length_buckets` 'auto' keeps a length only where the padding it saves outweighs its
  compilations (flops.auto_buckets: length_buckets.choose_buckets at this platform's
  cost): training rows count `epochs` times, eval rows a third (a forward pass).
  Train and eval share the lengths, so the run compiles at most one train and one eval
  program per length.
  """
  if config.packing or not config.length_bucketing:
    return None
  setting = length_buckets.parse_buckets(config.length_buckets, config.max_seq_length)
  if setting != "auto":
    return setting
  groups = [(x, 1.0 / 3.0) for x in eval_lengths]
  if train_lengths is not None:
    groups.append((train_lengths, epochs))
  return flops.auto_buckets(model_cfg, groups, config.max_seq_length)


def epoch_batches(config, lengths: np.ndarray, n_train: int, seed: int,
                  epoch: int, sort_by_length: bool = True,
                  buckets: Optional[tuple[int, ...]] = None) -> list[length_buckets.Batch]:
  """The training batches of one epoch: a permutation seeded by (seed, epoch), remainder
  dropped; with length_bucketing (and no packing), sorted within windows (within each
  batch only, when not `sort_by_length`: the task's loss compares a batch's examples)
  and cut to bucket lengths (`buckets`; default every fixed length)."""
  order = np.random.default_rng([seed, epoch]).permutation(n_train)
  if config.packing or not config.length_bucketing:  # packed rows are max_seq_length long
    return length_buckets.sequential_batches(order, config.batch_size, config.max_seq_length,
                                             pad_last=False)
  return length_buckets.train_batches(
      lengths, order, config.batch_size,
      buckets or length_buckets.bucket_lengths(config.max_seq_length),
      np.random.default_rng([seed, epoch, 1]),
      length_buckets.WINDOW_BATCHES if sort_by_length else 1)


def train_batch(arrays: dict, keys, batch: length_buckets.Batch,
                pack: Optional[dict]) -> tuple[dict, int]:
  """This process's share of a global training batch, and the shape it has.

  Args:
    arrays: the training arrays (the same on every process).
    keys: the features to take.
    batch: the global batch.
    pack: None, or packing.pack_batch's keyword arguments (seq_len, step,
      pad_id, position_offset): the global batch is packed on every process
      alike and each takes its share of rows and of examples.

  Returns:
    (host-local batch, its sequence length or, packed, its global row count).
  """
  pi, pc = jax.process_index(), jax.process_count()
  if pack is None:
    return length_buckets.cut(arrays, length_buckets.host_share(batch, pi, pc), keys), batch.length
  packed = packing.pack_batch(length_buckets.cut(arrays, batch, keys), **pack)
  share = lambda x: x[pi * (len(x) // pc):(pi + 1) * (len(x) // pc)]  # noqa: E731
  return jax.tree.map(share, packed), len(packed["input_ids"])


def predict_batches(arrays: dict, batch_size: int, bucketing: bool,
                    buckets: Optional[tuple[int, ...]]) -> list[length_buckets.Batch]:
  """The global batches `predict` runs over `arrays` (its arguments of the same names)."""
  n, seq_len = arrays["input_ids"].shape[0], arrays["input_ids"].shape[-1]  # [n, (k,) len]
  if bucketing:
    return length_buckets.eval_batches(length_buckets.row_lengths(arrays["input_mask"]),
                                       batch_size,
                                       buckets or length_buckets.bucket_lengths(seq_len))
  return length_buckets.sequential_batches(np.arange(n), batch_size, seq_len, pad_last=True)


# An evaluation says how far it is every this many seconds (a long one is never silent).
PROGRESS_SECONDS = 10.0


class EvaluationStopped(Exception):
  """A stop signal arrived during an evaluation (which then stops within a batch)."""


def predict(predict_step, params, arrays: dict, batch_size: int, mesh, rules=(),
            bucketing: bool = False, buckets: Optional[tuple[int, ...]] = None,
            stop: Optional[stop_signals.StopSignals] = None,
            progress: Optional[str] = None) -> dict:
  """Model outputs for every row of `arrays` (padded to whole batches, never dropped).

  Args:
    predict_step: jitted fn(params, global batch) -> outputs.
    params: the params.
    arrays: feature arrays, all rows (the same on every host).
    batch_size: global eval batch size.
    mesh: the device mesh.
    rules: logical -> mesh axis rules.
    bucketing: rows sorted by length and each batch cut to its bucket length
      (outputs must then be per example, [batch, ...] of no token axis).
    buckets: the bucket lengths (default: every fixed length up to the arrays' length).
    stop: the run's stop signals, checked before each batch.
    progress: a label: a line every PROGRESS_SECONDS says how many batches are done.

  Returns:
    Outputs gathered on every host as numpy, [n, ...] for the n rows, in row order.

  Raises:
    EvaluationStopped: a stop signal arrived.
  """
  n = arrays["input_ids"].shape[0]
  batches = predict_batches(arrays, batch_size, bucketing, buckets)
  pi, pc = jax.process_index(), jax.process_count()
  chunks = []
  start = said = time.time()
  for done, batch in enumerate(batches):
    if stop is not None and stop.name:
      raise EvaluationStopped(stop.name)
    if progress and time.time() - said >= PROGRESS_SECONDS:
      said = time.time()
      print(f"{progress}: {done} of {len(batches)} batches ({said - start:.0f} s)", flush=True)
    local = length_buckets.cut(arrays, length_buckets.host_share(batch, pi, pc),
                               task_lib.MODEL_INPUTS)
    with sharding.mesh_context(mesh, rules):
      out = predict_step(params, sharding.host_to_global(local, mesh))
    chunks.append(multihost_utils.process_allgather(out, tiled=True))
  return length_buckets.scatter_outputs(jax.device_get(chunks), batches, n)


# Config keys a resumed fine-tune may change without saying so: they change neither a step
# nor the data order (how often to log or save, the eval batch, the mesh, the compilation
# cache, the attention kernel and rematerialisation: the same math). Others need
# config.resume_allow_changes; batch_size never changes (the position counts its batches).
RESUME_MAY_CHANGE = ("log_every", "checkpoint_every", "keep_checkpoints", "eval_batch_size",
                     "resume_allow_changes", "start_over", "compile_cache", "mesh.",
                     "model.attention_impl", "model.remat")
# What a fine-tuning run leaves in its workdir (set aside whole by --config.start_over).
RUN_FILES = (workdir_layout.RESULTS, workdir_layout.RESULTS_PER_SEED, "predictions",
             "predictions.json", "nbest_predictions.json", "null_odds.json",
             workdir_layout.METRICS, workdir_layout.TENSORBOARD, workdir_layout.EXPORT,
             workdir_layout.FINETUNE_CHECKPOINTS, workdir_layout.RUN_FILE)


@dataclasses.dataclass
class SeedRun:
  """The training of one seed: epochs of batches from a position, logs, checkpoints, signals.

  `train` returns the trained state; after a stop signal (or `preempt_at`) it has saved
  a checkpoint at the step it stopped before and sets `stopped_by`.
  """
  config: Any
  train_step: ahead_compile.AheadCompiled
  predict_step: ahead_compile.AheadCompiled
  schedule: Any
  ckpts: Optional[ckpt_lib.TrainCheckpoints]
  logger: train_log.RunLogger
  split: time_split.TimeSplit
  task: Any
  keys: tuple
  pack: Optional[dict]
  train_lengths: Optional[np.ndarray]
  n_train: int
  buckets: tuple
  total_steps: int
  is_writer: bool
  mesh: Any
  rules: Any
  meta: dict  # what every checkpoint's meta holds (model description, config)
  preempt_at: Optional[tuple[int, int]] = None
  stopped_by: Optional[str] = None
  compiled_lengths: set = dataclasses.field(default_factory=set)  # the train step's shapes

  def save(self, seed: int, state, epoch: int, batch: int, per_seed: list, loop) -> None:
    """Checkpoints `state` with the position of the next batch (numbered across seeds).

    A seed's step 0 has the number of the previous seed's end of training: that checkpoint
    is kept (resumed, it evaluates the previous seed again, to the same results)."""
    step = int(state.step)
    number = (seed - self.config.seed) * self.total_steps + step
    if number in self.ckpts.all_steps():
      return
    loop.check(state, step)  # never a non-finite state
    self.ckpts.save(number, state,
                    dict(self.meta, seed=seed, epoch=epoch, batch=batch, per_seed=per_seed))

  def compile_ahead(self, state, batches: list, start: int, steps: int) -> None:
    """Queues the programs this seed will need next (bert_jax.training.ahead_compile): the
    train step of each length of `batches[start:start + steps]` after the first one (packed
    rows: their counts are known only once packed), then the eval step of each eval length.
    They compile while the steps before them run."""
    c = self.config
    state_spec = ahead_compile.spec(state)
    if self.pack is None:
      for b in length_buckets.first_of_each_length(batches[start:start + steps])[1:]:
        self.train_step.ahead(state_spec, sharding.global_batch_spec(
            length_buckets.cut(self.task.train_arrays, b, self.keys), self.mesh))
    for eval_set in self.task.eval_sets:
      eval_batches = predict_batches(eval_set.arrays, c.eval_batch_size, c.length_bucketing,
                                     self.buckets)
      for b in length_buckets.first_of_each_length(eval_batches):
        self.predict_step.ahead(state_spec.params, sharding.global_batch_spec(
            length_buckets.cut(eval_set.arrays, b, task_lib.MODEL_INPUTS), self.mesh))

  def train(self, seed: int, state, position: tuple[int, int], per_seed: list, stop):
    c = self.config
    step = int(state.step)
    first_epoch, skip = position
    loop = training_loop.Loop(self.ckpts, stop, "stop", self.is_writer)
    with self.split.phase("train"):
      for epoch in range(first_epoch, 0 if c.eval_only else int(np.ceil(c.num_epochs))):
        epoch_start, epoch_first_step = time.time(), step
        batches = list(epoch_batches(c, self.train_lengths, self.n_train, seed, epoch,
                                     self.task.sort_by_length, self.buckets))
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
            loop.stopped(f"seed {seed} step {step}")
            return state
          batch, shape = train_batch(self.task.train_arrays, self.keys, batches[index],
                                     self.pack)
          self.compiled_lengths.add(shape)
          with sharding.mesh_context(self.mesh, self.rules):
            batch = sharding.host_to_global(batch, self.mesh)
            program = self.train_step.program(state, batch, then=queue_ahead)
            queue_ahead = None
            state, metrics = program(state, batch)
          step += 1
          loop.add(metrics)
          if training_loop.due(step, c.log_every, self.total_steps):
            window = loop.take_window(state, step)
            self.logger.log(step, {
                "loss": float(window.sums["loss"] / window.sums["steps"]),
                "learning_rate": float(self.schedule(step - 1)),
                "examples_per_second": float(window.sums["examples"]) / window.seconds},
                prefix=f"seed{seed}_train_", steps_per_sec=window.steps / window.seconds)
          if training_loop.due(step, c.checkpoint_every) and step < self.total_steps:
            self.save(seed, state, epoch, index + 1, per_seed, loop)
        if queue_ahead is not None:  # no step ran (the epoch was done): the eval programs
          queue_ahead()
        jax.block_until_ready(state.step)
        seconds = time.time() - epoch_start
        examples = (step - epoch_first_step) * c.batch_size
        self.logger.log(step, {"epoch_seconds": seconds, "epoch_examples_per_second":
                               examples / max(seconds, 1e-9)}, prefix=f"seed{seed}_train_")
        if self.is_writer:
          print(f"seed {seed}: epoch {epoch + 1} took {seconds:.1f}s ({examples} examples, "
                f"{examples / max(seconds, 1e-9):.1f} examples/s, compilations included)",
                flush=True)
    if self.ckpts is not None:  # the trained state outlives a stop during the evaluation
      self.save(seed, state, int(np.ceil(c.num_epochs)), 0, per_seed, loop)
    return state


def score_eval_sets(config, predict_step, params, task, buckets, mesh, rules,
                    workdir: Optional[str], stop=None,
                    progress: Optional[str] = None) -> tuple[dict, list, bool]:
  """(results of every eval set, their warnings, whether the task checks for constant
  predictions); every process scores, files are written to `workdir` unless None;
  `progress`: the label of the progress lines (None: none)."""
  results, warnings, checked = {}, [], False
  for eval_set in task.eval_sets:
    outputs = predict(predict_step, params, eval_set.arrays, config.eval_batch_size,
                      mesh, rules, bucketing=config.length_bucketing, buckets=buckets,
                      stop=stop, progress=progress and f"{progress} {eval_set.name}")
    scores = eval_set.score(outputs, workdir)
    checked |= task_lib.WARNINGS in scores
    warnings += scores.pop(task_lib.WARNINGS, [])
    results.update(scores)
  return results, warnings, checked


def zero_shot(config, predict_step, state, task, buckets, mesh, rules,
              split: time_split.TimeSplit, is_writer: bool, stop=None) -> Optional[dict]:
  """The eval sets' scores of the state before training, as `zero_shot_<metric>` (printed);
  None when a stop signal ended the evaluation (the first step then saves and stops)."""
  if is_writer:
    print("zero-shot: scoring the init checkpoint on " + ", ".join(
        f"{es.name} ({len(es.arrays['input_ids'])})" for es in task.eval_sets)
        + " before training", flush=True)
  try:
    with split.phase("eval"):
      results = score_eval_sets(config, predict_step, state.params, task, buckets, mesh,
                                rules, None, stop, "zero-shot" if is_writer else None)[0]
  except EvaluationStopped:
    return None
  results = {f"zero_shot_{k}": v for k, v in results.items()}
  if is_writer:
    print("zero-shot (the init checkpoint before training): " + ", ".join(
        f"{k} {v:.4f}" for k, v in sorted(results.items())), flush=True)
  return results


def evaluate_seed(config, seed: int, predict_step, state, task, buckets, mesh, rules, logger,
                  split: time_split.TimeSplit, workdir: str, is_writer: bool,
                  stop=None) -> dict:
  """Scores every eval set with `state`'s params; the seed's results (logged and printed).

  Raises:
    EvaluationStopped: a stop signal arrived (checked before each batch).
  """
  if is_writer:
    print(f"seed {seed}: evaluating " + ", ".join(
        f"{es.name} ({len(es.arrays['input_ids'])})" for es in task.eval_sets), flush=True)
  with split.phase("eval"):
    results, warnings, checked = score_eval_sets(config, predict_step, state.params, task,
                                                 buckets, mesh, rules,
                                                 workdir if is_writer else None, stop,
                                                 f"seed {seed}: evaluating" if is_writer
                                                 else None)
  logger.log(int(state.step), {k: v for k, v in results.items() if isinstance(v, (int, float))},
             prefix=f"seed{seed}_eval_")
  if checked:
    results["constant_prediction"] = bool(warnings)
  if warnings:
    results["warning"] = "; ".join(warnings)
    if is_writer:
      print(f"WARNING seed {seed}: {results['warning']}", flush=True)
  if is_writer:
    print(f"seed {seed}: " + json.dumps(results, sort_keys=True), flush=True)
  return results


def mean_over_seeds(per_seed: list[dict]) -> dict:
  """Mean over seeds of every numeric metric, plus `<key>_std` when there are several.

  `constant_prediction` is true when it is for any seed, and `warning` holds the
  warnings of every seed that has one.
  """
  summary = {}
  keys = list(dict.fromkeys(k for r in per_seed for k in r))
  for key in keys:
    values = [r.get(key) for r in per_seed]
    if key == "constant_prediction":
      summary[key] = any(values)
    elif key == "warning":
      summary[key] = "; ".join(v for v in values if v)
    elif all(isinstance(v, (int, float)) for v in values):
      summary[key] = float(np.mean(values))
      if len(per_seed) > 1 and not task_lib.is_baseline(key):  # same for every seed
        summary[key + "_std"] = float(np.std(values))
    else:
      summary[key] = values[0]
  return summary


def print_header(config, pretrained, model_cfg, task, total_steps: int, steps_per_epoch: int,
                 workdir: str, buckets: Optional[tuple[int, ...]] = None) -> None:
  """What the run will do: model, parameters, data, steps, where it writes."""
  arch = bundle.describe_arch(model_cfg, ("num_layers", "hidden_size", "num_heads", "vocab_size"))
  params = train_log.count_params(pretrained.params)
  source = (f"TFDS in {config.tfds_data_dir}" if config.data_source == "tfds"
            else config.data_dir)
  data = ", ".join(f"{k} {v}" for k, v in task.data_stats.items())
  if config.eval_only:
    steps = "none (eval_only: the checkpoint's own head is evaluated)"
  else:
    how = "chosen from the data" if config.length_buckets == "auto" else "length_buckets"
    rows = ("packed several to a row" if config.packing
            else f"length-bucketed to {', '.join(map(str, buckets or ()))} ({how})"
            if config.length_bucketing else "padded to max_seq_length")
    steps = (f"{total_steps} ({config.num_epochs:g} epochs of {steps_per_epoch} steps of batch "
             f"{config.batch_size}, {rows}), learning rate {config.learning_rate:g}"
             + (f", {config.seeds} seeds" if config.seeds > 1 else ""))
  train_log.print_header(
      "bert_jax.finetune", f"{'evaluate' if config.eval_only else 'fine-tune and evaluate'} "
      f"{task.name}",
      [("model", f"{arch}, {params / 1e6:.1f}M params, from {pretrained.source} (heads "
                 f"{list(bundle.heads_of(pretrained.params))})"),
       ("attention", train_core.describe_attention(model_cfg, training=not config.eval_only)),
       ("data", f"{task.name}{f' from {source}' if source else ''}: {data}; max_seq_length "
                f"{config.max_seq_length}"),
       ("steps", steps),
       ("workdir", workdir)])


def write_results(config, out_dir: epath.Path, per_seed: list, params, model_cfg, pretrained,
                  task, task_model, is_writer: bool, baselines: Optional[dict] = None) -> dict:
  """Writes eval_results.json (and per seed), the fine-tuned bundle; prints the summary
  and the primary metric against the baselines (`baselines`: zero-shot scores)."""
  runs = len(per_seed)
  summary = dict(mean_over_seeds(per_seed), **(baselines or {}))
  if is_writer:
    text, undefined = json_file.dumps_defined(summary, indent=2, sort_keys=True)
    if undefined:
      print(f"WARNING: {', '.join(undefined)} undefined (NaN: constant predictions or labels?); "
            "written as null", flush=True)
    atomic_files.write_text(out_dir / workdir_layout.RESULTS, text)
    if runs > 1:
      atomic_files.write_text(out_dir / workdir_layout.RESULTS_PER_SEED,
                              json_file.dumps_defined(per_seed, indent=2)[0])
  if not config.eval_only:
    bundle.save_bundle(str(out_dir / workdir_layout.EXPORT), model_lib.unstack_layers(params),
                       model_cfg.replace(scan_layers=False), pretrained.vocab,
                       pretrained.lowercase, overwrite=True,
                       info={"source": "finetune", "task": task.name,
                             "init_checkpoint": pretrained.source, **task_model.export_info},
                       tokenizer_file=pretrained.tokenizer_file)
  if runs > 1:
    for key in per_seed[0]:
      if key + "_std" in summary:
        print(f"{key}: {summary[key]:.4f} ± {summary[key + '_std']:.4f} over {runs} seeds",
              flush=True)
  if is_writer:
    print("eval_results: " + json.dumps(summary, sort_keys=True), flush=True)
    if summary.get("warning"):
      print(f"WARNING: {summary['warning']}", flush=True)
    against = task_lib.baseline_line(summary, task.primary_metric)
    if against:
      print(against, flush=True)
    bundle_dir = out_dir / workdir_layout.EXPORT
    export = "" if config.eval_only else f" and the fine-tuned bundle {bundle_dir}"
    print(f"wrote {out_dir / workdir_layout.RESULTS}{export}", flush=True)
  return summary


def finetune(config: ml_collections.ConfigDict, workdir: str,
             preempt_at: Optional[tuple[int, int]] = None) -> dict[str, Any]:
  """Fine-tunes and evaluates over `config.seeds` seeds; resumes the workdir's checkpoint.

  Args:
    config: a configs/glue.py, squad.py, ner.py or sentence_embeddings.py ConfigDict.
    workdir: output directory, local or gs:// (eval_results.json, predictions,
      metrics.jsonl, tensorboard/, finetune_checkpoints/, export/ with the fine-tuned bundle
      of the last seed).
    preempt_at: (seed, step): behave as if SIGTERM arrived before that step (tests).

  Returns:
    eval_results: dev metric name -> value (mean over seeds; `<name>_std` too
    when seeds > 1), as written to workdir/eval_results.json. Stopped by SIGTERM /
    SIGINT: {"stopped_by": signal name, "seed": s, "step": k}, the checkpoint saved.
  """
  # -- Mesh and config checks -------------------------------------------------------
  split = time_split.TimeSplit()
  out_dir = epath.Path(workdir)
  workdir_owner.check(workdir, "finetune")
  is_writer = jax.process_index() == 0
  if is_writer:
    out_dir.mkdir(parents=True, exist_ok=True)
  mesh = sharding.mesh_from_config(config.mesh)
  rules = sharding.logical_rules(config.mesh.preset)
  check_config(config, mesh)
  config_record = json.loads(config.to_json_best_effort())  # in run.json and each checkpoint
  if workdir_owner.finished_run(workdir, config_record, RESUME_MAY_CHANGE, config.start_over):
    return already_finished(out_dir, is_writer)
  if config.start_over:
    if is_writer:
      workdir_owner.set_earlier_run_aside(workdir, RUN_FILES)
    if jax.process_count() > 1:
      multihost_utils.sync_global_devices("bert_jax.finetune.start_over")
  compile_cache.enable(config.compile_cache)

  # -- The checkpoint: model config, vocab, params (read only) ------------------------
  pretrained = ckpt_lib.load_pretrained(config.init_checkpoint)
  model_cfg = train_core.model_config_from(  # eval is never packed; training is as it says
      config.model, pretrained.config, one_example_per_row=not config.packing)
  if config.max_seq_length > model_cfg.max_position_embeddings:
    raise ValueError(f"bad config: max_seq_length {config.max_seq_length} does not fit "
                     f"{pretrained.source}: its position table has "
                     f"{model_cfg.max_position_embeddings} entries")
  task_model = task_registry.task_model(config, model_cfg)
  if config.eval_only:
    check_eval_head(task_model, pretrained, config.max_seq_length)

  # -- Task data (every split read and encoded before any training) --------------------
  with split.phase("data"):
    tokenizer = tokenizer_lib.for_checkpoint(pretrained)
    task = task_registry.build(config, tokenizer, model_cfg)
  n_train = len(task.train_arrays["input_ids"]) if task.train_arrays else 0
  steps_per_epoch = n_train // config.batch_size
  total_steps = int(steps_per_epoch * config.num_epochs)
  if not config.eval_only and total_steps <= 0:
    raise ValueError(f"{task.name}: {n_train} training rows give no step of batch_size "
                     f"{config.batch_size} over num_epochs {config.num_epochs}")
  train_lengths = length_buckets.row_lengths(task.train_arrays["input_mask"]) if n_train else None
  buckets = run_buckets(config, model_cfg, train_lengths,
                        [length_buckets.row_lengths(es.arrays["input_mask"])
                         for es in task.eval_sets],
                        0.0 if config.eval_only else config.num_epochs)
  if is_writer:
    print_header(config, pretrained, model_cfg, task, total_steps, steps_per_epoch, workdir,
                 buckets)

  # -- Optimizer: AdamW, warmup_fraction linear warmup, linear decay, layer-wise decay ---
  if config.eval_only:
    tx, schedule = optax.set_to_zero(), optax.constant_schedule(0.0)
  else:
    tx, schedule = opt_lib.make_optimizer(config.optimizer, config.learning_rate,
                                          int(config.warmup_fraction * total_steps), total_steps)
  params_init = task_lib.init_fn(task_model, config.max_seq_length)
  if config.layerwise_lr_decay != 1.0 and not config.eval_only:
    shapes = nn.unbox(jax.eval_shape(params_init, jax.random.PRNGKey(0)))
    tx = optax.chain(tx, opt_lib.scale_updates(opt_lib.layerwise_scales(
        shapes, model_cfg.num_layers, config.layerwise_lr_decay)))
  impl = train_core.prng_impl(config.model)
  init_fn = lambda rng: train_core.init_state(params_init, tx, rng, impl)  # noqa: E731

  # -- One run per seed: initial state (or this workdir's checkpoint), epochs, eval ------
  keys = task_lib.MODEL_INPUTS + task.label_keys
  fresh_heads = () if config.eval_only else bundle.TASK_HEADS
  runs = 1 if config.eval_only else config.seeds
  pack = None
  if config.packing:
    shards = mesh.shape["data"] * mesh.shape["fsdp"]
    pack = dict(seq_len=config.max_seq_length, step=packing.row_step(config.batch_size, shards),
                pad_id=tokenizer.pad_id, position_offset=model_cfg.position_offset)
    shape_limit = -(-config.batch_size // pack["step"])
  elif config.length_bucketing:
    shape_limit = len(buckets)
  else:
    shape_limit = 1
  ckpts = None if config.eval_only else ckpt_lib.TrainCheckpoints(
      str(out_dir / workdir_layout.FINETUNE_CHECKPOINTS), max_to_keep=config.keep_checkpoints)
  state, state_shardings, meta, how = ckpt_lib.initial_state(
      init_fn, tx, jax.random.PRNGKey(config.seed), mesh, rules, checkpoints=ckpts,
      pretrained=pretrained, fresh_heads=fresh_heads, run_config=config_record,
      check=ckpt_lib.config_resume_check(
          config_record, pretrained.vocab,
          RESUME_MAY_CHANGE + tuple(k.strip() for k in config.resume_allow_changes.split(",")
                                    if k.strip()),
          ("batch_size",), "the init_checkpoint's vocab"))
  # -- Jitted steps (compiled once, shared by every seed) ------------------------------
  # The state's shardings are initial_state's (from the init function's shapes, traced once).
  batch_shard = sharding.batch_sharding(mesh)
  # Each compiled per batch shape, those known ahead in a background thread (SeedRun).
  trace_context = lambda: sharding.mesh_context(mesh, rules)  # noqa: E731
  train_step = ahead_compile.AheadCompiled(jax.jit(
      train_core.make_train_step(task_lib.objective(task), tx, schedule,
                                 config.optimizer.grad_accum_steps, prng_impl=impl),
      in_shardings=(state_shardings, batch_shard), out_shardings=(state_shardings, None),
      donate_argnums=(0,)), trace_context)
  predict_step = ahead_compile.AheadCompiled(jax.jit(
      task_lib.predict_fn(task_model), in_shardings=(state_shardings.params, batch_shard)),
      trace_context)

  # Where training goes on: the checkpoint's seed, epoch and batch, and the results of the
  # seeds it finished; else the first seed from its start.
  per_seed = list(meta["per_seed"]) if meta else []
  first_seed = int(meta["seed"]) if meta else config.seed
  position = (int(meta["epoch"]), int(meta["batch"])) if meta else (0, 0)
  description = ckpt_lib.model_description(model_cfg, pretrained.vocab, pretrained.lowercase,
                                           tokenizer_file=pretrained.tokenizer_file)
  # Records logged after the checkpoint are logged again: dropped (steps restart per seed,
  # so only while the first seed is resumed).
  logger = train_log.RunLogger(workdir, total_steps, is_writer, resume_step=(
      int(state.step) if meta and first_seed == config.seed else None))
  if meta and is_writer:
    print(f"{how}: seed {first_seed}, epoch {position[0] + 1}, batch {position[1]}; "
          f"{len(per_seed)} seed(s) done before it", flush=True)
  stop = stop_signals.StopSignals()
  failed = True
  try:
    # The baseline a task whose init checkpoint is already its model must beat: scored once,
    # before the first step, and kept in every checkpoint's meta (None there: a stop signal
    # ended the zero-shot evaluation, and the first step saved and stopped).
    baselines = meta.get("zero_shot", {}) if meta else None
    if task.zero_shot and not config.eval_only and baselines is None:
      baselines = zero_shot(config, predict_step, state, task, buckets, mesh, rules, split,
                            is_writer, stop)
    # The logged learning rate: one compiled program, not the schedule's operations one by one.
    run = SeedRun(config, train_step, predict_step, jax.jit(schedule), ckpts, logger, split, task,
                  keys, pack, train_lengths, n_train, buckets, total_steps, is_writer, mesh, rules,
                  dict(description, config=config_record, zero_shot=baselines), preempt_at)
    if is_writer:  # from before the first step to after the export: what the workdir holds
      workdir_owner.record_run(workdir, "finetune", "training", config_record, task=task.name,
                               init_checkpoint=config.init_checkpoint)
    for seed in range(first_seed, config.seed + runs):
      if seed != first_seed:  # the first seed's state is the one made or resumed above
        state, _, _, how = ckpt_lib.initial_state(
            init_fn, tx, jax.random.PRNGKey(seed), mesh, rules, pretrained=pretrained,
            fresh_heads=fresh_heads)
        position = (0, 0)
      if is_writer:
        print(f"seed {seed}: {how}; compiling the train step, then training", flush=True)
      state = run.train(seed, state, position, per_seed, stop)
      if run.stopped_by:
        failed = False
        return {"stopped_by": run.stopped_by, "seed": seed, "step": int(state.step)}
      if is_writer and run.compiled_lengths:
        what, on = ("packed row counts", "packing on: ") if pack else ("sequence lengths", "")
        print(f"seed {seed}: {on}the train step is compiled for {len(run.compiled_lengths)} "
              f"{what} (at most {shape_limit}): {sorted(run.compiled_lengths)}", flush=True)
      try:
        per_seed.append(evaluate_seed(config, seed, predict_step, state, task, buckets, mesh,
                                      rules, logger, split, workdir, is_writer, stop))
      except EvaluationStopped as e:
        failed = False
        return stopped_in_evaluation(str(e), ckpts, seed, int(state.step), is_writer)

    # -- Results and the fine-tuned bundle (the stop signals still caught: a signal now
    # lets them finish, so the run ends with its export or with its last checkpoint) ------
    summary = write_results(config, out_dir, per_seed, state.params, model_cfg, pretrained,
                            task, task_model, is_writer, baselines or {})
    if is_writer:
      workdir_owner.record_run(workdir, "finetune", "finished", config_record, task=task.name,
                               init_checkpoint=config.init_checkpoint)
    failed = False
  finally:
    train_step.close()
    predict_step.close()
    stop.restore()
    train_log.close_all([logger.close] + ([ckpts.close] if ckpts else []),
                        raise_first=not failed)
  if is_writer:
    if stop.name:
      print(f"{stop.name} arrived while the results were written; they are complete",
            flush=True)
    print(split.line(), flush=True)
  return summary


def stopped_in_evaluation(signal_name: str, ckpts, seed: int, step: int,
                          is_writer: bool) -> dict:
  """Says where a run stopped by a signal during an evaluation can go on from."""
  if is_writer:
    if ckpts is None:
      where = "nothing was trained (eval_only); the same command evaluates again"
    else:
      ckpts.wait()
      where = (f"the checkpoint at the end of its training is kept "
               f"({ckpts.describe_latest()}); the same command evaluates it")
    print(f"{signal_name}: stopped evaluating seed {seed}; {where}", flush=True)
  return {"stopped_by": signal_name, "seed": seed, "step": step}


def already_finished(out_dir: epath.Path, is_writer: bool) -> dict:
  """The results of the workdir's finished run of this config (nothing is run again)."""
  summary = json_file.read_json(out_dir / workdir_layout.RESULTS,
                                missing=f"{out_dir} says its run finished but holds no "
                                        "eval_results.json; --config.start_over=True runs it "
                                        "anew (the earlier files are set aside)")
  if is_writer:
    print(f"{out_dir} holds this run, finished: eval_results: "
          f"{json.dumps(summary, sort_keys=True)}; nothing to do (--config.start_over=True "
          "sets it aside and trains anew)", flush=True)
  return summary


def main(argv: Optional[Sequence[str]] = None) -> None:
  """The command line (argv without the program name; None: sys.argv[1:])."""
  result = cli.run_config_program(finetune, argv, "bert_jax.finetune", __doc__,
                         "configs/glue.py:task=TASK, configs/squad.py:version=V, configs/ner.py or "
                         "configs/sentence_embeddings.py.",
                         "Output directory.")
  if result.get("stopped_by"):  # 128 + the signal's number, after the checkpoint line
    raise SystemExit(stop_signals.exit_status(result["stopped_by"]))


def run() -> None:
  """The program on sys.argv (what `python -m bert_jax.finetune` and launch scripts run)."""
  cli.exit_program(main)


if __name__ == "__main__":
  run()
