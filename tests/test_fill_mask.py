"""python -m bert_jax.fill_mask: top-k per [MASK] against a numpy MLM head, and clear errors."""
from flax import traverse_util
import io
import json
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.special import erf

from bert_jax.checkpoints import bundle
from bert_jax.checkpoints import loading
from bert_jax.checkpoints import run_checkpoints as ckpt_lib
from bert_jax import fill_mask
from bert_jax.inference import mask_filling
from bert_jax.modeling import model as model_lib
from bert_jax.modeling.model_config import BertConfig

WORDS = ["the", "capital", "of", "france", "is", "paris", "london", ".", "a", "city", "big"]
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS
CONFIG = BertConfig(vocab_size=len(VOCAB), hidden_size=16, num_layers=2, num_heads=2,
                    intermediate_size=32, max_position_embeddings=24)


def _save(directory, heads):
  rng = np.random.default_rng(0)
  flat = {k: (rng.normal(0, 0.5, s) + k.endswith("scale")).astype(np.float32)
          for k, s in bundle.pretraining_shapes(CONFIG).items()}
  drop = {"mlm": "mlm", "nsp": "nsp/", "pooler": "bert/pooler/"}
  flat = {k: v for k, v in flat.items()
          if not any(k.startswith(pre) for h, pre in drop.items() if h not in heads)}
  (directory / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
  path = str(directory / "bundle")
  bundle.save_bundle(path, traverse_util.unflatten_dict(flat, sep="/"), CONFIG, str(directory / "vocab.txt"), True)
  return path


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
  return _save(tmp_path_factory.mktemp("fm"), ("mlm",))


@jax.jit
def _encoder(params, ids):
  return model_lib.BertModel(CONFIG, add_pooler=False).apply(
      {"params": params}, ids, jnp.ones_like(ids), jnp.zeros_like(ids))["sequence_output"]


def _reference_probs(b, ids, position):
  """Softmax of the MLM head at one position, in numpy from the encoder output."""
  ids = np.array([ids], np.int32)
  h = _encoder(b.params["bert"], ids)
  x = np.asarray(h)[0, position].astype(np.float64)
  p = b.params["mlm"]
  x = x @ p["transform"]["kernel"] + p["transform"]["bias"]
  x = 0.5 * x * (1 + erf(x / np.sqrt(2)))
  x = (x - x.mean()) / np.sqrt(x.var() + 1e-12)
  x = x * p["transform_norm"]["scale"] + p["transform_norm"]["bias"]
  logits = x @ b.params["bert"]["embeddings"]["word_embeddings"]["embedding"].T
  logits += b.params["mlm_output_bias"]
  e = np.exp(logits - logits.max())
  return e / e.sum()


def test_top_k_matches_reference(ckpt):
  b = loading.load_pretrained(ckpt)
  texts = ["The capital of France is [MASK].", "[MASK] big [MASK] of the city"]
  got = mask_filling.fill_mask(b, texts, top_k=3)
  v = VOCAB.index
  cases = [([2, v("the"), v("capital"), v("of"), v("france"), v("is"), 4, v("."), 3], [6]),
           ([2, 4, v("big"), 4, v("of"), v("the"), v("city"), 3], [1, 3])]
  assert [len(r) for r in got] == [1, 2]
  for result, (ids, positions) in zip(got, cases):
    for preds, pos in zip(result, positions):
      probs = _reference_probs(b, ids, pos)
      order = np.argsort(-probs)[:3]
      assert [t for t, _ in preds] == [VOCAB[i] for i in order]
      np.testing.assert_allclose([q for _, q in preds], probs[order], atol=1e-5)


def test_cli_prints_predictions(ckpt, capsys):
  assert fill_mask.main(["--checkpoint", ckpt, "--top_k", "2", "--json",
                         "paris is a [MASK] ."]) == 0
  out = json.loads(capsys.readouterr().out)
  assert out[0]["text"] == "paris is a [MASK] ."
  preds = out[0]["masks"][0]
  assert len(preds) == 2 and preds[0]["prob"] >= preds[1]["prob"] > 0
  assert [p["token_str"] for p in preds] == [p["token"] for p in preds]  # WordPiece: the piece
  assert fill_mask.main(["--checkpoint", ckpt, "the [MASK] ."]) == 0
  lines = capsys.readouterr().out.splitlines()
  assert lines[0] == "the [MASK] ." and lines[1].startswith("  [MASK] 1: ")
  assert len(lines[1].split()) == 2 + 2 * 5  # '[MASK] 1:' then 5 (token, prob)


def test_errors(ckpt, tmp_path):
  no_mlm = _save(tmp_path, ("pooler",))
  with pytest.raises(ValueError, match=r"has no MLM head \(heads: \['pooler'\]\)"):
    fill_mask.main(["--checkpoint", no_mlm, "the [MASK] ."])
  with pytest.raises(ValueError, match=r"text 2 \('no mask here'\) has no \[MASK\]"):
    fill_mask.main(["--checkpoint", ckpt, "the [MASK] .", "no mask here"])
  with pytest.raises(ValueError, match="26 tokens long; the model takes at most 24"):
    mask_filling.fill_mask(loading.load_pretrained(ckpt), ["the [MASK] " + "city " * 22])


def test_pretraining_workdir_is_accepted(ckpt, tmp_path, capsys):
  """A pretraining workdir (latest train checkpoint, layers scanned) predicts like its params."""
  b = loading.load_pretrained(ckpt)
  workdir = tmp_path / "run"
  ckpts = ckpt_lib.TrainCheckpoints(str(workdir / "checkpoints"), async_save=False)
  ckpts.save(3, {"params": model_lib.stack_layers(b.params)},
             loading.model_description(CONFIG, VOCAB, lowercase=True))
  ckpts.close()
  assert fill_mask.main(["--checkpoint", str(workdir), "--json", "the capital is [MASK] ."]) == 0
  got = json.loads(capsys.readouterr().out)[0]["masks"][0]
  want = mask_filling.fill_mask(b, ["the capital is [MASK] ."])[0][0]
  assert [p["token"] for p in got] == [t for t, _ in want]
  np.testing.assert_allclose([p["prob"] for p in got], [q for _, q in want], atol=1e-6)


def test_a_crafted_config_in_a_workdir_is_refused_in_one_line(ckpt, tmp_path, capsys):
  """The checkpoint's declared config against its (scanned) arrays, before building."""
  b = loading.load_pretrained(ckpt)
  workdir = tmp_path / "run"
  ckpts = ckpt_lib.TrainCheckpoints(str(workdir / "checkpoints"), async_save=False)
  for step, layers in ((3, 20_000), (4, 7)):
    ckpts.save(step, {"params": model_lib.stack_layers(b.params)},
               loading.model_description(CONFIG.replace(num_layers=layers), VOCAB,
                                         lowercase=True))
    ckpts.wait()
    with pytest.raises(ValueError, match=rf"/{step}: its model config declares num_layers "
                       + ("20,000 \\(at most 1,024\\)" if step == 3 else
                          "7 but the params hold 2 encoder layers")):
      fill_mask.main(["--checkpoint", str(workdir), "the [MASK] ."])
  ckpts.close()


def test_an_input_file_runs_in_batches_with_progress_and_the_same_predictions(ckpt, tmp_path,
                                                                              capsys):
  """Many lines from --input, in batches of --batch_size (the last padded), progress
  on stderr, predictions equal to one batch of all of them; --quiet prints nothing there."""
  texts = [f"the [MASK] of {w} ." for w in ("paris", "the city", "france", "capital", "big")]
  path = tmp_path / "texts.txt"
  path.write_text("\n".join(texts[1:]) + "\n\n")
  b = loading.load_pretrained(ckpt)
  whole = mask_filling.fill_mask(b, texts, top_k=3)
  assert fill_mask.main(["--checkpoint", ckpt, "--input", str(path), "--batch_size", "2",
                         "--top_k", "3", "--json", texts[0]]) == 0
  captured = capsys.readouterr()
  got = json.loads(captured.out)
  assert [r["text"] for r in got] == texts
  for r, want in zip(got, whole):
    assert [p["token"] for p in r["masks"][0]] == [t for t, _ in want[0]]
    np.testing.assert_allclose([p["prob"] for p in r["masks"][0]], [q for _, q in want[0]],
                               atol=1e-6)
  assert "filling masks: 0/5 texts" in captured.err and "filling masks: 5 texts in" in captured.err
  assert "5 text(s)" in captured.err and "batches of 2" in captured.err
  assert fill_mask.main(["--checkpoint", ckpt, "--quiet", "the [MASK] ."]) == 0
  assert capsys.readouterr().err == ""
  empty = tmp_path / "empty.txt"
  empty.write_text("\n")
  with pytest.raises(ValueError, match=r"no text: give TEXT\.\.\. with \[MASK\], or --input FILE"):
    fill_mask.main(["--checkpoint", ckpt, "--input", str(empty)])


def test_input_dash_reads_standard_input(ckpt, monkeypatch, capsys):
  piped = b"the [MASK] .\n\nparis is a [MASK] .\n"
  monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(piped)))
  assert fill_mask.main(["--checkpoint", ckpt, "--input", "-", "--json"]) == 0
  captured = capsys.readouterr()
  assert [r["text"] for r in json.loads(captured.out)] == ["the [MASK] .", "paris is a [MASK] ."]
  assert "2 text(s) (standard input)" in captured.err
  monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"\n")))
  with pytest.raises(ValueError, match="standard input has none"):
    fill_mask.main(["--checkpoint", ckpt, "--input", "-"])


def test_a_slow_single_batch_says_what_it_does_while_it_runs(ckpt, monkeypatch, capsys):
  """One batch has no progress lines: a slow one (here a tokenizer and compile made slow)
  prints a beat within every BEAT_SECONDS, and nothing when it is quick."""
  from bert_jax.runtime import console  # pylint: disable=g-import-not-at-top
  slow = mask_filling.fill_mask

  def fill_slowly(*args, **kwargs):
    time.sleep(0.5)
    return slow(*args, **kwargs)

  monkeypatch.setattr(console, "BEAT_SECONDS", 0.1)
  monkeypatch.setattr(mask_filling, "fill_mask", fill_slowly)
  assert fill_mask.main(["--checkpoint", ckpt, "the [MASK] ."]) == 0
  beats = [l for l in capsys.readouterr().err.splitlines() if "filling the masks" in l]
  assert beats and beats[0].startswith("bert_jax.fill_mask: tokenizing, compiling"), beats
  monkeypatch.setattr(mask_filling, "fill_mask", slow)
  monkeypatch.setattr(console, "BEAT_SECONDS", 30.0)
  assert fill_mask.main(["--checkpoint", ckpt, "the [MASK] ."]) == 0
  assert "filling the masks" not in capsys.readouterr().err
