"""Every program takes relative paths: they are made absolute once, at its start.

Orbax refuses relative paths ("Checkpoint path should be absolute"), so a relative path that
reached it would lose the export of `--workdir runs/base` after the training, and likewise
`finetune --workdir relft` and `convert --dst rel_bundle`. Here every program runs with the
working directory a temp folder and every path relative to it.
"""
import json
import os

import numpy as np
import pytest

from bert_jax.checkpoints import bundle
from bert_jax import cli
from bert_jax import convert
from bert_jax import embed
from bert_jax import fill_mask
from bert_jax import finetune
from bert_jax import pretrain
from tests.fixtures.finetuning import MRPC_HEADER
from tests.fixtures.finetuning import SENTENCES
from tests.fixtures.finetuning import mrpc_rows
from tests.fixtures.finetuning import write_vocab
from tests.fixtures.repo import ROOT
from tests.fixtures.tiny_encoder import BUNDLE_CONFIG


def test_absolute_leaves_urls_and_empty_values():
  assert cli.absolute("") == ""
  assert cli.absolute("gs://b/x") == "gs://b/x"
  assert cli.absolute("a/b") == os.path.join(os.getcwd(), "a", "b")


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  return tmp_path


@pytest.mark.slow
def test_every_program_with_relative_paths(in_tmp, capsys):
  vocab = write_vocab(in_tmp / "vocab.txt")
  rng = np.random.default_rng(0)
  lines = []
  for _ in range(30):
    lines += [SENTENCES[i] + " ." for i in rng.choice(len(SENTENCES), 4)] + [""]
  (in_tmp / "corpus.txt").write_text("\n".join(lines), encoding="utf-8")
  assert os.path.basename(vocab) == "vocab.txt"
  config = str(ROOT / "configs" / "pretrain.py") + ":tiny"
  pretrain.main(["--config", config, "--workdir", "runs/base", "--config.seq_len=32",
                 "--config.batch_size=8", "--config.total_steps=2", "--config.warmup_steps=1",
                 "--config.checkpoint_every=2", "--config.data.source=files",
                 "--config.data.files=corpus.txt", "--config.data.vocab_file=vocab.txt",
                 "--config.data.max_predictions_per_seq=5", "--config.fill_mask_example="])
  assert bundle.is_bundle(str(in_tmp / "runs" / "base" / "export"))
  assert not list((in_tmp / "runs" / "base").glob("*tmp-bundle*"))

  assert fill_mask.main(["--checkpoint", "runs/base", "the old [MASK] walked"]) in (0, None)
  (in_tmp / "texts.txt").write_text("the old man\nthe king\n", encoding="utf-8")
  embed.main(["--checkpoint", "runs/base/export", "--input", "texts.txt", "--output", "e.npy"])
  assert np.load(in_tmp / "e.npy").shape[0] == 2

  convert.main(["--to", "hf", "--src", "runs/base/export", "--dst", "rel_hf"])
  convert.main(["--from", "hf", "--src", "rel_hf", "--dst", "rel_bundle"])
  assert bundle.is_bundle(str(in_tmp / "rel_bundle"))

  glue = in_tmp / "glue" / "MRPC"
  glue.mkdir(parents=True)
  for name, rows in (("train.tsv", mrpc_rows(16, 0)), ("dev.tsv", mrpc_rows(8, 1))):
    (glue / name).write_text("\n".join([MRPC_HEADER] + rows) + "\n", encoding="utf-8")
  finetune.main(["--config", str(ROOT / "configs" / "glue.py") + ":task=mrpc",
                 "--workdir", "relft", "--config.init_checkpoint=rel_bundle",
                 "--config.data_dir=glue", "--config.max_seq_length=32",
                 "--config.batch_size=8", "--config.eval_batch_size=8",
                 "--config.num_epochs=1"])
  assert bundle.is_bundle(str(in_tmp / "relft" / "export"))
  assert "accuracy" in json.loads((in_tmp / "relft" / "eval_results.json").read_text())
  capsys.readouterr()


def test_save_bundle_takes_a_relative_path(in_tmp):
  from flax import traverse_util  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  params = traverse_util.unflatten_dict(
      {k: rng.normal(size=s).astype(np.float32)
       for k, s in bundle.pretraining_shapes(BUNDLE_CONFIG).items()}, sep="/")
  tokens = [f"t{i}" for i in range(BUNDLE_CONFIG.vocab_size)]
  bundle.save_bundle("rel/b", params, BUNDLE_CONFIG, tokens, lowercase=True)
  loaded = bundle.load_bundle("rel/b")
  assert loaded.config == BUNDLE_CONFIG


def test_an_unreachable_remote_path_is_one_line_at_the_start(monkeypatch, capsys):
  """A gs:// workdir, init_checkpoint or corpus without credentials is one line at the start, not
  TensorFlow's FailedPreconditionError traceback after the data was read."""
  from etils import epath  # pylint: disable=g-import-not-at-top

  cls = type(epath.Path("gs://b/x"))
  exists = cls.exists

  def unreachable(self):
    if not str(self).startswith("gs://"):
      return exists(self)
    raise RuntimeError("Error executing an HTTP request: libcurl code 6 meaning 'Could not "
                       "resolve hostname'\n when reading metadata of " + str(self))
  monkeypatch.setattr(cls, "exists", unreachable)
  monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
  monkeypatch.setenv("HOME", "/nonexistent")
  with pytest.raises(SystemExit, match=r"^bert_jax.fill_mask: error: cannot reach gs://b/ckpt: "
                     r"Error executing an HTTP request: .*hostname' \(no Google Cloud credentials "
                     r"found: set GOOGLE_APPLICATION_CREDENTIALS"):
    fill_mask.main(["--checkpoint", "gs://b/ckpt", "a [MASK] ."])
  config = str(ROOT / "configs" / "pretrain.py") + ":tiny"
  for flag in ("--workdir=gs://b/run", "--config.init_checkpoint=gs://b/init",
               "--config.data.files=gs://b/corpus/*.txt"):
    argv = ["--config", config, "--workdir=/tmp/unused_local_run", flag]
    with pytest.raises(SystemExit, match=r"bert_jax.pretrain: error: cannot reach gs://b/"):
      pretrain.main(argv)
  assert not os.path.exists("/tmp/unused_local_run")
