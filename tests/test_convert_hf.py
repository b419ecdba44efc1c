"""HF <-> bert_jax conversion: parity with transformers' Flax BERT, round trips, bad input.

The reference is a randomly initialised transformers FlaxBertForPreTraining
(tests/hf_reference.py: every tensor perturbed),
saved with save_pretrained(safe_serialization=True) (Flax layout). transformers'
own PyTorch->Flax loader checks our PyTorch-layout export.
"""
from flax import traverse_util
import json
import os

import jax
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from bert_jax.checkpoints import bundle
from bert_jax import cli
from bert_jax.conversion import hf
from bert_jax.conversion import name_map
from bert_jax import convert
from bert_jax.modeling import model as model_lib
from tests.hf_reference import Reference
from tests.fixtures import parity

transformers = parity.require("transformers")

HF_CONFIG = dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=37, max_position_embeddings=64, type_vocab_size=2)
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"tok{i}" for i in range(94)]


def _write_vocab(directory):
  with open(os.path.join(directory, "vocab.txt"), "w", encoding="utf-8") as f:
    f.write("\n".join(VOCAB) + "\n")


def _save_hf(model_cls, directory, seed=0, **overrides):
  config = transformers.BertConfig(**{**HF_CONFIG, **overrides})
  m = Reference(model_cls, config, seed)
  m.model.save_pretrained(directory, params=m.params, safe_serialization=True)
  _write_vocab(directory)
  return m


def _batch(seed=0):
  """Three rows with padding and two segments, plus masked positions."""
  rng = np.random.default_rng(seed)
  batch, length = 3, 16
  ids = rng.integers(5, HF_CONFIG["vocab_size"], (batch, length)).astype(np.int32)
  mask = np.zeros((batch, length), np.int32)
  seg = np.zeros((batch, length), np.int32)
  for row, n in enumerate((16, 11, 6)):
    mask[row, :n] = 1
    seg[row, n // 2:n] = 1
    ids[row, 0], ids[row, n // 2 - 1], ids[row, n - 1] = 2, 3, 3
    ids[row, n:] = 0
  positions = np.array([[1, 5, 9], [2, 3, 8], [1, 4, 4]], np.int32)
  return ids, mask, seg, positions


def _ours(bundle_dir, **config_overrides):
  """Our outputs for _batch() from a bundle, with the given compute options."""
  b = bundle.load_bundle(bundle_dir)
  c = b.config.replace(**config_overrides)
  params = model_lib.match_scan_layout(b.params, c)
  ids, mask, seg, positions = _batch()

  @jax.jit
  def run(params):
    enc = model_lib.BertModel(c).apply({"params": params["bert"]}, ids, mask, seg)
    heads = model_lib.BertForPreTraining(c).apply({"params": params}, ids, mask, seg, positions)
    return enc, heads
  enc, heads = run(params)
  return dict(seq=enc["sequence_output"], pooled=enc["pooled_output"],
              mlm=heads["mlm_logits"], nsp=heads["nsp_logits"])


def _reference(m):
  """transformers' outputs for _batch() from a FlaxBertForPreTraining."""
  ids, mask, seg, positions = _batch()
  out = m(ids, mask, seg)
  base = transformers.FlaxBertModel(m.config, _do_init=False)
  enc = m(ids, mask, seg, params=m.params["bert"], model=base)
  mlm = np.take_along_axis(np.asarray(out.prediction_logits), positions[..., None], axis=1)
  return dict(seq=enc.last_hidden_state, pooled=enc.pooler_output, mlm=mlm,
              nsp=out.seq_relationship_logits)


@pytest.fixture(scope="module")
def hf_model(tmp_path_factory):
  directory = str(tmp_path_factory.mktemp("hf_flax"))
  return directory, _save_hf(transformers.FlaxBertForPreTraining, directory)


@pytest.fixture(scope="module")
def converted(hf_model, tmp_path_factory):
  dst = str(tmp_path_factory.mktemp("bundle") / "b")
  assert convert.main(["--from", "hf", "--src", hf_model[0], "--dst", dst]) == 0
  return dst


@pytest.fixture(scope="module")
def reference(hf_model):
  return _reference(hf_model[1])


@pytest.mark.parametrize("overrides", [
    dict(attention_impl="xla"),
    dict(attention_impl="einsum"),
    dict(attention_impl="xla", scan_layers=True),
    dict(attention_impl="xla", qkv_projection="fused"),
    dict(attention_impl="einsum", qkv_projection="fused", scan_layers=True),
], ids=["xla", "einsum", "scan", "fused_qkv", "fused_qkv_scan"])
def test_parity_with_transformers(converted, reference, overrides):
  ours = _ours(converted, **overrides)
  for name in ("seq", "pooled", "mlm", "nsp"):
    diff = np.max(np.abs(np.asarray(ours[name]) - np.asarray(reference[name])))
    assert diff <= 1e-4, f"{name}: max abs diff {diff}"
  assert ours["mlm"].shape == (3, 3, HF_CONFIG["vocab_size"])


def test_bundle_metadata(converted):
  b = bundle.load_bundle(converted)
  assert b.heads == ("pooler", "mlm", "nsp")
  assert b.config.num_layers == 2 and b.config.hidden_size == 32
  assert b.lowercase  # no capital letters in VOCAB
  assert open(b.vocab_file, encoding="utf-8").read().split() == VOCAB


def test_export_loads_in_transformers_exactly(hf_model, converted, tmp_path):
  """HF (Flax) -> bert_jax -> HF (PyTorch layout), loaded by transformers: every tensor exact."""
  out = str(tmp_path / "export")
  assert convert.main(["--to", "hf", "--src", converted, "--dst", out]) == 0
  assert convert.main(["--to", "hf", "--src", converted, "--dst", out, "--overwrite",
                       "--quiet"]) == 0
  cfg = json.load(open(os.path.join(out, "config.json")))
  assert cfg["architectures"] == ["BertForPreTraining"]
  reloaded = transformers.FlaxBertForPreTraining.from_pretrained(out)  # PyTorch->Flax loader
  orig = traverse_util.flatten_dict(hf_model[1].params, sep="/")
  back = traverse_util.flatten_dict(reloaded.params, sep="/")
  assert sorted(orig) == sorted(back)
  for k in orig:
    np.testing.assert_array_equal(np.asarray(back[k]), np.asarray(orig[k]), err_msg=k)
  tok = transformers.BertTokenizerFast.from_pretrained(out)
  assert tok.convert_tokens_to_ids("[MASK]") == 4


def test_every_exported_file_is_readable_as_the_umask_says(converted, tmp_path):
  """safetensors writes its file 0600: on a shared machine no one else could read the model."""
  out = tmp_path / "export"
  mask = os.umask(0o022)
  try:
    assert convert.main(["--to", "hf", "--src", converted, "--dst", str(out), "--quiet"]) == 0
  finally:
    os.umask(mask)
  modes = {p.name: p.stat().st_mode & 0o777 for p in out.iterdir()}
  assert "model.safetensors" in modes
  assert set(modes.values()) == {0o644}, modes


def test_pytorch_layout_round_trip_exact(converted, tmp_path):
  """PyTorch-layout safetensors -> bundle -> safetensors gives identical files' tensors."""
  first, second, b2 = (str(tmp_path / n) for n in ("first", "second", "b2"))
  hf.bundle_to_hf(converted, first)
  hf.hf_to_bundle(first, b2)
  hf.bundle_to_hf(b2, second)
  a = load_file(os.path.join(first, "model.safetensors"))
  b = load_file(os.path.join(second, "model.safetensors"))
  assert sorted(a) == sorted(b) and len(a) == 5 + 16 * 2 + 2 + 5 + 2
  for k in a:
    np.testing.assert_array_equal(a[k], b[k], err_msg=k)
  assert a["bert.encoder.layer.1.attention.self.query.weight"].shape == (32, 32)
  assert a["cls.seq_relationship.weight"].shape == (2, 32)


def _rewrite(src_dir, dst_dir, fn):
  """Copies an exported HF dir, rewriting its tensors dict with fn."""
  os.makedirs(dst_dir)
  for name in ("config.json", "vocab.txt"):
    with open(os.path.join(src_dir, name), "rb") as f, open(os.path.join(dst_dir, name), "wb") as g:
      g.write(f.read())
  tensors = fn(load_file(os.path.join(src_dir, "model.safetensors")))
  save_file(tensors, os.path.join(dst_dir, "model.safetensors"), metadata={"format": "pt"})


@pytest.fixture(scope="module")
def pt_export(converted, tmp_path_factory):
  out = str(tmp_path_factory.mktemp("pt") / "export")
  hf.bundle_to_hf(converted, out)
  return out


def test_legacy_names_tied_decoder_and_buffers(pt_export, converted, tmp_path):
  """No `bert.` prefix on the encoder, LayerNorm gamma/beta, tied decoder copies, buffers."""
  def legacy(t):
    out = {}
    for k, v in t.items():
      k = k.replace("LayerNorm.weight", "LayerNorm.gamma")
      out[k.replace("LayerNorm.bias", "LayerNorm.beta")] = v
    out["cls.predictions.decoder.weight"] = t["bert.embeddings.word_embeddings.weight"].copy()
    out["cls.predictions.decoder.bias"] = t["cls.predictions.bias"].copy()
    out["bert.embeddings.position_ids"] = np.arange(64, dtype=np.int64)[None]
    return out
  src = str(tmp_path / "legacy")
  _rewrite(pt_export, src, legacy)
  got = hf.load_hf(src)["params"]
  want = bundle.load_bundle(converted).params
  for k, v in traverse_util.flatten_dict(want, sep="/").items():
    np.testing.assert_array_equal(traverse_util.flatten_dict(got, sep="/")[k], v, err_msg=k)

  def untied(t):
    t = legacy(t)
    t["cls.predictions.decoder.weight"] = t["cls.predictions.decoder.weight"] + 1.0
    return t
  bad = str(tmp_path / "untied")
  _rewrite(pt_export, bad, untied)
  with pytest.raises(name_map.ConversionError, match="cls.predictions.decoder.weight differs"):
    hf.load_hf(bad)


@pytest.mark.parametrize("model_cls,heads", [
    (transformers.FlaxBertModel, ("pooler",)),
    (transformers.FlaxBertForMaskedLM, ("mlm",)),
], ids=["BertModel", "BertForMaskedLM"])
def test_other_layouts(model_cls, heads, tmp_path):
  src, dst = str(tmp_path / "hf"), str(tmp_path / "b")
  m = _save_hf(model_cls, src, seed=3)
  out = hf.hf_to_bundle(src, dst)
  assert out["heads"] == heads
  b = bundle.load_bundle(dst)
  ids, mask, seg, positions = _batch(1)
  if "mlm" in heads:
    ref = np.take_along_axis(np.asarray(m(ids, mask, seg).logits), positions[..., None], axis=1)
    ours = model_lib.BertForPreTraining(b.config, with_nsp=False).apply(
        {"params": b.params}, ids, mask, seg, positions)["mlm_logits"]
  else:
    ref = m(ids, mask, seg).pooler_output
    ours = model_lib.BertModel(b.config).apply({"params": b.params["bert"]}, ids, mask,
                                               seg)["pooled_output"]
  assert np.max(np.abs(np.asarray(ours) - np.asarray(ref))) <= 1e-4


def test_pickle_only_directory_is_refused(tmp_path):
  d = tmp_path / "bin_only"
  d.mkdir()
  (d / "config.json").write_text(json.dumps({**HF_CONFIG, "model_type": "bert"}))
  _write_vocab(str(d))
  (d / "pytorch_model.bin").write_bytes(b"not loaded")
  with pytest.raises(ValueError, match=r"(?s)pickle.*safetensors only.*model\.safetensors"):
    hf.load_hf(str(d))


def _run_convert(argv):
  """The command line as `python -m bert_jax.convert` runs it: bad input exits with status 2."""
  with pytest.raises(SystemExit) as e:
    cli.run_tool(lambda: convert.main(argv), "bert_jax.convert")
  assert e.value.code == 2


def test_truncated_safetensors_and_nan_values_are_refused_in_one_line(pt_export, tmp_path, capsys):
  d = str(tmp_path / "truncated")
  _rewrite(pt_export, d, lambda t: t)
  weights = os.path.join(d, "model.safetensors")
  data = open(weights, "rb").read()
  open(weights, "wb").write(data[:len(data) // 2])
  _run_convert(["--from", "hf", "--src", d, "--dst", str(tmp_path / "out1")])
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "model.safetensors is not a readable safetensors file" in err[0], err

  def poison(t):
    t["bert.encoder.layer.1.output.dense.weight"][3, :5] = np.nan
    t["bert.pooler.dense.bias"][0] = np.inf
    return t
  d = str(tmp_path / "nan")
  _rewrite(pt_export, d, poison)
  _run_convert(["--from", "hf", "--src", d, "--dst", str(tmp_path / "out2")])
  err = capsys.readouterr().err.strip().splitlines()
  assert len(err) == 1 and "NaN/inf values in 2 tensor(s)" in err[0], err
  assert "layer_1" in err[0] and "(5 of " in err[0] and "pooler" in err[0]
  assert not os.path.exists(tmp_path / "out2")


def test_directory_without_config(tmp_path):
  with pytest.raises(FileNotFoundError, match="has no config.json"):
    hf.load_hf(str(tmp_path))
  with pytest.raises(FileNotFoundError, match="not found"):
    hf.load_hf(str(tmp_path / "absent"))


def _with_config(pt_export, tmp_path, **changes):
  d = str(tmp_path / "changed")
  _rewrite(pt_export, d, lambda t: t)
  path = os.path.join(d, "config.json")
  cfg = json.load(open(path))
  cfg.update(changes)
  json.dump(cfg, open(path, "w"))
  return d


def test_checkpoint_of_another_size(pt_export, tmp_path):
  d = _with_config(pt_export, tmp_path, num_hidden_layers=3)
  with pytest.raises(name_map.ConversionError, match=r"declares 3 layers but the tensors hold 2"):
    hf.load_hf(d)


def test_wrong_shape_is_named(pt_export, tmp_path):
  d = _with_config(pt_export, tmp_path, intermediate_size=40)
  with pytest.raises(name_map.ConversionError, match=r"wrong shape.*intermediate\.dense\.weight: "
                     r"\(37, 32\), expected \(40, 32\)"):
    hf.load_hf(d)


def test_vocab_size_mismatch(pt_export, tmp_path):
  d = _with_config(pt_export, tmp_path)
  with open(os.path.join(d, "vocab.txt"), "a", encoding="utf-8") as f:
    f.write("extra\n")
  with pytest.raises(ValueError, match="100 tokens but config.json has vocab_size 99"):
    hf.load_hf(d)


def test_unexpected_keys_named_and_droppable(pt_export, tmp_path):
  def add_classifier(t):
    t["classifier.weight"] = np.zeros((3, 32), np.float32)
    t["classifier.bias"] = np.zeros((3,), np.float32)
    return t
  d = str(tmp_path / "cls")
  _rewrite(pt_export, d, add_classifier)
  with pytest.raises(name_map.ConversionError,
                     match=r"unexpected 2: classifier\.bias, classifier\.weight"):
    hf.load_hf(d)
  out = hf.load_hf(d, drop_unexpected=True)
  assert out["dropped"] == ["classifier.bias", "classifier.weight"]


def test_refuses_to_overwrite(converted, hf_model):
  with pytest.raises(FileExistsError, match="not empty"):
    hf.hf_to_bundle(hf_model[0], converted)


def test_bf16_file_converts_to_float32(pt_export, tmp_path):
  import ml_dtypes  # pylint: disable=g-import-not-at-top
  d = str(tmp_path / "bf16")
  _rewrite(pt_export, d, lambda t: {k: v.astype(ml_dtypes.bfloat16) for k, v in t.items()})
  params = hf.load_hf(d)["params"]
  emb = params["bert"]["embeddings"]["word_embeddings"]["embedding"]
  want = load_file(os.path.join(pt_export, "model.safetensors"))[
      "bert.embeddings.word_embeddings.weight"]
  assert emb.dtype == np.float32
  np.testing.assert_array_equal(emb, want.astype(ml_dtypes.bfloat16).astype(np.float32))
  assert not np.array_equal(emb, want)  # really rounded, so the bf16 path was taken



def test_a_crafted_config_of_20000_layers_is_refused_before_tracing(pt_export, tmp_path):
  """Refused before the model's shapes are traced (tracing 20,000 layers would hang)."""
  d = _with_config(pt_export, tmp_path, num_hidden_layers=20_000)
  with pytest.raises(ValueError, match=r"declares num_layers 20,000 \(at most 1,024\)"):
    hf.load_hf(d)


def test_to_hf_of_a_fine_tuned_bundle_names_its_head_and_drop_unexpected_leaves_it_out(
    tmp_path, capsys):
  """A fine-tuned classifier has no name in transformers' BertModel: the export names it and
  the flag that writes the encoder without it; with the flag, the encoder and pooler are written
  bit for bit and the head is named as left out."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from safetensors.numpy import load_file  # pylint: disable=g-import-not-at-top
  from bert_jax.checkpoints import bundle  # pylint: disable=g-import-not-at-top
  from tests.fixtures import tiny_encoder  # pylint: disable=g-import-not-at-top
  config = tiny_encoder.BUNDLE_CONFIG
  params = tiny_encoder.random_params(config, heads=("pooler",))
  params["classifier"] = {"kernel": np.ones((16, 3), np.float32),
                          "bias": np.zeros((3,), np.float32)}
  vocab = tiny_encoder.VOCAB + [f"w{i}" for i in range(config.vocab_size
                                                       - len(tiny_encoder.VOCAB))]
  src = str(tmp_path / "finetuned")
  bundle.save_bundle(src, params, config, vocab, True)
  with pytest.raises(Exception, match=r"not exportable classifier/bias, classifier/kernel .*"
                                      r"--drop_unexpected exports the model without them"):
    convert.main(["--to", "hf", "--src", src, "--dst", str(tmp_path / "refused"), "--quiet"])
  assert not (tmp_path / "refused").exists()
  capsys.readouterr()
  assert convert.main(["--to", "hf", "--src", src, "--dst", str(tmp_path / "hf"),
                       "--drop_unexpected", "--quiet"]) == 0
  out = capsys.readouterr().out
  assert "left out 2 tensors outside the name map (--drop_unexpected): ['classifier/bias', " \
         "'classifier/kernel']" in out
  tensors = load_file(str(tmp_path / "hf" / "model.safetensors"))
  assert not any("classifier" in k for k in tensors)
  np.testing.assert_array_equal(tensors["bert.pooler.dense.bias"],
                                params["bert"]["pooler"]["bias"])


def _fine_tuned_bundle(path, group, outputs, info, seed=4):
  """A tiny BERT fine-tuning export: random encoder, pooler and a task head of `outputs`."""
  from tests.fixtures import tiny_encoder  # pylint: disable=g-import-not-at-top
  config = tiny_encoder.BUNDLE_CONFIG
  rng = np.random.default_rng(seed)
  params = tiny_encoder.random_params(config, seed, heads=("pooler",))
  params[group] = {"kernel": rng.normal(0, 1, (16, outputs)).astype(np.float32),
                   "bias": rng.normal(0, 1, (outputs,)).astype(np.float32)}
  vocab = tiny_encoder.VOCAB + [f"w{i}" for i in range(config.vocab_size
                                                       - len(tiny_encoder.VOCAB))]
  bundle.save_bundle(str(path), params, config, vocab, True, info=info)
  return config, params


@pytest.mark.parametrize("task, labels", [("mrpc", ["0", "1"]), ("stsb", ["LABEL_0"]),
                                          ("ner", ["O", "B-PER", "I-PER"])])
def test_to_hf_writes_a_fine_tuned_head_as_transformers_class_for_it(tmp_path, task, labels):
  """GLUE's 'cls' head is BertForSequenceClassification, NER's BertForTokenClassification,
  with the labels bundle.json records: transformers gives the logits bert_jax gives."""
  torch = parity.require("torch")
  transformers = parity.require("transformers")
  from bert_jax.tasks.glue import task as glue_task  # pylint: disable=g-import-not-at-top
  ner = task == "ner"
  group = "token_classifier" if ner else "classifier"
  info = {"task": task, "labels": labels if task != "stsb" else []}  # (as the runs record them)
  if not ner:
    info["head"] = "cls"
  config, params = _fine_tuned_bundle(tmp_path / "export", group, len(labels), info)
  assert convert.main(["--to", "hf", "--src", str(tmp_path / "export"), "--dst",
                       str(tmp_path / "hf"), "--quiet"]) == 0
  written = json.loads((tmp_path / "hf" / "config.json").read_text())
  cls = "BertForTokenClassification" if ner else "BertForSequenceClassification"
  assert written["architectures"] == [cls]
  assert written["id2label"] == {str(i): x for i, x in enumerate(labels)}
  if task == "stsb":
    assert written["problem_type"] == "regression"
  theirs = getattr(transformers, cls).from_pretrained(str(tmp_path / "hf")).eval()
  ids = np.array([[2, 5, 6, 7, 3, 8, 9, 3], [2, 10, 11, 3, 0, 0, 0, 0]], np.int32)
  mask = (ids > 0).astype(np.int32)
  seg = np.array([[0, 0, 0, 0, 0, 1, 1, 1], [0] * 8], np.int32)
  net = (model_lib.BertForTokenClassification(config, len(labels)) if ner else
         glue_task.sequence_model(config, len(labels), "cls"))
  ours = np.asarray(net.apply({"params": params}, ids, mask, seg))
  with torch.no_grad():
    got = theirs(input_ids=torch.tensor(ids, dtype=torch.long),
                 attention_mask=torch.tensor(mask, dtype=torch.long),
                 token_type_ids=torch.tensor(seg, dtype=torch.long)).logits.numpy()
  if ner:  # padding positions are not compared
    ours, got = ours[mask.astype(bool)], got[mask.astype(bool)]
  np.testing.assert_allclose(got, ours, atol=2e-5)

  # And back: `convert --from hf` reads the head and its labels, and the Encoder answers with
  # them as transformers does.
  from bert_jax import api  # pylint: disable=g-import-not-at-top
  from bert_jax.checkpoints import loading  # pylint: disable=g-import-not-at-top
  back = tmp_path / "back"
  assert convert.main(["--from", "hf", "--src", str(tmp_path / "hf"), "--dst", str(back),
                       "--quiet"]) == 0
  recorded = json.loads((back / bundle.INFO_FILE).read_text())
  assert recorded["labels"] == info["labels"] and recorded.get("task") == ("ner" if ner else None)
  jax.tree.map(np.testing.assert_array_equal, loading.load_pretrained(str(back)).params[group],
               params[group])
  encoder = api.Encoder.load(str(back))
  tokenizer = transformers.BertTokenizerFast.from_pretrained(str(tmp_path / "hf"))
  if ner:
    words = ["the", "dogs", "ran", "far"]
    pieces = tokenizer(words, is_split_into_words=True, return_tensors="pt")
    with torch.no_grad():
      logits = theirs(**pieces).logits[0].numpy()
    first = [pieces.word_ids().index(i) for i in range(len(words))]
    assert encoder.tag([words]) == [[labels[int(np.argmax(logits[i]))] for i in first]]
    return
  pair = ("the cat sat", "a big red dog")
  with torch.no_grad():
    logits = theirs(**tokenizer(*pair, return_tensors="pt")).logits[0].numpy()
  (label, prob), = encoder.classify([pair])
  if task == "stsb":
    assert abs(label - float(logits[0])) < 2e-5 and prob == 1.0
  else:
    probs = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    assert label == labels[int(np.argmax(probs))] and abs(prob - probs.max()) < 2e-5


def test_to_hf_leaves_a_head_transformers_builds_otherwise_to_drop_unexpected(tmp_path):
  """The 'mean' head has no transformers class: the export refuses, naming the flag."""
  _fine_tuned_bundle(tmp_path / "export", "classifier", 2,
                    {"task": "mrpc", "head": "mean", "labels": ["0", "1"]})
  with pytest.raises(name_map.ConversionError, match=r"not exportable classifier/bias"):
    hf.bundle_to_hf(str(tmp_path / "export"), str(tmp_path / "hf"))
  # An export written before GLUE's labels were recorded: the same.
  _fine_tuned_bundle(tmp_path / "older", "classifier", 2, {"task": "mrpc", "head": "cls"})
  with pytest.raises(name_map.ConversionError, match=r"not exportable classifier/bias"):
    hf.bundle_to_hf(str(tmp_path / "older"), str(tmp_path / "hf"))


def test_from_hf_reads_a_classifier_transformers_fine_tuned_with_its_labels(tmp_path, capsys):
  """A BertForSequenceClassification saved by transformers (PyTorch) converts with its head
  and id2label; Encoder.classify gives transformers' label and probability. A multi-label
  head, or labels that do not match the weights, is refused in one line."""
  torch = parity.require("torch")
  from bert_jax import api  # pylint: disable=g-import-not-at-top
  labels = {"0": "negative", "1": "neutral", "2": "positive"}
  torch.manual_seed(0)
  config = transformers.BertConfig(**HF_CONFIG, id2label=labels,
                                   label2id={v: int(k) for k, v in labels.items()})
  theirs = transformers.BertForSequenceClassification(config).eval()
  src = tmp_path / "hf"
  theirs.save_pretrained(str(src), safe_serialization=True)
  _write_vocab(str(src))
  assert convert.main(["--from", "hf", "--src", str(src), "--dst", str(tmp_path / "b")]) == 0
  out = capsys.readouterr().out
  assert "heads ['pooler', 'classifier']" in out
  assert "its task head: labels ['negative', 'neutral', 'positive'] from config.json's " \
         "id2label; Encoder.classify answers with them" in out
  texts = [("tok5 tok6 tok7", "tok8 tok9"), "tok10 tok11 tok12 tok13"]
  got = api.Encoder.load(str(tmp_path / "b")).classify(texts)
  tokenizer = transformers.BertTokenizerFast(vocab_file=str(src / "vocab.txt"))
  for text, (label, prob) in zip(texts, got):
    pair = text if isinstance(text, tuple) else (text,)
    with torch.no_grad():
      probs = theirs(**tokenizer(*pair, return_tensors="pt")).logits.softmax(-1)[0].numpy()
    assert label == labels[str(int(np.argmax(probs)))] and abs(prob - probs.max()) < 1e-5

  saved = json.loads((src / "config.json").read_text())
  for change, message in [({"problem_type": "multi_label_classification"},
                           "multi_label_classification' scores each label on its own"),
                          ({"id2label": {"0": "a", "1": "b"}},
                           "id2label names 2 labels, but the classifier has 3 outputs")]:
    (src / "config.json").write_text(json.dumps({**saved, **change}))
    with pytest.raises(ValueError, match=message):
      hf.load_hf(str(src))
