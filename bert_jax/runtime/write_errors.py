"""Failed writes of a run's outputs (full disk, lost permission, size limit), reported in one
line naming the file and the cause, with a non-zero status (bert_jax.cli)."""
import contextlib
import errno
import re
from typing import Optional

# What the disk (not the data or the code) refuses: the failures a user fixes by freeing space,
# raising a limit or fixing a permission. Libraries that write in C++ or Rust (TensorStore,
# safetensors) report them inside messages of their own exception types.
_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS, errno.EACCES,
                          errno.EPERM, errno.EIO})
_DISK_CONDITION = re.compile(r"(No space left on device|Permission denied|Read-only file system"
                             r"|Disk quota exceeded|File too large|Input/output error)")
# The file TensorStore names in its write failures ('Failed writing: "PATH": ...').
_NAMED_FILE = re.compile(r'Failed writing: "([^"]+)"')


class OutputWriteError(RuntimeError):
  """A run's output (metrics.jsonl, TensorBoard events, the export) could not be written."""


def _chain(error: BaseException) -> list[BaseException]:
  """`error` and its causes, outermost first (a chain may loop back: it stops there)."""
  chain = [error]
  while (chain[-1].__cause__ or chain[-1].__context__) is not None:
    following = chain[-1].__cause__ or chain[-1].__context__
    if any(following is seen for seen in chain):
      break
    chain.append(following)
  return chain


def _named_file(error: BaseException) -> Optional[str]:
  """The file a write failure names, where it names one (OSError.filename, TensorStore's text)."""
  if isinstance(error, OSError) and error.filename:
    return str(error.filename)
  found = _NAMED_FILE.search(str(error))
  return found.group(1) if found else None


def write_error_cause(error: BaseException) -> str:
  """'ExcType: reason' of the innermost cause of a failed write ('OSError: No space left on
  device'), then the file it names; anything else by its first line."""
  cause = _chain(error)[-1]
  detail = _DISK_CONDITION.search(str(cause))
  text = str(cause).splitlines()[0][:300] if str(cause) else ""
  named = _named_file(cause) if detail else None
  return (f"{type(cause).__name__}: {detail.group(1) if detail else text}"
          + (f" ({named})" if named else ""))


def is_disk_failure(error: BaseException) -> bool:
  """Whether `error` or a cause is the disk refusing a write (full, size limit, read-only,
  permission), not a bad value or missing input."""
  return any((isinstance(e, OSError) and e.errno in _DISK_ERRNOS)
             or bool(_DISK_CONDITION.search(str(e))) for e in _chain(error))


def failed(what: str, error: BaseException) -> OutputWriteError:
  """The one-line error for a failed write of `what` (a path, or words naming the output)."""
  cause = write_error_cause(error).replace(f" ({what})", "")  # named once
  return OutputWriteError(f"writing {what} failed ({cause}); stopping")


@contextlib.contextmanager
def writing(what: str):
  """Turns any failure inside the block into one OutputWriteError line naming `what`."""
  try:
    yield
  except OutputWriteError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    raise failed(what, e) from e
