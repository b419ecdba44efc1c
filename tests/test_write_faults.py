"""What a program leaves when a write fails, a save fails, or two runs meet: the previous file
or none (never a half-written one), an exit within seconds, one line."""
import errno
import io
import os
import pathlib
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from bert_jax.checkpoints import loading
from bert_jax.conversion import hf
from bert_jax import prepare_data
from bert_jax.runtime import atomic_files
from bert_jax.runtime import workdirs
from bert_jax.runtime import write_errors
from bert_jax import tokenize as tokenize_cli
from tests.fixtures.finetuning import squad_config
from tests.fixtures.repo import ROOT
from tests.fixtures import write_faults

_FULL = OSError(errno.ENOSPC, "No space left on device")


def test_a_failed_write_leaves_the_previous_file_and_no_temporary_one(tmp_path):
  out = tmp_path / "emb.npy"
  atomic_files.write_bytes(out, b"previous")
  with pytest.raises(write_errors.OutputWriteError,
                     match=rf"writing {out} failed \(OSError: No space left on device\)"):
    with atomic_files.replacing(out) as tmp, tmp.open("wb") as f:
      np.save(f, np.zeros((100, 8), np.float32))
      raise _FULL  # the disk fills after part of the array was written
  assert out.read_bytes() == b"previous" and not write_faults.leftovers(tmp_path)
  # A complete write replaces the file; a folder replaces a folder whole.
  atomic_files.write_text(out, "new")
  assert out.read_text() == "new" and not write_faults.leftovers(tmp_path)
  (tmp_path / "d").mkdir()
  (tmp_path / "d" / "old.txt").write_text("old")
  with atomic_files.replacing(tmp_path / "d") as tmp:
    tmp.mkdir()
    (tmp / "new.txt").write_text("new")
  assert [p.name for p in (tmp_path / "d").iterdir()] == ["new.txt"]
  assert not write_faults.leftovers(tmp_path)


@pytest.mark.slow  # the session's pretraining run (about 20 s) unless built already
def test_convert_to_hf_on_a_full_disk_leaves_no_folder_and_keeps_an_earlier_one(
    pretrained, tmp_path, monkeypatch):
  import safetensors.numpy  # pylint: disable=g-import-not-at-top
  src = pretrained
  real = safetensors.numpy.save_file

  def fails(tensors, path, metadata=None):
    real(tensors, path, metadata=metadata)
    with open(path, "r+b") as f:
      f.truncate(100)
    raise _FULL
  monkeypatch.setattr(safetensors.numpy, "save_file", fails)
  with pytest.raises(write_errors.OutputWriteError,
                     match=r"hf/model.safetensors failed \(OSError: No space left on device\)"):
    hf.bundle_to_hf(src, str(tmp_path / "hf"))
  assert not (tmp_path / "hf").exists() and not write_faults.leftovers(tmp_path)
  monkeypatch.setattr(safetensors.numpy, "save_file", real)
  hf.bundle_to_hf(src, str(tmp_path / "hf"))
  before = {p.name: p.read_bytes() for p in (tmp_path / "hf").iterdir()}
  monkeypatch.setattr(safetensors.numpy, "save_file", fails)
  with pytest.raises(write_errors.OutputWriteError):
    hf.bundle_to_hf(src, str(tmp_path / "hf"), overwrite=True)
  assert {p.name: p.read_bytes() for p in (tmp_path / "hf").iterdir()} == before


def test_a_prepared_part_cut_short_is_refused_before_the_run_starts(tmp_path):
  import json  # pylint: disable=g-import-not-at-top
  import ml_collections  # pylint: disable=g-import-not-at-top
  from bert_jax.data.sources import prepared_data  # pylint: disable=g-import-not-at-top
  parts = []
  for i in range(2):
    part = prepared_data.Part(np.arange(40, dtype=np.int32), np.array([0, 2], np.int64),
                              lengths=np.array([15, 25], np.int64))
    prepared_data.write_part(str(tmp_path / prepared_data.part_file(i)), part)
    parts.append({"file": prepared_data.part_file(i), "size": 100})
  (tmp_path / prepared_data.INFO_FILE).write_text(json.dumps(
      {"version": prepared_data.VERSION, "parts": parts}))
  config = ml_collections.ConfigDict({"prepared_dir": str(tmp_path)})
  assert len(prepared_data.list_shards(config)) == 2
  cut = tmp_path / prepared_data.part_file(1)
  cut.write_bytes(cut.read_bytes()[:-40])
  with pytest.raises(ValueError, match=rf"prepared part .*{cut.name} cannot be read .*cut short "
                                       r"or damaged; prepare the corpus again"):
    prepared_data.list_shards(config)


def test_two_prepare_data_runs_into_one_directory_are_refused(tmp_path, capsys):
  out = tmp_path / "prepared"
  with workdirs.hold(str(out), "--out"):
    with pytest.raises(SystemExit, match=r"prepared is in use by another run \(host .*pid "
                                         rf"{os.getpid()}.*use another --out"):
      prepare_data.main(["--config", str(ROOT / "configs" / "pretrain.py") + ":tiny",
                         "--out", str(out), "--quiet"])
    assert sorted(p.name for p in out.iterdir()) == [workdirs.LOCK_FILE]  # nothing written
  assert not out.exists()  # the holder made the folder: empty at the end, it is removed


def test_tokenize_with_the_casing_its_vocab_cannot_read_is_one_line():
  vocab = str(ROOT / "bert_jax" / "assets" / "bert-base-uncased-vocab.txt")
  with pytest.raises(ValueError, match=r"is an uncased vocab .* but --cased keeps capitals: "
                                       r"every capitalized word would become \[UNK\]; leave out "
                                       r"--cased"):
    tokenize_cli.run(["--vocab", vocab, "--cased"], io.BytesIO(b"Hello World"), io.StringIO())
  out = io.StringIO()
  tokenize_cli.run(["--vocab", vocab, "--tokens"], io.BytesIO(b"Hello World"), out)
  assert out.getvalue() == "hello world\n"


@pytest.mark.slow  # the session's pretraining run (about 20 s) unless built already
def test_squad_v2_data_under_the_v1_config_is_refused_before_training(pretrained, squad_dir,
                                                                      tmp_path):
  from bert_jax import finetune  # pylint: disable=g-import-not-at-top
  config = squad_config(squad_dir, pretrained, eval_file="dev-v2.0.json")
  with pytest.raises(ValueError, match=r"dev-v2.0.json: 1 questions are marked is_impossible "
                                       r"\(SQuAD v2.0 data\) but the config is SQuAD 1.1.*"
                                       r"version=2.0"):
    finetune.finetune(config, str(tmp_path / "run"))
  assert not (tmp_path / "run" / "finetune_checkpoints").exists()


@pytest.mark.slow  # the session's pretraining run (about 20 s) unless built already
def test_a_checkpoint_deleted_while_it_is_read_is_read_again_at_the_newest(
    pretrained, tmp_path, monkeypatch):
  run = tmp_path / "run"
  shutil.copytree(pathlib.Path(pretrained) / "checkpoints", run / "checkpoints")
  shutil.copytree(run / "checkpoints" / "3", run / "checkpoints" / "6")
  real, calls = loading._load_checkpoint, []

  def rotated_away(ckpts, step, expect):
    calls.append(step)
    if step == 6:  # the training run deletes it while it is read
      shutil.rmtree(ckpts.directory / "6")
      raise TypeError("'NoneType' object is not subscriptable")
    return real(ckpts, step, expect)
  monkeypatch.setattr(loading, "_load_checkpoint", rotated_away)
  loaded = loading.load_pretrained(str(run))
  assert calls == [6, 3] and loaded.source.endswith("checkpoints/3")
  # A failure on the newest checkpoint that is still there is its own: raised.
  shutil.copytree(run / "checkpoints" / "3", run / "checkpoints" / "9")
  monkeypatch.setattr(loading, "_load_checkpoint",
                      lambda *a: (_ for _ in ()).throw(ValueError("truncated")))
  with pytest.raises(ValueError, match="truncated"):
    loading.load_pretrained(str(run))


_FAILING_SAVE = """
import sys
from bert_jax.checkpoints import workdir_owner
workdir_owner._FOLDERS = ()  # past the start's check: the first save fails
from bert_jax import pretrain
sys.argv = ["bert_jax.pretrain"] + sys.argv[1:]
pretrain.run()
"""


@pytest.mark.slow
def test_a_failed_save_ends_the_program_within_seconds_non_zero(tmp_path):
  corpus = tmp_path / "corpus.txt"
  corpus.write_text(("the quick brown fox jumps over the lazy dog .\nit was a sunny day .\n\n"
                     * 40), encoding="utf-8")
  workdir = tmp_path / "run"
  workdir.mkdir()
  (workdir / "checkpoints").write_text("a file where the checkpoints folder goes")
  args = ["--config", str(ROOT / "configs" / "pretrain.py") + ":tiny", "--workdir", str(workdir),
          "--config.seq_len=32", "--config.batch_size=8", "--config.total_steps=6",
          "--config.checkpoint_every=3", f"--config.data.files={corpus}",
          "--config.data.max_predictions_per_seq=5", "--config.fill_mask_example="]
  # The program refuses such a workdir at its start, in one line.
  done = subprocess.run([sys.executable, "-m", "bert_jax.pretrain"] + args, cwd=ROOT,
                        capture_output=True, text=True, timeout=300)
  assert done.returncode == 1
  assert done.stderr.strip().splitlines()[-1].endswith(
      "checkpoints is a file, where the run keeps a folder; move it away or give a new --workdir")
  # A save that fails later (past that check) ends the program, though Orbax's threads wait on.
  start = time.time()
  done = subprocess.run([sys.executable, "-c", _FAILING_SAVE] + args, cwd=ROOT,
                        capture_output=True, text=True, timeout=300)
  assert done.returncode == 1, done.stderr[-2000:]
  assert "saving a checkpoint to" in done.stderr and "failed (NotADirectoryError" in done.stderr
  said = done.stderr.index("failed (NotADirectoryError")
  assert "Traceback" not in done.stderr[said:]
  assert time.time() - start < 240
