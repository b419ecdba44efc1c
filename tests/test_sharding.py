"""Mesh, sharding presets, derived shardings and elastic restore on 8 fake CPU devices."""
import functools
import logging
import re

import flax.linen as nn
import jax
import ml_collections
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from bert_jax.checkpoints import loading
from bert_jax.checkpoints import run_checkpoints as ckpt_lib
from bert_jax.modeling import model as model_lib
from bert_jax.modeling import model_config
from bert_jax.objectives import distill
from bert_jax.objectives import mlm_nsp
from bert_jax import pretrain
from bert_jax.pretraining import setup as pretrain_setup
from bert_jax.training import optimizer
from bert_jax.training import sharding
from bert_jax.training import train_core
from configs import pretrain as pretrain_config
from tests.fixtures.pretraining import small_config

pytestmark = pytest.mark.multidevice  # meshes over 8 fake CPU devices (tests/device_split.py)

PRESETS = ("data_parallel", "fsdp", "fsdp_tensor")

# Golden mesh PartitionSpecs (trailing Nones dropped) of every BERT-base
# pretraining parameter, per preset: (data_parallel, fsdp, fsdp_tensor).
# Keys are regexes over the '/'-joined parameter path.
_NORM = ((), ("fsdp",), ("fsdp",))
GOLDEN_BASE = {
    r"bert/embeddings/word_embeddings/embedding": ((), (None, "fsdp"), ("tensor", "fsdp")),
    r"bert/embeddings/(position|token_type)_embeddings/embedding": ((), (None, "fsdp"), (None, "fsdp")),
    r"bert/embeddings/layer_norm/(scale|bias)": _NORM,
    r"bert/encoder/layer_\d+/attention/(query|key|value)/kernel": ((), ("fsdp",), ("fsdp", "tensor")),
    r"bert/encoder/layer_\d+/attention/(query|key|value)/bias": ((), (), ("tensor",)),
    r"bert/encoder/layer_\d+/attention/out/kernel": ((), (None, None, "fsdp"), ("tensor", None, "fsdp")),
    r"bert/encoder/layer_\d+/attention/out/bias": _NORM,
    r"bert/encoder/layer_\d+/(attention_norm|output_norm)/(scale|bias)": _NORM,
    r"bert/encoder/layer_\d+/intermediate/kernel": ((), ("fsdp",), ("fsdp", "tensor")),
    r"bert/encoder/layer_\d+/intermediate/bias": ((), ("fsdp",), ("tensor",)),
    r"bert/encoder/layer_\d+/output/kernel": ((), (None, "fsdp"), ("tensor", "fsdp")),
    r"bert/encoder/layer_\d+/output/bias": _NORM,
    r"bert/pooler/kernel": ((), ("fsdp",), ("fsdp",)),
    r"bert/pooler/bias": ((), (), ()),
    r"mlm/transform/kernel": ((), ("fsdp",), ("fsdp",)),
    r"mlm/transform/bias": ((), (), ()),
    r"mlm/transform_norm/(scale|bias)": _NORM,
    r"mlm_output_bias": ((), (), ("tensor",)),
    r"nsp/kernel": ((), ("fsdp",), ("fsdp",)),
    r"nsp/bias": ((), (), ()),
}
# 5 embedding leaves + 16 per layer x 12 + pooler 2 + MLM 5 + NSP 2.
BASE_NUM_PARAMS = 5 + 16 * 12 + 2 + 5 + 2


def _path(keys) -> str:
  return "/".join(str(getattr(k, "key", k)) for k in keys)


def _opt_config():
  return ml_collections.ConfigDict(dict(
      name="adamw", b1=0.9, b2=0.999, eps=1e-6, weight_decay=0.01, grad_clip_norm=1.0,
      bf16_moments=False, schedule="linear", poly_power=1.0, grad_accum_steps=1))


def _abstract_train_state(variant, vocab=30522, seq_len=128, scan=False):
  model = model_lib.BertForPreTraining(model_config.variant(variant, vocab, scan_layers=scan))
  tx, _ = optimizer.make_optimizer(_opt_config(), 1e-4, 10, 100)
  init_fn = functools.partial(train_core.init_state, mlm_nsp.init_fn(model, seq_len, 20), tx)
  return jax.eval_shape(init_fn, jax.random.PRNGKey(0))


# -- Mesh shape resolution --------------------------------------------------------


def test_mesh_shape_resolves_minus_one():
  assert sharding.mesh_shape((-1, 1, 1), 8) == (8, 1, 1)
  assert sharding.mesh_shape((2, -1, 2), 8) == (2, 2, 2)
  assert sharding.mesh_shape((1, 8, 1), 8) == (1, 8, 1)
  mesh = sharding.make_mesh((2, -1, 1))
  assert dict(mesh.shape) == {"data": 2, "fsdp": 4, "tensor": 1}
  assert mesh.axis_types == (jax.sharding.AxisType.Auto,) * 3


@pytest.mark.parametrize("shape, message", [
    ((-1, 1), r"mesh.shape \(-1, 1\) must have 3 entries"),
    ((-1, -1, 1), r"at most one -1"),
    ((3, -1, 1), r"8 devices do not divide by .* 3"),
    ((2, 2, 1), r"has 4 slots for 8 devices"),
    ((0, 8, 1), r"sizes must be positive"),
    (("a", 1, 1), r"must be 3 integers"),
])
def test_mesh_shape_errors_are_clear(shape, message):
  with pytest.raises(ValueError, match=message):
    sharding.make_mesh(shape)


def test_dcn_shape_errors_are_clear():
  with pytest.raises(ValueError, match=r"dcn_shape \(2, 1, 1\) asks for 2 slices .* 1 slice"):
    sharding.make_mesh((-1, 1, 1), dcn_shape=(2, 1, 1))
  with pytest.raises(ValueError, match=r"not divisible by mesh.dcn_shape"):
    sharding.make_mesh((1, 8, 1), dcn_shape=(2, 1, 1))


def test_mesh_from_config_reads_the_pretrain_config():
  c = pretrain_config.get_config("tiny")
  mesh = sharding.mesh_from_config(c.mesh, jax.devices()[:4])
  assert dict(mesh.shape) == {"data": 4, "fsdp": 1, "tensor": 1}
  assert set(mesh.devices.flat) == set(jax.devices()[:4])


def test_unknown_preset_and_idle_mesh_axis_are_errors():
  with pytest.raises(ValueError, match=r"mesh.preset 'zero3' .* known: \['data_parallel'"):
    sharding.logical_rules("zero3")
  abstract = _abstract_train_state("tiny", vocab=64, seq_len=8)
  with pytest.raises(ValueError, match=r"axis \['tensor'\] has size > 1 .* fsdp_tensor"):
    sharding.derive_shardings(abstract, sharding.make_mesh((1, 4, 2)), sharding.logical_rules("fsdp"))


def test_param_sharding_axes_of_size_one_warn(caplog):
  abstract = _abstract_train_state("tiny", vocab=64, seq_len=8)
  with caplog.at_level(logging.WARNING):
    sharding.derive_shardings(abstract, sharding.make_mesh((8, 1, 1)), sharding.logical_rules("fsdp"))
  assert "parameters stay replicated" in caplog.text


# -- Derived shardings -----------------------------------------------------------


@pytest.mark.parametrize("scan", [False, True])
def test_golden_partition_specs_base(scan):
  abstract = _abstract_train_state("base", scan=scan).params
  seen = 0
  for i, (preset, shape) in enumerate(zip(PRESETS, ((8, 1, 1), (1, 8, 1), (2, 2, 2)))):
    specs = sharding.partition_specs(abstract, sharding.make_mesh(shape),
                                     sharding.logical_rules(preset))
    leaves = jax.tree_util.tree_leaves_with_path(specs, is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))
    for keys, spec in leaves:
      path = _path(keys).replace("encoder/layers/", "encoder/layer_0/")
      matches = [g for pattern, g in GOLDEN_BASE.items() if re.fullmatch(pattern, path)]
      assert len(matches) == 1, f"{path}: {len(matches)} golden entries"
      want = matches[0][i]
      if scan and "encoder/" in path:
        want = (None,) + want if want else ()  # the leading 'layers' axis stays unsharded
      assert tuple(spec) == want, f"{preset} {path}: {spec} != {want}"
    seen = len(leaves)
  assert seen == (BASE_NUM_PARAMS if not scan else BASE_NUM_PARAMS - 16 * 11)


@pytest.mark.parametrize("variant", ["base", "large"])
def test_fsdp_leaves_no_large_array_replicated(variant):
  abstract = _abstract_train_state(variant)  # params and Adam moments, never allocated
  for preset, shape in (("fsdp", (1, 8, 1)), ("fsdp", (2, 4, 1)), ("fsdp_tensor", (2, 2, 2))):
    rules = sharding.logical_rules(preset)
    assert sharding.replicated_leaves(abstract, sharding.make_mesh(shape), rules) == [], preset
  # A 256-chip pod slice, by shapes only.
  pod = jax.sharding.AbstractMesh((1, 256, 1), sharding.MESH_AXES)
  assert sharding.replicated_leaves(abstract, pod, sharding.logical_rules("fsdp")) == []
  # The check can fail: data parallelism replicates every large array.
  big = sharding.replicated_leaves(abstract, sharding.make_mesh((8, 1, 1)),
                                   sharding.logical_rules("data_parallel"))
  assert any("word_embeddings" in p for p, _, _ in big) and len(big) > 100


def test_fsdp_falls_back_to_a_dimension_that_divides():
  mesh = jax.sharding.AbstractMesh((1, 512, 1), sharding.MESH_AXES)  # shapes only, no devices
  rules = sharding.logical_rules("fsdp")
  # 768 does not split 512 ways: the MLP kernel shards its 3072 axis instead.
  assert sharding.resolve_spec(("embed", "mlp"), (768, 3072), mesh, rules) == (P(None, "fsdp"), set())
  assert sharding.resolve_spec(("embed", "mlp"), (1024, 4096), mesh, rules) == (P("fsdp"), set())
  assert sharding.resolve_spec(("layers", "mlp", "embed"), (12, 3072, 768), mesh, rules) == (
      P(None, "fsdp"), set())
  # No dimension of BERT-base's attention kernel divides: replicated, and reported.
  assert sharding.resolve_spec(("embed", "heads", "kv"), (768, 12, 64), mesh, rules) == (P(), {"fsdp"})


def test_indivisible_dimension_stays_replicated():
  # 30522 rows do not split 4 ways: the vocab axis stays whole, 'embed' still splits.
  abstract = _abstract_train_state("tiny", seq_len=8).params
  specs = sharding.partition_specs(abstract, sharding.make_mesh((1, 2, 4)),
                                   sharding.logical_rules("fsdp_tensor"))
  assert tuple(specs["bert"]["embeddings"]["word_embeddings"]["embedding"]) == (None, "fsdp")
  assert tuple(specs["mlm_output_bias"]) == ()
  assert tuple(specs["bert"]["encoder"]["layer_0"]["intermediate"]["kernel"]) == ("fsdp", "tensor")


# -- Train step under each preset = one device -----------------------------------------


def _tiny_setup(vocab=512):
  cfg = model_config.variant("tiny", vocab)
  model = model_lib.BertForPreTraining(cfg)
  tx, sched = optimizer.make_optimizer(_opt_config(), 1e-3, 0, 10)
  init_fn = functools.partial(train_core.init_state, mlm_nsp.init_fn(model, 32, 5), tx)
  step = train_core.make_train_step(mlm_nsp.objective(model), tx, sched, 1)  # dropout on
  return init_fn, step


def _tiny_electra_setup(vocab=512):
  """ELECTRA (tiny discriminator, 1/4-width generator) as pretraining builds it, dropout on."""
  c = pretrain_config.get_config("tiny")
  c.objective, c.data.mode, c.seq_len, c.data.max_predictions_per_seq = (
      "electra", "full_sentences", 32, 5)
  c.model.dropout_rate = c.model.attention_dropout_rate = 0.1
  c.optimizer = _opt_config()
  c.learning_rate, c.warmup_steps, c.total_steps = 1e-3, 0, 10
  setup = pretrain_setup.build(c, vocab)
  return setup.init_fn, setup.train_step(1)


def _tiny_distill_setup(vocab=512):
  """A 1-layer student of a tiny (2-layer) teacher, dropout on; the teacher is a step input."""
  teacher_cfg = model_config.variant("tiny", vocab)
  teacher = model_lib.BertForPreTraining(teacher_cfg, with_nsp=False)
  student = model_lib.BertForPreTraining(distill.student_config(teacher_cfg, 1), with_nsp=False)
  tx, sched = optimizer.make_optimizer(_opt_config(), 1e-3, 0, 10)
  init_fn = functools.partial(train_core.init_state, mlm_nsp.init_fn(student, 32, 5), tx)
  step = train_core.make_train_step(distill.objective(student, teacher, 2.0, 5.0, 2.0, 1.0), tx,
                                    sched, 1)
  teacher_init = mlm_nsp.init_fn(teacher, 32, 5)
  params = jax.device_get(jax.jit(lambda r: nn.unbox(teacher_init(r)))(jax.random.PRNGKey(1)))
  frozen = loading.Pretrained(params, teacher_cfg, (), True, "teacher")
  return init_fn, step, (frozen, teacher_init)


def _batches(n, b=16, length=32, p=5, vocab=512, seed=0):
  rng = np.random.default_rng(seed)
  out = []
  for _ in range(n):
    ids = rng.integers(5, vocab, (b, length)).astype(np.int32)
    mask = np.ones((b, length), np.int32)
    mask[:, length - 6:] = 0
    pos = np.stack([rng.choice(length - 6, p, replace=False) for _ in range(b)]).astype(np.int32)
    out.append(dict(
        input_ids=ids, input_mask=mask,
        segment_ids=(np.arange(length) >= length // 2).astype(np.int32)[None].repeat(b, 0),
        masked_lm_positions=pos, masked_lm_ids=np.take_along_axis(ids, pos, 1),
        masked_lm_weights=np.ones((b, p), np.float32),
        next_sentence_labels=rng.integers(0, 2, b).astype(np.int32)))
  return out


_STEPS = {}


def _sharded_step(step, mesh, rules, shardings, frozen_shardings=()):
  """The jitted step for a mesh, compiled once per (step, mesh, rules) in this module."""
  key = (step, mesh.devices.shape, tuple(d.id for d in mesh.devices.flat), rules)
  if key not in _STEPS:
    _STEPS[key] = jax.jit(
        step, in_shardings=(shardings, sharding.batch_sharding(mesh)) + frozen_shardings,
        out_shardings=(shardings, None))
  return _STEPS[key]


def _run(state, step, batches, mesh, rules, frozen=()):
  losses = []
  with sharding.mesh_context(mesh, rules):
    for b in batches:
      state, metrics = step(state, sharding.host_to_global(b, mesh), *frozen)
      losses.append(float(metrics["loss"]))
  return state, losses


def _one_device(init_fn, step, teacher=None):
  """The first state and 3 steps on one device (`teacher`: (Pretrained, its init fn))."""
  batches = _batches(3)
  state0 = jax.jit(lambda r: nn.unbox(init_fn(r)))(jax.random.PRNGKey(0))
  jstep = jax.jit(step)
  frozen = () if teacher is None else (teacher[0].params,)
  state, losses = state0, []
  for b in batches:
    state, metrics = jstep(state, b, *frozen)
    losses.append(float(metrics["loss"]))
  return dict(init_fn=init_fn, step=step, batches=batches, state0=jax.device_get(state0),
              params=jax.device_get(state.params), losses=losses, teacher=teacher)


@pytest.fixture(scope="module")
def tiny():
  """The tiny variant (vocab 512), its first state, and 3 steps on one device."""
  return _one_device(*_tiny_setup())


@pytest.fixture(scope="module")
def tiny_electra():
  """The same for objective='electra' (generator and discriminator in one state)."""
  return _one_device(*_tiny_electra_setup())


@pytest.fixture(scope="module")
def tiny_distill():
  """The same for objective='distill' (the teacher sharded as an input of the step)."""
  return _one_device(*_tiny_distill_setup())


# Every preset with BERT's objective; ELECTRA's two models and distillation's student and
# teacher on the preset that shards the most (their params are sharded by the same rules;
# the other presets take a minute more).
@pytest.mark.slow
@pytest.mark.parametrize("objective, preset, shape", [
    ("mlm_nsp", "data_parallel", (8, 1, 1)), ("mlm_nsp", "fsdp", (2, 4, 1)),
    ("mlm_nsp", "fsdp_tensor", (2, 2, 2)), ("electra", "fsdp_tensor", (2, 2, 2)),
    ("distill", "fsdp_tensor", (2, 2, 2))])
def test_train_step_under_preset_matches_one_device(request, objective, preset, shape):
  tiny = request.getfixturevalue({"mlm_nsp": "tiny", "electra": "tiny_electra",
                                  "distill": "tiny_distill"}[objective])
  mesh = sharding.make_mesh(shape)
  rules = sharding.logical_rules(preset)
  _, shardings = sharding.abstract_state(tiny["init_fn"], mesh, rules, jax.random.PRNGKey(0))
  state = jax.device_put(tiny["state0"], shardings)
  frozen, frozen_shardings = (), ()
  if tiny["teacher"] is not None:
    teacher, teacher_shardings = distill.place_teacher(*tiny["teacher"], mesh, rules)
    frozen, frozen_shardings = (teacher,), (teacher_shardings,)
    if preset != "data_parallel":  # the teacher is sharded too
      word = teacher["bert"]["embeddings"]["word_embeddings"]["embedding"]
      assert word.addressable_shards[0].data.size < word.size
  state, losses = _run(
      state, _sharded_step(tiny["step"], mesh, rules, shardings, frozen_shardings),
      tiny["batches"], mesh, rules, frozen)
  # The state really is spread over the mesh.
  encoder = state.params.get("discriminator", state.params)  # ELECTRA: the shared table
  emb = encoder["bert"]["embeddings"]["word_embeddings"]["embedding"]
  if preset != "data_parallel":
    assert emb.addressable_shards[0].data.size < emb.size
  # Float32 sums in another order: ELECTRA's loss is ~40 (disc_weight 50), where 1e-5 is 2.5e-7
  # of it, two float32 ulps; hence a relative bound too.
  np.testing.assert_allclose(losses, tiny["losses"], atol=1e-5, rtol=1e-6)
  assert losses[-1] != losses[0]  # the steps trained
  diff = max(float(np.max(np.abs(a - b))) for a, b in zip(
      jax.tree.leaves(jax.device_get(state.params)), jax.tree.leaves(tiny["params"])))
  assert diff <= 1e-5, diff


# -- Elastic restore: saved on 8 devices, continued on 4 --------------------------------


@pytest.mark.slow
def test_checkpoint_from_8_devices_continues_on_4(tmp_path, tiny):
  rules = sharding.logical_rules("fsdp")
  init_fn, batches = tiny["init_fn"], tiny["batches"]
  mesh8 = sharding.make_mesh((2, 4, 1))
  state8, shardings8 = sharding.sharded_init(init_fn, mesh8, rules, jax.random.PRNGKey(0))
  # Initialised straight into its shards, with the same values as on one device.
  for a, b in zip(jax.tree.leaves(state8), jax.tree.leaves(tiny["state0"])):
    np.testing.assert_array_equal(np.asarray(a), b)
  step8 = _sharded_step(tiny["step"], mesh8, rules, shardings8)
  state8, _ = _run(state8, step8, batches[:1], mesh8, rules)
  ckpts = ckpt_lib.TrainCheckpoints(str(tmp_path / "checkpoints"), async_save=False)
  ckpts.save(1, state8, {"data_position": 1})
  ckpts.close()
  _, losses8 = _run(state8, step8, batches[1:], mesh8, rules)

  mesh4 = sharding.make_mesh((1, -1, 1), jax.devices()[:4])
  target, shardings4 = sharding.abstract_state(init_fn, mesh4, rules, jax.random.PRNGKey(0))
  ckpts = ckpt_lib.TrainCheckpoints(str(tmp_path / "checkpoints"), async_save=False)
  step0, state4, meta = ckpts.restore_latest(target)
  ckpts.close()
  assert (step0, meta["data_position"], int(state4.step)) == (1, 1, 1)
  emb = state4.params["bert"]["embeddings"]["word_embeddings"]["embedding"]
  assert emb.sharding.mesh.devices.size == 4 and len(emb.addressable_shards) == 4
  np.testing.assert_array_equal(np.asarray(emb), np.asarray(
      state8.params["bert"]["embeddings"]["word_embeddings"]["embedding"]))
  _, losses4 = _run(state4, _sharded_step(tiny["step"], mesh4, rules, shardings4),
                    batches[1:], mesh4, rules)
  np.testing.assert_allclose(losses4, losses8, atol=1e-5, rtol=0)
  np.testing.assert_allclose(losses4, tiny["losses"][1:], atol=1e-5, rtol=0)


def test_host_to_global_shards_the_batch():
  mesh = sharding.make_mesh((2, 4, 1))
  x = np.arange(16 * 3).reshape(16, 3).astype(np.int32)
  g = sharding.host_to_global({"x": x}, mesh)["x"]
  assert g.shape == (16, 3)
  assert {s.data.shape for s in g.addressable_shards} == {(2, 3)}
  np.testing.assert_array_equal(np.asarray(g), x)


def test_pretraining_a_batch_that_does_not_split_over_the_devices_is_refused(corpus, tmp_path):
  with pytest.raises(ValueError, match=r"batch_size 12 \(per step 12\) must be positive and "
                     r"divisible over the 8 batch shards"):
    pretrain.train(small_config(corpus, batch_size=12), str(tmp_path))

