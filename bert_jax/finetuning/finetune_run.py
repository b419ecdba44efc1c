"""A fine-tuning run, the program `python -m bert_jax.finetune` runs (its docstring says what
the run does and writes): the checkpoint, the task data, one run per seed, the results.

It lives apart from the command line so that the command answers a mistake in its flags or
config before JAX, Flax, Orbax and the task code load.
"""
import dataclasses
import functools
import json
import sys
from typing import Any, Optional

from etils import epath
import jax
import ml_collections

from bert_jax.batching import length_buckets
from bert_jax.checkpoints import bundle
from bert_jax.checkpoints import loading
from bert_jax.checkpoints import run_checkpoints as ckpt_lib
from bert_jax.checkpoints import workdir_owner
from bert_jax.data.tokenizers import tokenizer as tokenizer_lib
from bert_jax.finetuning import batches as finetune_batches
from bert_jax.finetuning import evaluation
from bert_jax.finetuning import seed_run
from bert_jax.finetuning import setup as finetune_setup
from bert_jax.members import registry as members
from bert_jax.runtime import compile_cache
from bert_jax.runtime import console
from bert_jax.runtime import stop_signals
from bert_jax.runtime import time_split
from bert_jax.runtime import train_log
from bert_jax.runtime import workdirs
from bert_jax.tasks import task as task_lib
from bert_jax.training import sharding

time_split.compile_clock()  # compilations from here on count in the run's time split


@dataclasses.dataclass(frozen=True)
class _Place:
  """Where a run computes and what it records, settled before anything loads: its workdir,
  whether this process writes, the mesh and its rules, the config as recorded, the time split
  and the test hook `preempt_at`."""
  workdir: str
  is_writer: bool
  mesh: Any
  rules: Any
  config_record: dict
  split: time_split.TimeSplit
  preempt_at: Optional[tuple[int, int]]


@dataclasses.dataclass(frozen=True)
class _TaskData:
  """The task on the checkpoint's model: model config, task model, tokenizer, the task with
  every split read and encoded, its step counts (finetune_batches.steps: train examples, steps
  per epoch, total steps, train lengths), how its batches are cut (`plan`) and the lengths
  they are cut to."""
  model_cfg: Any
  task_model: Any
  tokenizer: Any
  task: Any
  counts: tuple
  plan: finetune_batches.BatchPlan
  buckets: Optional[tuple[int, ...]]


@dataclasses.dataclass(frozen=True)
class _Start:
  """What the first seed starts from: the optimizer (finetune_setup.optimizer's tx, schedule,
  init_fn, prng_impl), the workdir's checkpoints (None when only evaluating), the state, its
  checkpoint's meta (None: not resumed), how it was made, and the jitted steps."""
  optimizer: tuple
  ckpts: Optional[ckpt_lib.TrainCheckpoints]
  state: Any
  meta: Optional[dict]
  how: str
  train_step: Any
  predict_step: Any


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
  is_writer = jax.process_index() == 0
  mesh = sharding.mesh_from_config(config.mesh)
  rules = sharding.logical_rules(config.mesh.preset)
  config_record = json.loads(config.to_json_best_effort())  # in run.json and each checkpoint
  if finetune_setup.check_run(config, config_record, workdir, mesh, is_writer) == "finished":
    return evaluation.already_finished(out_dir, is_writer, exports=not config.eval_only)
  compile_cache.enable(config.compile_cache)

  # Until the first step: a line within every 9 s while the checkpoint loads, the task data
  # is encoded (SQuAD: seconds) and the initial state is made (its program compiles).
  where = ["loading the init checkpoint"]
  starting = console.Heartbeat("bert_jax.finetune", enabled=is_writer, file=sys.stdout,
                               at_start=False, status=lambda: where[0])
  # From here a signal ends the program at once (nothing is trained yet); from the first step
  # on it stops the run after a save.
  stop = stop_signals.StopSignals(starting=True)
  place = _Place(workdir, is_writer, mesh, rules, config_record, split, preempt_at)
  try:
    return _start_and_run(config, place, where, starting, stop)
  finally:
    stop.restore()  # (again, for a run that failed before its first step)


def _start_and_run(config, place: _Place, where: list, starting, stop) -> dict[str, Any]:
  """finetune() from loading the init checkpoint on."""
  workdir, is_writer, split = place.workdir, place.is_writer, place.split
  with starting:
    # -- The checkpoint (read only), then the task data, every split read and encoded ----
    pretrained = finetune_setup.head_from_mlm(loading.load_pretrained(config.init_checkpoint))
    where[0] = "reading and encoding the task data"
    data = _task_data(config, pretrained, split)
    task, model_cfg = data.task, data.model_cfg
    n_train, _, total_steps, train_lengths = data.counts
    if is_writer:
      finetune_setup.print_header(config, pretrained, model_cfg, task, data.counts, data.plan,
                                  data.buckets, workdir)
      starting.touch()
    where[0] = "making the initial state"
    # -- Optimizer, initial state (this workdir's checkpoint, else the init checkpoint's
    # params) and the jitted steps (compiled once per batch shape, shared by every seed) ----
    start = _state_and_steps(config, place, pretrained, data)
  state, meta = start.state, start.meta

  per_seed, first_seed, position = resume = _resume_point(config, meta)
  description = loading.model_description(model_cfg, pretrained.vocab, pretrained.lowercase,
                                          tokenizer_file=pretrained.tokenizer_file)
  logger = _run_logger(workdir, total_steps, is_writer, meta, state, start.how, resume)
  out = evaluation.RunOutput(logger, split, workdir, is_writer)
  scorer = evaluation.Scorer(start.predict_step, task, config.eval_batch_size,
                             config.length_bucketing, data.buckets, place.mesh, place.rules)

  # -- One run per seed: epochs, a checkpoint at the end of training, evaluation -----------
  pack, shape_limit = finetune_batches.packing(data.plan, place.mesh, data.tokenizer,
                                               model_cfg, data.buckets)
  stop.started()
  failed = True
  try:
    # The baseline a task whose init checkpoint is already its model must beat: scored once,
    # before the first step, and kept in every checkpoint's meta (None there: a stop signal
    # ended the zero-shot evaluation, and the first step saved and stopped).
    baselines = meta.get("zero_shot", {}) if meta else None
    if task.zero_shot and not config.eval_only and baselines is None:
      baselines = evaluation.zero_shot(scorer, state.params, split, is_writer, stop)
    run = seed_run.SeedRun(
        config=config, train_step=start.train_step, schedule=jax.jit(start.optimizer[1]),
        ckpts=start.ckpts, scorer=scorer, out=out,
        data=seed_run.TrainData(task_lib.MODEL_INPUTS + task.label_keys, train_lengths,
                                n_train, total_steps, data.plan, pack, shape_limit),
        meta=dict(description, config=place.config_record, zero_shot=baselines),
        preempt_at=place.preempt_at, window=(meta or {}).get("window"))
    if is_writer:  # from before the first step to after the export: what the workdir holds
      workdir_owner.record_run(workdir, "finetune", "training", place.config_record,
                               task=task.name, init_checkpoint=config.init_checkpoint)
    fresh_state = functools.partial(_fresh_state, config, start.optimizer, place, pretrained)
    state, stopped = run.run_seeds(first_seed, state, start.how, position, per_seed,
                                   fresh_state, stop)
    if stopped:
      failed = False
      return stopped
    stop.training_over()
    # -- Results and the fine-tuned bundle (the stop signals still caught: a signal now
    # lets them finish, so the run ends with its export or with its last checkpoint) ------
    export = (None if config.eval_only else
              evaluation.ExportPlan(model_cfg, pretrained, data.task_model))
    summary = evaluation.write_results(out, per_seed, state.params, task, export,
                                       baselines or {})
    if is_writer:
      workdir_owner.record_run(workdir, "finetune", "finished", place.config_record,
                               task=task.name, init_checkpoint=config.init_checkpoint)
    failed = False
  finally:
    stop.restore()
    # Every writer is closed; a failed close is the run's error unless one is on its way.
    train_log.close_all([start.train_step.close, start.predict_step.close, logger.close]
                        + ([start.ckpts.close] if start.ckpts else []), raise_first=not failed)
  if is_writer and stop.name:
    print(f"{stop.name} arrived while the results were written; they are complete", flush=True)
  if is_writer:
    print(split.line(), flush=True)
  return summary


def _task_data(config, pretrained: loading.Pretrained, split: time_split.TimeSplit) -> _TaskData:
  """The task's model on the checkpoint's, every split read and encoded, its step counts and
  the lengths its batches are cut to."""
  plan = finetune_batches.BatchPlan.from_config(config)
  model_cfg, task_model = finetune_setup.task_model_for(config, pretrained, plan)
  with split.phase("data"):
    tokenizer = tokenizer_lib.for_checkpoint(pretrained)
    task = finetune_setup.build_task(config, tokenizer, model_cfg)
  counts = finetune_batches.steps(config, task)
  buckets = finetune_batches.run_buckets(
      plan, model_cfg, counts[3],
      [length_buckets.row_lengths(es.arrays["input_mask"]) for es in task.eval_sets],
      0.0 if config.eval_only else config.num_epochs)
  return _TaskData(model_cfg, task_model, tokenizer, task, counts, plan, buckets)


def _state_and_steps(config, place: _Place, pretrained: loading.Pretrained,
                     data: _TaskData) -> _Start:
  """The optimizer (AdamW, warmup_fraction linear warmup, linear decay, layer-wise decay),
  the first seed's state (this workdir's checkpoint, else the init checkpoint's params) and
  the jitted steps (compiled once per batch shape, shared by every seed)."""
  optimizer = finetune_setup.optimizer(config, data.task_model, data.model_cfg, data.counts[2],
                                       data.plan.seq_len)
  tx, _, init_fn, _ = optimizer
  ckpts = None if config.eval_only else ckpt_lib.TrainCheckpoints(
      str(epath.Path(place.workdir) / workdirs.FINETUNE_CHECKPOINTS),
      max_to_keep=config.keep_checkpoints)
  state, state_shardings, meta, how = ckpt_lib.initial_state(
      init_fn, tx, jax.random.PRNGKey(config.seed), place.mesh, place.rules, checkpoints=ckpts,
      pretrained=pretrained, fresh_heads=_fresh_heads(config, pretrained), run_config=place.config_record,
      check=finetune_setup.resume_check(config, place.config_record, pretrained))
  train_step, predict_step = seed_run.jitted_steps(config, data.task, data.task_model,
                                                   optimizer, state_shardings, place.mesh,
                                                   place.rules)
  return _Start(optimizer, ckpts, state, meta, how, train_step, predict_step)


def _run_logger(workdir: str, total_steps: int, is_writer: bool, meta: Optional[dict],
                state, how: str, resume_point: tuple) -> train_log.RunLogger:
  """The run's metrics log; resuming (`_resume_point`), it says where training goes on."""
  per_seed, first_seed, position = resume_point
  if meta and is_writer:
    print(f"{how}: seed {first_seed}, epoch {position[0] + 1}, batch {position[1]}; "
          f"{len(per_seed)} seed(s) done before it", flush=True)
    # Records logged after the checkpoint are logged again: dropped, so each appears once.
    seed_run.drop_records_after(workdir, first_seed, int(state.step), position[1])
  return train_log.RunLogger(workdir, total_steps, is_writer)


def _fresh_state(config, optimizer: tuple, place: _Place, pretrained: loading.Pretrained,
                 seed: int) -> tuple:
  """A later seed's state: the init checkpoint's params, its heads made afresh."""
  tx, _, init_fn, _ = optimizer
  return ckpt_lib.initial_state(init_fn, tx, jax.random.PRNGKey(seed), place.mesh, place.rules,
                                pretrained=pretrained, fresh_heads=_fresh_heads(config, pretrained))


def _fresh_heads(config, pretrained: loading.Pretrained) -> tuple:
  """The heads every seed starts afresh (none when only evaluating the init checkpoint). A
  member whose task heads read a prediction head (ModernBERT's `head`) takes it from the init
  checkpoint, as transformers' ...ForSequenceClassification.from_pretrained does
  (finetune_setup.head_from_mlm)."""
  if config.eval_only:
    return ()
  kept = ("head",) if members.get(pretrained.config.model_type).head_transform else ()
  return tuple(h for h in bundle.TASK_HEADS if h not in kept)


def _resume_point(config, meta: Optional[dict]) -> tuple[list, int, tuple[int, int]]:
  """Where training goes on: the checkpoint's results of the seeds it finished, its seed,
  and its (epoch, batch); else none done and the first seed from its start."""
  if not meta:
    return [], config.seed, (0, 0)
  return list(meta["per_seed"]), int(meta["seed"]), (int(meta["epoch"]), int(meta["batch"]))
