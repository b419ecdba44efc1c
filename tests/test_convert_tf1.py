"""Original Google BERT TF1 checkpoints -> bert_jax, checked against transformers' Flax BERT.

The test writes a TF checkpoint under Google's variable names (bert/..., cls/...,
with Adam slots and global_step as in released checkpoints) from the weights of
a random transformers FlaxBertForPreTraining, converts it with
`python -m bert_jax.convert --from tf1`, and compares outputs with that model.
"""
from flax import traverse_util
import json
import os
import re

import jax
import numpy as np
import pytest
import tensorflow as tf

from bert_jax.checkpoints import bundle
from bert_jax.conversion import name_map
from bert_jax.conversion import tf1
from bert_jax import convert
from bert_jax.modeling import model as model_lib
from tests.fixtures import parity

transformers = parity.require("transformers")

try:
  tf.config.set_visible_devices([], "GPU")
except RuntimeError:
  pass

HF_CONFIG = dict(vocab_size=40, hidden_size=24, num_hidden_layers=2, num_attention_heads=3,
                 intermediate_size=30, max_position_embeddings=32, type_vocab_size=2)
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"Tok{i}" for i in range(35)]


def _reference(seed):
  """transformers' FlaxBertForPreTraining (not initialised) and random params for it."""
  m = transformers.FlaxBertForPreTraining(transformers.BertConfig(**HF_CONFIG), _do_init=False)
  shapes = jax.eval_shape(lambda r: m.init_weights(r, (1, 8)), jax.random.PRNGKey(0))
  rng = np.random.default_rng(seed)  # N(0, 0.05), LayerNorm scales around 1
  params = jax.tree_util.tree_map_with_path(
      lambda path, x: (rng.normal(0, 0.05, x.shape)
                       + (path[-1].key == "scale")).astype(np.float32), shapes)
  return m, params


def _google_name(flax_path: str) -> str:
  """transformers' Flax names -> Google BERT's TF variable names."""
  name = re.sub(r"encoder/layer/(\d+)", r"encoder/layer_\1", flax_path)
  name = name.replace("LayerNorm/scale", "LayerNorm/gamma")
  name = name.replace("LayerNorm/bias", "LayerNorm/beta")
  name = re.sub(r"/embedding$", "", name)
  name = name.replace("cls/predictions/bias", "cls/predictions/output_bias")
  return name.replace("cls/seq_relationship/bias", "cls/seq_relationship/output_bias")


def _write_google_checkpoint(directory, params, bert_config):
  flat = traverse_util.flatten_dict(params, sep="/")
  tensors = {}
  for path, x in flat.items():
    x = np.asarray(x)
    if path == "cls/seq_relationship/kernel":
      tensors["cls/seq_relationship/output_weights"] = x.T  # [2, hidden] as Google stores it
    else:
      tensors[_google_name(path)] = x
  for name in list(tensors)[:3]:
    tensors[name + "/adam_m"] = np.zeros_like(tensors[name])
    tensors[name + "/adam_v"] = np.ones_like(tensors[name])
  tensors["global_step"] = np.array(1000, np.int64)
  names = sorted(tensors)
  tf.raw_ops.SaveV2(prefix=os.path.join(directory, "bert_model.ckpt"), tensor_names=names,
                    shape_and_slices=[""] * len(names),
                    tensors=[tf.constant(tensors[n]) for n in names])
  with open(os.path.join(directory, "bert_config.json"), "w") as f:
    json.dump(bert_config, f)
  with open(os.path.join(directory, "vocab.txt"), "w") as f:
    f.write("\n".join(VOCAB) + "\n")
  return tensors


@pytest.fixture(scope="module")
def google(tmp_path_factory):
  directory = str(tmp_path_factory.mktemp("cased_L-2_H-24_A-3"))
  m, params = _reference(0)
  # Google's bert_config.json: no layer_norm_eps, no model_type.
  bert_config = {k: v for k, v in HF_CONFIG.items()}
  bert_config.update(hidden_act="gelu", hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                     initializer_range=0.02)
  tensors = _write_google_checkpoint(directory, params, bert_config)
  return directory, (m, params), tensors


@pytest.mark.slow
def test_tf1_checkpoint_matches_reference(google, tmp_path):
  directory, (m, params), _ = google
  dst = str(tmp_path / "b")
  assert convert.main(["--from", "tf1", "--src", directory, "--dst", dst]) == 0
  b = bundle.load_bundle(dst)
  assert b.heads == ("pooler", "mlm", "nsp")
  assert b.lowercase is False  # the vocab has capital letters
  rng = np.random.default_rng(0)
  ids = rng.integers(5, 40, (2, 12)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[1, 7:] = 0
  seg = np.zeros_like(ids)
  seg[:, 6:] = 1
  positions = np.array([[1, 4], [3, 5]], np.int32)
  ours = model_lib.BertForPreTraining(b.config).apply({"params": b.params}, ids, mask, seg,
                                                      positions)
  ref = jax.jit(lambda p: m(ids, attention_mask=mask, token_type_ids=seg, params=p))(params)
  ref_mlm = np.take_along_axis(np.asarray(ref.prediction_logits), positions[..., None], axis=1)
  assert np.max(np.abs(np.asarray(ours["mlm_logits"]) - ref_mlm)) <= 1e-4
  assert np.max(np.abs(np.asarray(ours["nsp_logits"]) - ref.seq_relationship_logits)) <= 1e-4
  base = transformers.FlaxBertModel(m.config, _do_init=False)
  ref_enc = jax.jit(lambda p: base(ids, attention_mask=mask, token_type_ids=seg, params=p))(
      params["bert"])
  enc = model_lib.BertModel(b.config).apply({"params": b.params["bert"]}, ids, mask, seg)
  assert np.max(np.abs(enc["sequence_output"] - ref_enc.last_hidden_state)) <= 1e-4
  assert np.max(np.abs(enc["pooled_output"] - ref_enc.pooler_output)) <= 1e-4


def test_prefix_path_and_uncased_flag(google, tmp_path):
  directory, _, tensors = google
  out = tf1.load_tf1(os.path.join(directory, "bert_model.ckpt"), lowercase=True)
  assert out["lowercase"] is True
  kernel = out["params"]["bert"]["encoder"]["layer_1"]["attention"]["query"]["kernel"]
  assert kernel.shape == (24, 3, 8)
  np.testing.assert_array_equal(
      kernel.reshape(24, 24), tensors["bert/encoder/layer_1/attention/self/query/kernel"])


def _edited(google, tmp_path, drop=(), change=None, config=None):
  _, (_, params), _ = google
  d = str(tmp_path / "edited")
  os.makedirs(d)
  tensors = _write_google_checkpoint(d, params, {**HF_CONFIG, **(config or {})})
  names = sorted(n for n in tensors if n not in drop)
  for n in names:
    if change and n in change:
      tensors[n] = change[n]
  for f in os.listdir(d):
    if f.startswith("bert_model.ckpt"):
      os.remove(os.path.join(d, f))
  tf.raw_ops.SaveV2(prefix=os.path.join(d, "bert_model.ckpt"), tensor_names=names,
                    shape_and_slices=[""] * len(names),
                    tensors=[tf.constant(tensors[n]) for n in names])
  return d


def test_missing_variable_is_named(google, tmp_path):
  d = _edited(google, tmp_path, drop=("bert/encoder/layer_1/output/dense/bias",))
  with pytest.raises(name_map.ConversionError,
                     match=r"missing 1: bert/encoder/layer_1/output/dense/bias"):
    tf1.load_tf1(d)


def test_wrong_shape_is_named(google, tmp_path):
  d = _edited(google, tmp_path, change={"cls/seq_relationship/output_weights": np.zeros((24, 2))})
  with pytest.raises(name_map.ConversionError,
                     match=r"cls/seq_relationship/output_weights: \(24, 2\), expected \(2, 24\)"):
    tf1.load_tf1(d)


def test_checkpoint_of_another_size(google, tmp_path):
  d = _edited(google, tmp_path, config={"hidden_size": 48, "num_attention_heads": 4})
  with pytest.raises(name_map.ConversionError, match=r"wrong shape for L2 H48"):
    tf1.load_tf1(d)


def test_directory_without_config(google, tmp_path):
  directory, _, _ = google
  d = tmp_path / "noconfig"
  d.mkdir()
  for f in os.listdir(directory):
    if f != "bert_config.json":
      (d / f).write_bytes(open(os.path.join(directory, f), "rb").read())
  with pytest.raises(FileNotFoundError, match="has no bert_config.json"):
    tf1.load_tf1(str(d))
  with pytest.raises(FileNotFoundError, match=r"no TF checkpoint \(\*\.index\)"):
    tf1.load_tf1(str(tmp_path))
