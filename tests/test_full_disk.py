"""A full disk or a file-size limit under every program that writes: one line naming the file,
the earlier file or folder intact, nothing partial left; and what killed writers left behind
is removed by the next write there.

A size limit is RLIMIT_FSIZE in a child process (SIGXFSZ ignored: the write fails with EFBIG);
a full disk is a tmpfs of 64 KiB (as root; skipped otherwise) or ENOSPC raised at the writer.
"""
import errno
import os
import re
import subprocess
import sys

import pytest

from bert_jax.conversion import hf
from bert_jax import convert
from bert_jax.runtime import atomic_files
from bert_jax.runtime import write_errors
from tests.fixtures import tiny_encoder
from tests.fixtures import write_faults
from tests.fixtures.pretraining import write_corpus
from tests.fixtures.repo import ROOT

_LIMIT = 4096  # bytes: the tiny models' configs fit, their weights and the outputs do not
_WIDER = tiny_encoder.BUNDLE_CONFIG.replace(hidden_size=32, num_heads=4, intermediate_size=64)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
  root = tmp_path_factory.mktemp("models")
  return (tiny_encoder.save_random_bundle(root / "tiny", seed=0),
          tiny_encoder.save_random_bundle(root / "wider", _WIDER, seed=1))


def _one_line(done: subprocess.CompletedProcess, prog: str) -> str:
  assert done.returncode == 1, done.stderr[-3000:]
  assert "Traceback" not in done.stderr, done.stderr[-3000:]
  last = done.stderr.strip().splitlines()[-1]  # after the header and progress, if any
  assert last.startswith(f"{prog}: ") and done.stderr.count(f"{prog}: writing") == 1, (
      done.stderr[-3000:])
  return last


@pytest.mark.slow  # runs embed end to end
def test_embed_over_a_size_limit_is_one_line_naming_the_file_and_keeps_the_earlier_one(
    models, tmp_path):
  texts = tmp_path / "texts.txt"
  texts.write_text("the cat sat on the mat\na dog ran far\n" * 100)
  out = tmp_path / "emb.npy"
  out.write_bytes(b"the earlier embeddings")
  done = write_faults.run_with_file_size_limit(_LIMIT, [
      "-m", "bert_jax.embed", "--checkpoint", models[0], "--input", str(texts), "--output",
      str(out), "--quiet"])
  assert _one_line(done, "bert_jax.embed") == (
      f"bert_jax.embed: writing {out} failed (OSError: File too large); stopping")
  assert out.read_bytes() == b"the earlier embeddings" and not write_faults.leftovers(tmp_path)


@pytest.mark.slow  # runs convert end to end
@pytest.mark.parametrize("direction", ["to_hf", "from_hf"])
def test_convert_over_a_size_limit_is_one_line_naming_the_file_and_keeps_the_earlier_folder(
    models, tmp_path, direction):
  tiny, wider = models
  if direction == "to_hf":
    dst = tmp_path / "hf"
    hf.bundle_to_hf(tiny, str(dst))
    args = ["--to", "hf", "--src", wider]
    named = re.escape(f"writing {dst}/model.safetensors failed (SafetensorError: File too "
                      "large); stopping")
  else:
    src = tmp_path / "wider_hf"
    hf.bundle_to_hf(wider, str(src))
    dst = tmp_path / "bundle"
    hf.hf_to_bundle(str(tmp_path / "wider_hf"), str(dst))
    args = ["--from", "hf", "--src", str(src)]
    # Orbax's file inside the bundle being written, as TensorStore names it.
    named = (re.escape(f"writing {dst} failed (ValueError: File too large (") + r"\S+/d/\w+"
             + re.escape(")); stopping"))
  before = write_faults.snapshot(dst)
  done = write_faults.run_with_file_size_limit(_LIMIT, [
      "-m", "bert_jax.convert", *args, "--dst", str(dst), "--overwrite", "--quiet"])
  assert re.fullmatch(f"bert_jax.convert: {named}", _one_line(done, "bert_jax.convert"))
  assert write_faults.snapshot(dst) == before and not write_faults.leftovers(tmp_path)


@pytest.mark.slow  # runs prepare_data end to end (TensorFlow's import alone is seconds)
def test_prepare_data_over_a_size_limit_is_one_line_naming_the_part(tmp_path):
  pytest.importorskip("tensorflow_text")
  corpus = write_corpus(tmp_path / "corpus")
  out = tmp_path / "prepared"
  done = write_faults.run_with_file_size_limit(_LIMIT, [
      "-m", "bert_jax.prepare_data", "--config", str(ROOT / "configs" / "pretrain.py") + ":tiny",
      "--config.data.source=files", f"--config.data.files={corpus}", "--out", str(out),
      "--quiet"])
  assert _one_line(done, "bert_jax.prepare_data") == (
      f"bert_jax.prepare_data: writing {out}/part-00000.npz failed (OSError: File too large); "
      "stopping")
  assert not out.exists()  # nothing partial: the folder it made is gone again


_SAVE = """
import sys
import numpy as np
from bert_jax.checkpoints import run_checkpoints as checkpoint
ckpts = checkpoint.TrainCheckpoints(sys.argv[1])
try:
  ckpts.save(1, {"params": {"w": np.random.default_rng(0).normal(size=100_000)}}, {"step": 1})
  ckpts.wait()
except checkpoint.CheckpointSaveError as e:
  print(e)
"""


def test_a_checkpoint_save_over_a_size_limit_names_the_file(tmp_path):
  ckpts = tmp_path / "checkpoints"
  done = write_faults.run_with_file_size_limit(_LIMIT, ["-c", _SAVE, str(ckpts)])
  assert done.returncode == 0, done.stderr[-3000:]
  # TensorStore's ValueError names the file that passed the limit; the line keeps it.
  assert re.fullmatch(
      re.escape(f"saving a checkpoint to {ckpts} failed (ValueError: File too large ({ckpts}/1.")
      + r"orbax-checkpoint-tmp/\S+/d/\w+" + re.escape(")); stopping. Checkpoints saved before "
                                                      "are intact (steps: none)"),
      done.stdout.strip()), done.stdout


@pytest.fixture
def tiny_disk(tmp_path):
  """A 64 KiB tmpfs: a full disk that says ENOSPC (mounting needs root)."""
  disk = tmp_path / "disk"
  disk.mkdir()
  mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)],
                           capture_output=True, text=True)
  if mounted.returncode:
    pytest.skip(f"a tmpfs cannot be mounted here (needs root): {mounted.stderr.strip()}")
  try:
    yield disk
  finally:
    subprocess.run(["umount", str(disk)], check=True)


def test_a_full_disk_under_convert_and_a_file_write_is_one_line_and_keeps_the_earlier_ones(
    models, tiny_disk):
  tiny, wider = models
  dst = tiny_disk / "hf"
  hf.bundle_to_hf(tiny, str(dst))  # about 30 KB: fits; the wider model's 90 KB do not
  before = write_faults.snapshot(dst)
  with pytest.raises(SystemExit, match=re.escape(
      f"bert_jax.convert: writing {dst}/model.safetensors failed (SafetensorError: No space left "
      "on device); stopping")):
    convert.main(["--to", "hf", "--src", wider, "--dst", str(dst), "--overwrite", "--quiet"])
  assert write_faults.snapshot(dst) == before and not write_faults.leftovers(tiny_disk)
  out = tiny_disk / "emb.npy"
  out.write_bytes(b"earlier")
  with pytest.raises(write_errors.OutputWriteError, match=re.escape(
      f"writing {out} failed (OSError: No space left on device); stopping")):
    atomic_files.write_bytes(out, bytes(100_000))
  assert out.read_bytes() == b"earlier" and not write_faults.leftovers(tiny_disk)


def test_a_full_disk_at_the_writer_is_one_line_and_other_errors_pass_as_they_are(
    models, tmp_path, monkeypatch):
  import safetensors.numpy  # pylint: disable=g-import-not-at-top
  dst = tmp_path / "hf"

  def full(tensors, path, metadata=None):
    with open(path, "wb") as f:
      f.write(b"part of it")
    raise OSError(errno.ENOSPC, "No space left on device")
  monkeypatch.setattr(safetensors.numpy, "save_file", full)
  with pytest.raises(SystemExit, match=re.escape(
      f"bert_jax.convert: writing {dst}/model.safetensors failed (OSError: No space left on "
      "device); stopping")):
    convert.main(["--to", "hf", "--src", models[0], "--dst", str(dst), "--quiet"])
  assert not dst.exists() and not write_faults.leftovers(tmp_path)
  # A bad value inside a write is the caller's, raised as itself (not a full disk).
  with pytest.raises(ValueError, match="not a disk"):
    with atomic_files.replacing(tmp_path / "x") as tmp:
      tmp.write_text("x")
      raise ValueError("not a disk")
  assert not write_faults.leftovers(tmp_path) and not (tmp_path / "x").exists()


def test_a_write_removes_the_temporaries_of_writers_that_are_gone(tmp_path):
  gone = write_faults.process_gone()
  host = atomic_files.temporary_sibling(tmp_path / "x").name.rsplit("-", 1)[1]
  other_host = "0" * 8 if host != "0" * 8 else "f" * 8
  live = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                          stdin=subprocess.PIPE)
  try:
    removed = {f".emb.npy.partial-{gone}": b"\0" * 1_500_000,  # named before hosts were
               f".hf.partial-{gone}-{host}/model.safetensors": b"\0" * 1000,
               f".bundle.partial-{gone}-{host}.tmp-bundle/params/x": b"\0"}
    kept = {f".run.json.partial-{live.pid}-{host}": b"a live writer's",
            f".results.json.partial-{os.getpid()}-{host}": b"this process's",
            f".emb.npy.partial-{gone}-{other_host}": b"another host's (its pids are not ours)",
            ".notes.partial-draft": b"not a temporary name"}
    for name, data in {**removed, **kept}.items():
      (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
      (tmp_path / name).write_bytes(data)
    # An earlier folder set aside by a writer killed between its two renames: put back.
    aside = tmp_path / f".export.partial-{gone}-{host}.earlier"
    aside.mkdir()
    (aside / "model.safetensors").write_bytes(b"the earlier export")
    atomic_files.write_bytes(tmp_path / "emb.npy", b"new")
    assert sorted(os.listdir(tmp_path)) == sorted(["emb.npy", "export", *kept])
    assert write_faults.snapshot(tmp_path / "export") == {
        "model.safetensors": b"the earlier export"}
    assert all((tmp_path / n).read_bytes() == data for n, data in kept.items())
  finally:
    live.communicate(b"")
