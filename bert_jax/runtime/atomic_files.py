"""Files written whole or not at all.

Every file a program leaves for the user (results, predictions, embeddings, converted
models, prepared data) is written to a temporary name beside its destination and renamed
onto it when complete: a full disk, a kill or a crash leaves the previous file (or none),
never a half-written one. A rename within a directory is atomic on POSIX file systems; an
object store (gs://) writes each object whole already, so remote paths are written directly.
"""
import contextlib
import os
import shutil
from typing import Iterator

from etils import epath

TMP_MARK = ".partial-"  # in the name of every temporary file or folder made here


def _is_remote(path) -> bool:
  return "://" in str(path)


def temporary_sibling(path) -> epath.Path:
  """A name beside `path` that no other process uses (hidden, with this process's id)."""
  p = epath.Path(path)
  return p.parent / f".{p.name}{TMP_MARK}{os.getpid()}"


@contextlib.contextmanager
def replacing(path) -> Iterator[epath.Path]:
  """Yields a temporary path to write a file (or a folder) to; on success it replaces `path`.

  On an error the temporary file or folder is removed and `path` is left as it was.
  """
  dst = epath.Path(path)
  if _is_remote(dst):
    yield dst
    return
  tmp = temporary_sibling(dst)
  _remove(tmp)
  try:
    yield tmp
    if tmp.is_dir() and dst.is_dir():  # a folder replaces a folder: the old one goes last
      old = temporary_sibling(dst.parent / (dst.name + ".old"))
      _remove(old)
      os.rename(dst, old)
      os.rename(tmp, dst)
      _remove(old)
    else:
      if tmp.is_file():
        with open(tmp, "rb+") as f:  # on disk before the rename makes it visible
          os.fsync(f.fileno())
      os.replace(tmp, dst)
  except BaseException:
    _remove(tmp)
    raise


def write_text(path, text: str) -> None:
  """Writes `text` (UTF-8) to `path` whole or not at all."""
  with replacing(path) as tmp:
    tmp.write_text(text, encoding="utf-8")


def write_bytes(path, data: bytes) -> None:
  """Writes `data` to `path` whole or not at all."""
  with replacing(path) as tmp:
    tmp.write_bytes(data)


def _remove(p: epath.Path) -> None:
  """Removes a local file or folder, if there."""
  path = os.fspath(p)
  if os.path.isdir(path) and not os.path.islink(path):
    shutil.rmtree(path, ignore_errors=True)
  elif os.path.lexists(path):
    os.unlink(path)
