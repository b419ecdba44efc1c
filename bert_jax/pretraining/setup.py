"""What a configs/pretrain.py config means: its checks and the model, objective and optimizer.

Shared by the pretraining entry point (bert_jax.pretrain) and the ahead-of-time
compile check (bert_jax.aot_compile), so both build exactly the same step.
"""
from typing import Callable, Sequence

from etils import epath
from flax import traverse_util
import jax
import ml_collections

from bert_jax.checkpoints import bundle
from bert_jax.checkpoints import loading
from bert_jax.checkpoints import run_checkpoints as ckpt_lib
from bert_jax.configuration import options as options_lib
from bert_jax.configuration import sections as config_sections
from bert_jax.data.sources import source_base
from bert_jax.data.stream import batch_schema
from bert_jax.inference import mask_filling
from bert_jax.members import registry as members
from bert_jax.modeling import compute_policy
from bert_jax.modeling import model_config as model_config_lib
from bert_jax.objectives import base as objective_base
from bert_jax.objectives import registry as objective_registry
from bert_jax.training import optimizer as opt_lib
from bert_jax.training import train_core


# Config keys a resumed run may change without saying so: they change neither a step's
# computation nor the data position (how often to log, save, evaluate or profile; the mesh;
# the compilation cache; the attention kernel and rematerialisation, same math), or they are
# the length of the learning-rate schedule (total_steps), which users extend on purpose. A
# key ending in '.' covers its section. Others need config.resume_allow_changes.
RESUME_MAY_CHANGE = ("total_steps", "log_every", "checkpoint_every", "keep_checkpoints",
                     "eval_every", "eval_batches", "profile_start_step", "profile_num_steps",
                     "fill_mask_example", "on_nan", "divergence_factor", "init_checkpoint",
                     "start_over", "resume_allow_changes", "compile_cache", "mesh.",
                     "model.attention_impl", "model.remat", "model.qkv_projection")
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


# Members whose transformers MLM head hard-codes the exact GELU (RobertaLMHead), so a model
# trained with the tanh form does not export to what it computed.
_EXACT_GELU_MLM_HEADS = ("roberta",)


def objective_options(config) -> options_lib.Options:
  """The values of the config keys `config.objective` reads."""
  spec = objective_registry.get(config.objective)
  return options_lib.select(config, spec.options, f"objective {config.objective!r}")


def check_config(config: ml_collections.ConfigDict, mesh, source: source_base.Source) -> None:
  """Fails fast, with the offending key named, on configs that cannot run.

  Args:
    config: a configs/pretrain.py config.
    mesh: the run's mesh.
    source: config.data.source's Source (data.sources.registry.get), resolved once by the
      caller, which hands the same one to the data.
  """
  def bad(msg):
    raise ValueError(f"bad config: {msg}")
  if config.variant not in model_config_lib.VARIANTS:
    bad(f"variant {config.variant!r} not in {list(model_config_lib.VARIANTS)}")
  for key in ("total_steps", "batch_size", "seq_len", "log_every", "checkpoint_every",
              "keep_checkpoints"):
    if config[key] <= 0:
      bad(f"{key} must be positive, got {config[key]}")
  if config.data.max_predictions_per_seq > config.seq_len:
    bad(f"data.max_predictions_per_seq {config.data.max_predictions_per_seq} > seq_len "
        f"{config.seq_len}")
  if config.model_type not in members.names():
    bad(f"model_type {config.model_type!r} not in {list(members.names())}")
  if config.model.hidden_act == "gelu_new" and config.model_type in _EXACT_GELU_MLM_HEADS:
    bad(f"model.hidden_act='gelu_new' with model_type {config.model_type!r}: transformers' "
        f"{config.model_type} MLM head computes the exact GELU whatever config.json says, so "
        "its export would not compute what was trained; use model.hidden_act='as_built'")
  # The member's positions (ModernBERT's released sizes take 8,192; BERT's 512); the vocab
  # size, not known yet, does not change them.
  max_pos = model_config_lib.for_pretraining(model_config_lib.variant(config.variant, 1),
                                             config.model_type, 0).max_position_embeddings
  if config.seq_len > max_pos:
    bad(f"seq_len {config.seq_len} exceeds the model's max positions {max_pos}")
  names = objective_registry.names()
  if config.objective not in names:
    bad(f"objective {config.objective!r} not in {names}")
  spec = objective_registry.get(config.objective)
  if config.model.fp8 and not spec.fp8:
    with_fp8 = sorted(n for n in names if objective_registry.get(n).fp8)
    bad(f"model.fp8 is trained with objective {', '.join(with_fp8)}, not {config.objective!r} "
        "(its models are applied without the FP8 scales)")
  owner = objective_registry.owner_of(config.model_type)
  if owner and owner != config.objective:
    bad(f"model_type {config.model_type!r} is trained by objective={owner!r}, not "
        f"{config.objective!r}")
  if config.emd and (not members.get(config.model_type).emd or not spec.emd):
    with_emd = sorted(n for n in names if objective_registry.get(n).emd)
    member_emd = " or ".join(repr(t) for t in members.names() if members.get(t).emd)
    bad(f"emd (DeBERTa's enhanced mask decoder) needs model_type {member_emd} and objective "
        f"{', '.join(with_emd[:-1])} or {with_emd[-1]}; got model_type {config.model_type!r}, "
        f"objective {config.objective!r}")
  # Before the input pipeline and TensorFlow load (a glob that matches nothing: one line).
  source.check_early(config.data)
  modes = spec.data_modes[config.objective]
  if config.data.mode not in modes:
    bad(f"objective {config.objective!r} needs data.mode in {list(modes)}, got "
        f"{config.data.mode!r}"
        + (" (MLM alone is objective='mlm')" if config.data.mode == "full_sentences" else ""))
  spec.check_config(objective_options(config), bad)
  if config.teacher_checkpoint and not spec.reads_teacher:
    readers = [n for n in names if objective_registry.get(n).reads_teacher]
    bad(f"teacher_checkpoint is only read by objective={' or '.join(map(repr, readers))}, not "
        f"{config.objective!r}")
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
  train_core.check_batch_config({"batch_size": config.batch_size},
                                config.optimizer.grad_accum_steps, mesh)
  compute_policy.check(config.model, mesh.devices.flat[0].platform)
  known = set(traverse_util.flatten_dict(config.to_dict(), sep=".")) | {"mesh."}
  unknown = [k for k in _allowed_changes(config) if k not in known]
  if unknown:
    bad(f"resume_allow_changes names no config key: {', '.join(unknown)}")
  if config.init_checkpoint and not epath.Path(config.init_checkpoint).exists():
    bad(f"init_checkpoint {config.init_checkpoint} does not exist")
  if config.init_checkpoint:  # its architecture, before the data is read (vocab checked later)
    stored = loading.read_model_config(config.init_checkpoint)
    bundle.check_arch(stored, variant_model_config(config, stored.vocab_size, stored.pad_token_id),
                      config.init_checkpoint)
    compute_policy.check_activation(config.model, stored, config.init_checkpoint)


def abstract_batch(config: ml_collections.ConfigDict,
                   batch_sharding) -> dict[str, jax.ShapeDtypeStruct]:
  """The global batch of PretrainData.train_iterator for `config`, as ShapeDtypeStructs."""
  schema = batch_schema.features(config.seq_len, config.data.max_predictions_per_seq,
                                 config.data.packing)
  return {name: jax.ShapeDtypeStruct((config.batch_size,) + shape, dtype,
                                     sharding=batch_sharding)
          for name, (dtype, shape) in schema.items()}


def variant_model_config(config: ml_collections.ConfigDict, vocab_size: int,
                         pad_id: int = 0) -> model_config_lib.BertConfig:
  """The BertConfig of a pretraining config and the tokenizer's vocab size and padding id."""
  base = model_config_lib.for_pretraining(model_config_lib.variant(config.variant, vocab_size),
                                          config.model_type, pad_id)
  return compute_policy.model_config_from(config.model, base,
                                          one_example_per_row=not config.data.packing)


def build(config: ml_collections.ConfigDict, vocab_size: int,
          vocab: Sequence[str] = (), pad_id: int = 0) -> objective_base.Pretraining:
  """The model, objective, optimizer and init function of a pretraining config.

  Args:
    config: a configs/pretrain.py config (config.objective picks the objective).
    vocab_size: the tokenizer's vocab size.
    vocab: the tokenizer's tokens (distillation checks the teacher's are the same).
    pad_id: the tokenizer's padding id (RoBERTa's positions start after it).

  Returns:
    The Pretraining pieces.
  """
  tx, schedule = opt_lib.make_optimizer(config.optimizer, config.learning_rate,
                                        config.warmup_steps, config.total_steps)
  inputs = objective_base.BuildInputs(variant_model_config(config, vocab_size, pad_id), vocab_size,
                                      vocab, tx, schedule, compute_policy.prng_impl(config.model))
  return objective_registry.get(config.objective).build(objective_options(config), inputs)
