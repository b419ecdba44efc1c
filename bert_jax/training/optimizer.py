"""Optimizers (BERT's AdamW, LAMB, StableAdamW) and learning-rate schedules with optax."""
import math
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np
import optax

# Parameter leaf names that take weight decay and LAMB's trust ratio; LayerNorm scales and all
# biases take neither, as in BERT's AdamW and the TF Model Garden's and NVIDIA apex's LAMB.
_DECAYED_LEAVES = ("kernel", "embedding")


def _path_names(path) -> list[str]:
  names = [getattr(k, "key", getattr(k, "name", None)) for k in path]
  return [n for n in names if isinstance(n, str) and n != "value"]  # 'value': a boxed leaf


def _leaf_name(path) -> str:
  names = _path_names(path)
  return names[-1] if names else ""


def _decayed(path) -> bool:
  return _leaf_name(path) in _DECAYED_LEAVES


def _stacked(path) -> bool:
  """True under scanned layers (`encoder/layers`, model.stack_layers): one leaf holds every
  layer, the layer index its leading axis."""
  names = _path_names(path)
  return any(a == "encoder" and b == "layers" for a, b in zip(names, names[1:]))


def decay_mask(params: Any) -> Any:
  """True where weight decay applies: kernels and embeddings, not LayerNorm or biases."""
  return jax.tree_util.tree_map_with_path(lambda p, _: _decayed(p), params)


def _norm(x: jax.Array, axes: Optional[tuple[int, ...]]) -> jax.Array:
  x = x.astype(jnp.promote_types(x.dtype, jnp.float32))  # bfloat16 sums lose the small terms
  return jnp.sqrt(jnp.sum(jnp.square(x), axis=axes, keepdims=True))


def scale_by_layer_trust_ratio() -> optax.GradientTransformation:
  """LAMB's layer adaptation: each layer's update times ||w|| / ||update|| (1 if either is 0).

  A layer is one leaf, or one slice of a scanned layers' leaf: there the norms are over all
  axes but the leading layer axis, so unrolled and scanned layers get the same ratios
  (`optax.scale_by_trust_ratio` takes one norm over the whole stack). Leaves without weight
  decay (`decay_mask`: LayerNorm, biases) keep their update unscaled.
  """
  def update(updates, state, params=None):
    if params is None:
      raise ValueError("scale_by_layer_trust_ratio needs the params")

    def scale(path, u, w):
      if not _decayed(path):
        return u
      axes = tuple(range(1, u.ndim)) if _stacked(path) else None
      w_norm, u_norm = _norm(w, axes), _norm(u, axes)  # [layers, 1, ...] or [1, ...]
      ratio = jnp.where((w_norm > 0) & (u_norm > 0),
                        w_norm / jnp.where(u_norm > 0, u_norm, 1.0), 1.0)
      return u * ratio.astype(u.dtype)

    return jax.tree_util.tree_map_with_path(scale, updates, params), state

  return optax.GradientTransformation(optax.init_empty_state, update)


# Learning-rate shapes after the linear warmup.
SCHEDULES = ("linear", "polynomial", "constant", "trapezoidal")
OPTIMIZERS = ("adamw", "lamb", "stable_adamw")
# The trapezoidal schedule's decay: the last tenth of the steps, as 1 - sqrt of the
# fraction of the decay done (ModernBERT, arXiv:2412.13663 Sec. 2.2, after Hägele et al. 2024).
TRAPEZOID_DECAY_FRACTION = 0.1


def _one_minus_sqrt(peak: float, steps: int) -> optax.Schedule:
  return lambda count: peak * (1.0 - jnp.sqrt(jnp.minimum(count, steps) / steps))


def scale_by_stable_adam(b1: float, b2: float, eps: float, weight_decay: float,
                         mu_dtype: Optional[Any] = None) -> optax.GradientTransformation:
  """StableAdamW (Wortsman et al. 2023, arXiv:2304.13013, Algorithm 2) before the learning
  rate: AdamW's direction plus the decoupled decay (on decay_mask's params), each tensor's
  divided by max(1, RMS) where RMS = sqrt(mean(g^2 / max(v, eps^2))), v the bias-corrected
  second moment: AdaFactor's update clipping per tensor, so that a gradient far larger than
  its running scale cannot take a large step."""
  adam = optax.scale_by_adam(b1=b1, b2=b2, eps=eps, mu_dtype=mu_dtype)

  def update(updates, state, params=None):
    grads = updates
    direction, state = adam.update(updates, state, params)
    nu_hat = jax.tree.map(lambda v: v / (1 - b2 ** state.count.astype(jnp.float32)), state.nu)
    decayed = decay_mask(params)

    def clip(g, d, v, w, decay):
      rms = jnp.sqrt(jnp.mean(jnp.square(g.astype(jnp.float32)) / jnp.maximum(v, eps**2)))
      if decay and weight_decay:
        d = d + weight_decay * w
      return (d / jnp.maximum(1.0, rms)).astype(d.dtype)

    return jax.tree.map(clip, grads, direction, nu_hat, params, decayed), state

  return optax.GradientTransformation(adam.init, update)


def learning_rate_schedule(peak: float, warmup_steps: int, total_steps: int,
                           kind: str = "linear", power: float = 1.0) -> optax.Schedule:
  """Linear warmup to `peak`, then linear or polynomial decay to 0 at total_steps, or constant,
  or trapezoidal (warmup-stable-decay): constant, then 1 - sqrt decay to 0 over the last
  TRAPEZOID_DECAY_FRACTION of the steps."""
  if kind not in SCHEDULES:
    raise ValueError(f"optimizer.schedule {kind!r} not in {list(SCHEDULES)}")
  warmup_steps = min(warmup_steps, total_steps)
  decay_steps = max(1, total_steps - warmup_steps)
  if kind == "trapezoidal":
    tail = max(1, min(decay_steps, round(total_steps * TRAPEZOID_DECAY_FRACTION)))
    decay = optax.join_schedules([optax.constant_schedule(peak), _one_minus_sqrt(peak, tail)],
                                 [decay_steps - tail])
  elif kind == "constant":
    decay = optax.constant_schedule(peak)
  else:
    decay = optax.polynomial_schedule(peak, 0.0, 1.0 if kind == "linear" else power, decay_steps)
  if warmup_steps == 0:
    return decay
  warmup = optax.linear_schedule(0.0, peak, warmup_steps)
  return optax.join_schedules([warmup, decay], [warmup_steps])


def check_config(opt: Any, learning_rate: float) -> None:
  """Fails fast on optimizer settings that cannot train (shared by every entry point).

  Raises:
    ValueError: 'bad config: ...' naming the key and its value.
  """
  def bad(msg):
    raise ValueError(f"bad config: {msg}")
  if not (math.isfinite(learning_rate) and learning_rate > 0):
    bad(f"learning_rate must be positive and finite, got {learning_rate}")
  if opt.name not in OPTIMIZERS:
    bad(f"optimizer.name {opt.name!r} not in {list(OPTIMIZERS)}")
  for key in ("b1", "b2"):
    if not 0 <= opt[key] < 1:
      bad(f"optimizer.{key} must be in [0, 1), got {opt[key]}")
  if not opt.eps > 0:
    bad(f"optimizer.eps must be positive, got {opt.eps}")
  for key in ("weight_decay", "grad_clip_norm"):
    if not opt[key] >= 0:
      bad(f"optimizer.{key} must be >= 0 (0 disables), got {opt[key]}")
  if opt.schedule not in SCHEDULES:
    bad(f"optimizer.schedule {opt.schedule!r} not in {list(SCHEDULES)}")
  if not opt.poly_power > 0:
    bad(f"optimizer.poly_power must be positive, got {opt.poly_power}")
  if opt.grad_accum_steps <= 0:
    bad(f"optimizer.grad_accum_steps must be positive, got {opt.grad_accum_steps}")


def make_optimizer(opt: Any, learning_rate: float, warmup_steps: int,
                   total_steps: int) -> tuple[optax.GradientTransformation, optax.Schedule]:
  """Builds the optimizer from a config section.

  Args:
    opt: config with name, b1, b2, eps, weight_decay, grad_clip_norm,
      bf16_moments, schedule, poly_power.
    learning_rate: peak learning rate.
    warmup_steps: linear warmup steps.
    total_steps: steps to decay over.

  Returns:
    (optax transformation, learning-rate schedule)
  """
  schedule = learning_rate_schedule(learning_rate, warmup_steps, total_steps,
                                    opt.schedule, opt.poly_power)
  mu_dtype = jnp.bfloat16 if opt.bf16_moments else None
  if opt.name == "adamw":
    core = optax.adamw(schedule, b1=opt.b1, b2=opt.b2, eps=opt.eps,
                       weight_decay=opt.weight_decay, mask=decay_mask, mu_dtype=mu_dtype)
  elif opt.name == "lamb":
    # LAMB (You et al. 2019): Adam direction + decoupled decay, scaled per layer by
    # the trust ratio ||w|| / ||update|| (not LayerNorm or biases), as in the large-batch
    # BERT recipe.
    core = optax.chain(
        optax.scale_by_adam(b1=opt.b1, b2=opt.b2, eps=opt.eps, mu_dtype=mu_dtype),
        optax.add_decayed_weights(opt.weight_decay, mask=decay_mask),
        scale_by_layer_trust_ratio(),
        optax.scale_by_learning_rate(schedule))
  elif opt.name == "stable_adamw":
    core = optax.chain(
        scale_by_stable_adam(opt.b1, opt.b2, opt.eps, opt.weight_decay, mu_dtype),
        optax.scale_by_learning_rate(schedule))
  else:
    raise ValueError(f"optimizer.name {opt.name!r} not in {list(OPTIMIZERS)}")
  if opt.grad_clip_norm > 0:
    core = optax.chain(optax.clip_by_global_norm(opt.grad_clip_norm), core)
  return core, schedule


def layerwise_scales(params: Any, num_layers: int, decay: float) -> Any:
  """Per-parameter learning-rate factors for layer-wise decay.

  Heads and pooler 1, encoder layer i (0-based from the bottom) decay**(L - i),
  embeddings decay**(L + 1). Scanned layers (`encoder/layers`, leading layer
  axis) get an array of factors broadcast over that axis.

  Args:
    params: params or their shapes (anything with `.shape` / `.ndim` leaves).
    num_layers: L.
    decay: the factor per layer.

  Returns:
    A tree like `params` of float factors (or [L, 1, ...] arrays when scanned).
  """
  def scale(path, leaf):
    keys = [getattr(k, "key", "") for k in path]
    if "embeddings" in keys:
      return decay ** (num_layers + 1)
    if _stacked(path):
      factors = decay ** (num_layers - np.arange(num_layers, dtype=np.float32))
      return jnp.asarray(factors.reshape((num_layers,) + (1,) * (len(leaf.shape) - 1)))
    for k in keys:
      if isinstance(k, str) and k.startswith("layer_"):
        return decay ** (num_layers - int(k[6:]))
    return 1.0
  return jax.tree_util.tree_map_with_path(scale, params)


def scale_updates(scales: Any) -> optax.GradientTransformation:
  """Multiplies each update by its factor in `scales` (a tree like the params)."""
  def update(updates, state, params=None):
    del params
    return jax.tree.map(lambda u, s: u * s, updates, scales), state
  return optax.GradientTransformation(lambda _: optax.EmptyState(), update)
