"""DeBERTa's enhanced mask decoder (bert_jax.modeling.emd).

The reference is transformers' PyTorch DebertaV2 layer driven as microsoft/DeBERTa's
EnhancedMaskDecoder drives it (DeBERTa/apps/models/masked_language_model.py):
H = the second-to-last hidden states, query_states = H + z (z: the EMD's position
table at the position ids), then encoder.layer[-1](H, query_states=...) twice, every
row, and the MLM head on the masked rows. Our params (EMD on) are exported with
`params_to_hf` (which leaves the EMD's table out) and loaded by transformers.
"""
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util

from bert_jax import config_help
from bert_jax.conversion import hf
from bert_jax.modeling import emd
from bert_jax.modeling import flops
from bert_jax.modeling import model as model_lib
from bert_jax.modeling.model_config import from_hf_dict
from bert_jax.pretraining import setup as pretrain_setup
from tests.fixtures import parity

torch = parity.require("torch")
transformers = parity.require("transformers")

ROOT = pathlib.Path(__file__).resolve().parents[1]
VOCAB = 50


def _config():
  """DeBERTa-v3's attention, tiny: 2 layers, hidden 32, 8 log position buckets."""
  return from_hf_dict(transformers.DebertaV2Config(
      vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
      intermediate_size=37, max_position_embeddings=64, type_vocab_size=0,
      relative_attention=True, position_buckets=8, max_relative_positions=-1,
      pos_att_type="p2c|c2p", share_att_key=True, norm_rel_ebd="layer_norm",
      position_biased_input=False, layer_norm_eps=1e-7).to_dict()).replace(dtype="float32")


def _params(config, seed=0):
  """EMD-on params, every tensor perturbed (LayerNorm scales around 1)."""
  model = model_lib.BertForPreTraining(config, with_nsp=False, emd=True)

  @jax.jit
  def init(rng):
    params = model_lib.init_params(model, rng, seq_len=16, num_predictions=3)
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.fold_in(rng, 1), len(leaves))
    return jax.tree.unflatten(tree, [x + 0.05 * jax.random.normal(k, x.shape)
                                     for x, k in zip(leaves, keys)])
  return init(jax.random.PRNGKey(seed))


def _batch():
  """Three rows of 16, two padded, and three masked positions per row."""
  ids = np.random.default_rng(0).integers(5, VOCAB, (3, 16)).astype(np.int32)
  mask = np.zeros_like(ids)
  for row, n in enumerate((16, 11, 6)):
    mask[row, :n] = 1
  return ids, mask, np.array([[1, 5, 15], [2, 3, 8], [1, 4, 5]], np.int32)


def _logits(config, params, emd_on, ids, mask, positions, **kw):
  model = model_lib.BertForPreTraining(config, with_nsp=False, emd=emd_on)
  return model.apply({"params": params}, ids, mask, np.zeros_like(ids), positions,
                     **kw)["mlm_logits"]


def _jit_logits(config, params, emd_on, ids, mask, positions):
  return jax.jit(lambda p: _logits(config, p, emd_on, ids, mask, positions))(params)


@pytest.mark.slow
def test_emd_matches_deberta_reference_through_transformers(tmp_path):
  config = _config()
  params = _params(config)
  assert traverse_util.flatten_dict(params["emd"], sep="/")["position_embeddings/embedding"].shape \
      == (64, 32)
  written = hf.params_to_hf(params, config, str(tmp_path))
  assert written["dropped"] == ["emd/position_embeddings/embedding"]
  assert written["architecture"] == "DebertaV2ForMaskedLM"
  net = transformers.DebertaV2ForMaskedLM.from_pretrained(str(tmp_path)).eval()
  ids, mask, positions = _batch()
  table = np.asarray(params["emd"]["position_embeddings"]["embedding"])
  with torch.no_grad():
    out = net(torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
              output_hidden_states=True)
    encoder = net.deberta.encoder
    h = out.hidden_states[-2]  # [batch, len, hidden]
    query = h + torch.tensor(table[:16])[None]  # z at positions 0..15
    for _ in range(2):  # DeBERTa's EMD: the last layer twice, keys and values H
      query = encoder.layer[-1](h, encoder.get_attention_mask(torch.tensor(mask)),
                                query_states=query, relative_pos=encoder.get_rel_pos(h),
                                rel_embeddings=encoder.get_rel_embedding())[0]
    want = net.cls(query).numpy()  # [batch, len, vocab]
  want = np.take_along_axis(want, positions[..., None], axis=1)
  for scan in (False, True):
    c = config.replace(scan_layers=scan)
    got = _jit_logits(c, model_lib.match_scan_layout(params, c), True, ids, mask, positions)
    np.testing.assert_allclose(got, want, atol=1e-5, err_msg=f"scan_layers={scan}")
  # The plain head (EMD off) reads the last layer, as transformers does: another answer.
  plain = _jit_logits(config, {k: v for k, v in params.items() if k != "emd"}, False, ids, mask,
                      positions)
  np.testing.assert_allclose(
      plain, np.take_along_axis(out.logits.numpy(), positions[..., None], 1), atol=1e-5)
  assert np.max(np.abs(np.asarray(plain) - want)) > 1e-2


def test_emd_decode_is_two_passes_of_the_last_layer_with_query_states():
  """emd.decode's contract, with a stand-in layer: q0 = H[positions] + z, then two calls
  with keys / values H."""
  hidden = jnp.arange(2 * 4 * 3, dtype=jnp.float32).reshape(2, 4, 3)
  positions = jnp.array([[3, 1], [0, 2]])
  z = jnp.ones((2, 2, 3))
  calls = []

  def layer(kv, q):
    calls.append(kv)
    return 2.0 * q + kv[:, :2]

  got = emd.decode(layer, hidden, positions, z)
  q0 = jnp.take_along_axis(hidden, positions[..., None], axis=1) + z
  want = 2.0 * (2.0 * q0 + hidden[:, :2]) + hidden[:, :2]
  assert len(calls) == emd.EMD_PASSES == 2 and all(kv is hidden for kv in calls)
  np.testing.assert_array_equal(got, want)


@pytest.mark.slow
def test_gradients_reach_the_emd_table_and_the_last_layer_with_dropout():
  config = _config().replace(dropout_rate=0.1, attention_dropout_rate=0.1)
  params = _params(config)
  ids, mask, positions = _batch()

  def loss(p):
    logits = _logits(config, p, True, ids, mask, positions, deterministic=False,
                     rngs={"dropout": jax.random.PRNGKey(3)})
    return jnp.mean(jax.nn.logsumexp(logits, -1) - logits[..., 0])

  grads = jax.jit(jax.grad(loss))(params)
  table = np.asarray(grads["emd"]["position_embeddings"]["embedding"])
  used = sorted(set(positions.ravel().tolist()))  # position ids = columns
  assert np.all(np.abs(table[used]).sum(-1) > 0)
  assert np.all(table[[i for i in range(64) if i not in used]] == 0)
  last = grads["bert"]["encoder"]["layer_1"]["attention"]["query"]["kernel"]
  assert float(jnp.max(jnp.abs(last))) > 0


def test_emd_needs_deberta():
  config = _config().replace(model_type="bert", max_relative_positions=0, position_buckets=0,
                             absolute_positions=True, type_vocab_size=2)
  with pytest.raises(ValueError, match="emd .* needs model_type 'deberta-v2'"):
    model_lib.init_params(model_lib.BertForPreTraining(config, emd=True), jax.random.PRNGKey(0))


def test_the_deberta_recipe_has_the_emd_and_its_flops():
  """recipe=deberta turns the EMD on; its FLOPs per token add two layer passes with queries
  at the masked rows (and the backward key / value and p2c work of the other rows; the
  formula against XLA's count is tests/test_aot.py's)."""
  c = config_help.load_module(ROOT / "configs" / "pretrain.py").get_config("tiny,recipe=deberta")
  assert c.emd and c.model_type == "deberta-v2"
  with_emd = pretrain_setup.build(c, 512).flops_per_token(128, 0.15)
  c.emd = False
  without = pretrain_setup.build(c, 512).flops_per_token(128, 0.15)
  config = pretrain_setup.variant_model_config(c, 512)
  h, per_layer = config.hidden_size, flops.encoder_params(config) / config.num_layers
  r = config.relative_span
  assert with_emd - without == pytest.approx(
      2 * ((6 * per_layer + 12 * 128 * h + 12 * r * h) * 0.15 + 8 * (h * h + h) * 0.85
           + 8 * r * h))
