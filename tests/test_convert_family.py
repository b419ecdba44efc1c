"""The BERT family: RoBERTa, DistilBERT, ELECTRA (encoder with its embedding
projection, generator, discriminator) and ALBERT (one shared layer, SOP) from transformers:
parity and round trips.

Each reference is a random transformers Flax model (tests/hf_reference.py: every
tensor perturbed; 2 layers, hidden 32) saved with save_pretrained(safe_serialization=True),
read with bert_jax.conversion.hf and run on a padded batch by bert_jax.modeling.model.
Hidden states (every layer), CLS, mean and pooled embeddings and MLM logits must
agree within 1e-4 (float32); HF -> bert_jax -> HF must return every tensor exactly
(read back by transformers' own loader).
"""
from flax import traverse_util
import dataclasses
import json
import os
import shutil

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file

from bert_jax.checkpoints import bundle
from bert_jax.conversion import hf
from bert_jax.conversion import name_map
from bert_jax import convert
from bert_jax.modeling import model as model_lib
from bert_jax.modeling.model_config import from_hf_dict
from bert_jax.modeling import pooling
from tests.hf_reference import Reference
from tests.fixtures import parity

transformers = parity.require("transformers")

VOCAB_SIZE = 99
CONFIGS = {
    "roberta": lambda: transformers.RobertaConfig(
        vocab_size=VOCAB_SIZE, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=37, max_position_embeddings=40, type_vocab_size=1, pad_token_id=1,
        bos_token_id=0, eos_token_id=2, layer_norm_eps=1e-5),
    "distilbert": lambda: transformers.DistilBertConfig(
        vocab_size=VOCAB_SIZE, dim=32, n_layers=2, n_heads=4, hidden_dim=37,
        max_position_embeddings=40, pad_token_id=0),
    "electra": lambda: transformers.ElectraConfig(
        vocab_size=VOCAB_SIZE, embedding_size=16, hidden_size=32, num_hidden_layers=2,
        num_attention_heads=4, intermediate_size=37, max_position_embeddings=40,
        type_vocab_size=2),
    "albert": lambda: transformers.AlbertConfig(
        vocab_size=VOCAB_SIZE, embedding_size=16, hidden_size=32, num_hidden_layers=3,
        num_attention_heads=4, intermediate_size=37, max_position_embeddings=40,
        type_vocab_size=2),
}
MODELS = {
    ("roberta", "base"): transformers.FlaxRobertaModel,
    ("roberta", "mlm"): transformers.FlaxRobertaForMaskedLM,
    ("distilbert", "base"): transformers.FlaxDistilBertModel,
    ("distilbert", "mlm"): transformers.FlaxDistilBertForMaskedLM,
    ("electra", "base"): transformers.FlaxElectraModel,
    ("electra", "mlm"): transformers.FlaxElectraForMaskedLM,
    ("electra", "discriminator"): transformers.FlaxElectraForPreTraining,
    ("albert", "base"): transformers.FlaxAlbertModel,
    ("albert", "mlm"): transformers.FlaxAlbertForMaskedLM,
    ("albert", "pretraining"): transformers.FlaxAlbertForPreTraining,
}
# The heads each layout converts to (RobertaModel has a pooler, DistilBertModel none).
HEADS = {("roberta", "base"): ("pooler",), ("roberta", "mlm"): ("mlm",),
         ("distilbert", "base"): (), ("distilbert", "mlm"): ("mlm",),
         ("electra", "base"): (), ("electra", "mlm"): ("mlm",),
         ("electra", "discriminator"): ("discriminator",),
         ("albert", "base"): ("pooler",), ("albert", "mlm"): ("mlm",),
         ("albert", "pretraining"): ("pooler", "mlm", "nsp")}
CASES = sorted(MODELS)
CASE_IDS = [f"{t}-{h}" for t, h in CASES]


def _batch(pad_id, segments=1, seed=0):
  """Three rows, two padded (with the model's pad id), segment ids (two segments where
  the model has them), plus MLM positions."""
  rng = np.random.default_rng(seed)
  ids = rng.integers(5, VOCAB_SIZE, (3, 16)).astype(np.int32)
  mask, seg = np.zeros_like(ids), np.zeros_like(ids)
  for row, n in enumerate((16, 11, 6)):
    mask[row, :n] = 1
    ids[row, n:] = pad_id
    if segments > 1:
      seg[row, n // 2:n] = 1
  positions = np.array([[1, 5, 9], [2, 3, 8], [1, 4, 4]], np.int32)
  return ids, mask, seg, positions


@pytest.fixture(scope="module", params=CASES, ids=CASE_IDS)
def case(request, tmp_path_factory):
  """(model_type, head, reference, HF dir, load_hf_params output)."""
  model_type, head = request.param
  directory = str(tmp_path_factory.mktemp(f"{model_type}_{head}"))
  ref = Reference(MODELS[request.param], CONFIGS[model_type](), seed=len(directory))
  ref.model.save_pretrained(directory, params=ref.params, safe_serialization=True)
  return model_type, head, ref, directory, hf.load_hf_params(directory)


def _max_diff(a, b):
  return float(np.max(np.abs(np.asarray(a, np.float32) - np.asarray(b, np.float32))))


def test_parity_with_transformers(case):
  model_type, head, ref, _, loaded = case
  config, params = loaded["config"], loaded["params"]
  assert config.model_type == model_type and loaded["heads"] == HEADS[(model_type, head)]
  ids, mask, seg, positions = _batch(ref.config.pad_token_id, config.type_vocab_size)
  out = ref(ids, mask, None if model_type == "distilbert" else seg, output_hidden_states=True)
  diffs = {}
  if head == "base":
    ours = model_lib.BertModel(config, add_pooler="pooler" in loaded["heads"]).apply(
        {"params": params["bert"]}, ids, mask, seg, output_hidden_states=True)
    want_hidden = out.hidden_states
    assert len(ours["hidden_states"]) == len(want_hidden) == config.num_layers + 1
    for i, (a, b) in enumerate(zip(ours["hidden_states"], want_hidden)):
      diffs[f"hidden_{i}"] = _max_diff(a, b)
    seq, want_seq = ours["sequence_output"], out.last_hidden_state
    diffs["last"] = _max_diff(seq, want_seq)
    diffs["cls"] = _max_diff(seq[:, 0], want_seq[:, 0])
    m = mask[..., None]
    diffs["mean"] = _max_diff(pooling.pool(seq, mask, "mean"),
                              (np.asarray(want_seq) * m).sum(1) / m.sum(1))
    if "pooler" in loaded["heads"]:
      diffs["pooled"] = _max_diff(ours["pooled_output"], out.pooler_output)
  elif head == "pretraining":  # ALBERT: MLM and sentence-order prediction (the NSP group)
    ours = model_lib.BertForPreTraining(config).apply(
        {"params": params}, ids, mask, seg, positions)
    want = np.take_along_axis(np.asarray(out.prediction_logits), positions[..., None], axis=1)
    diffs["mlm"] = _max_diff(ours["mlm_logits"], want)
    diffs["sop"] = _max_diff(ours["nsp_logits"], out.sop_logits)
  elif head == "discriminator":
    ours = model_lib.ElectraDiscriminator(config).apply({"params": params}, ids, mask, seg)
    assert ours.shape == out.logits.shape == (3, 16)
    diffs["discriminator"] = _max_diff(ours, out.logits)
  else:
    ours = model_lib.BertForPreTraining(config, with_nsp=False).apply(
        {"params": params}, ids, mask, seg, positions)["mlm_logits"]
    want = np.take_along_axis(np.asarray(out.logits), positions[..., None], axis=1)
    assert ours.shape == want.shape == (3, 3, VOCAB_SIZE)
    diffs["mlm"] = _max_diff(ours, want)
    # The encoder under the head, too.
    enc = model_lib.BertModel(config, add_pooler=False).apply(
        {"params": params["bert"]}, ids, mask, seg)["sequence_output"]
    diffs["last"] = _max_diff(enc, out.hidden_states[-1])
  print(f"{model_type}-{head} max abs diffs: "
        + ", ".join(f"{k} {v:.2e}" for k, v in diffs.items()))
  bad = {k: v for k, v in diffs.items() if not v <= 1e-4}
  assert not bad, bad


def test_positions_and_token_types(case):
  """RoBERTa counts positions from pad_token_id + 1 (padding at pad_token_id); DistilBERT
  has no token type embeddings at all; ELECTRA projects its narrower embeddings; ALBERT
  shares one layer."""
  model_type, _, ref, _, loaded = case
  config, params = loaded["config"], loaded["params"]
  ids = _batch(ref.config.pad_token_id)[0]
  pos = np.asarray(model_lib.default_position_ids(ids, config))
  embeddings = params["bert"]["embeddings"]
  if model_type == "albert":
    assert list(params["bert"]["encoder"]) == ["layer_0"] and config.share_layers
    assert embeddings["project"]["kernel"].shape == (16, 32)
  elif model_type == "electra":
    assert config.embedding_size == 16 and embeddings["project"]["kernel"].shape == (16, 32)
    assert embeddings["word_embeddings"]["embedding"].shape == (VOCAB_SIZE, 16)
  elif model_type == "roberta":
    assert config.position_offset == 2 and config.max_position_embeddings == 40
    np.testing.assert_array_equal(pos[2], [2, 3, 4, 5, 6, 7] + [1] * 10)
    assert embeddings["token_type_embeddings"]["embedding"].shape == (1, 32)
  else:
    np.testing.assert_array_equal(pos[2], np.arange(16))
    assert "token_type_embeddings" not in embeddings and config.type_vocab_size == 0


def test_hf_round_trip_exact(case, tmp_path):
  """HF (Flax layout) -> bert_jax -> HF (PyTorch layout) read by transformers: every tensor
  exact; and a second pass through bert_jax writes identical tensors."""
  model_type, head, ref, _, loaded = case
  first, second = str(tmp_path / "first"), str(tmp_path / "second")
  written = hf.params_to_hf(loaded["params"], loaded["config"], first)
  cfg = json.load(open(os.path.join(first, "config.json")))
  assert cfg["model_type"] == model_type
  assert cfg["architectures"] == [MODELS[(model_type, head)].__name__[4:]]
  reloaded = MODELS[(model_type, head)].from_pretrained(first)  # transformers' own loader
  orig = traverse_util.flatten_dict(ref.params, sep="/")
  back = traverse_util.flatten_dict(reloaded.params, sep="/")
  assert sorted(orig) == sorted(back) and len(orig) == written["num_tensors"]
  for k in orig:
    np.testing.assert_array_equal(np.asarray(back[k]), np.asarray(orig[k]), err_msg=k)
  again = hf.load_hf_params(first)
  assert again["config"] == loaded["config"]
  hf.params_to_hf(again["params"], again["config"], second)
  a = load_file(os.path.join(first, "model.safetensors"))
  b = load_file(os.path.join(second, "model.safetensors"))
  assert sorted(a) == sorted(b)
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def _count(tree):
  return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(tree))


@pytest.mark.slow
@pytest.mark.parametrize("model_type,hf_config", [
    ("roberta", dict(vocab_size=50265, max_position_embeddings=514, type_vocab_size=1,
                     layer_norm_eps=1e-5, pad_token_id=1)),  # roberta-base
    ("distilbert", {}),  # distilbert-base-uncased: DistilBertConfig's defaults
    ("electra", {}),  # electra-small-discriminator: ElectraConfig's defaults (E 128, H 256)
    ("electra", dict(embedding_size=768, hidden_size=256, num_attention_heads=4,
                     intermediate_size=1024)),  # electra-base-generator
    ("albert", dict(vocab_size=30000, embedding_size=128, hidden_size=768, num_attention_heads=12,
                    intermediate_size=3072)),  # albert-base-v2
])
def test_base_parameter_counts_equal_transformers(model_type, hf_config):
  """Parameter counts of the base configs, ours (from the converted config) vs transformers'."""
  hf_cfg = {"roberta": transformers.RobertaConfig, "distilbert": transformers.DistilBertConfig,
            "electra": transformers.ElectraConfig,
            "albert": transformers.AlbertConfig}[model_type](**hf_config)
  config = from_hf_dict(hf_cfg.to_dict())
  counts = {}
  for head in [h for t, h in CASES if t == model_type]:
    ref = MODELS[(model_type, head)](hf_cfg, _do_init=False)
    theirs = _count(jax.eval_shape(lambda r, m=ref: m.init_weights(r, (1, 8)),
                                   jax.random.PRNGKey(0)))
    module = {"base": model_lib.BertModel(config, add_pooler=model_type in ("roberta", "albert")),
              "mlm": model_lib.BertForPreTraining(config, with_nsp=False),
              "pretraining": model_lib.BertForPreTraining(config),
              "discriminator": model_lib.ElectraDiscriminator(config)}[head]
    ours = _count(jax.eval_shape(
        lambda m=module: model_lib.init_params(m, jax.random.PRNGKey(0))))
    counts[head] = (ours, theirs)
  print(f"{model_type} base parameter counts (ours, transformers): {counts}")
  for head, (ours, theirs) in counts.items():
    assert ours == theirs, (head, ours, theirs)


def _write_vocab(directory):
  tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"tok{i}" for i in range(94)]
  with open(os.path.join(directory, "vocab.txt"), "w", encoding="utf-8") as f:
    f.write("\n".join(tokens) + "\n")


@pytest.mark.parametrize("model_type,head,tokenizer_class", [
    ("distilbert", "mlm", "DistilBertTokenizer"),
    ("electra", "discriminator", "ElectraTokenizer"),
], ids=["distilbert-mlm", "electra-discriminator"])
def test_wordpiece_bundle_through_the_command_line(model_type, head, tokenizer_class, tmp_path):
  """WordPiece variants convert to a bundle and back with `bert_jax.convert`, exactly."""
  src, dst, out = (str(tmp_path / n) for n in ("hf", "bundle", "export"))
  model_cls = MODELS[(model_type, head)]
  ref = Reference(model_cls, CONFIGS[model_type](), seed=7)
  ref.model.save_pretrained(src, params=ref.params, safe_serialization=True)
  _write_vocab(src)
  assert convert.main(["--from", "hf", "--src", src, "--dst", dst]) == 0
  b = bundle.load_bundle(dst)
  assert b.config.model_type == model_type and b.heads == HEADS[(model_type, head)]
  assert convert.main(["--to", "hf", "--src", dst, "--dst", out]) == 0
  assert json.load(open(os.path.join(out, "tokenizer_config.json")))["tokenizer_class"] == (
      tokenizer_class)
  back = traverse_util.flatten_dict(model_cls.from_pretrained(out).params, sep="/")
  orig = traverse_util.flatten_dict(ref.params, sep="/")
  assert sorted(back) == sorted(orig)
  for k in orig:
    np.testing.assert_array_equal(np.asarray(back[k]), np.asarray(orig[k]), err_msg=k)


@pytest.mark.parametrize("model_type", ["roberta", "albert"])
def test_bpe_and_sentencepiece_bundles_fill_masks_as_transformers(model_type, bpe_dir,
                                                                  albert_dir, tmp_path, capsys):
  """RoBERTa (byte-level BPE) and ALBERT (SentencePiece) end to end: HF directory with its
  tokenizer files -> `bert_jax.convert` -> bundle (tokenizer/ copied) -> fill_mask gives
  transformers' ids, top tokens and probabilities; `--to hf` gives the files back."""
  from bert_jax.checkpoints import loading  # pylint: disable=g-import-not-at-top
  from bert_jax.data.tokenizers import tokenizer as tokenizer_lib  # pylint: disable=g-import-not-at-top
  from bert_jax.inference import mask_filling  # pylint: disable=g-import-not-at-top
  tok_dir = bpe_dir if model_type == "roberta" else albert_dir
  names = ["merges.txt", "vocab.json"] if model_type == "roberta" else ["spiece.model"]
  fast = (transformers.RobertaTokenizerFast if model_type == "roberta"
          else transformers.AlbertTokenizerFast).from_pretrained(str(tok_dir))
  hf_config = CONFIGS[model_type]()
  hf_config.vocab_size = len(fast)
  ref = Reference(MODELS[(model_type, "mlm")], hf_config, seed=3)
  src, dst, out = (str(tmp_path / n) for n in ("hf", "bundle", "export"))
  ref.model.save_pretrained(src, params=ref.params, safe_serialization=True)
  for name in names:
    shutil.copy(tok_dir / name, src)
  assert convert.main(["--from", "hf", "--src", src, "--dst", dst]) == 0
  assert sorted(os.listdir(os.path.join(dst, "tokenizer"))) == names

  pretrained = loading.load_pretrained(dst)
  tok = tokenizer_lib.for_checkpoint(pretrained)
  assert tok.kind == ("bpe" if model_type == "roberta" else "sentencepiece")
  text = "the quick brown [MASK] jumps over lazy dogs."
  ids, positions = mask_filling.encode(tok, [text], 40)
  want = fast(text.replace("[MASK]", fast.mask_token))["input_ids"]
  assert ids[0] == want and positions[0] == [want.index(fast.mask_token_id)]
  ours = mask_filling.fill_mask(pretrained, [text], top_k=3)[0][0]
  logits = np.asarray(ref(np.array([want]), np.ones((1, len(want)), np.int32)).logits)
  probs = jax.nn.softmax(logits[0, positions[0][0]].astype(np.float64))
  top = np.argsort(-probs)[:3]
  assert [t for t, _ in ours] == fast.convert_ids_to_tokens(top.tolist())
  np.testing.assert_allclose([p for _, p in ours], probs[top], atol=1e-5)
  # The text a token stands for, as transformers' fill-mask pipeline gives it (token_str).
  sample = list(range(0, len(fast), max(1, len(fast) // 400)))
  assert [tok.token_text(i) for i in sample] == [fast.decode([i]) for i in sample]
  assert any(tok.token_text(i) != tok.inv_vocab[i] for i in sample)
  from bert_jax import fill_mask  # pylint: disable=g-import-not-at-top
  capsys.readouterr()
  assert fill_mask.main(["--checkpoint", dst, "--json", "--quiet", "--top_k", "3", text]) == 0
  printed = json.loads(capsys.readouterr().out)[0]["masks"][0]
  assert [(p["token"], p["token_str"]) for p in printed] == [
      (t, fast.decode([i])) for t, i in zip(fast.convert_ids_to_tokens(top.tolist()), top)]
  assert fill_mask.main(["--checkpoint", dst, "--quiet", "--top_k", "3", text]) == 0
  shown = capsys.readouterr().out.splitlines()[1].split()[2::2]
  assert shown == [fast.decode([i]).strip() or repr(fast.decode([i])) for i in top]

  assert convert.main(["--to", "hf", "--src", dst, "--dst", out]) == 0
  for name in names:
    assert (tmp_path / "export" / name).read_bytes() == (tok_dir / name).read_bytes()


def test_a_bundle_tokenizer_that_does_not_match_is_named(bpe_dir, albert_dir, tmp_path):
  from bert_jax.checkpoints import loading  # pylint: disable=g-import-not-at-top
  from bert_jax.data.tokenizers import tokenizer as tokenizer_lib  # pylint: disable=g-import-not-at-top
  src = str(tmp_path / "hf")
  ref = Reference(transformers.FlaxRobertaModel, CONFIGS["roberta"](), seed=1)
  ref.model.save_pretrained(src, params=ref.params, safe_serialization=True)
  with pytest.raises(ValueError, match=r"model_type 'roberta' needs a byte-level BPE tokenizer"):
    hf.hf_to_bundle(src, str(tmp_path / "b"))  # no tokenizer files beside the weights
  for name in os.listdir(albert_dir):
    shutil.copy(albert_dir / name, src)
  with pytest.raises(ValueError, match=r"needs a byte-level BPE .*found sentencepiece"):
    hf.hf_to_bundle(src, str(tmp_path / "b"))
  pretrained = loading.Pretrained({}, None, ("a", "b"), False, "ckpt",
                                  str(bpe_dir / "vocab.json"))
  with pytest.raises(ValueError, match=r"ckpt: tokenizer .*vocab.json has other tokens"):
    tokenizer_lib.for_checkpoint(pretrained)
  with pytest.raises(FileNotFoundError, match=r"ckpt: its tokenizer /gone/spiece.model does not"):
    tokenizer_lib.for_checkpoint(dataclasses.replace(pretrained, tokenizer_file="/gone/spiece.model"))


def test_bad_family_inputs_are_named(tmp_path):
  with pytest.raises(ValueError, match="both ELECTRA's generator"):
    hf._architecture("electra", ("mlm", "discriminator"))  # pylint: disable=protected-access
  with pytest.raises(ValueError, match=r"my/config\.json: model_type 'xlnet' is not supported"):
    from_hf_dict({"model_type": "xlnet"}, source="my/config.json")
  with pytest.raises(ValueError, match=r"not a distilbert config, missing keys \['dim'"):
    from_hf_dict({"model_type": "distilbert", "vocab_size": 9}, source="c.json")
  with pytest.raises(ValueError, match=r"c\.json: hidden_act 'relu' is not supported for roberta"):
    from_hf_dict({**CONFIGS["roberta"]().to_dict(), "hidden_act": "relu"}, source="c.json")
  roberta = from_hf_dict(CONFIGS["roberta"]().to_dict())
  with pytest.raises(ValueError, match=r"ckpt: checkpoint is another member of the BERT family "
                     r"than the config asks \(model_type: checkpoint 'roberta' vs config 'bert', "
                     r"position_offset: checkpoint 2 vs config 0\)"):
    bundle.check_arch(roberta, roberta.replace(model_type="bert", position_offset=0), "ckpt")
  with pytest.raises(ValueError, match=r"c\.json: ALBERT with num_hidden_groups, inner_group_num "
                     r"\(2, 1\)"):
    from_hf_dict({**CONFIGS["albert"]().to_dict(), "num_hidden_groups": 2}, source="c.json")
  with pytest.raises(ValueError, match="scan_layers is not supported"):
    from_hf_dict(CONFIGS["albert"]().to_dict()).replace(scan_layers=True)
  with pytest.raises(ValueError, match="sinusoidal_pos_embds"):
    from_hf_dict({**CONFIGS["distilbert"]().to_dict(), "sinusoidal_pos_embds": True})
  # A RoBERTa config.json over DistilBERT tensors: the missing and unexpected names are listed.
  src = str(tmp_path / "hf")
  ref = Reference(transformers.FlaxDistilBertModel, CONFIGS["distilbert"](), seed=2)
  ref.model.save_pretrained(src, params=ref.params, safe_serialization=True)
  cfg_path = os.path.join(src, "config.json")
  json.dump(CONFIGS["roberta"]().to_dict(), open(cfg_path, "w"))
  with pytest.raises(name_map.ConversionError, match=r"model\.safetensors: tensors do not match .*"
                     r"missing 33: roberta\.embeddings\.token_type_embeddings\.weight, .*"
                     r"unexpected 32: roberta\.transformer\.layer\.0\.attention\.k_lin\.bias"):
    hf.load_hf_params(src)


@pytest.mark.parametrize("recipe", ["roberta", "deberta", "modernbert"])
def test_a_member_trained_on_bert_wordpiece_exports_a_tokenizer_transformers_reads(recipe,
                                                                                 tmp_path):
  """bert_jax's recipes train RoBERTa, DeBERTa and ModernBERT on BERT's WordPiece vocab by
  default: `--to hf` writes BertTokenizer for it (not the member's own class, which has no
  files to read), names the special tokens, leaves out token_type_ids where the model takes
  none; transformers' tokenizer gives bert_jax's ids and its model bert_jax's MLM logits, and
  `--from hf` reads the folder back."""
  torch = parity.require("torch")
  from bert_jax.checkpoints import loading  # pylint: disable=g-import-not-at-top
  from bert_jax.data.tokenizers import tokenizer as tokenizer_lib  # pylint: disable=g-import-not-at-top
  from bert_jax.pretraining import setup as pretrain_setup  # pylint: disable=g-import-not-at-top
  from tests.fixtures import pretraining  # pylint: disable=g-import-not-at-top
  from tests.fixtures import tiny_encoder  # pylint: disable=g-import-not-at-top
  vocab = tiny_encoder.VOCAB
  cfg = pretrain_setup.variant_model_config(
      pretraining.config_module().get_config(f"tiny,recipe={recipe}"), len(vocab), 0)
  net = model_lib.BertForPreTraining(cfg, with_nsp=False)
  params = jax.device_get(jax.jit(lambda rng: model_lib.init_params(
      net, rng, seq_len=16, num_predictions=2))(jax.random.PRNGKey(3)))
  src, out, back = (str(tmp_path / n) for n in ("bundle", "hf", "back"))
  bundle.save_bundle(src, params, cfg, vocab, True)
  assert convert.main(["--to", "hf", "--src", src, "--dst", out, "--quiet"]) == 0
  written = json.load(open(os.path.join(out, "tokenizer_config.json")))
  assert written["tokenizer_class"] == "BertTokenizer"
  assert (written["mask_token"], written["pad_token"]) == ("[MASK]", "[PAD]")
  theirs_tok = transformers.AutoTokenizer.from_pretrained(out)
  text = "the cat sat on the [MASK] ."
  ours_tok = tokenizer_lib.for_checkpoint(loading.load_pretrained(src))
  ids = ours_tok.build_inputs(ours_tok.tokenize_to_ids(["the cat sat on the"])[0]
                              + [ours_tok.mask_id] + ours_tok.tokenize_to_ids(["."])[0])[0]
  encoded = theirs_tok(text, return_tensors="pt")
  assert encoded["input_ids"][0].tolist() == ids
  assert ("token_type_ids" in encoded) == (recipe == "deberta")
  model = transformers.AutoModelForMaskedLM.from_pretrained(out).eval()
  with torch.no_grad():
    got = model(**encoded).logits[0].numpy()
  arr = np.array([ids], np.int32)
  want = np.asarray(net.apply({"params": params}, arr, np.ones_like(arr), np.zeros_like(arr),
                              np.arange(len(ids), dtype=np.int32)[None])["mlm_logits"])[0]
  np.testing.assert_allclose(got, want, atol=2e-4)
  assert convert.main(["--from", "hf", "--src", out, "--dst", back, "--quiet"]) == 0
  assert loading.load_pretrained(back).vocab == tuple(vocab) or list(
      loading.load_pretrained(back).vocab) == list(vocab)
