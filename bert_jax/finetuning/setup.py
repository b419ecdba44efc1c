"""Fine-tuning's setup: its config checks, what a resumed run may change, what a run leaves in
its workdir, and the header it prints (pretraining's twin: bert_jax.pretraining.setup)."""
import dataclasses
import types
from typing import Optional

from etils import epath
import flax.linen as nn
import jax
from jax.experimental import multihost_utils
import numpy as np
import optax

from bert_jax.checkpoints import bundle
from bert_jax.checkpoints import folder as checkpoint_folder
from bert_jax.checkpoints import loading
from bert_jax.checkpoints import run_checkpoints as ckpt_lib
from bert_jax.checkpoints import workdir_owner
from bert_jax.configuration import options as options_lib
from bert_jax.configuration import sections as config_sections
from bert_jax.finetuning import batches as finetune_batches
from bert_jax.members import registry as members
from bert_jax.modeling import compute_policy
from bert_jax.runtime import console
from bert_jax.runtime import optional_tensorflow
from bert_jax.runtime import workdirs
from bert_jax.tasks import registry as task_registry
from bert_jax.tasks import task as task_lib
from bert_jax.training import optimizer as opt_lib
from bert_jax.training import train_core


def check_config(config, mesh) -> None:
  """Fails fast, with the offending key named, on configs that cannot run."""
  def bad(msg):
    raise ValueError(f"bad config: {msg}")
  if not config.init_checkpoint:
    bad("init_checkpoint is required (a bundle, a pretraining workdir or its checkpoints dir; "
        "convert Hugging Face / Google checkpoints with python -m bert_jax.convert)")
  if config.data_source == "tfds":
    optional_tensorflow.require_tfds("bad config: data_source='tfds'")
  train_core.check_batch_config(
      {k: config[k] for k in ("batch_size", "eval_batch_size")},
      config.optimizer.grad_accum_steps, mesh)
  compute_policy.check(config.model, trains_fp8=False)
  if config.model.hidden_act != compute_policy.AS_BUILT:  # the checkpoint's config.json only
    stored = loading.read_model_config(config.init_checkpoint)
    compute_policy.check_activation(config.model, stored, config.init_checkpoint)
  config_sections.check_minimums(config, config_sections.MINIMUMS)
  if config.max_train_examples < 0:
    bad(f"max_train_examples must be >= 0 (0: all), got {config.max_train_examples}")
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
    finetune_batches.BatchPlan.from_config(config)
  except ValueError as e:
    bad(str(e))
  if config.packing and config.optimizer.grad_accum_steps != 1:
    bad(f"packing needs optimizer.grad_accum_steps 1 (got {config.optimizer.grad_accum_steps}): "
        "packed rows do not split into microbatches; --config.packing=False to accumulate")
  family, options = task_family(config)
  if hasattr(family, "check_config"):
    family.check_config(options)


def task_family(config) -> tuple[types.ModuleType, options_lib.Options]:
  """The task module serving `config.task`, and the values of the config keys it reads."""
  family = task_registry.family(config.task)
  return family, options_lib.select(config, family.OPTIONS, family.__name__)


def make_task_model(config, model_cfg) -> task_lib.TaskModel:
  """The TaskModel of a fine-tuning config (reads no data)."""
  family, options = task_family(config)
  return family.model(options, model_cfg)


def build_task(config, tokenizer, model_cfg) -> task_lib.Task:
  """The Task of a fine-tuning config, every split read and encoded up front.

  ValueError: an unknown GLUE task, malformed data (file and line), or a config that does not
  apply; FileNotFoundError: a missing training or dev file (test files are optional).
  """
  family, options = task_family(config)
  return family.build(options, tokenizer, model_cfg)


def check_eval_head(task_model: task_lib.TaskModel, pretrained: loading.Pretrained,
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


# Config keys a resumed fine-tune may change without saying so: they change neither a step
# nor the data order (how often to log or save, the eval batch, the mesh, the compilation
# cache, the attention kernel and rematerialisation: the same math). Others need
# config.resume_allow_changes; batch_size never changes (the position counts its batches).
RESUME_MAY_CHANGE = ("log_every", "checkpoint_every", "keep_checkpoints", "eval_batch_size",
                     "resume_allow_changes", "start_over", "compile_cache", "mesh.",
                     "model.attention_impl", "model.remat", "model.qkv_projection")


# What a fine-tuning run leaves in its workdir (set aside whole by --config.start_over).
RUN_FILES = (workdirs.RESULTS, workdirs.RESULTS_PER_SEED, "predictions",
             "predictions.json", "nbest_predictions.json", "null_odds.json",
             workdirs.METRICS, workdirs.TENSORBOARD, workdirs.EXPORT,
             workdirs.FINETUNE_CHECKPOINTS, workdirs.RUN_FILE)


def print_header(config, pretrained, model_cfg, task, counts: tuple,
                 plan: finetune_batches.BatchPlan, buckets: Optional[tuple[int, ...]],
                 workdir: str) -> None:
  """What the run will do: model, parameters, data, steps (`counts`: finetune_batches.steps),
  where it writes."""
  steps_per_epoch, total_steps = counts[1], counts[2]
  arch = bundle.describe_arch(model_cfg, ("num_layers", "hidden_size", "num_heads", "vocab_size"))
  params = console.count_params(pretrained.params)
  source = (f"TFDS in {config.tfds_data_dir}" if config.data_source == "tfds"
            else config.data_dir)
  data = ", ".join(f"{k} {v}" for k, v in task.data_stats.items())
  if config.eval_only:
    steps = "none (eval_only: the checkpoint's own head is evaluated)"
  else:
    how = "chosen from the data" if plan.buckets == "auto" else "length_buckets"
    rows = ("packed several to a row" if plan.packing
            else f"length-bucketed to {', '.join(map(str, buckets or ()))} ({how})"
            if plan.length_bucketing else "padded to max_seq_length")
    steps = (f"{total_steps} ({config.num_epochs:g} epochs of {steps_per_epoch} steps of batch "
             f"{plan.batch_size}, {rows}), learning rate {config.learning_rate:g}"
             + (f", {config.seeds} seeds" if config.seeds > 1 else ""))
  console.print_header(
      "bert_jax.finetune", f"{'evaluate' if config.eval_only else 'fine-tune and evaluate'} "
      f"{task.name}",
      [("model", f"{arch}, {params / 1e6:.1f}M params, from {pretrained.source} (heads "
                 f"{list(bundle.heads_of(pretrained.params))})"),
       ("attention", compute_policy.describe_attention(model_cfg, training=not config.eval_only)),
       ("data", f"{task.name}{f' from {source}' if source else ''}: {data}; max_seq_length "
                f"{plan.seq_len}"),
       ("steps", steps),
       ("workdir", workdir)])


def optimizer(config, task_model: task_lib.TaskModel, model_cfg, total_steps: int,
              seq_len: int):
  """The run's optimizer, its schedule and its state's init function.

  AdamW (or the configured optimizer) with warmup_fraction linear warmup and linear
  decay, scaled per layer with layerwise_lr_decay; eval_only: no update.

  Returns:
    (tx, schedule, init_fn: rng -> TrainState, the dropout PRNG implementation).
  """
  if config.eval_only:
    tx, schedule = optax.set_to_zero(), optax.constant_schedule(0.0)
  else:
    tx, schedule = opt_lib.make_optimizer(config.optimizer, config.learning_rate,
                                          int(config.warmup_fraction * total_steps), total_steps)
  params_init = task_lib.init_fn(task_model, seq_len)
  if config.layerwise_lr_decay != 1.0 and not config.eval_only:
    shapes = nn.unbox(jax.eval_shape(params_init, jax.random.PRNGKey(0)))
    tx = optax.chain(tx, opt_lib.scale_updates(opt_lib.layerwise_scales(
        shapes, model_cfg.num_layers, config.layerwise_lr_decay)))
  impl = compute_policy.prng_impl(config.model)
  init_fn = lambda rng: train_core.init_state(params_init, tx, rng, impl)  # noqa: E731
  return tx, schedule, init_fn, impl


def check_run(config, config_record: dict, workdir: str, mesh, is_writer: bool) -> str:
  """Checks the workdir and the config before anything is read; 'finished' when the
  workdir holds this run, finished (nothing to do), else 'run' (also for a finished run whose
  export/ is missing: the last checkpoint writes it again).

  The workdir must not hold another program's run or a bundle, nor a finished run of
  another config (unless config.start_over, which sets that run's files aside first; not
  the unfinished run that the same start_over command began, which it resumes).
  """
  workdir_owner.check(workdir, "finetune")
  if is_writer:
    epath.Path(workdir).mkdir(parents=True, exist_ok=True)
  check_config(config, mesh)
  if workdir_owner.finished_run(workdir, config_record, RESUME_MAY_CHANGE, config.start_over):
    out_dir = epath.Path(workdir)
    if (config.eval_only or (out_dir / workdirs.EXPORT).exists()
        or not checkpoint_folder.committed_steps(out_dir / workdirs.FINETUNE_CHECKPOINTS)):
      return "finished"
    # Its export/ was deleted since (or moved): the last checkpoint holds the model it was
    # written from, so the run goes on from there, evaluating the last seed again.
    if is_writer:
      print(f"{out_dir} holds this run, finished, but its {workdirs.EXPORT}/ is missing (moved "
            "or deleted since the run wrote it): writing it again from the last checkpoint, "
            "after evaluating the last seed again", flush=True)
  elif config.start_over:
    if is_writer and not workdir_owner.resumes_its_own_start_over(workdir, config_record,
                                                                  RESUME_MAY_CHANGE):
      workdir_owner.set_earlier_run_aside(workdir, RUN_FILES)
    if jax.process_count() > 1:
      multihost_utils.sync_global_devices("bert_jax.finetune.start_over")
  return "run"


def head_from_mlm(pretrained: loading.Pretrained) -> loading.Pretrained:
  """The init checkpoint with a prediction head for the task heads of a member that reads one
  (ModernBERT's `head`: dense, activation, norm), from its MLM head's transform when it has no
  `head` of its own: transformers names both `head` and loads the MLM's into a classifier."""
  params = pretrained.params
  if (not members.get(pretrained.config.model_type).head_transform or "head" in params
      or "transform" not in params.get("mlm", {})):
    return pretrained
  head = {"dense": params["mlm"]["transform"], "norm": params["mlm"]["transform_norm"]}
  return dataclasses.replace(pretrained, params={**params, "head": head})


def task_model_for(config, pretrained: loading.Pretrained, plan: finetune_batches.BatchPlan):
  """(model config, task model) of the run on `pretrained`; its sequences must fit the
  checkpoint's position table, and eval_only needs the task's own head in it."""
  model_cfg = compute_policy.model_config_from(  # eval is never packed; training is as it says
      config.model, pretrained.config, one_example_per_row=not plan.packing)
  if plan.seq_len > model_cfg.max_position_embeddings:
    raise ValueError(f"bad config: max_seq_length {plan.seq_len} does not fit "
                     f"{pretrained.source}: it takes at most "
                     f"{model_cfg.max_position_embeddings} positions")
  task_model = make_task_model(config, model_cfg)
  if config.eval_only:
    check_eval_head(task_model, pretrained, plan.seq_len)
  return model_cfg, task_model


def resume_check(config, config_record: dict, pretrained: loading.Pretrained):
  """The check of a checkpoint this run resumes: its settings and vocab are this run's,
  but for RESUME_MAY_CHANGE and config.resume_allow_changes (batch_size never)."""
  allowed = tuple(k.strip() for k in config.resume_allow_changes.split(",") if k.strip())
  return ckpt_lib.config_resume_check(config_record, pretrained.vocab,
                                      RESUME_MAY_CHANGE + allowed, ("batch_size",),
                                      "the init_checkpoint's vocab")
