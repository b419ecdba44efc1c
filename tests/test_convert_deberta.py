"""DeBERTa-v2/v3: disentangled attention, conversion and parity with transformers.

transformers has no Flax DeBERTa, so the reference is its PyTorch DebertaV2ForMaskedLM
(torch is in the `test` extra): 2 layers, hidden 32, relative attention with 8 log
position buckets (distances beyond 4 are bucketed on the sequence of 16), share_att_key,
p2c|c2p, the relative embeddings' LayerNorm; every tensor perturbed. Two configurations:
DeBERTa-v3's (type_vocab_size 0, no absolute positions) and one with two token types and
absolute positions. Saved with save_pretrained (safetensors) beside the tiny DeBERTa-v3
SentencePiece fixture, converted with `bert_jax.convert`, then: hidden states of every
layer, CLS and mean embeddings on a padded batch with two segments, MLM logits, and
bert_jax.embed / fill_mask end to end against transformers fed by DebertaV2TokenizerFast:
max abs diff <= 1e-4 (float32). HF -> bert_jax -> HF returns every tensor exactly.
"""
import json
import os
import shutil

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file

from bert_jax.checkpoints import bundle
from bert_jax.checkpoints import loading
from bert_jax.conversion import hf
from bert_jax import convert
from bert_jax.data.tokenizers import tokenizer as tokenizer_lib
from bert_jax.inference import embedding
from bert_jax.inference import mask_filling
from bert_jax.modeling import disentangled
from bert_jax.modeling import model as model_lib
from bert_jax.modeling.model_config import from_hf_dict
from bert_jax.modeling import pooling
from tests.fixtures import parity

torch = parity.require("torch")
transformers = parity.require("transformers")

TEXTS = [("The quick brown fox jumps over the lazy dog.", "Seven wizards hum jazzy tunes."),
         ("café naïve", "1,000 towns in 9 countries, 12 of them by the sea and rivers")]


def _hf_config(vocab_size, type_vocab_size, **kw):
  """DeBERTa-v3's attention, tiny; type_vocab_size 0 is v3's (no absolute positions)."""
  return transformers.DebertaV2Config(
      vocab_size=vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
      intermediate_size=37, max_position_embeddings=64, type_vocab_size=type_vocab_size,
      relative_attention=True, position_buckets=8, max_relative_positions=-1,
      pos_att_type="p2c|c2p", share_att_key=True, norm_rel_ebd="layer_norm",
      position_biased_input=type_vocab_size > 0, layer_norm_eps=1e-7, **kw)


def _torch_model(config, seed):
  """DebertaV2ForMaskedLM with every tensor perturbed (LayerNorm scales around 1)."""
  torch.manual_seed(seed)
  model = transformers.DebertaV2ForMaskedLM(config).eval()
  with torch.no_grad():
    for p in model.parameters():
      p.add_(torch.randn_like(p) * 0.05)
  return model


_BUILT = {}


def _build(type_vocab_size, deberta_dir, tmp_path_factory):
  """(torch model, fast tokenizer, HF dir, bundle dir) with the tiny spm.model, once."""
  if type_vocab_size not in _BUILT:
    fast = transformers.DebertaV2TokenizerFast(vocab_file=str(deberta_dir / "spm.model"))
    model = _torch_model(_hf_config(len(fast), type_vocab_size), seed=type_vocab_size)
    root = tmp_path_factory.mktemp(f"deberta{type_vocab_size}")
    src, dst = str(root / "hf"), str(root / "bundle")
    model.save_pretrained(src, safe_serialization=True)
    shutil.copy(deberta_dir / "spm.model", src)
    assert convert.main(["--from", "hf", "--src", src, "--dst", dst]) == 0
    _BUILT[type_vocab_size] = model, fast, src, dst
  return _BUILT[type_vocab_size]


@pytest.fixture(scope="module", params=[0, 2], ids=["v3-types0", "types2-absolute"])
def case(request, deberta_dir, tmp_path_factory):
  return _build(request.param, deberta_dir, tmp_path_factory)


def _max_diff(a, b):
  return float(np.max(np.abs(np.asarray(a, np.float32) - np.asarray(b, np.float32))))


def _batch(vocab_size, pad_id=0):
  """Three rows, two padded, two segments, and MLM positions."""
  rng = np.random.default_rng(0)
  ids = rng.integers(5, vocab_size, (3, 16)).astype(np.int32)
  mask, seg = np.zeros_like(ids), np.zeros_like(ids)
  for row, n in enumerate((16, 11, 6)):
    mask[row, :n] = 1
    ids[row, n:] = pad_id
    seg[row, n // 2:n] = 1
  return ids, mask, seg, np.array([[1, 5, 15], [2, 3, 8], [1, 4, 4]], np.int32)


def test_parity_with_transformers(case):
  model, _, _, dst = case
  b = bundle.load_bundle(dst)
  config, params = b.config, b.params
  assert config.model_type == "deberta-v2" and b.heads == ("mlm",)
  assert config.absolute_positions == (config.type_vocab_size > 0)
  assert config.relative_span == 8 and config.max_relative_positions == 64
  ids, mask, seg, positions = _batch(config.vocab_size)
  with torch.no_grad():
    out = model(torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
                token_type_ids=torch.tensor(seg, dtype=torch.long), output_hidden_states=True)
  ours = jax.jit(lambda p: model_lib.BertModel(config, add_pooler=False).apply(
      {"params": p}, ids, mask, seg, output_hidden_states=True))(params["bert"])
  diffs = {f"hidden_{i}": _max_diff(a, b.numpy())  # padding rows included
           for i, (a, b) in enumerate(zip(ours["hidden_states"], out.hidden_states))}
  assert len(diffs) == config.num_layers + 1
  seq, want = ours["sequence_output"], out.hidden_states[-1].numpy()
  diffs["cls"] = _max_diff(seq[:, 0], want[:, 0])
  m = mask[..., None]
  diffs["mean"] = _max_diff(pooling.pool(seq, mask, "mean"),
                            (want * m).sum(1) / m.sum(1))
  # The MLM head; the last layer computes only the masked rows (relative positions of a
  # subset of queries).
  logits = jax.jit(lambda p: model_lib.BertForPreTraining(config, with_nsp=False).apply(
      {"params": p}, ids, mask, seg, positions)["mlm_logits"])(params)
  diffs["mlm"] = _max_diff(logits, np.take_along_axis(out.logits.numpy(), positions[..., None], 1))
  # Scanned layers (the relative embeddings stay beside the stacked layers).
  scanned = jax.jit(lambda p: model_lib.BertModel(config.replace(scan_layers=True),
                                                  add_pooler=False).apply(
      {"params": p}, ids, mask, seg)["sequence_output"])(model_lib.stack_layers(params)["bert"])
  diffs["scan"] = _max_diff(scanned, want)
  print("deberta-v2 max abs diffs: " + ", ".join(f"{k} {v:.2e}" for k, v in diffs.items()))
  bad = {k: v for k, v in diffs.items() if not v <= 1e-4}
  assert not bad, bad


def test_embed_and_fill_mask_through_the_bundle_as_transformers(case):
  """bert_jax.embed on text pairs ([CLS] A [SEP] B [SEP], segments 0 / 1) and fill_mask, from
  the bundle and its own tokenizer, vs transformers fed by DebertaV2TokenizerFast."""
  model, fast, _, dst = case
  pretrained = loading.load_pretrained(dst)
  enc = fast([a for a, _ in TEXTS], [b for _, b in TEXTS], padding=True,
             return_token_type_ids=True, return_tensors="pt")
  with torch.no_grad():
    out = model(**enc, output_hidden_states=True)
  m = enc["attention_mask"].numpy()[..., None]
  pooling = "mean" if pretrained.config.type_vocab_size else "cls"  # one compilation per case
  ours, _ = embedding.embed(pretrained, TEXTS, pooling=pooling, layers=(0, 1, 2), combine="concat",
                            length_bucketing=False)
  want = np.concatenate([(h.numpy() * m).sum(1) / m.sum(1) if pooling == "mean" else
                         h.numpy()[:, 0] for h in out.hidden_states], axis=-1)
  assert ours.shape == want.shape == (2, 3 * 32) and _max_diff(ours, want) <= 1e-4, pooling
  tok = tokenizer_lib.for_checkpoint(pretrained)
  text = "the quick brown [MASK] jumps over lazy dogs."
  ids, _ = mask_filling.encode(tok, [text], 64)
  want_ids = fast(text)["input_ids"]
  assert ids[0] == want_ids and fast.mask_token_id in want_ids
  top = mask_filling.fill_mask(pretrained, [text], top_k=3)[0][0]
  with torch.no_grad():
    logits = model(torch.tensor([want_ids])).logits[0, want_ids.index(fast.mask_token_id)]
  probs = torch.softmax(logits.double(), -1).numpy()
  best = np.argsort(-probs)[:3]
  assert [t for t, _ in top] == fast.convert_ids_to_tokens(best.tolist())
  np.testing.assert_allclose([p for _, p in top], probs[best], atol=1e-5)


def test_hf_round_trip_exact(case, tmp_path):
  """`--to hf` gives back every tensor (read by transformers), its config and spm.model."""
  model, _, src, dst = case
  out = str(tmp_path / "export")
  assert convert.main(["--to", "hf", "--src", dst, "--dst", out]) == 0
  cfg = json.load(open(os.path.join(out, "config.json")))
  assert cfg["architectures"] == ["DebertaV2ForMaskedLM"] and cfg["model_type"] == "deberta-v2"
  assert from_hf_dict(cfg) == hf.read_config(src)
  reloaded = transformers.DebertaV2ForMaskedLM.from_pretrained(out).state_dict()
  orig = model.state_dict()
  assert sorted(reloaded) == sorted(orig)
  for k, v in orig.items():
    np.testing.assert_array_equal(reloaded[k].numpy(), v.numpy(), err_msg=k)
  a, b = load_file(os.path.join(src, "model.safetensors")), load_file(
      os.path.join(out, "model.safetensors"))
  assert sorted(a) == sorted(b)
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)
  assert open(os.path.join(out, "spm.model"), "rb").read() == open(
      os.path.join(src, "spm.model"), "rb").read()


def test_a_table_padded_past_the_tokenizer_is_cut_to_it(deberta_dir, tmp_path):
  """microsoft/deberta-v3-base has 128,100 embedding rows for 128,001 tokens: the rows past
  the tokenizer's go (named in `dropped`); fewer rows than tokens is an error."""
  fast = transformers.DebertaV2TokenizerFast(vocab_file=str(deberta_dir / "spm.model"))
  for extra in (99, -1):
    src = str(tmp_path / f"hf{extra}")
    model = _torch_model(_hf_config(len(fast) + extra, 0), seed=5)
    model.save_pretrained(src, safe_serialization=True)
    shutil.copy(deberta_dir / "spm.model", src)
    if extra < 0:
      with pytest.raises(ValueError, match=rf"spm\.model: {len(fast)} tokens but config\.json has "
                         rf"vocab_size {len(fast) - 1}"):
        hf.load_hf(src)
      continue
    out = hf.load_hf(src)
    assert out["config"].vocab_size == len(out["vocab"]) == len(fast)
    assert out["dropped"] == [f"word_embeddings rows {len(fast)}..{len(fast) + 98} (past the "
                              f"tokenizer's {len(fast)} tokens)"]
    np.testing.assert_array_equal(
        out["params"]["bert"]["embeddings"]["word_embeddings"]["embedding"],
        model.deberta.embeddings.word_embeddings.weight.detach().numpy()[:len(fast)])
    np.testing.assert_array_equal(out["params"]["mlm_output_bias"],
                                  model.cls.predictions.bias.detach().numpy()[:len(fast)])


@pytest.mark.parametrize("buckets,max_position", [(256, 512), (8, 40), (32, 128)])
def test_log_buckets_equal_transformers(buckets, max_position):
  from transformers.models.deberta_v2 import modeling_deberta_v2 as ref  # pylint: disable=g-import-not-at-top
  distances = np.arange(-3000, 3001)
  want = ref.make_log_bucket_position(torch.tensor(distances), buckets, max_position).long()
  np.testing.assert_array_equal(disentangled.log_buckets(distances, buckets, max_position),
                                want.numpy())


def _count(tree):
  return sum(int(np.prod(x.shape)) for x in jax.tree.leaves(tree))


def test_base_parameter_counts_equal_transformers():
  """deberta-v3-base's config.json: DebertaV2Model and DebertaV2ForMaskedLM (no weights made)."""
  hf_cfg = transformers.DebertaV2Config(
      vocab_size=128100, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
      intermediate_size=3072, max_position_embeddings=512, type_vocab_size=0,
      relative_attention=True, position_buckets=256, norm_rel_ebd="layer_norm",
      share_att_key=True, pos_att_type="p2c|c2p", layer_norm_eps=1e-7,
      max_relative_positions=-1, position_biased_input=False)
  config = from_hf_dict(hf_cfg.to_dict())
  counts = {}
  with torch.device("meta"):
    for name, cls in (("base", transformers.DebertaV2Model),
                      ("mlm", transformers.DebertaV2ForMaskedLM)):
      theirs = sum(p.numel() for p in cls(hf_cfg).parameters())  # tied decoder counted once
      module = (model_lib.BertModel(config, add_pooler=False) if name == "base"
                else model_lib.BertForPreTraining(config, with_nsp=False))
      ours = _count(jax.eval_shape(lambda m=module: model_lib.init_params(m, jax.random.PRNGKey(0))))
      counts[name] = (ours, theirs)
  print(f"deberta-v3-base parameter counts (ours, transformers): {counts}")
  assert counts["base"][0] == counts["base"][1] == 183_831_552
  assert counts["mlm"][0] == counts["mlm"][1]


@pytest.mark.parametrize("key,value,message", [
    ("conv_kernel_size", 3, r"conv_kernel_size=3"),
    ("share_att_key", False, r"share_att_key=False"),
    ("pos_att_type", "c2p", r"pos_att_type=\['c2p'\]"),
    ("relative_attention", False, r"relative_attention=False"),
    ("norm_rel_ebd", "none", r"norm_rel_ebd='none'"),
    ("legacy", False, r"legacy=False"),
    ("embedding_size", 16, r"embedding_size=16 \(!= hidden_size\)"),
])
def test_configs_bert_jax_does_not_compute_are_refused_in_one_line(key, value, message):
  d = {**_hf_config(99, 0).to_dict(), key: value}
  with pytest.raises(ValueError, match=r"^c\.json: DeBERTa-v2 with " + message + r".* is not "
                     r"supported \(bert_jax computes DeBERTa-v3's attention"):
    from_hf_dict(d, source="c.json")


@pytest.mark.slow
def test_glue_finetuning_from_the_converted_bundle(deberta_dir, tmp_path_factory, tmp_path):
  """MRPC (tiny, its SentencePiece pairs) fine-tunes from the DeBERTa-v3 bundle end to end:
  the pooler and classifier start fresh (one padded length: one train and one eval compile)."""
  from bert_jax import finetune  # pylint: disable=g-import-not-at-top
  from tests.fixtures.finetuning import MRPC_HEADER, glue_config, mrpc_rows  # pylint: disable=g-import-not-at-top
  _, _, _, dst = _build(0, deberta_dir, tmp_path_factory)
  glue_dir = tmp_path / "glue"
  (glue_dir / "MRPC").mkdir(parents=True)
  for split, rows in (("train", mrpc_rows(8, 0)), ("dev", mrpc_rows(8, 1))):
    (glue_dir / "MRPC" / f"{split}.tsv").write_text("\n".join([MRPC_HEADER] + rows) + "\n")
  workdir = str(tmp_path / "run")
  config = glue_config(str(glue_dir), dst, length_bucketing=False, packing=False,
                       eval_batch_size=8, max_seq_length=48)
  results = finetune.finetune(config, workdir)
  assert 0.0 <= results["accuracy"] <= 1.0 and np.isfinite(results["f1"])
  losses = [json.loads(line)["seed0_train_loss"] for line in open(os.path.join(workdir,
                                                                               "metrics.jsonl"))
            if "seed0_train_loss" in line]
  assert losses and all(np.isfinite(losses))
  exported = bundle.load_bundle(os.path.join(workdir, "export"))
  assert exported.config.model_type == "deberta-v2"
  assert exported.heads == ("pooler", "classifier")
  assert "rel_embeddings" in exported.params["bert"]["encoder"]


def test_context_pooler_and_classifier_equal_transformers(deberta_dir, tmp_path):
  """DebertaV2ForSequenceClassification's ContextPooler (dense + exact GELU on token 0),
  converted as the bundle's pooler: pooled output and logits with its classifier weights."""
  fast = transformers.DebertaV2TokenizerFast(vocab_file=str(deberta_dir / "spm.model"))
  torch.manual_seed(3)
  model = transformers.DebertaV2ForSequenceClassification(
      _hf_config(len(fast), 0, num_labels=3)).eval()
  with torch.no_grad():
    for p in model.parameters():
      p.add_(torch.randn_like(p) * 0.05)
  src, dst = str(tmp_path / "hf"), str(tmp_path / "bundle")
  model.save_pretrained(src, safe_serialization=True)
  shutil.copy(deberta_dir / "spm.model", src)
  assert convert.main(["--from", "hf", "--src", src, "--dst", dst, "--drop_unexpected"]) == 0
  b = bundle.load_bundle(dst)
  assert "pooler" in b.heads
  ids, mask, seg, _ = _batch(b.config.vocab_size)
  with torch.no_grad():
    out = model(torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
                output_hidden_states=True)
    want_pooled = model.pooler(out.hidden_states[-1]).numpy()
  clf = model_lib.BertForSequenceClassification(b.config, num_labels=3)
  params = {"bert": b.params["bert"],
            "classifier": {"kernel": model.classifier.weight.detach().numpy().T,
                           "bias": model.classifier.bias.detach().numpy()}}
  logits = jax.jit(lambda p: clf.apply({"params": p}, ids, mask, np.zeros_like(seg)))(params)
  pooled = jax.jit(lambda p: model_lib.BertModel(b.config).apply(
      {"params": p}, ids, mask, np.zeros_like(seg))["pooled_output"])(b.params["bert"])
  diffs = {"pooled": _max_diff(pooled, want_pooled), "logits": _max_diff(logits, out.logits)}
  print(f"deberta-v2 sequence classification max abs diffs: {diffs}")
  assert max(diffs.values()) <= 1e-5, diffs
  # BERT's tanh pooler would differ: the activation is really exercised.
  assert _max_diff(np.tanh(want_pooled), want_pooled) > 1e-3
