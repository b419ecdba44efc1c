"""Files and folders written whole or not at all.

Every output is written to a temporary name beside its destination and renamed onto it when
complete, so a full disk, kill or crash leaves the previous file, never half of one (gs://
objects are written whole already, so directly). A folder replaces a folder in one step
(renameat2 RENAME_EXCHANGE), else by two renames with the earlier folder set aside; a kill
between them is repaired by the next write there. A disk refusing a write inside `replacing`
is one OutputWriteError line. Temporary names carry the writer's pid and host, so each write
removes those of writers that are gone, never a live or another host's.
"""
import contextlib
import ctypes
import errno
import functools
import hashlib
import os
import re
import shutil
import socket
from typing import Iterator, Optional

from etils import epath

from bert_jax.runtime import write_errors

TMP_MARK = ".partial-"  # in the name of every temporary file or folder made here
_EARLIER = ".earlier"  # ends the temporary name of an earlier folder set aside
# Which host made a temporary name: a short digest, as a host name may hold dots and be long.
_HOST = hashlib.sha1(socket.gethostname().encode()).hexdigest()[:8]
# .NAME.partial-PID-HOST[.SUFFIX]; names made before the host was recorded have no -HOST, and
# are taken as this host's. A suffix is added by the writer inside (a bundle's own temporary
# folder) or marks an earlier folder set aside.
_TEMPORARY = re.compile(r"^\.(?P<name>.+)\.partial-(?P<pid>\d+)(?:-(?P<host>[0-9a-f]{8}))?"
                        r"(?P<suffix>\.[a-z-]+)?$")


def _is_remote(path) -> bool:
  return "://" in str(path)


def writer_id() -> str:
  """This process's id and host, as a temporary name carries them."""
  return f"{os.getpid()}-{_HOST}"


def temporary_sibling(path, writer: Optional[str] = None) -> epath.Path:
  """A hidden name beside `path` that no other process uses (carrying `writer`, by default
  this process's writer_id())."""
  p = epath.Path(path)
  return p.parent / f".{p.name}{TMP_MARK}{writer or writer_id()}"


@contextlib.contextmanager
def replacing(path) -> Iterator[epath.Path]:
  """Yields a temporary path to write a file (or folder) to; on success it replaces `path`.

  On an error it is removed and `path` left as it was. A link at `path` is kept: its target is
  replaced.
  """
  dst = epath.Path(path)
  if _is_remote(dst):
    yield dst
    return
  with _replacing_local(path, None, True) as tmp:
    yield tmp


@contextlib.contextmanager
def replacing_folder(path, *, writer: Optional[str] = None,
                     primary: bool = True) -> Iterator[epath.Path]:
  """Yields a temporary folder path beside `path` (not made yet) that replaces `path` whole on
  success.

  Several processes may write it together (Orbax's sharded saves): all pass the same `writer`,
  and only the one that puts the folder in place passes `primary`; it cleans up before yielding
  and moves or removes the folder after. The caller must order the others' writes between.
  """
  dst = epath.Path(path)
  if not _is_remote(dst):
    with _replacing_local(path, writer, primary) as tmp:
      yield tmp
    return
  tmp = temporary_sibling(dst, writer)
  aside = epath.Path(str(tmp) + _EARLIER)
  if not primary:
    yield tmp
    return
  for p in (tmp, aside):
    if p.exists():
      p.rmtree()
  try:
    yield tmp
    if dst.exists():
      dst.rename(aside)
    tmp.rename(dst)
    if aside.exists():
      aside.rmtree()
  except BaseException:
    if tmp.exists():
      tmp.rmtree()
    raise


@contextlib.contextmanager
def _replacing_local(path, writer: Optional[str], primary: bool) -> Iterator[epath.Path]:
  dst = epath.Path(os.path.realpath(path))
  tmp = temporary_sibling(dst, writer)
  if not primary:
    yield tmp
    return
  remove_leftovers(dst.parent)
  _remove(tmp)
  try:
    yield tmp
    _flush(tmp)
    _put_in_place(os.fspath(tmp), os.fspath(dst))
  except BaseException as e:
    _remove_temporaries(tmp)
    if (isinstance(e, Exception) and not isinstance(e, write_errors.OutputWriteError)
        and write_errors.is_disk_failure(e)):
      raise write_errors.failed(str(path), e) from e
    raise


def with_default_mode(path) -> None:
  """Gives a local file the mode open() gives a new one (0666 less the umask)."""
  if _is_remote(path):
    return
  mask = os.umask(0)
  os.umask(mask)
  os.chmod(path, 0o666 & ~mask)


def write_text(path, text: str) -> None:
  """Writes `text` (UTF-8) to `path` whole or not at all."""
  with replacing(path) as tmp:
    tmp.write_text(text, encoding="utf-8")


def write_bytes(path, data: bytes) -> None:
  """Writes `data` to `path` whole or not at all."""
  with replacing(path) as tmp:
    tmp.write_bytes(data)


def remove_leftovers(folder) -> list[str]:
  """Removes the temporaries of writers now gone from `folder`, and puts back an earlier folder
  set aside whose destination is missing; returns the names."""
  try:
    names = os.listdir(folder)
  except OSError:
    return []
  done = []
  for name in names:
    found = _TEMPORARY.match(name)
    if not found or not _writer_gone(int(found["pid"]), found["host"]):
      continue
    path, dst = os.path.join(folder, name), os.path.join(folder, found["name"])
    if found["suffix"] == _EARLIER and not os.path.lexists(dst):
      with contextlib.suppress(OSError):  # another writer may put it back first
        os.rename(path, dst)
    else:
      _remove(path)
    done.append(name)
  return done


def _writer_gone(pid: int, host: Optional[str]) -> bool:
  """Whether the process that made a temporary name has ended (False when it cannot be told)."""
  if (host is not None and host != _HOST) or pid == os.getpid():
    return False
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return True
  except (PermissionError, OverflowError):  # another user's process, or no pid at all
    return False
  return False


def _put_in_place(tmp: str, dst: str) -> None:
  """Renames the complete `tmp` onto `dst`; a folder replaces a folder whole."""
  if not (os.path.isdir(tmp) and os.path.isdir(dst)):
    os.replace(tmp, dst)
    return
  if _exchange(tmp, dst):
    _remove(tmp)  # now the earlier folder
    return
  aside = tmp + _EARLIER
  os.rename(dst, aside)
  try:
    os.rename(tmp, dst)
  except BaseException:
    os.rename(aside, dst)
    raise
  _remove(aside)


@functools.cache
def _renameat2():
  try:
    return getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
  except (OSError, TypeError):  # no C library to load (Windows)
    return None


def _exchange(a: str, b: str) -> bool:
  """Swaps `a` and `b` in one step; False (nothing changed) where the file system cannot."""
  renameat2 = _renameat2()
  if renameat2 is None:
    return False
  at_cwd, rename_exchange = -100, 2  # AT_FDCWD, RENAME_EXCHANGE (linux/fcntl.h, linux/fs.h)
  if renameat2(at_cwd, os.fsencode(a), at_cwd, os.fsencode(b), rename_exchange) == 0:
    return True
  code = ctypes.get_errno()
  if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
    return False
  raise OSError(code, os.strerror(code), a, None, b)


def _flush(p: epath.Path) -> None:
  """Puts a written file (or every file of a folder) on disk before a rename makes it visible."""
  path = os.fspath(p)
  files = [path] if os.path.isfile(path) else [
      os.path.join(d, f) for d, _, names in os.walk(path) for f in names]
  for f in files:
    fd = os.open(f, os.O_RDONLY)
    try:
      os.fsync(fd)
    finally:
      os.close(fd)


def _remove_temporaries(tmp: epath.Path) -> None:
  """Removes `tmp` and the `tmp.SUFFIX` names derived from it; never a folder set aside."""
  _remove(tmp)
  for name in os.listdir(tmp.parent):
    if name.startswith(tmp.name + ".") and not name.endswith(_EARLIER):
      _remove(tmp.parent / name)


def _remove(p) -> None:
  """Removes a local file or folder, if there."""
  path = os.fspath(p)
  if os.path.isdir(path) and not os.path.islink(path):
    shutil.rmtree(path, ignore_errors=True)
  elif os.path.lexists(path):
    os.unlink(path)
