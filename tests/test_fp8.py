"""model.fp8: flax's FP8 dot in the encoder's dense layers, its state in the train state.

The quantize-dequantize numerics against a hand-written reference (scale from amax, clip to
the format's largest finite value, round to float8), the amax history flax's ops keep step by
step, the switch off leaving the model and step as they were, an exact resume with the switch
on, and the one-line refusals where FP8 cannot run.
"""
import os
import sys

import flax.linen as nn
from flax.linen import fp8_ops
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from bert_jax.checkpoints import loading
from bert_jax.configuration import sections as config_sections
from bert_jax.modeling import compute_policy
from bert_jax.modeling import fp8
from bert_jax.modeling import layers
from bert_jax.modeling import model as model_lib
from bert_jax.modeling import model_config as model_config_lib
from bert_jax.objectives import mlm_nsp
from bert_jax import pretrain
from bert_jax.training import train_core
from tests.fixtures.pretraining import logged_losses
from tests.fixtures.pretraining import small_config
from tests.fixtures.repo import ROOT

E4M3_MAX, E5M2_MAX = 448.0, 57344.0  # the formats' largest finite values (OCP FP8)


def reference_qdq(x: np.ndarray, dtype, fmt_max: float, scale: float) -> np.ndarray:
  """x / scale clipped to +-fmt_max, rounded to the float8 format (ml_dtypes: round to
  nearest even), times scale; float32 throughout."""
  scaled = np.clip(x.astype(np.float32) / np.float32(scale), -fmt_max, fmt_max)
  return scaled.astype(dtype).astype(np.float32) * np.float32(scale)


@pytest.mark.parametrize("dtype,fmt_max", [(jnp.float8_e4m3fn, E4M3_MAX),
                                           (jnp.float8_e5m2, E5M2_MAX)])
def test_quantize_dequantize_matches_the_reference(dtype, fmt_max):
  assert float(jnp.finfo(dtype).max) == fmt_max
  rng = np.random.default_rng(0)
  x = (rng.standard_normal(4096) * 3).astype(np.float32)
  x[:4] = [1e6, -1e6, fmt_max * 0.999, 0.0]  # clipped, clipped, in range, zero
  amax = float(np.max(np.abs(x[4:])))
  for scale in (1.0, amax / fmt_max, 0.37):
    got = np.asarray(fp8_ops.qdq(jnp.asarray(x), dtype, jnp.float32(scale), jnp.float32))
    want = reference_qdq(x, ml_dtypes.float8_e4m3fn if dtype == jnp.float8_e4m3fn
                         else ml_dtypes.float8_e5m2, fmt_max, scale)
    np.testing.assert_array_equal(got, want)
    assert np.max(np.abs(got)) <= fmt_max * scale * (1 + 1e-6)  # clipped to the format's range
  # the scale from an amax puts the largest value at the format's largest: a relative error
  # of at most half a unit in the last place (3 mantissa bits: 1/16; 2 bits: 1/8)
  scale = amax / fmt_max
  got = np.asarray(fp8_ops.qdq(jnp.asarray(x[4:]), dtype, jnp.float32(scale), jnp.float32))
  big = np.abs(x[4:]) > 2 ** -6 * fmt_max * scale  # normal numbers of the format
  ulp = 2.0 ** -(3 if dtype == jnp.float8_e4m3fn else 2)
  assert np.max(np.abs(got - x[4:])[big] / np.abs(x[4:])[big]) <= ulp / 2 + 1e-7


def _dense(fp8_on=True):
  return layers.DenseGeneral(16, ("embed", "mlp"), fp8=fp8_on)


def test_the_dense_layer_computes_with_quantized_input_and_kernel():
  x = jax.random.normal(jax.random.key(0), (3, 5, 8)) * 4
  v = _dense().init(jax.random.key(1), x)
  assert sorted(v) == [fp8.FP8_STATE, "params"]
  kernel, bias = (np.asarray(nn.unbox(v["params"][k])) for k in ("kernel", "bias"))
  state = v[fp8.FP8_STATE]["fp8"]
  assert np.all(np.asarray(state["input_scale"]) == 1.0)  # flax's first scale
  for amax_x, amax_k in ((0.0, 0.0), (12.0, 0.3)):  # an empty history keeps the old scale
    state = dict(state, input_amax_history=jnp.zeros(1024).at[5].set(amax_x),
                 kernel_amax_history=jnp.zeros(1024).at[9].set(amax_k))
    got = np.asarray(_dense().apply({**v, fp8.FP8_STATE: {"fp8": state}}, x))
    sx, sk = (a / E4M3_MAX if a else 1.0 for a in (amax_x, amax_k))
    qx = reference_qdq(np.asarray(x), ml_dtypes.float8_e4m3fn, E4M3_MAX, sx)
    qk = reference_qdq(kernel, ml_dtypes.float8_e4m3fn, E4M3_MAX, sk)
    np.testing.assert_allclose(got, qx @ qk + bias, rtol=1e-5, atol=1e-5)
    off = np.asarray(_dense(False).apply({"params": v["params"]}, x))
    assert np.max(np.abs(got - off)) > 1e-3  # quantized: not the float32 product


def test_the_amax_history_and_scales_update_step_by_step():
  """Each step's 'gradient' of the FP8 state is its next value: the history rolled by one
  with this step's amax at [0], the scale from the largest amax of the history before it."""
  dense = _dense()
  xs = [jax.random.normal(jax.random.key(i), (4, 8)) * (i + 1) for i in range(4)]
  v = dense.init(jax.random.key(9), xs[0])
  params, state = v["params"], v[fp8.FP8_STATE]
  target = jax.random.normal(jax.random.key(7), (4, 16))

  def loss(s, x):
    y = dense.apply({"params": params, fp8.FP8_STATE: s}, x)
    return jnp.sum((y - target) ** 2), y

  amaxes_x, amaxes_g = [], []
  for step, x in enumerate(xs):
    (_, y), next_state = jax.value_and_grad(loss, has_aux=True)(state, x)
    old, new = state["fp8"], next_state["fp8"]
    g = 2 * (y - target)  # d loss / d y
    amaxes_x.append(float(jnp.max(jnp.abs(x))))
    amaxes_g.append(float(jnp.max(jnp.abs(g))))
    for name, amaxes in (("input", amaxes_x), ("output_grad", amaxes_g)):
      history = np.asarray(new[f"{name}_amax_history"])
      assert history[0] == np.float32(amaxes[-1]), (step, name)
      np.testing.assert_array_equal(history[1:], np.roll(np.asarray(old[f"{name}_amax_history"]),
                                                         -1)[1:])
      before = max(amaxes[:-1], default=0.0)  # the scale this step used
      fmt_max = E4M3_MAX if name == "input" else E5M2_MAX
      want = np.float32(before) / np.float32(fmt_max) if before else 1.0
      np.testing.assert_allclose(np.asarray(new[f"{name}_scale"]), [want], rtol=1e-6)
    # flax's ring: after step t the history is [a_t, 0 ..., a_1, ..., a_{t-1}]
    history = np.asarray(new["input_amax_history"])
    np.testing.assert_allclose(history[-step:] if step else [], amaxes_x[:step], rtol=0)
    state = next_state


def test_a_layer_applied_twice_records_the_larger_amax_not_the_sum():
  """ALBERT's shared layer, DeBERTa's projections of the relative embeddings: the next
  values of two uses combine by max (fp8.max_accumulated), as do microbatches (add_grads)."""
  dense = _dense()
  x = jax.random.normal(jax.random.key(0), (4, 8))
  v = dense.init(jax.random.key(1), x)

  def loss(p):
    p = fp8.max_accumulated(p)
    out = dense.apply(fp8.variables(p), x) + dense.apply(fp8.variables(p), 3 * x)
    return jnp.sum(out)

  params = fp8.state_params(nn.unbox(v))
  grads = jax.jit(jax.grad(loss))(params)  # fp8_meta arrays live inside a jitted step
  _, next_state = fp8.split(grads)
  history = next_state["fp8"]["input_amax_history"]
  assert history.dtype == jnp.float32
  assert float(history[0]) == pytest.approx(3 * float(jnp.max(jnp.abs(x))), rel=1e-6)
  a, b = fp8.add_grads(grads, grads), grads
  np.testing.assert_array_equal(fp8.split(a)[1]["fp8"]["input_amax_history"], history)
  np.testing.assert_array_equal(fp8.split(a)[0]["kernel"], 2 * fp8.split(b)[0]["kernel"])


def _tiny(fp8_on: bool):
  cfg = model_config_lib.for_pretraining(model_config_lib.variant("tiny", 64), "bert").replace(
      fp8=fp8_on, dropout_rate=0.0, attention_dropout_rate=0.0)
  return model_lib.BertForPreTraining(cfg, with_nsp=True)


def test_the_switch_off_leaves_the_variables_the_step_and_the_config_as_they_were():
  assert config_sections.model().fp8 is False
  model = _tiny(False)
  params = mlm_nsp.init_fn(model, 16, 3)(jax.random.key(0))
  assert fp8.FP8_STATE not in params
  assert fp8.max_accumulated(params) is params and fp8.split(params) == (params, None)
  assert fp8.variables(params) == {"params": params}
  on = mlm_nsp.init_fn(_tiny(True), 16, 3)(jax.random.key(0))
  assert sorted(on) == sorted([*params, fp8.FP8_STATE])
  # the same params (the FP8 state holds no param), only the encoder layers' dense layers
  assert jax.tree.structure(fp8.split(on)[0]) == jax.tree.structure(params)
  dense = {"/".join(p[:-1]) for p in _paths(on[fp8.FP8_STATE])}
  assert dense == {f"bert/encoder/layer_{i}/{d}/fp8" for i in (0, 1) for d in (
      "attention/query", "attention/key", "attention/value", "attention/out", "intermediate",
      "output")}
  assert "fp8" not in _tiny(True).config.to_dict()  # never saved: exports carry no FP8


def _paths(tree):
  return [tuple(str(getattr(k, "key", k)) for k in path)
          for path, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]


def test_the_optimizer_never_touches_the_fp8_state():
  model = _tiny(True)
  init = mlm_nsp.init_fn(model, 16, 3)
  import optax  # pylint: disable=g-import-not-at-top
  tx = optax.adamw(1e-2, weight_decay=0.5)
  state = nn.unbox(train_core.init_state(init, tx, jax.random.PRNGKey(0)))
  assert jax.tree.structure(state.opt_state[0].mu) == jax.tree.structure(
      fp8.split(state.params)[0])
  rng = np.random.default_rng(0)
  batch = {"input_ids": rng.integers(5, 64, (4, 16)).astype(np.int32),
           "input_mask": np.ones((4, 16), np.int32), "segment_ids": np.zeros((4, 16), np.int32),
           "masked_lm_positions": np.tile(np.arange(1, 4, dtype=np.int32), (4, 1)),
           "masked_lm_ids": rng.integers(5, 64, (4, 3)).astype(np.int32),
           "masked_lm_weights": np.ones((4, 3), np.float32),
           "next_sentence_labels": np.zeros((4,), np.int32)}
  step = jax.jit(train_core.make_train_step(mlm_nsp.objective(model), tx, lambda s: 1e-2))
  new, _ = step(state, batch)
  old_fp8, new_fp8 = fp8.split(state.params)[1], fp8.split(new.params)[1]
  h = new_fp8["bert"]["encoder"]["layer_0"]["attention"]["query"]["fp8"]
  assert float(h["input_amax_history"][0]) > 0  # overwritten with its next value
  # scales from an all-zero history: flax keeps the initial 1.0 (no weight decay shrank them)
  assert all(float(s[0]) == 1.0 for p, s in jax.tree_util.tree_leaves_with_path(new_fp8)
             if str(p[-1].key).endswith("scale"))
  assert jax.tree.structure(old_fp8) == jax.tree.structure(new_fp8)
  # two microbatches: the FP8 state of the whole batch (max of the amaxes), not a sum
  acc, _ = jax.jit(train_core.make_train_step(mlm_nsp.objective(model), tx, lambda s: 1e-2,
                                              grad_accum_steps=2))(state, batch)
  got = fp8.split(acc.params)[1]["bert"]["encoder"]["layer_0"]["attention"]["query"]["fp8"]
  assert float(got["input_amax_history"][0]) == float(h["input_amax_history"][0])


@pytest.mark.parametrize("backend,capability,words", [
    ("gpu", "8.0", "compute capability 8.9 or newer"),
    ("gpu", "8.6", "this one is 8.6"),
    ("tpu", None, "JAX runs on tpu here"),
])
def test_fp8_is_refused_in_one_line_where_it_cannot_run(backend, capability, words, monkeypatch):
  class Device:
    compute_capability = capability
    platform = backend
  if backend == "gpu":  # the run's devices are this process's: a GPU of that capability
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    monkeypatch.setattr(jax, "devices", lambda *a: [Device()])
  m = config_sections.model()
  m.fp8 = True
  with pytest.raises(ValueError, match=words) as e:
    compute_policy.check(m, backend)
  assert "\n" not in str(e.value) and "model.fp8" in str(e.value)
  assert fp8.unsupported("gpu", "9.0") is None and fp8.unsupported("gpu", "12.0") is None
  assert fp8.unsupported("cpu", None) is None  # the quantize-dequantize numerics, for tests


@pytest.mark.parametrize("override,words", [
    ({"model.scan_layers": True}, "model.scan_layers=False"),
    ({"objective": "electra", "data.mode": "full_sentences"}, "not 'electra'"),
])
def test_combinations_fp8_cannot_honour_are_refused_in_one_line(corpus, tmp_path, override,
                                                                words):
  config = small_config(corpus, **{"model.fp8": True, **override})
  with pytest.raises(ValueError, match=words) as e:
    pretrain.train(config, str(tmp_path))
  assert "\n" not in str(e.value)
  m = config_sections.model()
  m.fp8 = True
  with pytest.raises(ValueError, match="pretraining recipe"):  # fine-tuning's check
    compute_policy.check(m, "cpu", trains_fp8=False)


@pytest.mark.slow  # three tiny runs of 6 steps
def test_resume_with_fp8_is_bitwise_the_uninterrupted_run(corpus, tmp_path):
  fp8_on = {"model.fp8": True}
  straight = str(tmp_path / "straight")
  want = pretrain.train(small_config(corpus, **fp8_on), straight)
  resumed = str(tmp_path / "resumed")
  first = pretrain.train(small_config(corpus, **fp8_on), resumed, preempt_at_step=4)
  assert first["step"] == 4
  got = pretrain.train(small_config(corpus, **fp8_on), resumed)
  a, b = logged_losses(straight), logged_losses(resumed)
  assert sorted(a) == sorted(b) == [1, 2, 3, 4, 5, 6]
  for step in (5, 6):
    assert a[step] == b[step], (step, a[step], b[step])
  # the FP8 state went through the checkpoint: the same histories and scales, bit for bit
  for x, y in zip(jax.tree.leaves(fp8.split(want["state"].params)[1]),
                  jax.tree.leaves(fp8.split(got["state"].params)[1])):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  history = fp8.split(got["state"].params)[1]["bert"]["encoder"]["layer_1"]["output"]["fp8"][
      "output_grad_amax_history"]
  assert np.count_nonzero(np.asarray(history)) == 6  # one amax a step, 6 steps
  # params loaded from the run (fine-tuning, the Encoder API, exports) carry no FP8 state
  assert fp8.FP8_STATE not in loading.load_pretrained(resumed).params
  # the FP8 losses are close to, not equal to, the float32 run's
  plain = str(tmp_path / "plain")
  pretrain.train(small_config(corpus), plain)
  c = logged_losses(plain)
  assert all(abs(a[s] - c[s]) < 0.05 for s in a) and any(a[s] != c[s] for s in a)


@pytest.mark.slow  # the tiny step built and lowered twice, as the sweep's other dry run
def test_the_gpu_sweep_lowers_the_fp8_step_for_cuda_with_fp8_types():
  sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
  import gpu_variants  # pylint: disable=g-import-not-at-top
  import train_step  # pylint: disable=g-import-not-at-top
  assert gpu_variants.VARIANTS["fp8"][0] == ["model.fp8=true"]
  record = gpu_variants.dry_run("fp8")
  assert record["status"] == "ok" and record["platforms"] == ["cuda"]
  # the lowered step holds the FP8 dots XLA:GPU turns into cuBLASLt GEMMs: e4m3 operands
  # forward, e5m2 output gradients backward
  setup = train_step.Setup(train_step_args(train_step))
  runner = train_step.ours(setup.config, setup.model_cfg, setup.batch)
  text = jax.export.export(runner.step_fn, platforms=["cuda"])(runner.state,
                                                               runner.batch).mlir_module()
  assert "f8E4M3FN" in text and "f8E5M2" in text


def train_step_args(train_step):
  import argparse  # pylint: disable=g-import-not-at-top
  p = argparse.ArgumentParser()
  train_step.add_step_args(p)
  return p.parse_args(["--config", "configs/pretrain.py:tiny,fused_attention", "--batch_size",
                       "4", "--seq_len", "32", "--dtype", "bfloat16", "--set", "model.fp8=true"])
