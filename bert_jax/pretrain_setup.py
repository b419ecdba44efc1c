"""What a configs/pretrain.py config means: its checks and the model, objective and optimizer.

Shared by the pretraining entry point (bert_jax.pretrain) and the ahead-of-time
compile check (bert_jax.aot_compile), so both build exactly the same step.
"""
import dataclasses
import functools
import glob
from typing import Any, Callable, Optional, Sequence

from etils import epath
from flax import traverse_util
import jax
import jax.numpy as jnp
import ml_collections
import optax

from bert_jax import bundle
from bert_jax import checkpoint as ckpt_lib
from bert_jax import config_sections
from bert_jax import mask_filling
from bert_jax import flops as flops_lib
from bert_jax import model as model_lib
from bert_jax import model_config as model_config_lib
from bert_jax import optimizer as opt_lib
from bert_jax import train_core
from bert_jax.objectives import distill
from bert_jax.objectives import electra
from bert_jax.objectives import mlm_nsp

# config.objective -> the data modes it trains on.
OBJECTIVE_MODES = {"mlm_nsp": ("nsp",), "mlm_sop": ("sop",),
                   "mlm": ("nsp", "sop", "full_sentences"),
                   "electra": ("nsp", "sop", "full_sentences"),
                   "distill": ("nsp", "sop", "full_sentences")}


# Config keys a resumed run may change without saying so: they change neither a step's
# computation nor the data position (how often to log, save, evaluate or profile; the mesh;
# the compilation cache; the attention kernel and rematerialisation, same math), or they are
# the length of the learning-rate schedule (total_steps), which users extend on purpose. A
# key ending in '.' covers its section. Others need config.resume_allow_changes.
RESUME_MAY_CHANGE = ("total_steps", "log_every", "checkpoint_every", "keep_checkpoints",
                     "eval_every", "eval_batches", "profile_start_step", "profile_num_steps",
                     "fill_mask_example", "on_nan", "divergence_factor", "init_checkpoint",
                     "start_over", "resume_allow_changes", "compile_cache", "mesh.",
                     "model.attention_impl", "model.remat")
# Never changed on resume, even when allowed: the saved data position counts batches of the
# saved size, so another size would skip or repeat rows of the stream.
RESUME_NEVER_CHANGES = ("batch_size",)


def _allowed_changes(config: ml_collections.ConfigDict) -> list[str]:
  return [k.strip() for k in config.resume_allow_changes.split(",") if k.strip()]


def resume_check(config: ml_collections.ConfigDict, config_record: dict,
                 vocab: Sequence[str]) -> Callable[[str, dict], None]:
  """check(path, meta) for TrainCheckpoints.restore_latest: the saved run must be this run.

  Refuses (ResumeMismatchError, one line, nothing moved) a checkpoint saved with
  another value of any config key outside RESUME_MAY_CHANGE and
  config.resume_allow_changes, with another batch size, or with another
  vocabulary (the same tokens in the same order).
  """
  return ckpt_lib.config_resume_check(
      config_record, vocab, tuple(RESUME_MAY_CHANGE) + tuple(_allowed_changes(config)),
      RESUME_NEVER_CHANGES, "data.tokenizer / data.vocab_file")


def _check_local_files(data: ml_collections.ConfigDict) -> None:
  """A local data.files glob that matches nothing fails here, before the input pipeline and
  TensorFlow load (seconds); data/sources.py lists the shards (gs:// too) and says it again."""
  if data.source != "files":
    return
  for pattern in (p.strip() for p in data.files.split(",")):
    if pattern and "://" not in pattern and not glob.glob(pattern):
      what = "glob" if any(c in pattern for c in "*?[") else "file"
      raise FileNotFoundError(f"config.data.files: {what} {pattern!r} "
                              + ("matches no file" if what == "glob" else "does not exist"))


def check_config(config: ml_collections.ConfigDict, mesh) -> None:
  """Fails fast, with the offending key named, on configs that cannot run."""
  def bad(msg):
    raise ValueError(f"bad config: {msg}")
  if config.variant not in model_config_lib.VARIANTS:
    bad(f"variant {config.variant!r} not in {list(model_config_lib.VARIANTS)}")
  for key in ("total_steps", "batch_size", "seq_len", "log_every", "checkpoint_every",
              "keep_checkpoints"):
    if config[key] <= 0:
      bad(f"{key} must be positive, got {config[key]}")
  max_pos = model_config_lib.BertConfig.max_position_embeddings
  if config.seq_len > max_pos:
    bad(f"seq_len {config.seq_len} exceeds the model's max positions {max_pos}")
  if config.data.max_predictions_per_seq > config.seq_len:
    bad(f"data.max_predictions_per_seq {config.data.max_predictions_per_seq} > seq_len "
        f"{config.seq_len}")
  if config.model_type not in model_config_lib.PRETRAIN_MODEL_TYPES:
    bad(f"model_type {config.model_type!r} not in {list(model_config_lib.PRETRAIN_MODEL_TYPES)}")
  if config.objective == "electra" and config.model_type not in ("electra", "bert"):
    bad(f"objective 'electra' trains ELECTRA's own encoders; model_type {config.model_type!r} "
        "is not supported with it")
  if config.model_type == "electra" and config.objective != "electra":
    bad(f"model_type 'electra' is trained by objective='electra', not {config.objective!r}")
  if config.model_type == "distilbert" and config.objective in mlm_nsp.PAIR_TASKS:
    bad(f"model_type 'distilbert' has no pooler for objective {config.objective!r}'s sentence "
        "task; use objective='mlm' or 'distill'")
  if config.emd and (config.model_type != "deberta-v2"
                     or config.objective not in ("mlm", "mlm_nsp", "mlm_sop")):
    bad(f"emd (DeBERTa's enhanced mask decoder) needs model_type 'deberta-v2' and objective "
        f"mlm, mlm_nsp or mlm_sop; got model_type {config.model_type!r}, objective "
        f"{config.objective!r}")
  _check_local_files(config.data)
  if config.objective not in OBJECTIVE_MODES:
    bad(f"objective {config.objective!r} not in {list(OBJECTIVE_MODES)}")
  if config.data.mode not in OBJECTIVE_MODES[config.objective]:
    bad(f"objective {config.objective!r} needs data.mode in "
        f"{list(OBJECTIVE_MODES[config.objective])}, got {config.data.mode!r}"
        + (" (MLM alone is objective='mlm')" if config.data.mode == "full_sentences" else ""))
  if config.objective == "electra":
    if not 0.0 < config.electra.generator_hidden_fraction <= 1.0:
      bad(f"electra.generator_hidden_fraction {config.electra.generator_hidden_fraction} must be "
          "in (0, 1]")
    if config.electra.disc_weight <= 0:
      bad(f"electra.disc_weight must be positive, got {config.electra.disc_weight}")
    if config.init_checkpoint:
      bad("init_checkpoint is not supported with objective='electra' yet (the state holds a "
          "generator and a discriminator)")
  if config.objective == "distill":
    d = config.distill
    if not config.teacher_checkpoint:
      bad("objective='distill' needs teacher_checkpoint (a bundle, converted checkpoint or "
          "pretraining workdir with an MLM head)")
    if config.init_checkpoint:
      bad("init_checkpoint is not used with objective='distill' (the student starts from the "
          "teacher's layers)")
    if d.temperature <= 0 or d.student_layers < 0:
      bad(f"distill.temperature ({d.temperature}) must be positive and distill.student_layers "
          f"({d.student_layers}) >= 0")
    if min(d.alpha_ce, d.alpha_mlm, d.alpha_cos) < 0 or d.alpha_ce + d.alpha_mlm + d.alpha_cos <= 0:
      bad(f"distill.alpha_ce/alpha_mlm/alpha_cos ({d.alpha_ce}, {d.alpha_mlm}, {d.alpha_cos}) "
          "must be >= 0 and not all 0")
    if not epath.Path(config.teacher_checkpoint).exists():
      bad(f"teacher_checkpoint {config.teacher_checkpoint} does not exist")
    ckpt_lib.read_model_config(config.teacher_checkpoint)  # a checkpoint at all, before the data
  elif config.teacher_checkpoint:
    bad(f"teacher_checkpoint is only read by objective='distill', not {config.objective!r}")
  config_sections.check_model(config.model)
  config_sections.check_minimums(config, config_sections.MINIMUMS)
  if config.on_nan not in ("stop", "skip"):
    bad(f"on_nan {config.on_nan!r} not in ['stop', 'skip']")
  if config.fill_mask_example and mask_filling.MASK not in config.fill_mask_example:
    bad(f"fill_mask_example {config.fill_mask_example!r} has no {mask_filling.MASK} (the example "
        "run after the export predicts it; '' for none)")
  if config.eval_every and not config.data.eval_every_nth_document:
    bad(f"eval_every {config.eval_every} needs held-out data: data.eval_every_nth_document is 0")
  opt_lib.check_config(config.optimizer, config.learning_rate)
  train_core.LossSpikeCheck(config.divergence_factor)  # validates the factor
  if config.warmup_steps < 0:
    bad(f"warmup_steps must be >= 0, got {config.warmup_steps}")
  train_core.check_batch_config(config, mesh)
  train_core.check_attention_impl(config.model)
  known = set(traverse_util.flatten_dict(config.to_dict(), sep=".")) | {"mesh."}
  unknown = [k for k in _allowed_changes(config) if k not in known]
  if unknown:
    bad(f"resume_allow_changes names no config key: {', '.join(unknown)}")
  if config.init_checkpoint and not epath.Path(config.init_checkpoint).exists():
    bad(f"init_checkpoint {config.init_checkpoint} does not exist")
  if config.init_checkpoint:  # its architecture, before the data is read (vocab checked later)
    stored = ckpt_lib.read_model_config(config.init_checkpoint)
    bundle.check_arch(stored, model_config_from(config, stored.vocab_size, stored.pad_token_id),
                      config.init_checkpoint)


def abstract_batch(config: ml_collections.ConfigDict,
                   batch_sharding) -> dict[str, jax.ShapeDtypeStruct]:
  """The global batch of PretrainData.train_iterator for `config`, as ShapeDtypeStructs."""
  def s(shape, dtype):
    return jax.ShapeDtypeStruct(shape, dtype, sharding=batch_sharding)
  b, length, p = config.batch_size, config.seq_len, config.data.max_predictions_per_seq
  batch = dict(input_ids=s((b, length), jnp.int32), input_mask=s((b, length), jnp.int32),
               segment_ids=s((b, length), jnp.int32), masked_lm_positions=s((b, p), jnp.int32),
               masked_lm_ids=s((b, p), jnp.int32), masked_lm_weights=s((b, p), jnp.float32),
               next_sentence_labels=s((b,), jnp.int32))
  if config.data.packing:
    batch["position_ids"] = s((b, length), jnp.int32)
  return batch


def model_config_from(config: ml_collections.ConfigDict, vocab_size: int,
                      pad_id: int = 0) -> model_config_lib.BertConfig:
  """The BertConfig of a pretraining config and the tokenizer's vocab size and padding id."""
  base = model_config_lib.for_pretraining(model_config_lib.variant(config.variant, vocab_size),
                                          config.model_type, pad_id)
  return train_core.model_config_from(config.model, base,
                                      one_example_per_row=not config.data.packing)


@dataclasses.dataclass(frozen=True)
class Pretraining:
  """The pieces of a pretraining run that do not depend on devices or data.

  Attributes:
    model_config: the BertConfig of the exported model (ELECTRA: the discriminator).
    objective: the train_core.Objective.
    tx: the optimizer.
    schedule: its learning-rate schedule.
    init_fn: rng -> TrainState with boxed params (for eval_shape / jit).
    summarize: host side, accumulated metric sums -> the logged metrics.
    export_params: the state's params -> the params of the exported model.
    flops_per_token: (seq_len, masked fraction) -> training FLOPs per real token.
    start_from: params to start from when not resuming (distillation: the student made
      from the teacher), else None.
    place_frozen: (mesh, rules) -> (frozen params on the mesh, their shardings), the
      step's `frozen` argument (distillation: the teacher); None when there are none.
    frozen_init: rng -> the frozen model's boxed params (their shapes and logical axes:
      bert_jax.aot_compile's abstract `frozen` argument); None when there are none.
  """
  model_config: model_config_lib.BertConfig
  objective: train_core.Objective
  tx: optax.GradientTransformation
  schedule: optax.Schedule
  init_fn: Callable[[jax.Array], Any]
  summarize: Callable[[dict], dict[str, float]]
  export_params: Callable[[Any], Any]
  flops_per_token: Callable[[int, float], float]
  start_from: Optional[ckpt_lib.Pretrained] = None
  place_frozen: Optional[Callable[[Any, Any], tuple[Any, Any]]] = None
  frozen_init: Optional[Callable[[jax.Array], Any]] = None
  prng_impl: str = train_core.THREEFRY

  def train_step(self, grad_accum_steps: int):
    return train_core.make_train_step(self.objective, self.tx, self.schedule, grad_accum_steps,
                                      prng_impl=self.prng_impl)


def build(config: ml_collections.ConfigDict, vocab_size: int,
          vocab: Sequence[str] = (), pad_id: int = 0) -> Pretraining:
  """The model, objective, optimizer and init function of a pretraining config.

  Args:
    config: a configs/pretrain.py config (config.objective picks the objective).
    vocab_size: the tokenizer's vocab size.
    vocab: the tokenizer's tokens (distillation checks the teacher's are the same).
    pad_id: the tokenizer's padding id (RoBERTa's positions start after it).

  Returns:
    The Pretraining pieces.
  """
  model_cfg = model_config_from(config, vocab_size, pad_id)
  impl = train_core.prng_impl(config.model)
  tx, schedule = opt_lib.make_optimizer(config.optimizer, config.learning_rate,
                                        config.warmup_steps, config.total_steps)
  seq_len, num_predictions = config.seq_len, config.data.max_predictions_per_seq
  if config.objective == "electra":
    models = electra.Models(model_cfg.replace(model_type="electra"),
                            config.electra.generator_hidden_fraction)
    init_params = electra.init_fn(models, seq_len, num_predictions)

    def flops(length, masked_fraction):  # both encoders; the generator's MLM head; the
      h = models.discriminator_config.hidden_size  # discriminator's head at every token
      return (flops_lib.train_flops_per_token(models.discriminator_config, length, 0.0)
              + flops_lib.train_flops_per_token(models.generator_config, length, masked_fraction)
              + 6.0 * (h * h + h))
    return Pretraining(
        models.discriminator_config, electra.objective(models, config.electra.disc_weight), tx,
        schedule, functools.partial(train_core.init_state, init_params, tx, prng_impl=impl),
        functools.partial(electra.summarize, disc_weight=config.electra.disc_weight),
        lambda params: params["discriminator"], flops, prng_impl=impl)
  if config.objective == "distill":
    return _distillation(config, vocab_size, vocab, tx, schedule)
  pair_task = mlm_nsp.PAIR_TASKS.get(config.objective)
  model = model_lib.BertForPreTraining(model_cfg, with_nsp=pair_task is not None, emd=config.emd)
  init_params = mlm_nsp.init_fn(model, seq_len, num_predictions)
  return Pretraining(
      model_cfg, mlm_nsp.objective(model, pair_task or "nsp"), tx, schedule,
      functools.partial(train_core.init_state, init_params, tx, prng_impl=impl), mlm_nsp.summarize,
      lambda params: params,
      functools.partial(flops_lib.train_flops_per_token, model_cfg, emd=config.emd),
      prng_impl=impl)


def _distillation(config: ml_collections.ConfigDict, vocab_size: int, vocab: Sequence[str],
                  tx: optax.GradientTransformation, schedule: optax.Schedule) -> Pretraining:
  """objective='distill': the student of config.teacher_checkpoint (bert_jax.objectives.distill)."""
  d = config.distill
  impl = train_core.prng_impl(config.model)
  stored = ckpt_lib.read_model_config(config.teacher_checkpoint)
  layers = distill.student_layers(stored.num_layers, d.student_layers)
  teacher = distill.load_teacher(config.teacher_checkpoint, layers, vocab)
  if teacher.config.vocab_size != vocab_size:
    raise ValueError(f"teacher_checkpoint {config.teacher_checkpoint}: vocab_size "
                     f"{teacher.config.vocab_size}, the data's tokenizer has {vocab_size}; set "
                     "data.vocab_file / data.tokenizer to the teacher's vocab")
  teacher_cfg = train_core.model_config_from(config.model, teacher.config,
                                             one_example_per_row=not config.data.packing)
  student_cfg = distill.student_config(teacher_cfg, layers)
  teacher_model = model_lib.BertForPreTraining(teacher_cfg, with_nsp=False)
  student = model_lib.BertForPreTraining(student_cfg, with_nsp=False)
  seq_len, num_predictions = config.seq_len, config.data.max_predictions_per_seq
  teacher_init = mlm_nsp.init_fn(teacher_model, seq_len, num_predictions)
  weights = dict(temperature=d.temperature, alpha_ce=d.alpha_ce, alpha_mlm=d.alpha_mlm,
                 alpha_cos=d.alpha_cos)

  def flops(length, masked_fraction):  # the student's training and the teacher's forward pass
    return (flops_lib.train_flops_per_token(student_cfg, length, masked_fraction)
            + flops_lib.train_flops_per_token(teacher_cfg, length, masked_fraction) / 3)
  return Pretraining(
      student_cfg, distill.objective(student, teacher_model, **weights), tx, schedule,
      functools.partial(train_core.init_state, mlm_nsp.init_fn(student, seq_len, num_predictions),
                        tx, prng_impl=impl),
      functools.partial(distill.summarize, **weights), lambda params: params, flops,
      start_from=distill.student_from_teacher(teacher, layers) if d.init_from_teacher else None,
      place_frozen=functools.partial(distill.place_teacher, teacher, teacher_init),
      frozen_init=teacher_init, prng_impl=impl)
