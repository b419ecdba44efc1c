"""A fine-tuning run, the program `python -m bert_jax.finetune` runs (its docstring says what
the run does and writes): the checkpoint, the task data, one run per seed, the results.

It lives apart from the command line so that the command answers a mistake in its flags or
config before JAX, Flax, Orbax and the task code load.
"""
import functools
import json
import sys
from typing import Any, Optional

from etils import epath
import jax
import ml_collections

from bert_jax.data.stream import length_buckets
from bert_jax.data.tokenizers import tokenizer as tokenizer_lib
from bert_jax.finetuning import batches as finetune_batches
from bert_jax.finetuning import evaluation
from bert_jax.finetuning import seed_run
from bert_jax.finetuning import setup as finetune_setup
from bert_jax.modeling import bundle
from bert_jax.modeling import loading
from bert_jax.runtime import compile_cache
from bert_jax.runtime import stop_signals
from bert_jax.runtime import time_split
from bert_jax.runtime import train_log
from bert_jax.runtime import workdir_layout
from bert_jax.tasks import registry as task_registry
from bert_jax.tasks import task as task_lib
from bert_jax.training import checkpoint as ckpt_lib
from bert_jax.training import sharding
from bert_jax.training import workdir_owner

time_split.compile_clock()  # compilations from here on count in the run's time split


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
    return evaluation.already_finished(out_dir, is_writer)
  compile_cache.enable(config.compile_cache)

  # Until the first step: a line within every 9 s while the checkpoint loads, the task data
  # is encoded (SQuAD: seconds) and the initial state is made (its program compiles).
  where = ["loading the init checkpoint"]
  starting = train_log.Heartbeat("bert_jax.finetune", enabled=is_writer, file=sys.stdout,
                                 at_start=False, status=lambda: where[0])
  # From here a signal ends the program at once (nothing is trained yet); from the first step
  # on it stops the run after a save.
  stop = stop_signals.StopSignals(starting=True)
  try:
    return _start_and_run(config, workdir, preempt_at, split, out_dir, is_writer, mesh, rules,
                          config_record, where, starting, stop)
  finally:
    stop.restore()  # (again, for a run that failed before its first step)


def _start_and_run(config, workdir: str, preempt_at, split, out_dir, is_writer: bool, mesh,
                   rules, config_record: dict, where: list, starting, stop) -> dict[str, Any]:
  """finetune() from loading the init checkpoint on."""
  with starting:
    # -- The checkpoint (read only), then the task data, every split read and encoded ----
    pretrained = loading.load_pretrained(config.init_checkpoint)
    where[0] = "reading and encoding the task data"
    model_cfg, task_model, tokenizer, task, counts, buckets = _task_data(config, pretrained,
                                                                         split)
    n_train, steps_per_epoch, total_steps, train_lengths = counts
    if is_writer:
      finetune_setup.print_header(config, pretrained, model_cfg, task, total_steps,
                                  steps_per_epoch, workdir, buckets)
      starting.touch()
    where[0] = "making the initial state"
    # -- Optimizer, initial state (this workdir's checkpoint, else the init checkpoint's
    # params) and the jitted steps (compiled once per batch shape, shared by every seed) ----
    tx, schedule, init_fn, ckpts, state, meta, how, train_step, predict_step = _state_and_steps(
        config, out_dir, pretrained, task, task_model, model_cfg, total_steps, mesh, rules,
        config_record)

  per_seed, first_seed, position = resume = _resume_point(config, meta)
  description = loading.model_description(model_cfg, pretrained.vocab, pretrained.lowercase,
                                          tokenizer_file=pretrained.tokenizer_file)
  logger = _run_logger(workdir, total_steps, is_writer, meta, state, how, resume)

  # -- One run per seed: epochs, a checkpoint at the end of training, evaluation -----------
  pack, shape_limit = finetune_batches.packing(config, mesh, tokenizer, model_cfg, buckets)
  stop.started()
  failed = True
  try:
    # The baseline a task whose init checkpoint is already its model must beat: scored once,
    # before the first step, and kept in every checkpoint's meta (None there: a stop signal
    # ended the zero-shot evaluation, and the first step saved and stopped).
    baselines = meta.get("zero_shot", {}) if meta else None
    if task.zero_shot and not config.eval_only and baselines is None:
      baselines = evaluation.zero_shot(config, predict_step, state, task, buckets, mesh, rules,
                                       split, is_writer, stop)
    # The logged learning rate: one compiled program, not the schedule's operations one by one.
    run = seed_run.SeedRun(config, train_step, predict_step, jax.jit(schedule), ckpts, logger,
                           split, task, task_lib.MODEL_INPUTS + task.label_keys, pack,
                           train_lengths, n_train, buckets, total_steps, is_writer, mesh, rules,
                           dict(description, config=config_record, zero_shot=baselines),
                           preempt_at)
    if is_writer:  # from before the first step to after the export: what the workdir holds
      workdir_owner.record_run(workdir, "finetune", "training", config_record, task=task.name,
                               init_checkpoint=config.init_checkpoint)
    fresh_state = functools.partial(_fresh_state, config, init_fn, tx, mesh, rules, pretrained)
    state, stopped = _each_seed(config, run, first_seed, state, how, position, per_seed,
                                fresh_state, stop, workdir, (pack, shape_limit))
    if stopped:
      failed = False
      return stopped
    # -- Results and the fine-tuned bundle (the stop signals still caught: a signal now
    # lets them finish, so the run ends with its export or with its last checkpoint) ------
    summary = evaluation.write_results(config, out_dir, per_seed, state.params, model_cfg,
                                       pretrained, task, task_model, is_writer, baselines or {})
    if is_writer:
      workdir_owner.record_run(workdir, "finetune", "finished", config_record, task=task.name,
                               init_checkpoint=config.init_checkpoint)
    failed = False
  finally:
    stop.restore()
    # Every writer is closed; a failed close is the run's error unless one is on its way.
    train_log.close_all([train_step.close, predict_step.close, logger.close]
                        + ([ckpts.close] if ckpts else []), raise_first=not failed)
  if is_writer and stop.name:
    print(f"{stop.name} arrived while the results were written; they are complete", flush=True)
  if is_writer:
    print(split.line(), flush=True)
  return summary


def _task_data(config, pretrained: loading.Pretrained, split: time_split.TimeSplit) -> tuple:
  """(model config, task model, tokenizer, task, step counts, bucket lengths): the task's
  model on the checkpoint's, every split read and encoded, (train examples, steps per epoch,
  total steps, train lengths) and the lengths its batches are cut to."""
  model_cfg, task_model = finetune_setup.task_model_for(config, pretrained)
  with split.phase("data"):
    tokenizer = tokenizer_lib.for_checkpoint(pretrained)
    task = task_registry.build(config, tokenizer, model_cfg)
  counts = finetune_batches.steps(config, task)
  buckets = finetune_batches.run_buckets(
      config, model_cfg, counts[3],
      [length_buckets.row_lengths(es.arrays["input_mask"]) for es in task.eval_sets],
      0.0 if config.eval_only else config.num_epochs)
  return model_cfg, task_model, tokenizer, task, counts, buckets


def _state_and_steps(config, out_dir: epath.Path, pretrained: loading.Pretrained, task,
                     task_model, model_cfg, total_steps: int, mesh, rules,
                     config_record: dict) -> tuple:
  """The optimizer (AdamW, warmup_fraction linear warmup, linear decay, layer-wise decay),
  the first seed's state (this workdir's checkpoint, else the init checkpoint's params) and
  the jitted steps (compiled once per batch shape, shared by every seed).

  Returns:
    (tx, schedule, init_fn, the workdir's checkpoints or None when only evaluating, state,
    the checkpoint's meta or None, how the state was made, train step, predict step).
  """
  tx, schedule, init_fn, impl = finetune_setup.optimizer(config, task_model, model_cfg,
                                                         total_steps)
  ckpts = None if config.eval_only else ckpt_lib.TrainCheckpoints(
      str(out_dir / workdir_layout.FINETUNE_CHECKPOINTS), max_to_keep=config.keep_checkpoints)
  state, state_shardings, meta, how = ckpt_lib.initial_state(
      init_fn, tx, jax.random.PRNGKey(config.seed), mesh, rules, checkpoints=ckpts,
      pretrained=pretrained, fresh_heads=_fresh_heads(config), run_config=config_record,
      check=finetune_setup.resume_check(config, config_record, pretrained))
  train_step, predict_step = seed_run.jitted_steps(config, task, task_model, tx, schedule,
                                                   impl, state_shardings, mesh, rules)
  return tx, schedule, init_fn, ckpts, state, meta, how, train_step, predict_step


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


def _fresh_state(config, init_fn, tx, mesh, rules, pretrained: loading.Pretrained,
                 seed: int) -> tuple:
  """A later seed's state: the init checkpoint's params, its heads made afresh."""
  return ckpt_lib.initial_state(init_fn, tx, jax.random.PRNGKey(seed), mesh, rules,
                                pretrained=pretrained, fresh_heads=_fresh_heads(config))


def _fresh_heads(config) -> tuple:
  """The heads every seed starts afresh (none when only evaluating the init checkpoint)."""
  return () if config.eval_only else bundle.TASK_HEADS


def _resume_point(config, meta: Optional[dict]) -> tuple[list, int, tuple[int, int]]:
  """Where training goes on: the checkpoint's results of the seeds it finished, its seed,
  and its (epoch, batch); else none done and the first seed from its start."""
  if not meta:
    return [], config.seed, (0, 0)
  return list(meta["per_seed"]), int(meta["seed"]), (int(meta["epoch"]), int(meta["batch"]))


def _each_seed(config, run: seed_run.SeedRun, first_seed: int, state, how: str,
               position: tuple[int, int], per_seed: list, fresh_state, stop, workdir: str,
               packing: tuple) -> tuple[Any, Optional[dict]]:
  """Trains and evaluates each seed from `first_seed` (its state and position given; the
  later seeds' from `fresh_state(seed)`), appending each seed's results to `per_seed`.

  Returns:
    (the last seed's trained state, None), or (state, what `finetune` returns when stopped).
  """
  pack, shape_limit = packing
  runs = 1 if config.eval_only else config.seeds
  for seed in range(first_seed, config.seed + runs):
    if seed != first_seed:  # the first seed's state is the one made or resumed
      state, _, _, how = fresh_state(seed)
      position = (0, 0)
    if run.is_writer:
      print(f"seed {seed}: {how}; compiling the train step, then training", flush=True)
    state = run.train(seed, state, position, per_seed, stop)
    if run.stopped_by:
      return state, {"stopped_by": run.stopped_by, "seed": seed, "step": int(state.step)}
    if run.is_writer and run.compiled_lengths:
      what, on = ("packed row counts", "packing on: ") if pack else ("sequence lengths", "")
      print(f"seed {seed}: {on}the train step is compiled for {len(run.compiled_lengths)} "
            f"{what} (at most {shape_limit}): {sorted(run.compiled_lengths)}", flush=True)
    try:
      per_seed.append(evaluation.evaluate_seed(
          config, seed, run.predict_step, state, run.task, run.buckets, run.mesh, run.rules,
          run.logger, run.split, workdir, run.is_writer, stop, run.ckpts))
    except evaluation.EvaluationStopped as e:
      return state, evaluation.stopped_in_evaluation(str(e), run.ckpts, seed, int(state.step),
                                                     run.is_writer)
  return state, None
