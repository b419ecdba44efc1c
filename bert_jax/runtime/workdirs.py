"""A run's workdir: the names of what it keeps there, and one run per workdir.

The names below are the one place that spells them. The lock is a file held by the process
that writes the workdir (`hold`): a second run stops at once naming the holder's host and pid. A lock left by a dead process on
this host is taken over atomically; one from another host cannot be checked (the message says
which file to delete). gs:// workdirs are not locked: no exclusive create, and a preempted
pod must be able to go on.
"""
import contextlib
import json
import os
import pathlib
import socket
import time
from typing import Iterator

from etils import epath

from bert_jax.runtime import write_errors

CHECKPOINTS = "checkpoints"
FINETUNE_CHECKPOINTS = "finetune_checkpoints"
EXPORT = "export"
METRICS = "metrics.jsonl"
TENSORBOARD = "tensorboard"
RESULTS = "eval_results.json"
RESULTS_PER_SEED = "eval_results_per_seed.json"
RUN_FILE = "run.json"
LOCK_FILE = "bert_jax.lock"


class WorkdirInUseError(RuntimeError):
  """Another live run holds the workdir."""


class WorkdirNotWritableError(ValueError):
  """The workdir cannot be created or written (a read-only file system, no permission)."""


def _holder(path: epath.Path) -> dict:
  try:
    holder = json.loads(path.read_text())
    return holder if isinstance(holder, dict) else {}
  except (OSError, ValueError):
    return {}


def _is_stale(path: epath.Path, holder: dict) -> bool:
  if not holder:  # unreadable: a writer that died between creating and writing it
    try:
      return time.time() - path.stat().mtime > 10
    except OSError:
      return True
  if holder.get("host") != socket.gethostname():
    return False
  try:
    os.kill(int(holder.get("pid", -1)), 0)
  except ProcessLookupError:
    return True
  except (PermissionError, ValueError, OverflowError):
    return False
  return False


def _create(path: epath.Path, me: dict) -> bool:
  """Creates the lock file holding `me`; False when it exists (a full disk: one line)."""
  with write_errors.writing(f"the lock file {path}"):
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
      fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
      return False
    try:
      with os.fdopen(fd, "w") as f:
        json.dump(me, f)
    except BaseException:
      path.unlink(missing_ok=True)  # a half-written lock would hold the workdir for 10 s
      raise
  return True


def _create_in(path: epath.Path, me: dict, workdir: str, flag: str) -> bool:
  """_create, after making the workdir; an unwritable workdir is one line, before anything else."""
  try:
    path.parent.mkdir(parents=True, exist_ok=True)
    return _create(path, me)
  except (OSError, write_errors.OutputWriteError) as e:
    cause = e.__cause__ if isinstance(e, write_errors.OutputWriteError) else e
    if (not isinstance(cause, OSError) or isinstance(cause, FileExistsError)
        or cause.errno is None):
      raise
    raise WorkdirNotWritableError(f"{flag} {workdir} cannot be written: {cause.strerror} "
                                  f"({cause.filename})") from None


@contextlib.contextmanager
def hold(workdir: str, flag: str = "--workdir") -> Iterator[None]:
  """Holds `workdir/bert_jax.lock` while the block runs (on the writing process).

  Folders it made are removed at the end if the run left them empty. `flag` names the
  directory's flag in messages. WorkdirInUseError names a live holder's host, pid and start.
  """
  if "://" in str(workdir):
    yield
    return
  path = epath.Path(workdir) / LOCK_FILE
  made, folder = [], pathlib.Path(workdir)
  while not folder.exists() and folder != folder.parent:
    made.append(folder)  # deepest first
    folder = folder.parent
  me = {"host": socket.gethostname(), "pid": os.getpid(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S")}
  while not _create_in(path, me, workdir, flag):
    holder = _holder(path)
    if not _is_stale(path, holder):
      raise WorkdirInUseError(
          f"{workdir} is in use by another run (host {holder.get('host')}, pid "
          f"{holder.get('pid')}, since {holder.get('started')}); wait for it to end or use "
          f"another {flag} (if that run is gone, delete {path})")
    # Take the stale lock over: a rename succeeds for one taker only.
    aside = path.parent / f"{LOCK_FILE}.stale-{os.getpid()}"
    try:
      os.rename(path, aside)
      os.remove(aside)
    except FileNotFoundError:
      pass
  try:
    yield
  finally:
    if _holder(path) == me:  # still ours: not taken over as stale meanwhile
      path.unlink(missing_ok=True)
    for made_folder in made:
      try:
        made_folder.rmdir()  # only when empty
      except OSError:
        break
