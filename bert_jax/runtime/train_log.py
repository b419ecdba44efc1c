"""A run's log: each log step's record on the console, in TensorBoard and in metrics.jsonl.

The console's own pieces (headers, progress, heartbeats, ETAs) are bert_jax.runtime.console.
"""
import functools
import json
import sys
import threading
import time
from typing import Optional, Sequence

from etils import epath

from bert_jax.runtime import console as console_lib
from bert_jax.runtime import workdirs
from bert_jax.runtime import write_errors


@functools.cache  # imported when a run first logs: half a second that tools never need
def _summary_writer_class():
  """tensorboardX's SummaryWriter, imported without loading PyTorch.

  tensorboardX imports torch whenever installed (to accept torch tensors, never logged here),
  which costs resident memory in a JAX process; torch is hidden unless already loaded.
  """
  if "torch" in sys.modules:
    from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
    return SummaryWriter
  sys.modules["torch"] = None  # import torch raises ImportError, which tensorboardX expects
  try:
    from tensorboardX import SummaryWriter  # pylint: disable=g-import-not-at-top
  finally:
    del sys.modules["torch"]
  return SummaryWriter


class _ThreadErrors:
  """Exceptions raised in given background threads (TensorBoard's writer thread): a failed
  write there would lose every later event silently, so the next log step raises it."""

  def __init__(self):
    self.threads = {}  # thread -> the exception that ended it (None: still fine)
    self._default = threading.excepthook
    threading.excepthook = self._hook

  def _hook(self, args):
    if args.thread in self.threads:
      self.threads[args.thread] = args.exc_value
      return
    self._default(args)

  def watch(self, thread: Optional[threading.Thread]) -> None:
    if thread is not None:
      self.threads[thread] = None


_THREAD_ERRORS = None


def _abandon(writer) -> None:
  """After a failed close: tensorboardX's exit handler must not try (and fail) again."""
  for file_writer in (getattr(writer, "all_writers", None) or {}).values():
    event_writer = getattr(file_writer, "event_writer", None)
    if event_writer is not None:
      event_writer._closed = True  # pylint: disable=protected-access


def _tensorboard_thread(writer) -> Optional[threading.Thread]:
  """The thread that writes `writer`'s events (None if tensorboardX changed its internals)."""
  try:
    return writer._get_file_writer().event_writer._worker  # pylint: disable=protected-access
  except AttributeError:
    return None


def close_all(closers, raise_first: bool) -> None:
  """Calls every closer; re-raises the first failure when `raise_first`, else drops them."""
  first = None
  for close in closers:
    try:
      close()
    except Exception as e:  # pylint: disable=broad-except
      first = first or e
  if first is not None and raise_first:
    raise first


def _records_up_to(text: str, step: int) -> str:
  """The lines of a metrics.jsonl whose step is at most `step` (a torn last line is dropped)."""
  kept = []
  for line in text.splitlines():
    try:
      if json.loads(line)["step"] <= step:
        kept.append(line + "\n")
    except (ValueError, KeyError, TypeError):
      pass
  return "".join(kept)


class RunLogger:
  """Writes one record per log step to the console, TensorBoard and metrics.jsonl.

  Only process 0 creates files. A local metrics.jsonl is appended to; a remote one (gs://
  cannot append) is rewritten whole. With `resume_step=k`, records of later steps are removed
  first, so each step appears once. A record that cannot be written raises OutputWriteError
  (TensorBoard's thread: at the next log step or at close).
  """

  def __init__(self, workdir: str, total_steps: int, is_writer: bool = True,
               resume_step: Optional[int] = None, console: Sequence[str] = ()):
    self.total_steps = total_steps
    self.is_writer = is_writer
    self.console = tuple(console)  # the objective's metrics on the progress line, after loss
    self._jsonl = None
    self._tb = None
    if is_writer:
      root = epath.Path(workdir)
      self._jsonl_path = root / workdirs.METRICS
      self._tb_path = root / workdirs.TENSORBOARD
      with write_errors.writing(str(self._jsonl_path)):
        root.mkdir(parents=True, exist_ok=True)
        existing = self._jsonl_path.read_text() if self._jsonl_path.exists() else ""
        kept = existing if resume_step is None else _records_up_to(existing, resume_step)
        self._remote_lines = None
        if "://" in str(workdir):
          self._remote_lines = kept
        else:
          if kept != existing:
            tmp = root / "metrics.jsonl.tmp"
            tmp.write_text(kept)
            tmp.replace(self._jsonl_path)
          self._jsonl = self._jsonl_path.open("a", encoding="utf-8")
      with write_errors.writing(f"TensorBoard events to {self._tb_path}"):
        # A queue that never fills: after its writer thread failed, a bounded one would
        # block the next add_scalar for ever (the failure is raised at the next record).
        self._tb = _summary_writer_class()(str(self._tb_path), max_queue=1 << 20)
      global _THREAD_ERRORS
      if _THREAD_ERRORS is None:
        _THREAD_ERRORS = _ThreadErrors()
      self._tb_thread = _tensorboard_thread(self._tb)
      _THREAD_ERRORS.watch(self._tb_thread)
    self._t0 = time.time()
    self._pace = console_lib.Pace()
    self._later = (0, 0.0, "")

  def plan_after(self, steps: int = 0, seconds: float = 0.0, unknown: str = "") -> None:
    """What the run does after its `total_steps`, for the ETA: `steps` more at the same pace,
    `seconds` of other work, and `unknown` work named after the ETA ('the evaluation')."""
    self._later = (steps, seconds, unknown)

  def _eta(self, prefix: str, step: int, steps_per_sec: float) -> str:
    later_steps, later_seconds, unknown = self._later
    pace = self._pace(prefix, step, time.time(), steps_per_sec)
    seconds = console_lib.eta_seconds(self.total_steps - step + later_steps, pace,
                                      later_seconds)
    if seconds is None:
      return "eta at the next line"
    return f"eta {console_lib.format_eta(seconds)}" + (f" + {unknown}" if unknown else "")

  def _check_tensorboard(self, running: bool = True) -> None:
    """Raises a write that failed in TensorBoard's writer thread (as OutputWriteError); with
    `running`, a thread that ended is a failure."""
    error = _THREAD_ERRORS.threads.get(self._tb_thread) if _THREAD_ERRORS else None
    if (error is None and running and self._tb_thread is not None
        and not self._tb_thread.is_alive()):
      error = RuntimeError("TensorBoard's writer thread ended")
    if error is not None:  # (never re-raised itself: its chain stays its own)
      raise write_errors.OutputWriteError(
          f"writing TensorBoard events to {self._tb_path} failed "
          f"({write_errors.write_error_cause(error)}); stopping")

  def log(self, step: int, metrics: dict, prefix: str = "", steps_per_sec: Optional[float] = None):
    """Records `metrics` (floats) at `step`; train records print a progress line."""
    if not self.is_writer:
      return
    record = {"step": step, **{prefix + k: float(v) for k, v in metrics.items()}}
    line = json.dumps(record) + "\n"
    with write_errors.writing(str(self._jsonl_path)):
      if self._jsonl is not None:
        self._jsonl.write(line)
        self._jsonl.flush()
      else:
        self._remote_lines += line
        self._jsonl_path.write_text(self._remote_lines)
    with write_errors.writing(f"TensorBoard events to {self._tb_path}"):
      for k, v in record.items():
        if k != "step":
          self._check_tensorboard()
          self._tb.add_scalar(k, v, step)
      self._tb.flush()
    label = f"{prefix.rstrip('_')} " if prefix else ""  # seed0_train_loss -> seed0_train ... loss
    parts = [f"{label}step {step}/{self.total_steps}" if self.total_steps else f"{label}step {step}"]
    for key, fmt in ((("loss", ".4f"),) + tuple((k, ".4f") for k in self.console) +
                     (("learning_rate", ".3e"), ("tokens_per_second", ",.0f"),
                      ("examples_per_second", ",.1f"), ("mfu", ".2%"), ("input_wait", ".1%"))):
      if prefix + key in record:
        parts.append(f"{key} {record[prefix + key]:{fmt}}")
    if steps_per_sec and self.total_steps:
      parts.append(self._eta(prefix, step, steps_per_sec))
    if len(parts) > 1:  # records without progress keys (e.g. fine-tuning's eval) print elsewhere
      print(" | ".join(parts), flush=True)

  def close(self):
    """Closes both files; OutputWriteError when what they still held could not be written."""
    jsonl, tb = self._jsonl, self._tb
    self._jsonl = self._tb = None
    try:
      if jsonl:
        with write_errors.writing(str(self._jsonl_path)):
          jsonl.close()
    finally:
      if tb:
        with write_errors.writing(f"TensorBoard events to {self._tb_path}"):
          try:
            tb.close()
          except Exception:
            _abandon(tb)
            raise
        self._check_tensorboard(running=False)
        _THREAD_ERRORS.threads.pop(self._tb_thread, None)
