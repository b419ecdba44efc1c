"""Files and folders written whole or not at all.

Every file a program leaves for the user (results, predictions, embeddings, converted
models, prepared data) is written to a temporary name beside its destination and renamed
onto it when complete: a full disk, a kill or a crash leaves the previous file (or none),
never a half-written one. A rename within a directory is atomic on POSIX file systems; an
object store (gs://) writes each object whole already, so remote paths are written directly.

A folder (a converted model) replaces an earlier folder whole, never file by file: the new
folder is built beside it and the two are exchanged in one step (Linux's renameat2 with
RENAME_EXCHANGE), so that the destination is at every moment the complete earlier folder or
the complete new one; the earlier one is removed after. A file system that cannot exchange
(NFS, or another system) gets two renames, the earlier folder aside first: a kill between them
leaves it beside the destination under a temporary name, and the next write there puts it back.

A disk that refuses a write inside `replacing` (full, a file-size limit, read-only, a lost
permission) is one OutputWriteError line naming the file; any other error passes as it is.

A killed writer leaves its temporary file or folder behind (nothing runs to remove it). Each
temporary name carries its writer's pid and host, and every write removes from its folder those
of writers that are gone: never one of a live process, nor one of another host sharing the file
system (its processes cannot be seen from here).
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
  """A name beside `path` that no other process uses (hidden, with the writer's id and host:
  `writer`, a writer_id(), or by default this process's)."""
  p = epath.Path(path)
  return p.parent / f".{p.name}{TMP_MARK}{writer or writer_id()}"


@contextlib.contextmanager
def replacing(path) -> Iterator[epath.Path]:
  """Yields a temporary path to write a file (or a folder) to; on success it replaces `path`.

  A folder replaces a folder whole (see the module's docstring). On an error the temporary
  file or folder is removed and `path` is left as it was; a disk that refused a write is
  raised as OutputWriteError naming `path`. A link at `path` is kept: its target is replaced.
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
  """Yields a temporary folder path beside `path` (not made yet); on success the folder written
  there replaces `path` whole, as `replacing` does.

  Several processes may write one folder together (each its part, as Orbax saves sharded
  arrays): each passes the same `writer` (the writer_id() of the one that puts the folder in
  place), and only that one passes `primary`. The primary removes leftovers and an earlier
  temporary folder before yielding, and after a clean exit puts the folder in place (on an
  error it removes it); the others only write into it, so the caller must make them wait for
  the primary's start (and the primary for their writes) itself.

  An object store cannot rename a folder in one step: there the earlier folder is renamed
  aside, the new one renamed onto `path`, and the earlier one removed.
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
  """Gives a local file the mode a plain open() gives a new file (0666 less the umask), for
  writers that make theirs private."""
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
  """Removes the temporary files and folders that writers now gone left in `folder`.

  An earlier folder set aside whose destination is missing (a writer killed between its two
  renames) is put back instead. Returns the names removed or put back.
  """
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
  """Swaps the entries at `a` and `b` in one step; False where this system or file system
  cannot (then nothing was changed)."""
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
  """Removes `tmp` and the names a writer inside derived from it (`tmp.SUFFIX`); never an
  earlier folder set aside, which a failed rename may have left there."""
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
