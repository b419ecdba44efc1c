"""Run observability: console progress lines, TensorBoard scalars, metrics.jsonl."""
import functools
import json
import sys
import threading
import time
from typing import Callable, Optional, Sequence, Union

from etils import epath
import jax
import numpy as np

from bert_jax.runtime import workdir_layout
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


def count_params(tree) -> int:
  """Number of scalars in a tree of arrays (or shape structs)."""
  return int(sum(np.prod(np.shape(x)) for x in jax.tree.leaves(tree)))


def print_header(program: str, what: str, rows, file=None) -> None:
  """The first lines of every run, in one layout for every program:

    bert_jax.finetune: fine-tune and evaluate mrpc
      model    L6 H384 A12 V30522, 22.7M params, from /tmp/minilm (heads ['pooler'])

  rows are (name, text) pairs, empty texts left out; file defaults to stdout.
  """
  print(f"{program}: {what}", file=file)
  for name, text in rows:
    if text:
      print(f"  {name:<8} {text}", file=file)
  if file is None:
    sys.stdout.flush()


def _fmt_eta(seconds: float) -> str:
  seconds = int(max(seconds, 0))
  h, rem = divmod(seconds, 3600)
  m, s = divmod(rem, 60)
  return f"{h}:{m:02d}:{s:02d}"


def eta_seconds(steps_left: int, pace: Optional[float], later_seconds: float = 0.0
                ) -> Optional[float]:
  """Seconds until a run ends: `steps_left` at `pace` steps/s plus `later_seconds`; None while
  there is no pace to trust and steps are left."""
  if steps_left <= 0:
    return later_seconds
  if not pace:
    return None
  return steps_left / pace + later_seconds


class Pace:
  """The steps per second an ETA is taken from: wall time over the steps since the first log line.

  The first log window holds one-off work (the first compile, the first shards), which
  extrapolated gives far too long an ETA; that line gets none. Steps restarting from 0 (the
  next seed, another `prefix`) start from their first line's window.
  """

  def __init__(self):
    self._since = None  # (prefix, step, time) of the first log line of these steps

  def __call__(self, prefix: str, step: int, now: float,
               window_pace: float) -> Optional[float]:
    """The pace at log line `step` (None: not yet); `window_pace`: the window's own."""
    if self._since is None or self._since[0] != prefix:
      first = self._since is None
      self._since = (prefix, step, now)
      return None if first else window_pace
    _, since_step, since = self._since
    if step <= since_step or now <= since:
      return window_pace
    return (step - since_step) / (now - since)


class Progress:
  """A long loop's progress on stderr: at once, then every `every` seconds, then at the end.

    encoding corpus: 1,216/5,183 texts (23%) | 41.3 texts/s | eta 0:01:36

  As a context manager a Heartbeat prints it every `every` seconds even while no unit ends (a
  first batch that compiles); the closing line comes unless the loop failed. total 0: unknown.
  enabled False (--quiet) prints nothing.
  """

  def __init__(self, label: str, total: int, unit: str, enabled: bool = True,
               every: Optional[float] = None, file=None):
    self.label, self.total, self.unit, self.enabled = label, total, unit, enabled
    self.every, self.file = BEAT_SECONDS if every is None else every, file or sys.stderr
    self.done, self._start = 0, time.time()
    self._last = self._start
    self._beat = None
    self._print(f"{self.done:,}/{self.total:,} {self.unit}" if total else f"0 {self.unit}")

  def __enter__(self):
    self._beat = Heartbeat(self.label, self.every, self.enabled, self.file, at_start=False,
                           status=lambda: self._text(time.time()) if self.done else
                           f"0{self._of_total()} {self.unit} so far")
    self._beat.__enter__()
    return self

  def __exit__(self, exc_type, *exc):
    self._beat.__exit__(exc_type, *exc)
    if exc_type is None:
      self.close()

  def _of_total(self) -> str:
    return f"/{self.total:,}" if self.total else ""

  def _print(self, text: str) -> None:
    if self.enabled:
      print(f"{self.label}: {text}", file=self.file, flush=True)
      if self._beat is not None:
        self._beat.touch()

  def update(self, n: int = 1) -> None:
    self.done += n
    now = time.time()
    if self._beat is not None or now - self._last < self.every:
      return  # (as a context, the beats print the progress)
    self._last = now
    self._print(self._text(now))

  def _text(self, now: float) -> str:
    """'1,216/5,183 texts (23%) | 41.3 texts/s | eta 0:01:36'."""
    rate = self.done / max(now - self._start, 1e-9)
    text = f"{self.done:,}{self._of_total()} {self.unit}"
    if self.total:
      return text + (f" ({self.done / self.total:.0%}) | {rate:,.1f} {self.unit}/s | "
                     f"eta {_fmt_eta((self.total - self.done) / max(rate, 1e-9))}")
    return text + f" | {rate:,.1f} {self.unit}/s"

  def close(self) -> None:
    seconds = time.time() - self._start
    self._print(f"{self.done:,} {self.unit} in {_fmt_eta(seconds)} "
                f"({self.done / max(seconds, 1e-9):,.1f} {self.unit}/s)")


# A program prints something at least this often (a heartbeat's default). Under 10 s, so that
# a beat delayed by a busy machine still lands within the 10 s a reader waits for progress.
BEAT_SECONDS = 9.0
# A tool's first beat while it loads a checkpoint before its first line (Heartbeat's `first`):
# the imports before it take a few seconds more, and a bad path fails in one line before it.
LOADING_SECONDS = 3.0


class Heartbeat:
  """A line on stderr every `every` seconds while a step of unknown length runs.

    learning the vocab: 0:00:30 so far

  at_start=False prints nothing before the first beat (`first`, when given). `status` (a text
  or a function, changed by doing()) says what the program is doing instead. touch(): the
  program printed its own line, so the next beat comes `every` seconds after it.
  """

  def __init__(self, label: str, every: Optional[float] = None, enabled: bool = True, file=None,
               at_start: bool = True, status: Union[str, Callable[[], str], None] = None,
               first: Optional[float] = None):
    self.label, self.enabled, self.file = label, enabled, file or sys.stderr
    self.every = BEAT_SECONDS if every is None else every
    self.first = self.every if first is None else min(first, self.every)
    self.at_start, self.status = at_start, None
    if status is not None:
      self.doing(status)
    self._stop = threading.Event()
    self._thread = None
    self._last = time.time()

  def touch(self) -> None:
    self._last = time.time()

  def doing(self, status: Union[str, Callable[[], str]]) -> None:
    """What the next beats say the program is doing: a text, or a function that returns one."""
    self.status = status if callable(status) else (lambda: status)

  def __enter__(self):
    if self.enabled:
      if self.at_start:
        print(f"{self.label} ...", file=self.file, flush=True)
      start = time.time()
      self._last = start - (self.every - self.first)  # the first beat `first` seconds in

      def beat():
        while not self._stop.wait(max(self._last + self.every - time.time(), 0.0)):
          now = time.time()
          if now < self._last + self.every:
            continue  # touched while waiting
          self._last = now
          text = (f"{self.status()} ({now - start:.0f} s)" if self.status is not None
                  else f"{_fmt_eta(now - start)} so far")
          print(f"{self.label}: {text}", file=self.file, flush=True)
      self._thread = threading.Thread(target=beat, daemon=True, name="heartbeat")
      self._thread.start()
    return self

  def __exit__(self, *exc):
    self.end()

  def end(self) -> None:
    """No beat from now on (as at the block's end), for a program whose last line comes before."""
    self._stop.set()
    if self._thread is not None:
      self._thread.join()


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
      self._jsonl_path = root / workdir_layout.METRICS
      self._tb_path = root / workdir_layout.TENSORBOARD
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
    self._pace = Pace()
    self._later = (0, 0.0, "")

  def plan_after(self, steps: int = 0, seconds: float = 0.0, unknown: str = "") -> None:
    """What the run does after its `total_steps`, for the ETA: `steps` more at the same pace,
    `seconds` of other work, and `unknown` work named after the ETA ('the evaluation')."""
    self._later = (steps, seconds, unknown)

  def _eta(self, prefix: str, step: int, steps_per_sec: float) -> str:
    later_steps, later_seconds, unknown = self._later
    seconds = eta_seconds(self.total_steps - step + later_steps,
                          self._pace(prefix, step, time.time(), steps_per_sec), later_seconds)
    if seconds is None:
      return "eta at the next line"
    return f"eta {_fmt_eta(seconds)}" + (f" + {unknown}" if unknown else "")

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
