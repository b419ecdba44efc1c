"""Files and folders a program writes whole (bert_jax.runtime.atomic_files) get the mode the
user's umask gives a new file, as a plain open() would: others can read an export on a shared
machine under the usual 022, and nobody else under 077."""
import os

import numpy as np
import pytest

from bert_jax.checkpoints import bundle
from bert_jax.runtime import atomic_files
from tests.fixtures import tiny_encoder


def _written(root):
  out = {}
  for dirpath, dirnames, filenames in os.walk(root):
    for name in dirnames + filenames:
      path = os.path.join(dirpath, name)
      out[os.path.relpath(path, root)] = os.stat(path).st_mode & 0o777
  return out


@pytest.mark.parametrize("umask", [0o022, 0o027, 0o077])
def test_every_atomic_write_takes_the_umask(tmp_path, umask):
  previous = os.umask(umask)
  try:
    atomic_files.write_text(tmp_path / "a.txt", "text")
    atomic_files.write_bytes(tmp_path / "b.bin", b"\x00\x01")
    with atomic_files.replacing(tmp_path / "c.npy") as tmp, tmp.open("wb") as f:
      np.save(f, np.arange(3))
    with atomic_files.replacing_folder(tmp_path / "folder") as tmp:
      tmp.mkdir()
      (tmp / "inner.json").write_text("{}")
    # A writer that makes its file private (safetensors does): the mode put back.
    with atomic_files.replacing(tmp_path / "private.bin") as tmp:
      fd = os.open(tmp, os.O_CREAT | os.O_WRONLY, 0o600)
      os.close(fd)
      atomic_files.with_default_mode(tmp)
  finally:
    os.umask(previous)
  modes = _written(tmp_path)
  files = {k: v for k, v in modes.items() if not os.path.isdir(tmp_path / k)}
  folders = {k: v for k, v in modes.items() if os.path.isdir(tmp_path / k)}
  assert sorted(files) == ["a.txt", "b.bin", "c.npy", "folder/inner.json", "private.bin"]
  assert set(files.values()) == {0o666 & ~umask}, files
  assert folders == {"folder": 0o777 & ~umask}


def test_an_export_takes_the_umask(tmp_path):
  previous = os.umask(0o027)
  try:
    bundle.save_bundle(str(tmp_path / "export"), tiny_encoder.random_params(tiny_encoder.CONFIG),
                       tiny_encoder.CONFIG, list(tiny_encoder.VOCAB), lowercase=True)
  finally:
    os.umask(previous)
  modes = _written(tmp_path / "export")
  assert modes, "nothing written"
  for name, mode in modes.items():
    expected = 0o750 if os.path.isdir(tmp_path / "export" / name) else 0o640
    assert mode == expected, (name, oct(mode))
