"""Failed writes of a run's outputs, reported in one line.

A full disk, a lost permission or a file-size limit while writing metrics,
TensorBoard events, checkpoints or the export must end the program with a
non-zero status and one line naming the file and the cause (the programs turn
these errors into that line: bert_jax.cli).
"""
import contextlib
import re


class OutputWriteError(RuntimeError):
  """A run's output (metrics.jsonl, TensorBoard events, the export) could not be written."""


def write_error_cause(error: BaseException) -> str:
  """'ExcType: reason' of the innermost cause of a failed write, in a few words.

  A full disk, a lost permission or a file-size limit is named as such
  ('OSError: No space left on device'); anything else by its first line.
  """
  cause, seen = error, {id(error)}
  while (cause.__cause__ or cause.__context__) is not None:  # a chain may loop back: stop there
    following = cause.__cause__ or cause.__context__
    if id(following) in seen:
      break
    seen.add(id(following))
    cause = following
  detail = re.search(r"(No space left on device|Permission denied|Read-only file system"
                     r"|Disk quota exceeded|File too large)", str(cause))
  text = str(cause).splitlines()[0][:300] if str(cause) else ""
  return f"{type(cause).__name__}: {detail.group(1) if detail else text}"


@contextlib.contextmanager
def writing(what: str):
  """Turns any failure inside the block into one OutputWriteError line naming `what`."""
  try:
    yield
  except OutputWriteError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    raise OutputWriteError(f"writing {what} failed ({write_error_cause(e)}); stopping") from e
