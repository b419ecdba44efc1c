"""The training core under every entry point (pretraining and fine-tuning).

  TrainState           everything a step changes; checkpointed whole for exact resume
  Objective            how a batch becomes a loss: un-normalised sums of a (micro)batch,
                       denominators taken from the whole batch, loss = f(sums, denominators)
  make_train_step      the one step builder: exact gradient accumulation over microbatches,
                       a NaN/inf guard, the optimizer (clipping and schedule live in `tx`);
                       an objective may also read frozen params (a distillation teacher),
                       an argument of the step, never in the state or its checkpoints
  make_eval_step       the objective's sums without dropout
  check_batch_config   batch sizes vs microbatches, mesh batch shards and processes
  check_finite         the host-side end of the NaN guard (also checks the state itself)
  LossSpikeCheck       an optional divergence check on logged losses

A run's compute and attention policy (dtype, kernels, vocab padding, the dropout PRNG) is
bert_jax.modeling.compute_policy's. Objectives (bert_jax/objectives/) and tasks
(bert_jax/tasks/) only give an Objective; the step, the state and the guard are the same for
all of them.
"""
import collections
import dataclasses
from typing import Any, Callable, Optional

import flax
import jax
import jax.numpy as jnp
import optax

from bert_jax.modeling import compute_policy
from bert_jax.modeling import fp8

Batch = dict[str, jax.Array]
Sums = dict[str, jax.Array]


@flax.struct.dataclass
class TrainState:
  """Everything a step changes; checkpointed whole for exact resume."""
  step: jax.Array  # int32 scalar: updates applied so far
  params: Any
  opt_state: Any
  rng: jax.Array  # base PRNG key's raw data (uint32[2] for threefry); step keys are
  # fold_in(rng, step) in the run's PRNG implementation (prng_impl)
  nonfinite_steps: jax.Array  # int32 scalar: steps whose loss or grads were NaN/inf


def init_state(init_params: Callable[[jax.Array], Any], tx: optax.GradientTransformation,
               rng: jax.Array, prng_impl: str = compute_policy.THREEFRY) -> TrainState:
  """The initial state; use under jax.eval_shape / jit (params may be boxed).

  Args:
    init_params: rng -> params (logically boxed, as model.init returns them).
    tx: the optimizer.
    rng: a raw threefry key, split into the params' init key and the state's base key.
    prng_impl: the state's key's implementation (its raw data is drawn from the split
      key for another one); the train step made with the same `prng_impl` reads it.

  Returns:
    A TrainState at step 0.
  """
  init_rng, state_rng = jax.random.split(rng)
  if prng_impl != compute_policy.THREEFRY:
    words = jax.eval_shape(lambda: jax.random.key_data(jax.random.key(0, impl=prng_impl)))
    state_rng = jax.random.bits(state_rng, words.shape, jnp.uint32)
  params = init_params(init_rng)
  opt_state = tx.init(fp8.split(params)[0])  # the FP8 state is overwritten, never optimized
  return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=opt_state,
                    rng=state_rng, nonfinite_steps=jnp.zeros((), jnp.int32))


@dataclasses.dataclass(frozen=True)
class Objective:
  """How a batch becomes a loss, so that k microbatches give the full batch's gradient.

  Attributes:
    sums: (params, batch, rng, deterministic) -> dict of un-normalised sums of one
      (micro)batch: loss numerators and metric counts, added over microbatches.
    denominators: batch -> dict of scalars, computed once from the whole batch.
    loss: (sums, denominators) -> the scalar loss.
  """
  sums: Callable[[Any, Batch, Optional[jax.Array], bool], Sums]
  denominators: Callable[[Batch], dict[str, jax.Array]]
  loss: Callable[[Sums, dict[str, jax.Array]], jax.Array]


def microbatches(batch: Batch, k: int) -> Batch:
  """[B, ...] -> [k, B/k, ...] taking rows i, i+k, ... so each device's shard splits evenly."""
  def split(x):
    x = x.reshape((x.shape[0] // k, k) + x.shape[1:])
    return jnp.swapaxes(x, 0, 1)
  return jax.tree.map(split, batch)


def with_frozen(params: Any, frozen: Any) -> Any:
  """What objective.sums receives: `params`, or {'trained': params, 'frozen': frozen}.

  `frozen` (None: none) are params an objective reads but never trains, such as a
  distillation teacher: the step takes them as an argument (placed on the mesh once,
  sharded like params), they are not in the TrainState, the optimizer state or the
  checkpoints, and no gradient flows into them.
  """
  if frozen is None:
    return params
  return {"trained": params, "frozen": jax.lax.stop_gradient(frozen)}


def make_train_step(objective: Objective, tx: optax.GradientTransformation,
                    schedule: optax.Schedule, grad_accum_steps: int = 1,
                    deterministic: bool = False,
                    finite_guard: Optional[str] = None,
                    prng_impl: str = compute_policy.THREEFRY) -> Callable[..., tuple]:
  """Returns train_step(state, batch, frozen=None) -> (state, metric sums); jit it with donation.

  The gradient is that of the full batch's loss: each microbatch's sums are
  normalised by the whole batch's denominators, so k microbatches give the same
  update as one batch (dropout aside). A step whose loss or gradient is not
  finite leaves params and optimizer state unchanged and counts itself in
  `nonfinite_steps`. `frozen`: see `with_frozen`. `finite_guard` (None: the
  backend's, `default_finite_guard`) is how: 'cond' skips the update, 'select'
  computes it and keeps the old values (the same results when finite). `prng_impl`:
  the implementation of the state's key (`init_state`), for dropout and sampling.

  With FP8 (params holding bert_jax.modeling.fp8's state) the optimizer updates the other
  params, and the FP8 state takes its "gradient", its next value, as flax's FP8 ops define
  it; a non-finite step keeps the old one too.
  """
  def grad_sums(params, mb, rng, denominators, frozen):
    def loss_fn(p):
      p = fp8.max_accumulated(p)  # no-op without FP8
      sums = objective.sums(with_frozen(p, frozen), mb, rng, deterministic)
      return objective.loss(sums, denominators), sums
    (_, sums), grads = jax.value_and_grad(loss_fn, has_aux=True)(params)
    return grads, sums

  guard = finite_guard or default_finite_guard()
  if guard not in ("cond", "select"):
    raise ValueError(f"finite_guard {guard!r} not in ('cond', 'select')")

  def train_step(state: TrainState, batch: Batch, frozen: Any = None):
    base = (state.rng if prng_impl == compute_policy.THREEFRY
            else jax.random.wrap_key_data(state.rng, impl=prng_impl))
    rng = jax.random.fold_in(base, state.step)
    denominators = objective.denominators(batch)
    if grad_accum_steps == 1:
      grads, sums = grad_sums(state.params, batch, rng, denominators, frozen)
    else:
      mbs = microbatches(batch, grad_accum_steps)

      def body(carry, xs):
        i, mb = xs
        g, s = grad_sums(state.params, mb, jax.random.fold_in(rng, i), denominators, frozen)
        return (fp8.add_grads(carry[0], g), jax.tree.map(jnp.add, carry[1], s)), None

      zeros_g = jax.tree.map(jnp.zeros_like, state.params)
      zeros_s = jax.eval_shape(lambda: grad_sums(
          state.params, jax.tree.map(lambda x: x[0], mbs), rng, denominators, frozen)[1])
      zeros_s = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), zeros_s)
      (grads, sums), _ = jax.lax.scan(body, (zeros_g, zeros_s),
                                      (jnp.arange(grad_accum_steps), mbs))
    loss = objective.loss(sums, denominators)
    grad_norm = jnp.sqrt(sum(jnp.sum(jnp.square(g.astype(jnp.float32)))
                             for g in jax.tree.leaves(fp8.split(grads)[0])))
    finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)

    def apply_update(operand):
      params, opt_state, grads = operand
      params, grads, fp8_next = fp8.split(params)[0], *fp8.split(grads)
      updates, opt_state = tx.update(grads, opt_state, params)
      return fp8.join(optax.apply_updates(params, updates), fp8_next), opt_state

    operand = (state.params, state.opt_state, grads)
    if guard == "cond":
      new_params, new_opt = jax.lax.cond(finite, apply_update, lambda op: (op[0], op[1]), operand)
    else:
      new_params, new_opt = jax.tree.map(lambda new, old: jnp.where(finite, new, old),
                                         apply_update(operand), operand[:2])
    new_state = state.replace(
        step=state.step + 1,
        params=new_params,
        opt_state=new_opt,
        nonfinite_steps=state.nonfinite_steps + (~finite).astype(jnp.int32))
    metrics = dict(sums, loss=loss, grad_norm=grad_norm, learning_rate=schedule(state.step),
                   finite=finite.astype(jnp.float32), steps=jnp.ones((), jnp.float32))
    return new_state, metrics

  return train_step


def default_finite_guard(backend: Optional[str] = None) -> str:
  """The NaN guard's form on a backend: 'select' on a GPU, 'cond' elsewhere.

  XLA:GPU runs a conditional by copying its predicate to the host and waiting for it:
  a host synchronisation every step, which leaves the GPU idle while the host
  dispatches the next one. As a select the guard fuses into the optimizer's
  elementwise update. On the CPU the select cost a pass over params and moments plus
  copies with donated buffers (6% of a base step), and a TPU's conditional stays on
  the device, so both keep the conditional.
  """
  return "select" if (backend or jax.default_backend()) == "gpu" else "cond"


def make_eval_step(objective: Objective) -> Callable[..., Sums]:
  """Returns eval_step(params, batch, frozen=None) -> the objective's sums (deterministic)."""
  def eval_step(params, batch, frozen=None):
    return objective.sums(with_frozen(params, frozen), batch, None, True)
  return eval_step


def step_means(sums: dict[str, Any]) -> dict[str, float]:
  """Host-side: the train step's loss, grad_norm and learning_rate summed over `steps` -> means.

  Empty for eval sums (no `loss`), where each objective's summarize computes the loss.
  """
  if "loss" not in sums:
    return {}
  steps = max(float(sums.get("steps", 1.0)), 1.0)
  return {k: float(sums[k]) / steps for k in ("loss", "grad_norm", "learning_rate")}


def check_batch_config(batches: dict[str, int], grad_accum_steps: int, mesh) -> None:
  """Batch sizes must split into microbatches, over the mesh's batch shards and processes.

  Args:
    batches: global batch size by config key; the first is the training batch (split into
      `grad_accum_steps` microbatches), the others are used whole (eval).
    grad_accum_steps: the config's optimizer.grad_accum_steps.
    mesh: the device mesh.

  Raises:
    ValueError: naming the key, its value and what it must divide by.
  """
  k = grad_accum_steps
  keys = list(batches)
  if k <= 0 or batches[keys[0]] % k:
    raise ValueError(f"bad config: {keys[0]} {batches[keys[0]]} is not divisible by "
                     f"optimizer.grad_accum_steps {k}")
  shards = mesh.shape["data"] * mesh.shape["fsdp"]
  for i, key in enumerate(keys):
    per_step = batches[key] // k if i == 0 else batches[key]
    if per_step <= 0 or per_step % shards or batches[key] % jax.process_count():
      raise ValueError(
          f"bad config: {key} {batches[key]} (per step {per_step}) must be positive and "
          f"divisible over the {shards} batch shards of mesh {dict(mesh.shape)} and "
          f"{jax.process_count()} processes")


class NonFiniteLossError(RuntimeError):
  """The loss, gradients or train state became NaN/inf (or diverged) and the run stops."""


@jax.jit
def _state_is_finite(state: TrainState) -> jax.Array:
  """Whether params and optimizer moments are finite and not diverged.

  One read pass: the float32 sum of squares of every floating leaf is NaN/inf
  when any element is, and overflows (|x| of ~1e19 in a leaf) when the state
  diverged, as a learning rate of 1e30 makes it after one step.
  """
  leaves = [x for x in jax.tree.leaves((state.params, state.opt_state))
            if jnp.issubdtype(x.dtype, jnp.floating)]
  return jnp.isfinite(sum(jnp.sum(jnp.square(x.astype(jnp.float32))) for x in leaves))


def check_finite(state: TrainState, step: int, on_nan: str, last_checkpoint: str) -> int:
  """Host side of the NaN guard, run at log steps and before every save.

  Args:
    state: the current train state.
    step: the step just run, for the message.
    on_nan: 'stop' stops at the first NaN/inf loss or gradient; 'skip' goes on
      (those steps left the state unchanged).
    last_checkpoint: where the last good state is, for the message.

  Returns:
    The number of steps skipped so far for a NaN/inf loss or gradient.

  Raises:
    NonFiniteLossError: the params or optimizer moments are not finite (in
      either mode: a skipped step cannot undo an applied update, so such a state
      is never saved), or on_nan='stop' and a step's loss or gradients were.
  """
  if not bool(jax.device_get(_state_is_finite(state))):
    raise NonFiniteLossError(
        f"params or optimizer moments are NaN/inf or diverged (a squared norm overflows "
        f"float32) at step {step}: the learning rate is likely too high. Stopping; this state "
        f"is not saved; last good checkpoint: {last_checkpoint}")
  bad = int(jax.device_get(state.nonfinite_steps))
  if bad and on_nan == "stop":
    raise NonFiniteLossError(
        f"loss or gradients were NaN/inf in {bad} step(s) up to step {step}; params were not "
        f"updated by those steps. Stopping (on_nan='stop'); last good checkpoint: "
        f"{last_checkpoint}")
  return bad


@jax.jit
def _tree_add(a, b):
  return jax.tree.map(jnp.add, a, b)


class MetricSums:
  """Sums of per-step metrics on the devices, with at most `max_in_flight` steps in flight.

  `add` sums a step's metrics with one jitted call (not one dispatch per metric), then waits
  until the sums of the step `max_in_flight` steps back are computed, so the host never runs
  further ahead of the devices than that: the devices stay busy (the next steps are queued)
  and no device's queue of launches fills up. A full queue deadlocked runs on XLA:CPU with
  several devices (jaxlib 0.10, the test suite's 8): the client launches each device's
  program on its thread pool, where a launch blocks while that device has too many
  computations in flight; with every pool thread blocked in such launches or in a running
  step's all-reduce waiting for devices that no thread was left to run, XLA's collective
  rendezvous timed out after 40 s and aborted the process (under CPU load, where the host
  outruns the devices). Bitwise the same sums as adding eagerly.
  """

  def __init__(self, max_in_flight: int = 2):
    self._max_in_flight = max_in_flight
    self._sums = None
    self._pending = collections.deque()

  def add(self, metrics) -> None:
    self._sums = metrics if self._sums is None else _tree_add(self._sums, metrics)
    self._pending.append(self._sums)
    while len(self._pending) > self._max_in_flight:
      jax.block_until_ready(self._pending.popleft())

  def start_from(self, sums) -> None:
    """The window goes on from `sums` (host arrays saved with a checkpoint mid-window): the
    next `add` sums onto them as the uninterrupted run did, bit for bit."""
    self._sums = sums

  def peek(self):
    """The sums so far on the host (None before any `add`); the window goes on."""
    return None if self._sums is None else jax.device_get(self._sums)

  def take(self):
    """The sums so far on the host (None before any `add`), and a new window."""
    sums = None if self._sums is None else jax.device_get(self._sums)
    self._sums = None
    self._pending.clear()
    return sums


class LossSpikeCheck:
  """Stops a run whose logged loss spikes: a divergence that stays finite.

  At each log step the window's mean loss is compared with the lowest window
  mean so far; above `factor` times it, the run stops, naming the newest
  checkpoint saved before the spiking window began.

  Args:
    factor: the spike ratio (> 1); 0 disables the check.
    start_step: the step the run starts (resumes) from.
  """

  def __init__(self, factor: float, start_step: int = 0):
    if factor and factor <= 1 or factor < 0:
      raise ValueError(f"bad config: divergence_factor must be 0 (off) or > 1, got {factor}")
    self.factor = factor
    self.lowest, self.lowest_step, self.last_step = float("inf"), 0, start_step

  def __call__(self, loss: float, step: int, saved_steps: list[int], directory: str) -> None:
    window_start, self.last_step = self.last_step, step
    if not self.factor:
      return
    if loss > self.factor * self.lowest:
      before = [s for s in saved_steps if s <= window_start]
      good = f"{directory}/{before[-1]}" if before else "none saved before it"
      raise NonFiniteLossError(
          f"loss spiked to {loss:.4g} over steps {window_start + 1}-{step}, more than "
          f"divergence_factor {self.factor:g} x the lowest logged loss {self.lowest:.4g} (step "
          f"{self.lowest_step}). Stopping; last checkpoint saved before the spike: {good}")
    if loss < self.lowest:
      self.lowest, self.lowest_step = loss, step
