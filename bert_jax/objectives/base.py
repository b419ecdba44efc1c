"""What a pretraining objective module declares (its `SPEC`) and what its build returns.

bert_jax.objectives.registry finds a Spec by config.objective; bert_jax.pretraining.setup
checks a config and builds the run from it without naming any objective.
"""
import dataclasses
from typing import Any, Callable, Optional, Sequence

import jax
import optax

from bert_jax.checkpoints import loading
from bert_jax.modeling import compute_policy
from bert_jax.modeling import model_config as model_config_lib
from bert_jax.training import train_core


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
  start_from: Optional[loading.Pretrained] = None
  place_frozen: Optional[Callable[[Any, Any], tuple[Any, Any]]] = None
  frozen_init: Optional[Callable[[jax.Array], Any]] = None
  prng_impl: str = compute_policy.THREEFRY

  def train_step(self, grad_accum_steps: int):
    return train_core.make_train_step(self.objective, self.tx, self.schedule, grad_accum_steps,
                                      prng_impl=self.prng_impl)


@dataclasses.dataclass(frozen=True)
class BuildInputs:
  """What every objective's build gets besides the config.

  Attributes:
    model_config: the BertConfig of the config's variant and model_type, with the run's
      compute options.
    vocab_size: the tokenizer's vocab size.
    vocab: the tokenizer's tokens (distillation checks the teacher's are the same).
    tx: the optimizer; schedule: its learning-rate schedule.
    prng_impl: the run's dropout PRNG implementation.
  """
  model_config: model_config_lib.BertConfig
  vocab_size: int
  vocab: Sequence[str]
  tx: optax.GradientTransformation
  schedule: optax.Schedule
  prng_impl: str


@dataclasses.dataclass(frozen=True)
class Spec:
  """A pretraining objective module's declaration.

  Attributes:
    data_modes: objective name -> the data modes it trains on (one module may serve
      several names: mlm_nsp serves mlm_nsp, mlm_sop and mlm).
    options: the config keys (top-level; a section by its name) the objective reads;
      pretraining hands `build` and `check_config` their values alone
      (bert_jax.configuration.options.Options).
    build: (options, BuildInputs) -> Pretraining.
    check_config: (options, bad) -> None: the objective's own config checks; `bad(msg)`
      raises the one-line error.
    owns_model_types: model types only this objective trains (ELECTRA's).
    reads_teacher: whether it reads config.teacher_checkpoint.
    emd: whether DeBERTa's enhanced mask decoder can serve its MLM head.
    fp8: whether it trains with model.fp8 (its model applied with the FP8 state its params
      carry: bert_jax.modeling.fp8).
    console_metrics: the metrics (keys of `summarize`'s output) the console's progress
      line shows after the loss; all of them go to metrics.jsonl and TensorBoard.
  """
  data_modes: dict
  options: tuple
  build: Callable[[Any, BuildInputs], Pretraining]
  check_config: Callable[[Any, Callable[[str], None]], None] = lambda options, bad: None
  owns_model_types: tuple = ()
  reads_teacher: bool = False
  emd: bool = False
  fp8: bool = False
  console_metrics: tuple = ("mlm_accuracy",)
