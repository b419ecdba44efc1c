"""What a configs/pretrain.py config means: its checks and the model, objective and optimizer.

Shared by the pretraining entry point (bert_jax.pretrain) and the ahead-of-time
compile check (bert_jax.aot_compile), so both build exactly the same step.
"""
import dataclasses
import functools
from typing import Any, Callable

from etils import epath
import jax
import ml_collections
import optax

from bert_jax import bundle
from bert_jax import checkpoint as ckpt_lib
from bert_jax import model as model_lib
from bert_jax import model_config as model_config_lib
from bert_jax import optimizer as opt_lib
from bert_jax import train_core
from bert_jax.objectives import mlm_nsp


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
  if config.on_nan not in ("stop", "skip"):
    bad(f"on_nan {config.on_nan!r} not in ['stop', 'skip']")
  opt_lib.check_config(config.optimizer, config.learning_rate)
  train_core.LossSpikeCheck(config.divergence_factor)  # validates the factor
  if config.warmup_steps < 0:
    bad(f"warmup_steps must be >= 0, got {config.warmup_steps}")
  train_core.check_batch_config(config, mesh)
  if config.init_checkpoint and not epath.Path(config.init_checkpoint).exists():
    bad(f"init_checkpoint {config.init_checkpoint} does not exist")
  if config.init_checkpoint:  # its architecture, before the data is read (vocab checked later)
    stored = ckpt_lib.read_model_config(config.init_checkpoint)
    bundle.check_arch(stored, model_config_from(config, stored.vocab_size),
                      config.init_checkpoint)


def model_config_from(config: ml_collections.ConfigDict,
                      vocab_size: int) -> model_config_lib.BertConfig:
  """The BertConfig of a pretraining config and the tokenizer's vocab size."""
  return train_core.model_config_from(config.model,
                                      model_config_lib.variant(config.variant, vocab_size))


@dataclasses.dataclass(frozen=True)
class Pretraining:
  """The pieces of a pretraining run that do not depend on devices or data.

  Attributes:
    model_config: the BertConfig computed with.
    model: BertForPreTraining (with the NSP head when the data has sentence pairs).
    objective: the train_core.Objective.
    tx: the optimizer.
    schedule: its learning-rate schedule.
    init_fn: rng -> TrainState with boxed params (for eval_shape / jit).
  """
  model_config: model_config_lib.BertConfig
  model: model_lib.BertForPreTraining
  objective: train_core.Objective
  tx: optax.GradientTransformation
  schedule: optax.Schedule
  init_fn: Callable[[jax.Array], Any]

  def train_step(self, grad_accum_steps: int):
    return train_core.make_train_step(self.objective, self.tx, self.schedule, grad_accum_steps)


def build(config: ml_collections.ConfigDict, vocab_size: int, with_nsp: bool) -> Pretraining:
  """The model, objective, optimizer and init function of a pretraining config."""
  model_cfg = model_config_from(config, vocab_size)
  model = model_lib.BertForPreTraining(model_cfg, with_nsp=with_nsp)
  tx, schedule = opt_lib.make_optimizer(config.optimizer, config.learning_rate,
                                        config.warmup_steps, config.total_steps)
  init_fn = functools.partial(
      train_core.init_state,
      mlm_nsp.init_fn(model, config.seq_len, config.data.max_predictions_per_seq), tx)
  return Pretraining(model_cfg, model, mlm_nsp.objective(model), tx, schedule, init_fn)
