"""Ahead-of-time compilation of the train step for TPU topologies (needs libtpu, no TPU)."""
import importlib.util

import jax
import numpy as np
import pytest

from bert_jax.checkpoints import bundle
from bert_jax.modeling import compute_policy
from bert_jax.modeling import flops as flops_lib
from bert_jax.modeling import model as model_lib
from bert_jax.modeling import model_config
from bert_jax.pretraining import setup as pretrain_setup
from bert_jax.pretraining import topology_compile
from bert_jax.training import sharding
from configs import pretrain as pretrain_config

# The distillation step compiles over 4 of the 8 fake CPU devices (tests/device_split.py).
pytestmark = pytest.mark.multidevice

needs_libtpu = pytest.mark.skipif(
    importlib.util.find_spec("libtpu") is None,
    reason="libtpu is not installed (pip install -e '.[tpu]'); AOT TPU compilation needs it")


@pytest.mark.parametrize("name, runtime", [
    ("v5e:4x4", "v5e:4x4"), ("v5litepod-16", "v5e:4x4"), ("v5e-8", "v5e:2x4"),
    ("v4-32", "v4:2x2x4"), ("v4:2x2x1", "v4:2x2x1"), ("v5p-16", "v5:2x2x2"), ("v6e-256", "v6e:16x16"),
])
def test_parse_topology(name, runtime):
  assert topology_compile.parse_topology(name)[1] == runtime


@pytest.mark.parametrize("name, message", [
    ("v9:4x4", "unknown TPU generation 'v9'"),
    ("v4-33", "'33' is not a v4 size"),
    ("v5e-12", "no known v5e grid with 12 chips"),
    ("v4:4x4", "v4 grids have 3 dimensions"),
    ("tpu", "expected e.g. v5e:4x4"),
])
def test_parse_topology_errors(name, message):
  with pytest.raises(ValueError, match=message):
    topology_compile.parse_topology(name)


@needs_libtpu
def test_multislice_mesh_puts_slices_on_the_dcn_axis():
  devices, _ = topology_compile.topology_devices("v5e:2x2", num_slices=2)
  assert len(devices) == 8
  mesh = sharding.make_mesh((2, -1, 1), devices, dcn_shape=(2, 1, 1))
  slices = np.vectorize(lambda d: d.slice_index)(mesh.devices)  # [data, fsdp, tensor]
  assert (slices[0] == slices[0].flat[0]).all() and (slices[1] == slices[1].flat[0]).all()
  assert slices[0].flat[0] != slices[1].flat[0]


@pytest.mark.slow
@needs_libtpu
def test_tiny_train_step_compiles_for_v5e_2x2_under_fsdp():
  devices, chip = topology_compile.topology_devices("v5e:2x2")
  assert len(devices) == 4 and devices[0].platform == "tpu"
  config = pretrain_config.get_config("tiny")
  config.update(dict(batch_size=16, seq_len=32))
  config.data.max_predictions_per_seq = 5
  config.mesh.update(dict(shape=(1, -1, 1), preset="fsdp"))
  assert config.model.dtype == "auto" and config.model.prng_impl == "auto"
  out = topology_compile.compile_train_step(config, devices, vocab_size=30522)
  # 'auto' resolved for the TPU, not for this CPU host: bf16 compute, rbg dropout
  assert out["model_config"].dtype == "bfloat16"
  assert out["model_config"].vocab_pad_multiple == 128  # the decoder's GEMM: 30,592 wide
  assert out["state"].rng.shape == (4,)  # an rbg key's raw data (threefry's: 2 words)
  assert dict(out["mesh"].shape) == {"data": 1, "fsdp": 4, "tensor": 1}
  emb = out["state"].params["bert"]["embeddings"]["word_embeddings"]["embedding"]
  assert emb.sharding.spec == jax.sharding.PartitionSpec(None, "fsdp")

  mem = topology_compile.memory_report(out["compiled"])
  state_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(out["state"]))
  # Each device holds about a quarter of the state (params + Adam moments).
  assert state_bytes / 4 <= mem["arguments"] < state_bytes / 2
  assert mem["aliased"] > 0.9 * mem["arguments"] - 4096  # donated state buffers reused
  assert mem["temporaries"] > 0 and 0 < mem["peak"] < chip.hbm_bytes

  flops = topology_compile.compiled_flops(out["compiled"])
  analytic = flops_lib.train_flops_per_token(out["model_config"], 32, 5 / 32) * 16 * 32 / 4
  assert 0.5 < flops / analytic < 2.0, (flops, analytic)
  assert 0.8 < out["hlo_flops_per_device"] / analytic < 1.25, (out["hlo_flops_per_device"], analytic)


@pytest.mark.slow
@needs_libtpu
def test_the_fused_attention_recipe_compiles_splash_attention_for_a_tpu():
  """'auto' resolved for the TPU target: the encoder's full-length layers run Pallas splash
  attention (Mosaic kernels in the compiled program), the last layer's masked rows XLA's."""
  devices, chip = topology_compile.topology_devices("v5e:2x2")
  config = pretrain_config.get_config("tiny,fused_attention")
  config.update(dict(batch_size=16, seq_len=128))
  config.mesh.update(dict(shape=(1, -1, 1), preset="fsdp"))
  assert config.model.attention_impl == "auto"
  assert topology_compile.for_target(config, "tpu").model.attention_impl == "splash"
  assert topology_compile.for_target(config, "cpu").model.attention_impl == "auto"
  out = topology_compile.compile_train_step(config, devices, vocab_size=30522)
  text = out["compiled"].as_text()
  assert "splash_mha_fwd" in text and "splash_mha_dkv" in text
  assert compute_policy.describe_attention(out["model_config"]).startswith("Pallas splash")
  mem = topology_compile.memory_report(out["compiled"])
  assert 0 < mem["peak"] < chip.hbm_bytes
  analytic = flops_lib.train_flops_per_token(out["model_config"], 128, 20 / 128) * 16 * 128 / 4
  assert 0.8 < out["hlo_flops_per_device"] / analytic < 1.25
  # BERT's attention dropout is not the fused kernels': 'auto' stays the einsum path there.
  bert = pretrain_config.get_config("mini")
  assert bert.model.attention_dropout_rate == 0.1
  assert topology_compile.for_target(bert, "tpu").model.attention_impl == "auto"


@pytest.mark.slow
@needs_libtpu
def test_modernbert_compiles_splash_attention_with_local_masks_for_a_v5e(monkeypatch):
  """ModernBERT on a TPU ('auto' resolved for the target): its global layers run splash
  attention with the full mask, its local layers the kernel's local mask (64 columns each
  side), in the compiled step."""
  from bert_jax.modeling import splash_attention  # pylint: disable=g-import-not-at-top
  windows = []
  kernel = splash_attention._kernel  # pylint: disable=protected-access
  monkeypatch.setattr(splash_attention, "_kernel",
                      lambda h, n, w=None: windows.append(w) or kernel(h, n, w))
  devices, chip = topology_compile.topology_devices("v5e:2x2")
  # mini: 4 layers, 0 and 3 global, 1 and 2 local; pretraining's last layer computes the
  # masked rows only (XLA's attention), so the kernels are layers 0 to 2's.
  config = pretrain_config.get_config("mini,recipe=modernbert")
  config.update(dict(batch_size=8, seq_len=512))
  config.data.max_predictions_per_seq = 154
  config.mesh.update(dict(shape=(1, -1, 1), preset="fsdp"))
  out = topology_compile.compile_train_step(config, devices, vocab_size=30522)
  cfg = out["model_config"]
  assert cfg.attention_impl == "splash"
  assert [cfg.is_local(i) for i in range(4)] == [False, True, True, False]
  assert sorted(windows, key=str) == [64, 64, None]  # at 512 tokens, 4 heads
  text = out["compiled"].as_text()
  assert "splash_mha_fwd" in text and "splash_mha_dkv" in text
  mem = topology_compile.memory_report(out["compiled"])
  assert 0 < mem["peak"] < chip.hbm_bytes


@pytest.mark.parametrize("recipe", ["electra", "deberta", "albert", "roberta"])
def test_family_analytic_flops_match_the_lowered_step(recipe):
  """Each member's FLOPs per token (MFU, equal-compute comparisons) count what its step
  computes. ELECTRA: the generator's MLM head at the embedding width (4 x its hidden size at
  tiny) and the discriminator's head; counting the generator's head at its hidden size gave
  half. DeBERTa: the c2p and p2c scores over 512 relative embeddings, 40 % of the step at
  tiny and seq 32. ALBERT: its one layer computed num_layers times, the E -> H projection."""
  config = pretrain_config.get_config(f"tiny,recipe={recipe}")
  config.update(dict(batch_size=16, seq_len=32))
  config.data.max_predictions_per_seq = 5
  hlo = topology_compile.unrolled_hlo_flops(config, 30522)
  analytic = pretrain_setup.build(config, 30522).flops_per_token(32, 5 / 32) * 16 * 32
  # DeBERTa's bound is tighter: without the relative terms the ratio is 1.19.
  low, high = (0.9, 1.1) if recipe == "deberta" else (0.85, 1.2)
  assert low < hlo / analytic < high, (hlo, analytic)


@pytest.mark.slow
def test_distill_step_compiles_with_the_teacher_as_a_sharded_input(tmp_path):
  """objective=distill: the frozen teacher is the step's third input (not in the train state),
  sharded as the same model's params; compiled here for 4 CPU devices under fsdp."""
  teacher_cfg = model_config.BertConfig(vocab_size=64, hidden_size=32, num_layers=2, num_heads=2,
                                        intermediate_size=64, max_position_embeddings=32)
  params = model_lib.init_params(model_lib.BertForPreTraining(teacher_cfg, with_nsp=False),
                                 jax.random.PRNGKey(0), seq_len=32, num_predictions=5)
  bundle.save_bundle(str(tmp_path / "teacher"), jax.device_get(params), teacher_cfg,
                     [f"t{i}" for i in range(64)], True)
  config = pretrain_config.get_config("tiny")
  config.update(dict(batch_size=8, seq_len=32, objective="distill",
                     teacher_checkpoint=str(tmp_path / "teacher")))
  config.data.max_predictions_per_seq = 5
  config.mesh.update(dict(shape=(1, -1, 1), preset="fsdp"))
  out = topology_compile.compile_train_step(config, jax.devices("cpu")[:4], vocab_size=64)
  assert out["model_config"].num_layers == 1  # the student
  _, _, teacher = out["compiled"].input_shardings[0]
  emb = teacher["bert"]["embeddings"]["word_embeddings"]["embedding"]
  assert emb.spec == jax.sharding.PartitionSpec(None, "fsdp")
  assert "teacher" not in str(jax.tree_util.tree_structure(out["state"]))
  # The unrolled step's FLOPs: the student's training and the teacher's forward pass.
  analytic = pretrain_setup.build(config, 64).flops_per_token(32, 5 / 32) * 8 * 32
  assert 0.8 < out["hlo_flops_per_device"] * 4 / analytic < 1.25


def test_collective_bytes_of_a_program_compiled_for_8_cpu_devices():
  """Each collective's bytes per device, and a loop's collective counted once per trip."""
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:8]), ("x",))

  def body(x):  # [16, 128] float32 on each device: 8 KiB
    gathered = jax.lax.all_gather(x, "x", tiled=True)  # [128, 128]: 64 KiB
    scattered = jax.lax.psum_scatter(gathered, "x", tiled=True)  # from 64 KiB
    swapped = jax.lax.all_to_all(x, "x", 0, 0, tiled=True)
    shifted = jax.lax.ppermute(x, "x", [(i, (i + 1) % 8) for i in range(8)])
    summed, _ = jax.lax.scan(lambda c, _: (jax.lax.psum(c * 2.0, "x"), None), x, None, length=5)
    return scattered + swapped + shifted + summed

  step = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=jax.P("x"), out_specs=jax.P("x"),
                               check_vma=False))
  text = step.lower(jax.numpy.ones((128, 128))).compile().as_text()
  got = topology_compile.collective_bytes(text, 8)
  kib = 1024
  assert got["kinds"] == {
      "all-reduce": dict(ops=5, bytes=5 * 8 * kib, ring_bytes=5 * 8 * kib * 2 * 7 / 8),
      "all-gather": dict(ops=1, bytes=64 * kib, ring_bytes=64 * kib * 7 / 8),
      "reduce-scatter": dict(ops=1, bytes=64 * kib, ring_bytes=64 * kib * 7 / 8),
      "all-to-all": dict(ops=1, bytes=8 * kib, ring_bytes=8 * kib * 7 / 8),
      "collective-permute": dict(ops=1, bytes=8 * kib, ring_bytes=8 * kib)}
  assert got["bytes"] == (40 + 64 + 64 + 8 + 8) * kib and got["unknown_loops"] == 0


# The forms a TPU program takes (libtpu's optimized HLO): mesh replica groups, collectives inside
# fusions, an async start whose result holds its operand, a loop whose trip count is only in its
# condition, and a conditional (the NaN guard) whose update branch holds the collectives.
_TPU_LIKE_HLO = """\
HloModule jit_train_step

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %sum = f32[] add(%a, %b)
}

%gather_fusion (param_0.1: bf16[32,128]) -> bf16[128,128] {
  %param_0.1 = bf16[32,128]{1,0:T(8,128)(2,1)} parameter(0)
  ROOT %all-gather.1 = bf16[128,128]{1,0:T(8,128)(2,1)} all-gather(%param_0.1), channel_id=1, replica_groups=mesh['axis_0'=4,'axis_1'=2] {'axis_0'}, dimensions={0}
}

%cond (p.1: (s32[], bf16[32,128])) -> pred[] {
  %p.1 = (s32[]{:T(128)}, bf16[32,128]{1,0}) parameter(0)
  %constant.7 = s32[]{:T(128)} constant(24)
  %gte.1 = s32[]{:T(128)} get-tuple-element(%p.1), index=0
  ROOT %lt.1 = pred[]{:T(512)} compare(%gte.1, %constant.7), direction=LT
}

%body (p.2: (s32[], bf16[32,128])) -> (s32[], bf16[32,128]) {
  %p.2 = (s32[]{:T(128)}, bf16[32,128]{1,0}) parameter(0)
  %gte.2 = bf16[32,128]{1,0} get-tuple-element(%p.2), index=1
  %fusion.1 = bf16[128,128]{1,0} fusion(%gte.2), kind=kCustom, calls=%gather_fusion
  %collective-permute-start.1 = (bf16[32,128]{1,0}, bf16[32,128]{1,0}, u32[]{:S(2)}, u32[]{:S(2)}) collective-permute-start(%gte.2), channel_id=2, source_target_pairs={{0,1},{1,0}}
  %collective-permute-done.1 = bf16[32,128]{1,0} collective-permute-done(%collective-permute-start.1)
  %i = s32[]{:T(128)} get-tuple-element(%p.2), index=0
  ROOT %t.1 = (s32[]{:T(128)}, bf16[32,128]{1,0}) tuple(%i, %collective-permute-done.1)
}

%update (p.3: f32[1024]) -> f32[1024] {
  %p.3 = f32[1024]{0} parameter(0)
  ROOT %all-reduce.2 = f32[1024]{0} all-reduce(%p.3), channel_id=3, replica_groups=[2,4]<=[8], to_apply=%add
}

%keep (p.4: f32[1024]) -> f32[1024] {
  ROOT %p.4 = f32[1024]{0} parameter(0)
}

ENTRY %main (x: bf16[32,128], g: f32[1024], ok: pred[]) -> f32[1024] {
  %x = bf16[32,128]{1,0} parameter(0)
  %g = f32[1024]{0} parameter(1)
  %ok = pred[] parameter(2)
  %zero = s32[]{:T(128)} constant(0)
  %init = (s32[]{:T(128)}, bf16[32,128]{1,0}) tuple(%zero, %x)
  %while.1 = (s32[]{:T(128)}, bf16[32,128]{1,0}) while(%init), condition=%cond, body=%body
  %all-gather-start.2 = (bf16[32,128]{1,0}, bf16[256,128]{1,0}) all-gather-start(%x), channel_id=4, replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}
  %all-gather-done.2 = bf16[256,128]{1,0} all-gather-done(%all-gather-start.2)
  ROOT %conditional.1 = f32[1024]{0} conditional(%ok, %g, %g), true_computation=%update, false_computation=%keep
}
"""


def test_collective_bytes_reads_the_forms_of_a_tpu_program():
  got = topology_compile.collective_bytes(_TPU_LIKE_HLO, 8)
  kinds = got["kinds"]
  # In the loop's fusion, 24 trips: 32 KiB gathered over the 4 devices of axis_0.
  # After the loop, an async all-gather of 64 KiB over all 8 (its operand not counted again).
  assert kinds["all-gather"]["ops"] == 25
  assert kinds["all-gather"]["bytes"] == 24 * 32768 + 65536
  assert kinds["all-gather"]["ring_bytes"] == 24 * 32768 * 3 / 4 + 65536 * 7 / 8
  assert kinds["collective-permute"] == dict(ops=24, bytes=24 * 8192, ring_bytes=24 * 8192)
  # The update branch's all-reduce over groups of 4, not the empty branch.
  assert kinds["all-reduce"] == dict(ops=1, bytes=4096, ring_bytes=4096 * 2 * 3 / 4)
  assert got["unknown_loops"] == 0
  unknown = _TPU_LIKE_HLO.replace("direction=LT", "direction=NE")
  assert topology_compile.collective_bytes(unknown, 8)["unknown_loops"] == 1


def test_step_estimate_is_compute_or_collectives_bound():
  chip = topology_compile.CHIPS["v5p"]  # 459 TFLOP/s bf16, 1,200 GB/s bidirectional ICI
  est = topology_compile.estimate_step_seconds(459e12 * 0.5, 600e9 * 3.0, chip, mfu=0.5)
  assert est["compute"] == pytest.approx(1.0) and est["collectives"] == pytest.approx(3.0)
  assert (est["overlapped"], est["serial"]) == (pytest.approx(3.0), pytest.approx(4.0))


@pytest.mark.slow
@needs_libtpu
def test_aot_compile_reports_collectives_and_the_time_to_train(tmp_path, capsys):
  """Data parallel with 2 microbatches: the gradients' all-reduce, in the accumulation loop,
  counted per microbatch; the printed totals are the written HLO's."""
  from bert_jax import aot_compile  # pylint: disable=g-import-not-at-top
  hlo = tmp_path / "step.hlo"
  with pytest.raises(SystemExit) as e:
    aot_compile.main(["--config", "configs/pretrain.py:tiny", "--topology", "v5e:2x2",
                      "--batch_size", "16", "--seq_len", "32", "--mfu", "0.5",
                      "--config.optimizer.grad_accum_steps=2", "--hlo_out", str(hlo)])
  assert e.value.code == 0
  out = capsys.readouterr().out
  coll = topology_compile.collective_bytes(hlo.read_text(), 4)
  params = 4.4e6  # tiny's gradients, float32, reduced once per microbatch at least
  assert coll["kinds"]["all-reduce"]["bytes"] >= 2 * 4 * params * 0.9
  gib = coll["ring_bytes"] / topology_compile.GiB
  assert f"ring send {gib:9.3f} GiB" in out and "per-device collectives per step" in out
  assert "at MFU 50% of 197 TFLOP/s" in out and "time to train 300 steps: " in out


@needs_libtpu
@pytest.mark.parametrize("flags, message", [
    (["--batch_size", "30"], r"batch_size 30 \(per step 30\) must be positive and divisible "
                             r"over the 4 batch shards"),
    (["--config.optimizer.grad_accum_steps=3"], r"not divisible by optimizer.grad_accum_steps 3"),
    (["--mesh_shape", "3,-1,1"], r"mesh.shape \(3, -1, 1\)"),
])
def test_aot_compile_answers_a_batch_or_mesh_it_cannot_lay_out_in_one_line(flags, message):
  """The combinations this tool is for trying: one error line, as pretrain gives it."""
  from bert_jax import aot_compile  # pylint: disable=g-import-not-at-top
  with pytest.raises(SystemExit, match=r"^bert_jax.aot_compile: error: (bad config: )?" + ".*"
                     + message):
    aot_compile.main(["--config", "configs/pretrain.py:tiny", "--topology", "v5e:2x2", *flags])
