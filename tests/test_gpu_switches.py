"""The GPU speed switches built on the CPU: model.qkv_projection='fused' (one GEMM over BERT's
separate params) and model.hidden_act='gelu_new' (the tanh GELU cuBLASLt's epilogue fuses, for
pretraining from scratch only)."""
import json
import os
import re
import subprocess
import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.checkpoints import bundle
from bert_jax.configuration import sections as config_sections
from bert_jax.data.sources import registry as source_registry
from bert_jax.finetuning import setup as finetune_setup
from bert_jax.modeling import compute_policy
from bert_jax.modeling import model as model_lib
from bert_jax.modeling.model_config import BertConfig
from bert_jax.pretraining import setup as pretrain_setup
from bert_jax.training import sharding
from tests.fixtures import finetuning
from tests.fixtures import pretraining
from tests.fixtures.repo import ROOT


def _tiny(**kw):
  return BertConfig(**{**dict(vocab_size=50, hidden_size=32, num_layers=2, num_heads=4,
                              intermediate_size=64, max_position_embeddings=16,
                              dropout_rate=0.0, attention_dropout_rate=0.0), **kw})


DEBERTA = dict(model_type="deberta-v2", max_relative_positions=8, position_buckets=4,
               absolute_positions=False, type_vocab_size=0)


def _batch():
  rng = np.random.default_rng(0)
  ids = jnp.asarray(rng.integers(5, 50, (3, 12)), jnp.int32)
  mask = jnp.asarray(np.arange(12)[None] < np.array([[12], [9], [5]]), jnp.int32)
  positions = jnp.array([[1, 5, 9], [2, 3, 8], [0, 4, 4]], jnp.int32)
  return ids, mask, ids * 0, positions


def _loss_and_grads(config, params):
  """A loss over every output the heads read (MLM rows only: the last layer computes the
  masked rows alone, its queries from those rows), and its gradients."""
  ids, mask, seg, positions = _batch()
  model = model_lib.BertForPreTraining(config)
  weights = jax.random.normal(jax.random.key(1), (3, 3, 50))

  def loss(p):
    out = model.apply({"params": p}, ids, mask, seg, positions)
    return jnp.sum(out["mlm_logits"] * weights) + jnp.sum(out["nsp_logits"] ** 2)
  return jax.jit(jax.value_and_grad(loss))(params)


@pytest.mark.parametrize("arch", [{}, dict(scan_layers=True), DEBERTA],
                         ids=["bert", "scanned", "deberta"])
def test_fused_qkv_has_the_same_params_outputs_and_gradients(arch):
  ids, mask, seg, positions = _batch()
  separate, fused = _tiny(**arch), _tiny(qkv_projection="fused", **arch)
  init = lambda c: nn.unbox(model_lib.BertForPreTraining(c).init(  # noqa: E731
      jax.random.key(0), ids, mask, seg, positions))["params"]
  params = init(separate)
  fused_params = init(fused)  # the same names, shapes and initial values: checkpoints unchanged
  assert jax.tree.structure(params) == jax.tree.structure(fused_params)
  jax.tree.map(np.testing.assert_array_equal, params, fused_params)
  layer = params["bert"]["encoder"]["layers" if arch.get("scan_layers") else "layer_0"]
  assert sorted(layer["attention"]) == ["key", "out", "query", "value"]
  params = jax.tree.map(  # biases nonzero, so a bias dropped or swapped would show
      lambda p: p + 0.05 * jax.random.normal(jax.random.key(p.size), p.shape), params)
  (loss_a, grads_a), (loss_b, grads_b) = (_loss_and_grads(c, params) for c in (separate, fused))
  np.testing.assert_allclose(loss_b, loss_a, rtol=1e-6, atol=1e-6)
  scale = max(float(jnp.max(jnp.abs(g))) for g in jax.tree.leaves(grads_a))
  for (path, a), b in zip(jax.tree_util.tree_leaves_with_path(grads_a), jax.tree.leaves(grads_b)):
    np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-6 * scale, err_msg=str(path))
  q_grad = (grads_a["bert"]["encoder"]["layers" if arch.get("scan_layers") else "layer_0"]
            ["attention"]["query"]["kernel"])
  assert float(jnp.max(jnp.abs(q_grad))) > 1e-3  # the comparison compares something


def test_the_projection_is_one_gemm_of_three_times_the_width():
  ids, mask, seg, _ = _batch()
  for qkv, widths in (("separate", [32, 32, 32, 32, 64]), ("fused", [32, 64, 96])):
    model = model_lib.BertModel(_tiny(qkv_projection=qkv, num_layers=1), add_pooler=False)
    params = model.init(jax.random.key(0), ids, mask, seg)
    text = jax.jit(model.apply).lower(params, ids, mask, seg).as_text()
    # the layer's GEMMs over its rows: Q, K, V (or QKV), the attention output, intermediate
    kernels = re.findall(r"dot_general.*\(tensor<3x12x32xf32>, tensor<32x([0-9x]+)xf32>\)", text)
    assert sorted(int(np.prod([int(d) for d in k.split("x")])) for k in kernels) == widths, kernels


def test_qkv_projection_is_a_compute_option_never_saved():
  c = _tiny(qkv_projection="fused")
  assert "qkv_projection" not in c.to_dict()
  assert BertConfig.from_dict(c.to_dict()) == c.replace(qkv_projection="separate")
  with pytest.raises(ValueError, match="qkv_projection 'one' not in"):
    _tiny(qkv_projection="one")
  m = config_sections.model()
  m.qkv_projection = "fused"
  assert compute_policy.model_config_from(m, _tiny()).qkv_projection == "fused"
  m.fp8 = True
  with pytest.raises(ValueError, match=r"^bad config: model.qkv_projection='fused' projects Q, K "
                     r"and V outside the FP8 dense layers"):
    compute_policy.check(m, "cpu")
  m.fp8 = False
  m.qkv_projection = "qkv"
  with pytest.raises(ValueError, match=r"^bad config: model.qkv_projection 'qkv' not in"):
    compute_policy.check(m, "gpu")


def test_gelu_new_is_an_opt_in_for_pretraining_from_scratch():
  c = pretraining.config_module().get_config("tiny")
  assert c.model.hidden_act == "as_built"
  assert pretrain_setup.variant_model_config(c, 100).hidden_act == "gelu"  # BERT's exact GELU
  c.model.hidden_act = "gelu_new"
  pretrain_setup.check_config(c, sharding.make_mesh((1, 1, 1), jax.devices()[:1]),
                              source_registry.get(c.data.source))
  built = pretrain_setup.variant_model_config(c, 100)
  assert built.hidden_act == "gelu_new" and built.to_dict()["hidden_act"] == "gelu_new"
  c.model.hidden_act = "relu"
  with pytest.raises(ValueError, match=r"^bad config: model.hidden_act 'relu' not in"):
    compute_policy.check(c.model, "gpu")
  roberta = pretraining.config_module().get_config("tiny,recipe=roberta")
  roberta.model.hidden_act = "gelu_new"  # its MLM head in transformers is always exact GELU
  with pytest.raises(ValueError, match=r"^bad config: model.hidden_act='gelu_new' with "
                                       r"model_type 'roberta': .*use model.hidden_act='as_built'$"):
    pretrain_setup.check_config(roberta, sharding.make_mesh((1, 1, 1), jax.devices()[:1]),
                                source_registry.get(roberta.data.source))


def _gelu_new_error(source):
  return (r"^bad config: model.hidden_act='gelu_new' asks for another activation than "
          + source + r" was trained with \(hidden_act='gelu'\): the tanh GELU is for "
          r"pretraining from scratch; use model.hidden_act='as_built'$")


def test_gelu_new_on_a_checkpoint_trained_with_the_exact_gelu_is_refused_in_fine_tuning(
    tmp_path, glue_dir):
  ckpt = finetuning.random_bundle(tmp_path / "converted")
  mesh = sharding.make_mesh((1, 1, 1), jax.devices()[:1])
  config = finetuning.glue_config(glue_dir, ckpt)
  finetune_setup.check_config(config, mesh)
  config.model.hidden_act = "gelu_new"
  with pytest.raises(ValueError, match=_gelu_new_error(ckpt)):
    finetune_setup.check_config(config, mesh)
  # a checkpoint that learned the tanh GELU may say so
  b = bundle.load_bundle(ckpt)
  tanh = str(tmp_path / "tanh")
  bundle.save_bundle(tanh, b.params, b.config.replace(hidden_act="gelu_new"), b.vocab_file, True)
  finetune_setup.check_config(finetuning.glue_config(glue_dir, tanh), mesh)
  config = finetuning.glue_config(glue_dir, tanh)
  config.model.hidden_act = "gelu_new"
  finetune_setup.check_config(config, mesh)


def test_gelu_new_on_a_checkpoint_trained_with_the_exact_gelu_is_refused_in_pretraining(
    tmp_path):
  c = pretraining.config_module().get_config("tiny")
  cfg = pretrain_setup.variant_model_config(c, 40)
  model = model_lib.BertForPreTraining(cfg)
  shapes = jax.eval_shape(lambda: model_lib.init_params(model, jax.random.PRNGKey(0)))
  params = jax.tree.map(lambda s: np.zeros(s.shape, np.float32), shapes)
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                             + [f"w{i}" for i in range(35)]) + "\n", encoding="utf-8")
  ckpt = str(tmp_path / "init")
  bundle.save_bundle(ckpt, params, cfg, str(vocab), True)
  c.init_checkpoint = ckpt
  mesh = sharding.make_mesh((1, 1, 1), jax.devices()[:1])
  pretrain_setup.check_config(c, mesh, source_registry.get(c.data.source))
  c.model.hidden_act = "gelu_new"
  with pytest.raises(ValueError, match=_gelu_new_error(ckpt)):
    pretrain_setup.check_config(c, mesh, source_registry.get(c.data.source))


def _gpu_variants():
  sys.path.insert(0, str(ROOT / "benchmarks"))
  import gpu_variants  # pylint: disable=g-import-not-at-top
  return gpu_variants


def test_every_variant_sets_keys_the_config_has_and_runs_as_many_flag_sets_as_runs():
  gpu_variants = _gpu_variants()
  config = pretraining.config_module().get_config("base,fused_attention")
  for name, (sets, _, _, runs) in gpu_variants.VARIANTS.items():
    for item in sets:
      *path, leaf = item.partition("=")[0].split(".")
      node = config
      for part in path:
        node = node[part]
      assert leaf in node, (name, item)
    if name in gpu_variants.RUN_FLAGS:
      assert len(gpu_variants.RUN_FLAGS[name]) == runs, name
  assert list(gpu_variants.VARIANTS).index("cublaslt_gelu_new") == (
      list(gpu_variants.VARIANTS).index("cublaslt") + 1)


@pytest.mark.slow  # about a minute on 2 cores: seven tiny steps built and lowered for CUDA
def test_the_dry_run_lowers_the_new_variants_for_cuda_and_starts_xla_with_their_flags(tmp_path):
  names = ["baseline", "cublaslt_gelu_new", "fused_qkv", "fused_qkv_norm_cublaslt_gelu_new",
           "scan_layers", "compile_threads", "autotune_warm_start"]
  proc = subprocess.run([sys.executable, "benchmarks/gpu_variants.py", "--dry_run", "--variants",
                         ",".join(names), "--json", str(tmp_path / "v.json")],
                        cwd=ROOT, capture_output=True, text=True, timeout=900,
                        env=dict(os.environ, PYTHONPATH=str(ROOT)))
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
  records = {r["name"]: r for r in json.loads((tmp_path / "v.json").read_text())["variants"]}
  assert all(records[n]["status"] == "ok" and records[n]["platforms"] == ["cuda"] for n in names)
  # fused Q, K and V: per full layer 3 forward GEMMs -> 1 and 6 backward -> 2; the last layer
  # (its queries are the masked rows) fuses K and V only: 2 -> 1 and 4 -> 2
  assert records["baseline"]["dots"] - records["fused_qkv"]["dots"] == 6 + 3
  assert records["fused_qkv_norm_cublaslt_gelu_new"]["triton_calls"] == 8
  assert "| autotune_warm_start | ok | cuda | 0 |" in proc.stdout
