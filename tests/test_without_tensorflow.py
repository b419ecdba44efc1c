"""Without TensorFlow: pretraining from prepared data (the Python loader gives tf.data's batches),
and fine-tuning, embed and fill_mask (WordPiece on `tokenizers`) as with it, bitwise.

The TF-free runs are subprocesses started through tests/without_tensorflow.py, where
tensorflow, tensorflow_text and tensorflow_datasets cannot be imported.
"""
import json
import os
import pathlib
import subprocess
import sys
import threading

import numpy as np
import pytest

from bert_jax.data.sources import prepared_data
from bert_jax.data.sources import shard_spec
from bert_jax.data.stream import pretrain_data
from bert_jax import prepare_data
from bert_jax import pretrain
from bert_jax.runtime.cpu_tensorflow import tf
from bert_jax.runtime import optional_tensorflow
from configs import pretrain as pretrain_config

ROOT = pathlib.Path(__file__).resolve().parents[1]
_WORDS = ("the old man walked to the river and saw a boat near the house she said that the war "
          "was over they went home in the evening a small dog ran across field while children "
          "played by trees many people lived city but few of them knew king").split()


def _text_config(files, **overrides):
  c = pretrain_config.get_config("tiny")
  c.data.source, c.data.files = "files", files
  c.data.max_predictions_per_seq = 5
  c.data.eval_every_nth_document = 4
  c.data.block_mb = 3000 / (1 << 20)  # the large file in several blocks (parts)
  c.data.shuffle_mb = 5000 / (1 << 20)  # a few parts per pool: several pools per epoch
  c.data.update(overrides)
  return c


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
  """A corpus of 3 files (one in blocks), prepared: (text glob, prepared dir)."""
  d = tmp_path_factory.mktemp("corpus")
  rng = np.random.default_rng(0)
  for f, num_docs in enumerate((10, 60, 15)):
    docs = ["\n".join(" ".join(rng.choice(_WORDS, rng.integers(4, 14))) + " ."
                      for _ in range(rng.integers(1, 7))) for _ in range(num_docs)]
    (d / f"part-{f}.txt").write_text("\n\n".join(docs) + "\n", encoding="utf-8")
  out = str(d / "prepared")
  info = prepare_data.prepare(_text_config(str(d / "*.txt")).data, out)
  assert len(info["parts"]) >= 5 and info["version"] == 2
  assert all(p["file"].endswith(".npz") for p in info["parts"])
  return str(d / "*.txt"), out


def _data(prepared_dir, loader, batch=2, **overrides):
  c = _text_config("", source="prepared", prepared_dir=prepared_dir, loader=loader, **overrides)
  return pretrain_data.PretrainData(c.data, seq_len=32, global_batch_size=batch, seed=0)


def _take(it, n):
  out = [next(it) for _ in range(n)]
  it.close()
  return out


def _assert_same(batches_a, batches_b):
  assert len(batches_a) == len(batches_b)
  for a, b in zip(batches_a, batches_b):
    assert list(a) == list(b)
    for k in a:
      assert a[k].dtype == b[k].dtype, k
      np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def _stream_threads():
  return [t for t in threading.enumerate() if t.name.startswith("bert_jax-")]


# -- The stream -------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [dict(mode="nsp"), dict(mode="full_sentences", packing=True)],
                         ids=["nsp", "packed"])
def test_python_loader_gives_the_tf_data_batches_from_any_position(prepared, mode):
  _, out = prepared
  tf_data, python = _data(out, "tf_data", **mode), _data(out, "python", **mode)
  assert (tf_data.loader, python.loader) == ("tf_data", "python")
  epoch = python.epoch_rows(0) // 2
  # Several pools per epoch.
  assert len(python._epoch_plan(0)) >= 3  # pylint: disable=protected-access
  # From the start into the third epoch; from inside the first pool, at an epoch's end;
  # and at batch 10,000 (epochs later: the rows before it are counted, not read again).
  for start, n in ((0, 2 * epoch + 3), (1, 3), (epoch - 1, 3), (10_000, 4)):
    _assert_same(_take(tf_data.train_iterator(start), n), _take(python.train_iterator(start), n))
  assert not _stream_threads()
  _assert_same(list(tf_data.eval_iterator(2)), list(python.eval_iterator(2)))


def test_version_1_tfrecord_parts_still_read_with_tensorflow(prepared, tmp_path):
  """A directory prepared before the numpy parts (version 1) gives the same stream."""
  _, out = prepared
  info = json.loads(pathlib.Path(out, prepared_data.INFO_FILE).read_text())
  for p in info["parts"]:
    part = prepared_data.read_part(shard_spec.ShardSpec(0, os.path.join(out, p["file"]),
                                                        "prepared", 0))
    p["file"] = p["file"].replace(".npz", ".tfrecord")
    _write_tfrecord_part(str(tmp_path / p["file"]), part)
  info["version"] = 1
  (tmp_path / "prepared.json").write_text(json.dumps(info))
  a, b = _data(out, "python"), _data(str(tmp_path), "tf_data")
  _assert_same(_take(a.train_iterator(3), 4), _take(b.train_iterator(3), 4))


def _write_tfrecord_part(path, part):
  """A version-1 part: tf.train.Examples of up to 1000 documents (one record here)."""
  def ints(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=np.asarray(values).tolist()))
  with tf.io.TFRecordWriter(path) as w:
    w.write(tf.train.Example(features=tf.train.Features(feature={
        "input_ids": ints(part.tokens), "sentence_lengths": ints(part.lengths),
        "document_sentences": ints(np.diff(part.doc_splits))})).SerializeToString())


def test_python_loader_raises_a_stage_error_as_itself_and_stops_its_threads(prepared, tmp_path):
  _, out = prepared
  broken = tmp_path / "broken"
  broken.mkdir()
  for f in pathlib.Path(out).iterdir():
    (broken / f.name).write_bytes(f.read_bytes())
  part = sorted(broken.glob("part-*.npz"))[1]
  damaged = bytearray(part.read_bytes())  # whole, but its array data damaged (bad CRC)
  damaged[200:260] = bytes(60)
  part.write_bytes(bytes(damaged))
  it = _data(str(broken), "python").train_iterator()
  with pytest.raises(ValueError, match=f"cannot read prepared part .*{part.name}"):
    for _ in range(1000):
      next(it)
  assert not _stream_threads()
  it = _data(out, "python").train_iterator()
  next(it)
  assert len(_stream_threads()) == 2
  it.close()  # while the threads read and make the next pools
  assert not _stream_threads()


_EXIT_SCRIPT = """
import sys
from bert_jax.data.stream import pretrain_data
from configs import pretrain
c = pretrain.get_config("tiny").data
c.source, c.prepared_dir, c.shuffle_mb = "prepared", sys.argv[1], 0.001
data = pretrain_data.PretrainData(c, seq_len=32, global_batch_size=2, seed=0)
it = data.train_iterator()  # never closed by the program
for _ in range(3):
  next(it)
print(data.loader, "exiting", flush=True)
"""


def test_a_program_exits_while_a_python_loader_is_running(prepared, tmp_path):
  script = tmp_path / "exit_script.py"
  script.write_text(_EXIT_SCRIPT)
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(tmp_path)]))
  proc = subprocess.run(
      [sys.executable, str(ROOT / "tests" / "without_tensorflow.py"), "exit_script",
       prepared[1]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stdout == "python exiting\n"
  assert "Exception ignored" not in proc.stderr, proc.stderr[-2000:]  # the thread pool's finalizer
  assert "TENSORFLOW MODULES: []" in proc.stderr


def test_bad_loader_is_refused(prepared):
  with pytest.raises(ValueError, match=r"config.data.loader='grain'; expected one of"):
    _data(prepared[1], "grain")


# -- Runs without TensorFlow --------------------------------------------------------------


def _run_config(prepared_dir, **overrides):
  c = pretrain_config.get_config("tiny")
  c.seq_len, c.batch_size, c.total_steps, c.warmup_steps = 32, 8, 6, 2
  c.log_every, c.checkpoint_every = 1, 3
  c.data.source, c.data.prepared_dir = "prepared", prepared_dir
  c.data.max_predictions_per_seq = 5
  c.update_from_flattened_dict(overrides)
  return c


_RUN_ARGS = ["--config", "configs/pretrain.py:tiny", "--config.seq_len=32",
             "--config.batch_size=8", "--config.total_steps=6", "--config.warmup_steps=2",
             "--config.log_every=1", "--config.checkpoint_every=3",
             "--config.data.max_predictions_per_seq=5"]


def _without_tensorflow(*args):
  """Runs `python -m MODULE ARGS` where TensorFlow is not importable."""
  env = dict(os.environ, PYTHONPATH=str(ROOT))
  return subprocess.run([sys.executable, str(ROOT / "tests" / "without_tensorflow.py"), *args],
                        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


def _losses(workdir):
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    return {r["step"]: r["loss"] for r in map(json.loads, f) if "loss" in r}


@pytest.mark.slow
def test_pretraining_without_tensorflow_equals_the_tf_data_run(prepared, tmp_path):
  _, out = prepared
  free = str(tmp_path / "without_tf")
  proc = _without_tensorflow("bert_jax.pretrain", *_RUN_ARGS, "--workdir", free,
                             "--config.data.source=prepared", f"--config.data.prepared_dir={out}")
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "TENSORFLOW MODULES: []" in proc.stderr
  assert "fill-mask example from the new checkpoint:" in proc.stdout  # WordPiece in Rust
  with_tf = str(tmp_path / "tf_data")
  pretrain.train(_run_config(out, **{"data.loader": "tf_data"}), with_tf)
  a, b = _losses(with_tf), _losses(free)
  assert sorted(a) == list(range(1, 7))
  assert a == b  # bitwise: the same float32 losses
  # The Python loader (in this process, with TensorFlow) resumed after step 4 equals both.
  resumed = str(tmp_path / "resumed")
  first = pretrain.train(_run_config(out, **{"data.loader": "python"}), resumed,
                         preempt_at_step=4)
  assert first["step"] == 4
  pretrain.train(_run_config(out, **{"data.loader": "python"}), resumed)
  assert {s: _losses(resumed)[s] for s in (5, 6)} == {s: a[s] for s in (5, 6)}


@pytest.mark.parametrize("args, prepared_version, message", [
    (["bert_jax.pretrain", *_RUN_ARGS, "--config.data.source=builtin"], None,
     "bert_jax.pretrain: error: config.data.source='builtin' (tokenizing raw text) needs "
     "TensorFlow and tensorflow-text, and tensorflow is not installed"),
    (["bert_jax.prepare_data", "--config", "configs/pretrain.py:tiny",
      "--config.data.source=builtin"], None,
     "bert_jax.prepare_data: error: bert_jax.prepare_data (tokenizing raw text) needs "
     "TensorFlow and tensorflow-text"),
    (["bert_jax.pretrain", *_RUN_ARGS, "--config.data.loader=tf_data"], 2,
     "bert_jax.pretrain: error: config.data.loader='tf_data' needs TensorFlow, which is not "
     "installed here"),
    (["bert_jax.pretrain", *_RUN_ARGS], 1,
     "holds version-1 (TFRecord) parts, which need TensorFlow to read, and it is not installed "
     "here; re-run python -m bert_jax.prepare_data"),
    (["bert_jax.finetune", "--config", "configs/glue.py:task=stsb", "--config.data_source=tfds",
      "--config.init_checkpoint=/nonexistent"], None,
     "bert_jax.finetune: error: bad config: data_source='tfds' reads a prepared TFDS dataset, "
     "which needs tensorflow-datasets and TensorFlow, and tensorflow and tensorflow_datasets are "
     "not installed here: pip install tensorflow tensorflow-datasets"),
], ids=["builtin", "prepare_data", "tf_data_loader", "version_1_parts", "finetune_tfds"])
def test_what_needs_tensorflow_is_one_line_without_it(prepared, tmp_path, args,
                                                      prepared_version, message):
  if prepared_version is not None:
    d = pathlib.Path(prepared[1])
    if prepared_version == 1:  # prepared.json alone: refused before any part is read
      d = tmp_path / "v1"
      d.mkdir()
      info = json.loads(pathlib.Path(prepared[1], prepared_data.INFO_FILE).read_text())
      (d / prepared_data.INFO_FILE).write_text(json.dumps(dict(info, version=1)))
    args = [*args, "--config.data.source=prepared", f"--config.data.prepared_dir={d}"]
  out_flag = "--out" if args[0] == "bert_jax.prepare_data" else "--workdir"
  proc = _without_tensorflow(*args, out_flag, str(tmp_path / "out"))
  assert proc.returncode != 0
  assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
  lines = [l for l in proc.stderr.strip().splitlines() if not l.startswith("TENSORFLOW MODULES")]
  assert message in lines[-1], lines[-3:]


def test_a_local_corpus_that_does_not_exist_is_named_before_the_input_pipeline_loads(tmp_path):
  """The glob is checked before the input pipeline (and TensorFlow's 7 s import) loads; here
  TensorFlow is missing, so only a check made before the pipeline can name the glob."""
  proc = _without_tensorflow("bert_jax.pretrain", "--config", "configs/pretrain.py:tiny",
                             "--workdir", str(tmp_path / "w"), "--config.data.source=files",
                             f"--config.data.files={tmp_path}/nothing-*.txt")
  assert proc.returncode == 1
  assert proc.stdout.strip() == ""  # not even "loading the input pipeline"
  assert proc.stderr.splitlines()[0] == (f"bert_jax.pretrain: error: config.data.files: glob "
                                         f"'{tmp_path}/nothing-*.txt' matches no file")


# -- Fine-tuning, embed and fill_mask without TensorFlow (WordPiece on `tokenizers`) -----------

_STSB_HEADER = "\t".join(("index", "genre", "filename", "year", "old_index", "source1", "source2",
                          "sentence1", "sentence2", "score"))
# Capitals, accents and CJK: the uncased normalisation decides the ids.
_STSB_TEXTS = ["The Old Man walked to the river.", "A man walks to the RIVER.",
               "Café naïve: she said the war was over.", "The war was Over, she said.",
               "A small dog ran across the field.", "Children played by the trees [SEP] 中文.",
               "Many people lived in the city.", "The King built a tower in 1850."]


@pytest.fixture(scope="module")
def stsb(tmp_path_factory):
  """(GLUE data_dir with a tiny STS-B, a random 1-layer uncased bundle with the MLM head)."""
  import jax  # pylint: disable=g-import-not-at-top
  from bert_jax.checkpoints import bundle  # pylint: disable=g-import-not-at-top
  from bert_jax.data.tokenizers import wordpiece  # pylint: disable=g-import-not-at-top
  from bert_jax.modeling import model as model_lib  # pylint: disable=g-import-not-at-top
  from bert_jax.modeling.model_config import BertConfig  # pylint: disable=g-import-not-at-top
  root = tmp_path_factory.mktemp("stsb")
  (root / "glue" / "STS-B").mkdir(parents=True)
  rng = np.random.default_rng(0)
  for split, n in (("train", 24), ("dev", 16)):
    rows = [_STSB_HEADER] + [
        f"{i}\tmain-news\tx\t2012\t{i:04d}\tnone\tnone\t{_STSB_TEXTS[a]}\t{_STSB_TEXTS[b]}\t"
        f"{rng.uniform(0, 5):.3f}" for i, (a, b) in enumerate(rng.integers(0, 8, (n, 2)))]
    (root / "glue" / "STS-B" / f"{split}.tsv").write_text("\n".join(rows) + "\n",
                                                          encoding="utf-8")
  words = sorted({w for t in _STSB_TEXTS
                  for w in wordpiece.WordPieceTokenizer(
                      wordpiece.default_vocab_file(), backend="tokenizers").basic_tokenize(t)})
  vocab = list(wordpiece.SPECIAL_TOKENS) + words + ["##" + c for c in "abcdefghijklmnopqrstuvwxyz"]
  cfg = BertConfig(vocab_size=len(vocab), hidden_size=16, num_layers=1, num_heads=2,
                   intermediate_size=32, max_position_embeddings=64)
  model = model_lib.BertForPreTraining(cfg)
  shapes = jax.eval_shape(lambda: model_lib.init_params(model, jax.random.PRNGKey(0)))
  params = jax.tree.map(lambda s: rng.normal(0, 0.5, s.shape).astype(np.float32), shapes)
  bundle.save_bundle(str(root / "bundle"), params, cfg, vocab, True)
  return str(root / "glue"), str(root / "bundle")


def _stsb_config(data_dir, init):
  from bert_jax import config_help  # pylint: disable=g-import-not-at-top
  c = config_help.load_module(ROOT / "configs" / "glue.py").get_config("task=stsb")
  c.data_dir, c.init_checkpoint = data_dir, init
  c.max_seq_length, c.batch_size, c.eval_batch_size = 32, 8, 8
  c.num_epochs, c.log_every, c.learning_rate = 2.0, 1, 1e-3
  return c


_STSB_ARGS = ["--config", "configs/glue.py:task=stsb", "--config.max_seq_length=32",
              "--config.batch_size=8", "--config.eval_batch_size=8", "--config.num_epochs=2",
              "--config.log_every=1", "--config.learning_rate=1e-3"]


@pytest.mark.slow
def test_glue_finetuning_without_tensorflow_equals_the_run_with_it(stsb, tmp_path):
  from bert_jax.data.tokenizers import tokenizer as tokenizer_lib  # pylint: disable=g-import-not-at-top
  from bert_jax import finetune  # pylint: disable=g-import-not-at-top
  data_dir, init = stsb
  free = tmp_path / "without_tf"
  proc = _without_tensorflow("bert_jax.finetune", *_STSB_ARGS, f"--config.data_dir={data_dir}",
                             f"--config.init_checkpoint={init}", "--workdir", str(free))
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "TENSORFLOW MODULES: []" in proc.stderr
  with_tf = tmp_path / "with_tf"
  # With TensorFlow loaded first, the host-side calls run on tf-text (wordpiece.host_backend):
  # the two backends compared end to end. Tokenizers cached by earlier tests are dropped.
  assert optional_tensorflow.available(text=True)
  tokenizer_lib._TOKENIZERS.clear()  # pylint: disable=protected-access
  finetune.finetune(_stsb_config(data_dir, init), str(with_tf))
  assert {t.backend for t in tokenizer_lib._TOKENIZERS.values()  # pylint: disable=protected-access
          if t.kind == "wordpiece"} == {"tf-text"}
  results = [json.loads((d / "eval_results.json").read_text()) for d in (free, with_tf)]
  assert not results[0]["constant_prediction"]
  assert results[0] == results[1]  # bitwise: the same float64 metrics
  losses = [[r["seed0_train_loss"] for r in map(json.loads, (d / "metrics.jsonl").open())
             if "seed0_train_loss" in r] for d in (free, with_tf)]
  assert len(losses[0]) == 6 and losses[0] == losses[1]


@pytest.mark.slow
def test_embed_and_fill_mask_without_tensorflow_equal_the_runs_with_them(stsb, tmp_path, capsys):
  from bert_jax import embed  # pylint: disable=g-import-not-at-top
  from bert_jax import fill_mask  # pylint: disable=g-import-not-at-top
  _, init = stsb
  texts = tmp_path / "texts.txt"
  texts.write_text("\n".join(_STSB_TEXTS) + "\n", encoding="utf-8")
  args = ["--checkpoint", init, "--input", str(texts)]
  proc = _without_tensorflow("bert_jax.embed", *args, "--output", str(tmp_path / "free.npy"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "TENSORFLOW MODULES: []" in proc.stderr
  assert embed.main([*args, "--output", str(tmp_path / "tf.npy")]) == 0
  np.testing.assert_array_equal(np.load(tmp_path / "free.npy"), np.load(tmp_path / "tf.npy"))
  masked = ["The OLD [MASK] walked to the river.", "Café [MASK] 中文 [MASK]."]
  proc = _without_tensorflow("bert_jax.fill_mask", "--json", "--checkpoint", init, *masked)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "TENSORFLOW MODULES: []" in proc.stderr
  capsys.readouterr()
  assert fill_mask.main(["--json", "--checkpoint", init, *masked]) == 0
  assert json.loads(proc.stdout) == json.loads(capsys.readouterr().out)
