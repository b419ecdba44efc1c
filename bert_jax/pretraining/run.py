"""A pretraining run, the program `python -m bert_jax.pretrain` runs (its docstring says what
the run does): the mesh, the data, the state, the compiled step and the loop, then the export
and the fill-mask example.

It lives apart from the command line so that the command answers a mistake in its flags or
config before JAX, Flax, Orbax, TensorFlow and the objectives load.
"""
import dataclasses
import functools
import json
import sys
from typing import Any, Optional

from absl import logging
from etils import epath
import jax
import ml_collections

from bert_jax.checkpoints import folder as checkpoint_folder
from bert_jax.checkpoints import loading
from bert_jax.checkpoints import run_checkpoints as ckpt_lib
from bert_jax.checkpoints import workdir_owner
from bert_jax.data.sources import registry as source_registry
from bert_jax.modeling import compute_policy
from bert_jax.modeling import flops as flops_lib
from bert_jax.modeling import fp8
from bert_jax.modeling import model as model_lib
from bert_jax.objectives import registry as objective_registry
from bert_jax.pretraining import setup as pretrain_setup
from bert_jax.runtime import compile_cache
from bert_jax.runtime import console
from bert_jax.runtime import optional_tensorflow
from bert_jax.runtime import stop_signals
from bert_jax.runtime import train_log
from bert_jax.runtime import workdirs
from bert_jax.runtime import write_errors
from bert_jax.runtime import xla_flags
from bert_jax.training import loop as training_loop
from bert_jax.training import sharding
from bert_jax.training import train_core


@dataclasses.dataclass(frozen=True)
class _Place:
  """Where a run computes and writes, settled before anything loads: its workdir, whether this
  process writes, the mesh and its rules, and the test hook `preempt_at_step`."""
  workdir: str
  is_writer: bool
  mesh: Any
  rules: Any
  preempt_at_step: Optional[int]


@dataclasses.dataclass(frozen=True)
class _Start:
  """What the loop starts from: the data, the objective's setup, the state and its shardings,
  the stream's position, the workdir's checkpoints, the config as recorded, and the log window
  a checkpoint saved mid-window recorded (Loop.window_record; None when resumed at a log step
  or not resumed)."""
  data: Any
  setup: Any
  state: Any
  state_shardings: Any
  data_position: int
  ckpts: ckpt_lib.TrainCheckpoints
  config_record: dict
  window: Optional[dict] = None


def train(config: ml_collections.ConfigDict, workdir: str,
          preempt_at_step: Optional[int] = None,
          stop: Optional[stop_signals.StopSignals] = None) -> dict[str, Any]:
  """Runs pretraining; returns a summary (final step, last logged metrics, state).

  Args:
    config: a configs/pretrain.py ConfigDict.
    workdir: run directory (local or gs://); resumes from its checkpoints.
    preempt_at_step: behave as if SIGTERM arrived before this step (tests).
    stop: the program's stop signals, when it writes more after training (the export) and
      restores them itself; by default train's own, restored when it returns.
  """
  # -- Mesh and checks -----------------------------------------------------------
  workdir_owner.check(workdir, "pretrain")
  mesh = sharding.mesh_from_config(config.mesh)
  rules = sharding.logical_rules(config.mesh.preset)
  source = source_registry.get(config.data.source)  # the checks, the data and the header use it
  pretrain_setup.check_config(config, mesh, source)
  _check_init_given(config, workdir)
  compile_cache.enable(config.compile_cache)
  is_writer = jax.process_index() == 0
  logging.info("mesh %s over %d devices, %d processes", dict(mesh.shape), jax.device_count(),
               jax.process_count())
  if is_writer:
    print("bert_jax.pretrain: loading the input pipeline ...", flush=True)
  # From here until the end of training a signal stops the run: at once before the first
  # step (nothing is trained yet), after a save once training has begun.
  own = stop is None
  stop = stop or stop_signals.StopSignals(starting=True)
  try:
    # Until the end of training, a line within every 9 s in every phase, saying which.
    with console.Heartbeat("bert_jax.pretrain", enabled=is_writer, file=sys.stdout,
                           at_start=False, status="loading the input pipeline") as beat:
      return _train(config, _Place(workdir, is_writer, mesh, rules, preempt_at_step), source,
                    beat, stop)
  finally:
    if own:
      stop.restore()


def _train(config, place: _Place, source, beat: console.Heartbeat,
           stop: stop_signals.StopSignals) -> dict[str, Any]:
  """train() from the input pipeline on; `beat` says which phase the run is in."""
  # -- Data ------------------------------------------------------------------
  data = _input_pipeline(config, source)
  beat.doing("making the model, the optimizer and the initial state")

  # -- Abstract model, objective, optimizer --------------------------------------
  setup = pretrain_setup.build(config, data.vocab_size, data.tokenizer.inv_vocab,
                               data.tokenizer.pad_id)

  # -- State: resume this workdir, or start from init_checkpoint (or the params the
  # objective starts from: a distillation student from its teacher), or scratch -----
  ckpts = ckpt_lib.TrainCheckpoints(
      str(epath.Path(place.workdir) / workdirs.CHECKPOINTS),
      max_to_keep=config.keep_checkpoints)
  config_record = json.loads(config.to_json_best_effort())  # saved with each checkpoint
  state, state_shardings, data_position, window = _initial_state(config, place, setup, data,
                                                                 ckpts, config_record)
  beat.touch()  # _initial_state printed the header
  beat.doing("compiling the train step")
  return _compile_and_loop(config, place, _Start(data, setup, state, state_shardings,
                                                 data_position, ckpts, config_record, window),
                           beat, stop)


def _compile_and_loop(config, place: _Place, start: _Start, beat: console.Heartbeat,
                      stop: stop_signals.StopSignals) -> dict[str, Any]:
  """_train from the first compile on: the steps compiled, the loop, the last checkpoint."""
  workdir, is_writer, mesh, rules = place.workdir, place.is_writer, place.mesh, place.rules
  data, setup, state, ckpts = start.data, start.setup, start.state, start.ckpts
  data_position, config_record = start.data_position, start.config_record
  model_cfg = setup.model_config
  start_step = int(state.step)
  # -- Jitted steps (frozen params, a distillation teacher, are an input placed once) --
  train_step, eval_step, frozen = _jitted_steps(config, setup, state, start.state_shardings,
                                                mesh, rules, stop)

  # -- Loop ---------------------------------------------------------------------
  description = _model_description(model_cfg, data.tokenizer)  # saved with each checkpoint
  logger = train_log.RunLogger(workdir, config.total_steps, is_writer, resume_step=start_step,
                               console=objective_registry.get(config.objective).console_metrics)
  peak = flops_lib.device_peak_flops(model_cfg.dtype) * jax.device_count()
  spike_check = train_core.LossSpikeCheck(config.divergence_factor, start_step)

  def save(step):
    beat.doing(f"saving the checkpoint of step {step}")
    loop.check(state, step)  # never a non-finite state
    window = loop.window_record()  # (a stop mid-window: the resumed run logs all of it)
    ckpts.save(step, state, dict(description, data_position=data_position,
                                 config=config_record, **({"window": window} if window else {})))

  stop.started()
  it = sharding.DevicePrefetch(data.train_iterator(start_position=data_position), mesh)
  step, last, failed = start_step, {}, True
  loop = training_loop.Loop(ckpts, stop, config.on_nan, is_writer)
  loop.resume_window(start.window)
  try:
    while step < config.total_steps:
      beat.doing(f"training, step {step} of {config.total_steps}")
      if loop.stop_requested(preempt=step == place.preempt_at_step):
        save(step)
        loop.stopped(f"step {step}", beat)  # its line saying it exits is the program's last
        break
      if config.profile_start_step and step == config.profile_start_step and is_writer:
        jax.profiler.start_trace(str(epath.Path(workdir) / "profile"))
      batch = next(it)
      with sharding.mesh_context(mesh, rules):
        state, metrics = train_step(state, batch, *frozen)
      step += 1
      data_position += 1
      loop.add(metrics)
      if (config.profile_start_step and is_writer
          and step == config.profile_start_step + config.profile_num_steps):
        jax.profiler.stop_trace()
      if training_loop.due(step, config.log_every, config.total_steps):
        window = loop.take_window(state, step)
        last = _window_metrics(window, setup, config.seq_len, peak, it.take_wait())
        spike_check(last["loss"], step, ckpts.all_steps(), str(ckpts.directory))
        if window.nonfinite_steps:
          logging.warning("%d step(s) had NaN/inf loss and were skipped", window.nonfinite_steps)
        logger.log(step, last, steps_per_sec=last["steps_per_second"])
        beat.touch()
      if training_loop.due(step, config.checkpoint_every, config.total_steps):
        save(step)
      if training_loop.due(step, config.eval_every):
        beat.doing(f"evaluating at step {step} ({config.eval_batches} held-out batches)")
        with sharding.mesh_context(mesh, rules):
          results = evaluate(eval_step, state.params, data.eval_iterator(config.eval_batches),
                             mesh, setup.summarize, *frozen, stop=stop)
        if results is not None:  # (None: a stop signal; the next check saves and stops)
          logger.log(step, results, prefix="eval_")
        loop.restart_window()
        it.take_wait()  # a window starts here
    failed = False
  finally:
    stop.training_over()  # a signal now lets the last checkpoint (and export) finish
    beat.doing(f"step {step} of {config.total_steps}, writing the last checkpoint")
    # Every writer is closed; a failed close is the run's error unless one is on its way.
    train_log.close_all((ckpts.close, logger.close), raise_first=not failed)
    # The input pipeline's threads end as `it` goes (seconds on a busy host): said as such.
    beat.doing("closing the input pipeline")
  return {"step": step, "stopped_by": loop.stopped_by, "metrics": last,
          "model_config": model_cfg, "state": state,
          "export_params": setup.export_params(state.params),
          "vocab": description["vocab"], "lowercase": data.lowercase,
          "tokenizer_file": description.get("tokenizer_file")}


def _input_pipeline(config, source):
  """This host's pretraining data (PretrainData), its held-out batches built when evaluating."""
  from bert_jax.data.stream import pretrain_data  # pylint: disable=g-import-not-at-top
  data = pretrain_data.PretrainData(
      config.data, seq_len=config.seq_len, global_batch_size=config.batch_size,
      seed=config.seed, process_index=jax.process_index(), process_count=jax.process_count(),
      source=source)
  if config.eval_every:  # the held-out batches exist (built once, reused), not at step eval_every
    data.eval_iterator(config.eval_batches)
  return data


def _check_init_given(config, workdir: str) -> None:
  """Refuses a fresh start of a run that continues another's weights (a second phase) when
  init_checkpoint is empty: it would train from random weights without a word."""
  if (config.get("needs_init_checkpoint") and not config.init_checkpoint
      and not checkpoint_folder.committed_steps(epath.Path(workdir) / workdirs.CHECKPOINTS)):
    raise ValueError("bad config: this run continues another run's weights (a second phase: "
                     "needs_init_checkpoint) and init_checkpoint is empty: pass "
                     "--config.init_checkpoint=PHASE1_WORKDIR/checkpoints, or "
                     "--config.needs_init_checkpoint=False to train from random weights")


def _initial_state(config, place: _Place, setup, data, ckpts, config_record: dict):
  """The state the run starts from (ckpt_lib.initial_state's policy), announced.

  Returns:
    (state, its shardings, the data position to continue the stream from, the log window its
    checkpoint recorded or None).
  """
  workdir, is_writer, mesh, rules = place.workdir, place.is_writer, place.mesh, place.rules
  _check_export_has_checkpoints(config, workdir, ckpts)
  pretrained = setup.start_from
  if config.init_checkpoint:
    pretrained = functools.partial(_load_init_checkpoint, config, setup.model_config,
                                   data.tokenizer.inv_vocab)  # loaded when nothing is resumed
  state, state_shardings, meta, how = ckpt_lib.initial_state(
      setup.init_fn, setup.tx, jax.random.PRNGKey(config.seed), mesh, rules, checkpoints=ckpts,
      pretrained=pretrained, run_config=config_record,
      check=pretrain_setup.resume_check(config, config_record, data.tokenizer.inv_vocab),
      start_over=config.start_over,
      start_over_hint=f"To start {workdir} over from step 0 (from init_checkpoint when given), "
                      "pass --config.start_over=True (they are then moved to "
                      "checkpoints_unreadable/, export/ and metrics.jsonl to before_start_over/)")
  if meta is None and config.start_over and is_writer:
    workdir_owner.set_earlier_run_aside(workdir, _EARLIER_RUN)
  data_position = int(meta["data_position"]) if meta else 0
  start_step = int(state.step)
  if is_writer:
    _print_header(config, workdir, setup.model_config, state.params, data, start_step)
  if meta or pretrained:
    print(how + (f" (data position {data_position})" if meta else ""), flush=True)
  if is_writer and start_step < config.total_steps:
    first = "reading" if data.source.tokenized else "tokenizing"
    print(f"compiling the train step, then {first} the first shards "
          f"(progress every {config.log_every} steps) ...", flush=True)
  return state, state_shardings, data_position, (meta or {}).get("window")


def _jitted_steps(config, setup, state, state_shardings, mesh, rules,
                  stop: stop_signals.StopSignals):
  """(train step, eval step, frozen inputs); the train step compiled unless the run is done."""
  batch_shard = sharding.batch_sharding(mesh)
  frozen, frozen_shardings = (), ()
  if setup.place_frozen is not None:
    placed, placed_shardings = setup.place_frozen(mesh, rules)
    frozen, frozen_shardings = (placed,), (placed_shardings,)
  train_step = jax.jit(
      setup.train_step(config.optimizer.grad_accum_steps),
      in_shardings=(state_shardings, batch_shard) + frozen_shardings,
      out_shardings=(state_shardings, None), donate_argnums=(0,))
  eval_step = jax.jit(train_core.make_eval_step(setup.objective),
                      in_shardings=(state_shardings.params, batch_shard) + frozen_shardings)
  if int(state.step) < config.total_steps:
    # Compiled before the input pipeline starts, so that the compiler's peak memory and the
    # pipeline's first pools do not add up (peak RSS of tiny on War and Peace: 2.17 -> 1.91
    # GB, benchmarks/README). A batch of another shape is then an error, never a recompile.
    with sharding.mesh_context(mesh, rules), stop_signals.first_compile("the train step",
                                                                        stop=stop):
      train_step = train_step.lower(
          state, pretrain_setup.abstract_batch(config, batch_shard), *frozen).compile()
  return train_step, eval_step, frozen


def _model_description(model_cfg, tokenizer) -> dict:
  """The model config, vocab and casing that make a checkpoint self-describing."""
  return loading.model_description(
      model_cfg, tokenizer.inv_vocab, tokenizer.lowercase,
      tokenizer_file=tokenizer.vocab_file if tokenizer.kind != "wordpiece" else None)


def _window_metrics(window, setup, seq_len: int, peak_flops: float,
                    input_wait_seconds: float) -> dict[str, float]:
  """A log window's metrics: the objective's summary, throughput, MFU, input wait and the
  steps skipped for a NaN/inf loss (when any were)."""
  last = setup.summarize(window.sums)
  tokens = float(window.sums["real_tokens"])
  last["tokens_per_second"] = window.timed("real_tokens") / window.seconds
  masked_fraction = float(window.sums["mlm_weight"]) / max(tokens, 1.0)
  last["mfu"] = (last["tokens_per_second"]
                 * setup.flops_per_token(seq_len, masked_fraction) / peak_flops)
  # The share of the window spent waiting for input; steps per second count padding,
  # as a step benchmark does.
  last["input_wait"] = input_wait_seconds / window.seconds
  last["steps_per_second"] = (window.steps - window.carried_steps) / window.seconds
  if window.nonfinite_steps:
    last["nonfinite_steps"] = window.nonfinite_steps
  return last


_EARLIER_RUN = (workdirs.EXPORT, workdirs.METRICS, workdirs.TENSORBOARD)


def _check_export_has_checkpoints(config, workdir: str, ckpts) -> None:
  """A workdir with an export/ and no checkpoint would be overwritten by a new model: refused."""
  export = epath.Path(workdir) / workdirs.EXPORT
  if ckpts.latest_step() is None and export.exists() and not config.start_over:
    raise ValueError(
        f"{workdir} holds {export} but no checkpoint to continue it from (a new run would "
        "replace it with another model); use another --workdir, or pass "
        "--config.start_over=True to train anew here (export/ and metrics.jsonl are moved to "
        "before_start_over/ first); nothing was moved or written")


def _load_init_checkpoint(config, model_cfg, vocab):
  """config.init_checkpoint's params; its vocabulary must be the data's, token for token."""
  pretrained = loading.load_pretrained(config.init_checkpoint, expect=model_cfg)
  diff = loading.vocab_difference(pretrained.vocab, vocab)
  if diff:
    raise ValueError(f"init_checkpoint {config.init_checkpoint} was trained with another "
                     f"vocabulary than the data's tokenizer ({diff}); set data.tokenizer / "
                     "data.vocab_file to its vocab")
  return pretrained


def _print_header(config, workdir: str, model_cfg, params, data, start_step: int) -> None:
  """What the run will do: model, parameters, data, steps, where it writes."""
  from bert_jax.checkpoints import bundle  # pylint: disable=g-import-not-at-top
  from bert_jax.data.tokenizers import wordpiece  # pylint: disable=g-import-not-at-top
  arch = bundle.describe_arch(model_cfg, ("num_layers", "hidden_size", "num_heads"))
  d, tokenizer = config.data, data.tokenizer
  default_vocab = wordpiece.default_vocab_file()
  vocab = (f"{tokenizer.kind} {tokenizer.vocab_file}" if tokenizer.vocab_file != default_vocab
           else "bert-base-uncased's")
  resumed = f", resuming at step {start_step}" if start_step else ""
  console.print_header("bert_jax.pretrain", f"pretrain {config.variant}", [
      ("model", f"{config.variant} {model_cfg.model_type}: {arch}, "
                f"vocab {tokenizer.vocab_size:,}{_decoder_padding(model_cfg)}, "
                f"{console.count_params(fp8.split(params)[0]) / 1e6:.1f}M params with the "
                f"pretraining heads{'; FP8 encoder matmuls (model.fp8)' if model_cfg.fp8 else ''}"),
      ("attention", compute_policy.describe_attention(model_cfg)),
      ("data", f"{data.source.describe(d)}, {d.mode}, {vocab} vocab"),
      ("steps", f"{config.total_steps:,} of batch {config.batch_size} x seq {config.seq_len}, "
                f"{config.optimizer.name} at {config.learning_rate:g}{resumed}"),
      ("workdir", f"{workdir} (checkpoints every {config.checkpoint_every} steps, "
                  "metrics.jsonl, tensorboard/, export/ at the end)")]
      + ([("XLA flags", xla_flags.describe())] if xla_flags.describe() != "none" else []))


def _decoder_padding(model_cfg) -> str:
  """' (MLM decoder padded to 30,592)' when model.vocab_pad_multiple pads it, else ''."""
  padded = model_cfg.decoder_rows
  return f" (MLM decoder padded to {padded:,})" if padded != model_cfg.vocab_size else ""


def evaluate(eval_step, params, batches, mesh, summarize, *frozen,
             stop: Optional[stop_signals.StopSignals] = None) -> Optional[dict[str, float]]:
  """Metrics on held-out host batches (deterministic, no dropout), summarized by `summarize`;
  None when a stop signal came (`stop`, looked at before each batch): the run then saves and
  stops without this evaluation, which a long one would delay past a preemption's grace."""
  acc = train_core.MetricSums()
  for batch in batches:
    if stop is not None and stop.reached():
      return None
    acc.add(eval_step(params, sharding.host_to_global(batch, mesh), *frozen))
  sums = acc.take()
  return {} if sums is None else summarize(sums)


def train_and_export(config: ml_collections.ConfigDict, workdir: str) -> None:
  """The whole program after start-up: trains, exports and demos.

  A signal once training is over lets the last checkpoint and the export finish; the fill-mask
  example is then left out, and the program says so and ends with status 0: the run is whole.
  """
  stop = stop_signals.StopSignals(starting=True)
  try:
    summary = train(config, workdir, stop=stop)
    export_and_demo(summary, config, workdir, stop)
  finally:
    stop.restore()
  if summary["stopped_by"]:  # 128 + the signal's number, after the checkpoint line
    raise SystemExit(stop_signals.exit_status(summary["stopped_by"]))
  if stop.name and jax.process_index() == 0:
    print(f"{stop.name} arrived while the last checkpoint and the export were written; they are "
          "complete", flush=True)


def export_and_demo(summary: dict[str, Any], config, workdir: str,
                    stop: Optional[stop_signals.StopSignals] = None) -> Optional[str]:
  """Writes the params-only bundle for fine-tuning and runs the fill-mask example (not after a
  signal: `stop.name`)."""
  if summary["step"] < config.total_steps:
    return None
  from bert_jax.checkpoints import bundle  # pylint: disable=g-import-not-at-top
  from bert_jax.inference import mask_filling  # pylint: disable=g-import-not-at-top
  path = str(epath.Path(workdir) / workdirs.EXPORT)
  params = model_lib.unstack_layers(summary["export_params"])
  primary = jax.process_index() == 0
  with write_errors.writing(f"the export to {path}"), console.Heartbeat(
      "bert_jax.pretrain", enabled=primary, file=sys.stdout, at_start=False,
      status=f"writing the export to {path}"):
    bundle.save_bundle(path, params, summary["model_config"].replace(scan_layers=False),
                       summary["vocab"], summary["lowercase"], overwrite=True,
                       info={"source": "pretrain", "step": summary["step"]},
                       tokenizer_file=summary["tokenizer_file"])
  if primary:
    print(f"exported params, model config and vocab to {path}", flush=True)
  # (Every process of a multi-process run runs it, whatever signal one of them had.)
  late = stop is not None and stop.name is not None and jax.process_count() == 1
  if config.fill_mask_example and "mlm" in params and not late:  # (ELECTRA: no MLM head)
    # Every process loads the bundle and runs the example: Orbax's restore is collective,
    # so a process that skipped it would leave the others waiting for ever.
    try:
      with console.Heartbeat("bert_jax.pretrain", enabled=primary, file=sys.stdout,
                             at_start=False, status="running the fill-mask example"):
        from bert_jax.data.tokenizers import tokenizer as tokenizer_lib  # pylint: disable=g-import-not-at-top
        exported = loading.load_pretrained(path)
        tokenizer = tokenizer_lib.for_checkpoint(exported)
        result = mask_filling.fill_mask(exported, [config.fill_mask_example], top_k=5,
                                        tokenizer=tokenizer)
    except optional_tensorflow.MissingTensorFlowError as e:  # a host that trained on prepared data
      result = None
      if primary:
        print(f"fill-mask example skipped: its tokenizer needs TensorFlow here, and {e}",
              flush=True)
    if primary and result is not None:
      print("fill-mask example from the new checkpoint:", flush=True)
      mask_filling.print_predictions([config.fill_mask_example], result, tokenizer)
      if summary["step"] < 10_000:  # what to expect from a smoke run such as the quick start
        print(f"  (a {config.variant} model after {summary['step']:,} steps: short runs mostly "
              "predict frequent words such as 'the', ',' or '.'"
              + ("; a fully trained bert-base answers 'paris'"
                 if "france" in config.fill_mask_example else "") + ")", flush=True)
  return path
