"""LAMB against a reference written from the paper and the TF Model Garden's code, in both layouts.

The reference (numpy, float64) follows official/modeling/optimization/lamb.py: Adam's direction,
decoupled weight decay, then ||w|| / ||u|| per variable, with LayerNorm and biases excluded from
both the decay and the layer adaptation. A variable is a layer's weight: under scanned layers
(model.stack_layers: `encoder/layers`, the layer index leading) the reference takes each stacked
leaf apart into its layers. make_optimizer's LAMB must give the same updates in either layout.
"""
import functools
import re
import types

from flax import traverse_util
import flax.linen as nn
import jax
import numpy as np
import optax
import pytest

from bert_jax.modeling import model as model_lib
from bert_jax.modeling import model_config
from bert_jax.objectives import electra
from bert_jax.training import optimizer
from tests.fixtures.optimizer import opt_config

_STEPS = 3
# The reference's exclusion list (Model Garden: ["LayerNorm", "layer_norm", "bias"]) in this
# codebase's names: every LayerNorm module is named *norm, every bias leaf *bias.
_EXCLUDED = re.compile(r"norm|bias")


def _small(model_type: str) -> model_config.BertConfig:
  return model_config.for_pretraining(model_config.BertConfig(
      vocab_size=64, hidden_size=32, num_layers=3, num_heads=2, intermediate_size=64,
      max_position_embeddings=32), model_type)


@functools.cache
def _init(model_type: str, scan: bool = False):
  """The params of a small model of `model_type`; their shapes only, unless BERT unrolled.

  BERT's come from its init (jitted: a few seconds); the other members' trees hold values drawn
  here, each leaf at its own scale, so that the layers' norms differ too.
  """
  cfg = _small(model_type).replace(scan_layers=scan)
  if model_type == "electra":  # generator and discriminator, two encoders in one tree
    init = lambda r: nn.unbox(electra.init_fn(electra.Models(cfg, 0.25), 16, 3)(r))  # noqa: E731
  else:
    init = lambda r: model_lib.init_params(model_lib.BertForPreTraining(cfg), r)  # noqa: E731
  key = jax.random.PRNGKey(0)
  if model_type != "bert" or scan:
    return jax.eval_shape(init, key)
  return jax.device_get(jax.jit(init)(key))


def _stack(params: dict) -> dict:
  """The scan layout: model.stack_layers on each encoder of the tree."""
  if "bert" in params:
    return model_lib.stack_layers(params)
  return {k: _stack(v) if isinstance(v, dict) else v for k, v in params.items()}


def _unstack(params: dict) -> dict:
  if "bert" in params:
    return model_lib.unstack_layers(params)
  return {k: _unstack(v) if isinstance(v, dict) else v for k, v in params.items()}


def _flat(tree) -> dict:
  return {k: np.asarray(v) for k, v in traverse_util.flatten_dict(tree, sep="/").items()}


def reference_layer_adaptation(name: str, w: np.ndarray, u: np.ndarray) -> np.ndarray:
  """The update `u` of the variable `name` (flattened path), times its trust ratio."""
  if _EXCLUDED.search(name):
    return u
  out = np.empty_like(u)
  # One variable per layer: a stacked leaf is taken apart along its leading axis.
  for i in range(u.shape[0]) if "encoder/layers/" in name else [Ellipsis]:
    w_norm, u_norm = np.linalg.norm(w[i]), np.linalg.norm(u[i])
    out[i] = u[i] * (w_norm / u_norm if w_norm > 0 and u_norm > 0 else 1.0)
  return out


def reference_lamb(params: dict, grads: list, lrs: list, c) -> list:
  """LAMB of the paper (You et al. 2019, Algorithm 2) as the Model Garden codes it, per variable.

  Args:
    params: the initial params (any layout).
    grads: one gradient tree per step.
    lrs: the learning rate of each step.
    c: the optimizer config (b1, b2, eps, weight_decay, grad_clip_norm).

  Returns:
    One dict per step: flattened name -> the step's update (float64).
  """
  w = {k: v.astype(np.float64) for k, v in _flat(params).items()}
  m = {k: np.zeros_like(v) for k, v in w.items()}
  v2 = {k: np.zeros_like(v) for k, v in w.items()}
  out = []
  for t, (grad_tree, lr) in enumerate(zip(grads, lrs), start=1):
    g = {k: x.astype(np.float64) for k, x in _flat(grad_tree).items()}
    global_norm = np.sqrt(sum(np.sum(x * x) for x in g.values()))
    if c.grad_clip_norm > 0 and global_norm > c.grad_clip_norm:  # make_optimizer clips first
      g = {k: x * c.grad_clip_norm / global_norm for k, x in g.items()}
    step = {}
    for name in w:
      m[name] = c.b1 * m[name] + (1 - c.b1) * g[name]
      v2[name] = c.b2 * v2[name] + (1 - c.b2) * g[name] ** 2
      m_hat = m[name] / (1 - c.b1 ** t)
      v_hat = v2[name] / (1 - c.b2 ** t)
      u = m_hat / (np.sqrt(v_hat) + c.eps)
      if not _EXCLUDED.search(name):
        u = u + c.weight_decay * w[name]
      update = -lr * reference_layer_adaptation(name, w[name], u)
      w[name] = w[name] + update
      step[name] = update
    out.append(step)
  return out


def _run(txs: list, params: dict, grads: list) -> list:
  """Each transformation's updates at each step, all from the params that the first moves.

  Returns:
    For each of `txs`, a list of one flattened update per step, like reference_lamb's.
  """
  states = [tx.init(params) for tx in txs]

  @jax.jit
  def step(g, states, params):  # one program for all of txs: one compile
    return tuple(zip(*[tx.update(g, s, params) for tx, s in zip(txs, states)]))

  out = [[] for _ in txs]
  for g in grads:
    updates, states = step(g, states, params)
    params = optax.apply_updates(params, updates[0])
    for steps, u in zip(out, updates):
      steps.append(_flat(u))
  return out


def _worst(a: list, b: list, names=None) -> float:
  """The largest difference of two runs' updates, relative to each leaf's largest update."""
  worst = 0.0
  for sa, sb in zip(a, b, strict=True):
    assert sa.keys() == sb.keys()
    for k in names if names is not None else sa:
      scale = np.max(np.abs(sb[k]))
      assert scale > 0, k
      worst = max(worst, float(np.max(np.abs(sa[k] - sb[k])) / scale))
  return worst


def _per_leaf_lamb(c, schedule) -> optax.GradientTransformation:
  """LAMB with optax's trust ratio: one norm per leaf (a whole stack), every leaf adapted."""
  return optax.chain(
      optax.clip_by_global_norm(c.grad_clip_norm),
      optax.scale_by_adam(b1=c.b1, b2=c.b2, eps=c.eps),
      optax.add_decayed_weights(c.weight_decay, mask=optimizer.decay_mask),
      optax.scale_by_trust_ratio(),
      optax.scale_by_learning_rate(schedule))


def _members_params(model_type: str, rng: np.random.Generator) -> dict:
  """Float64 params of `model_type` (see _init), unrolled, with one layer's kernel all zeros:
  its ratio must be 1 while the other layers' are not."""
  params = jax.tree.map(lambda p: (np.asarray(p) if isinstance(p, np.ndarray)
                                   else rng.normal(size=p.shape) * 10.0 ** rng.uniform(-2, 0))
                        .astype(np.float64), _init(model_type))
  for enc in [t["bert"]["encoder"] for t in ([params] if "bert" in params else params.values())]:
    if "layer_1" in enc:
      dense = enc["layer_1"]["intermediate"]
      dense["kernel"] = np.zeros_like(dense["kernel"])
  return params


def _random_like(params: dict, rng: np.random.Generator) -> dict:
  """Gradients of very different sizes per leaf (and so per layer): the layers' ratios differ."""
  return jax.tree.map(lambda p: rng.normal(size=p.shape) * 10.0 ** rng.uniform(-4, 0), params)


@pytest.fixture(scope="module")
def runs():
  """BERT's updates over _STEPS steps in each layout: make_optimizer's LAMB, the reference, Adam
  and LAMB with optax's trust ratio; in float64, so that only the algorithms can differ."""
  rng = np.random.default_rng(0)
  params = _members_params("bert", rng)
  grads = [_random_like(params, rng) for _ in range(_STEPS)]
  c = opt_config("lamb")
  c.b1, c.b2 = 0.8, 0.98  # the tiny recipe's
  layouts = {}
  with jax.enable_x64(True):
    tx, schedule = optimizer.make_optimizer(c, 1e-2, 0, 10)
    adam = optax.chain(optax.clip_by_global_norm(c.grad_clip_norm),
                       optax.adam(schedule, b1=c.b1, b2=c.b2, eps=c.eps))
    lrs = [float(schedule(t)) for t in range(_STEPS)]
    for layout, arrange in (("unrolled", lambda t: t), ("scanned", _stack)):
      p, g = arrange(params), [arrange(x) for x in grads]
      lamb, adam_steps, per_leaf = _run([tx, adam, _per_leaf_lamb(c, schedule)], p, g)
      layouts[layout] = types.SimpleNamespace(lamb=lamb, reference=reference_lamb(p, g, lrs, c),
                                              adam=adam_steps, per_leaf=per_leaf)
  return layouts


def _unstack_steps(steps: list) -> list:
  return [_flat(_unstack(traverse_util.unflatten_dict(s, sep="/"))) for s in steps]


@pytest.mark.parametrize("layout", ["unrolled", "scanned"])
def test_lamb_matches_the_reference(runs, layout):
  run = runs[layout]
  assert _worst(run.lamb, run.reference) <= 1e-6


def test_scanned_and_unrolled_updates_agree(runs):
  assert _worst(_unstack_steps(runs["scanned"].lamb), runs["unrolled"].lamb) <= 1e-6
  # The comparison can tell: optax's trust ratio, one norm over each stacked leaf, differs.
  assert _worst(_unstack_steps(runs["scanned"].per_leaf), runs["unrolled"].per_leaf) > 1e-2


@pytest.mark.parametrize("layout", ["unrolled", "scanned"])
def test_layer_norm_and_biases_get_adams_update(runs, layout):
  run = runs[layout]
  names = [k for k in run.lamb[0] if _EXCLUDED.search(k)]
  assert any(k.endswith("norm/scale") for k in names) and any(k.endswith("/bias") for k in names)
  assert _worst(run.lamb, run.adam, names) <= 1e-6
  # optax's trust ratio scales them too.
  assert _worst(run.per_leaf, run.adam, names) > 1e-2


# ALBERT's one shared layer is never scanned (BertConfig refuses share_layers with scan_layers);
# stacked, it is a stack of one. DeBERTa keeps its relative embeddings in the encoder, beside the
# stack; ELECTRA has two encoders, the generator's narrower.
@pytest.mark.parametrize("model_type", ["bert", "albert", "deberta-v2", "electra"])
def test_every_member_gets_a_ratio_per_layer_in_both_layouts(model_type):
  rng = np.random.default_rng(1)
  params = _members_params(model_type, rng)
  updates = _random_like(params, rng)
  if model_type == "albert":
    with pytest.raises(ValueError, match="scan_layers is not supported"):
      _small("albert").replace(scan_layers=True)
  else:  # the stacked layout here is the scanned model's
    scanned, stacked = _init(model_type, scan=True), _stack(params)
    assert jax.tree.structure(scanned) == jax.tree.structure(stacked)
    shapes = lambda t: [x.shape for x in jax.tree.leaves(t)]  # noqa: E731
    assert shapes(scanned) == shapes(stacked)
  adapt = optimizer.scale_by_layer_trust_ratio()
  results = {}
  with jax.enable_x64(True):
    for layout, arrange in (("unrolled", lambda t: t), ("scanned", _stack)):
      p, u = arrange(params), arrange(updates)
      # decay_mask is the exclusion list: the leaves it leaves out are the reference's.
      assert sorted(k for k, d in _flat(optimizer.decay_mask(p)).items() if not d) == sorted(
          k for k in _flat(p) if _EXCLUDED.search(k))
      got, _ = adapt.update(u, adapt.init(p), p)
      flat_u = _flat(u)
      want = {k: reference_layer_adaptation(k, w, flat_u[k]) for k, w in _flat(p).items()}
      assert _worst([_flat(got)], [want]) <= 1e-6
      results[layout] = got
  assert _worst(_unstack_steps([_flat(results["scanned"])]), [_flat(results["unrolled"])]) <= 1e-6
