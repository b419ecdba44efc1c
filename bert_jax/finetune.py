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
TensorBoard logs, and the fine-tuned bundle in workdir/export (prediction files and export
are of the last seed).

Preemption: the training state is saved to workdir/finetune_checkpoints every
`checkpoint_every` steps, at the end of each seed's training (before its evaluation) and
on SIGTERM / SIGINT (the run then stops after the save, with exit status 128 + the
signal's number: 143 and 130); a signal during an evaluation stops it within a batch,
the end-of-training checkpoint kept; one that arrives while the results and the export
are written lets them finish. So a signal at any moment leaves either the finished
export or a checkpoint, and the same command resumes from the newest checkpoint (seed,
epoch, batch within it, dropout key, the finished seeds' results) to the uninterrupted
run's results, bitwise on the CPU. A checkpoint saved with other settings is refused in
one line (bert_jax.finetuning.setup.RESUME_MAY_CHANGE lists what may change).

The workdir records its run in run.json (bert_jax.training.workdir_owner): given again
once the run has finished, the same command prints the results and does nothing else;
another config is refused in one line unless `--config.start_over=True` sets the earlier
run's files aside (before_start_over/) first.
"""
import json
from typing import Any, Optional, Sequence

from etils import epath
import flax.linen as nn
import jax
from jax.experimental import multihost_utils
import ml_collections
import optax

from bert_jax import cli
from bert_jax.data import length_buckets
from bert_jax.data import tokenizer as tokenizer_lib
from bert_jax.finetuning import batches as finetune_batches
from bert_jax.finetuning import evaluation
from bert_jax.finetuning import seed_run
from bert_jax.finetuning import setup as finetune_setup
from bert_jax.modeling import bundle
from bert_jax.runtime import compile_cache
from bert_jax.runtime import stop_signals
from bert_jax.runtime import time_split
from bert_jax.runtime import train_log
from bert_jax.runtime import workdir_layout
from bert_jax.tasks import packing
from bert_jax.tasks import registry as task_registry
from bert_jax.tasks import task as task_lib
from bert_jax.training import ahead_compile
from bert_jax.training import checkpoint as ckpt_lib
from bert_jax.training import optimizer as opt_lib
from bert_jax.training import sharding
from bert_jax.training import train_core
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
  workdir_owner.check(workdir, "finetune")
  is_writer = jax.process_index() == 0
  if is_writer:
    out_dir.mkdir(parents=True, exist_ok=True)
  mesh = sharding.mesh_from_config(config.mesh)
  rules = sharding.logical_rules(config.mesh.preset)
  finetune_setup.check_config(config, mesh)
  config_record = json.loads(config.to_json_best_effort())  # in run.json and each checkpoint
  if workdir_owner.finished_run(workdir, config_record, finetune_setup.RESUME_MAY_CHANGE,
                                config.start_over):
    return evaluation.already_finished(out_dir, is_writer)
  if config.start_over:
    if is_writer:
      workdir_owner.set_earlier_run_aside(workdir, finetune_setup.RUN_FILES)
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
    finetune_setup.check_eval_head(task_model, pretrained, config.max_seq_length)

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
  buckets = finetune_batches.run_buckets(
      config, model_cfg, train_lengths,
      [length_buckets.row_lengths(es.arrays["input_mask"]) for es in task.eval_sets],
      0.0 if config.eval_only else config.num_epochs)
  if is_writer:
    finetune_setup.print_header(config, pretrained, model_cfg, task, total_steps,
                                steps_per_epoch, workdir, buckets)

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
          finetune_setup.RESUME_MAY_CHANGE + tuple(
              k.strip() for k in config.resume_allow_changes.split(",") if k.strip()),
          ("batch_size",), "the init_checkpoint's vocab"))
  # -- Jitted steps (compiled once, shared by every seed) ------------------------------
  # The state's shardings are initial_state's (from the init function's shapes, traced once).
  batch_shard = sharding.batch_sharding(mesh)
  # Each compiled per batch shape, those known ahead in a background thread (seed_run.SeedRun).
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
      baselines = evaluation.zero_shot(config, predict_step, state, task, buckets, mesh, rules,
                                       split, is_writer, stop)
    # The logged learning rate: one compiled program, not the schedule's operations one by one.
    run = seed_run.SeedRun(config, train_step, predict_step, jax.jit(schedule), ckpts, logger,
                           split, task, keys, pack, train_lengths, n_train, buckets, total_steps,
                           is_writer, mesh, rules,
                           dict(description, config=config_record, zero_shot=baselines),
                           preempt_at)
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
        per_seed.append(evaluation.evaluate_seed(config, seed, predict_step, state, task,
                                                 buckets, mesh, rules, logger, split, workdir,
                                                 is_writer, stop))
      except evaluation.EvaluationStopped as e:
        failed = False
        return evaluation.stopped_in_evaluation(str(e), ckpts, seed, int(state.step), is_writer)

    # -- Results and the fine-tuned bundle (the stop signals still caught: a signal now
    # lets them finish, so the run ends with its export or with its last checkpoint) ------
    summary = evaluation.write_results(config, out_dir, per_seed, state.params, model_cfg,
                                       pretrained, task, task_model, is_writer, baselines or {})
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


def main(argv: Optional[Sequence[str]] = None) -> None:
  """The command line (argv without the program name; None: sys.argv[1:])."""
  result = cli.run_config_program(
      finetune, argv, "bert_jax.finetune", __doc__,
      "configs/glue.py:task=TASK, configs/squad.py:version=V, configs/ner.py or "
      "configs/sentence_embeddings.py.", "Output directory.")
  if result.get("stopped_by"):  # 128 + the signal's number, after the checkpoint line
    raise SystemExit(stop_signals.exit_status(result["stopped_by"]))


def run() -> None:
  """The program on sys.argv (what `python -m bert_jax.finetune` and launch scripts run)."""
  cli.exit_program(main)


if __name__ == "__main__":
  run()
