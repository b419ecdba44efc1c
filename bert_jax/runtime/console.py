"""The console's lines: every program's header, progress with rate and ETA, and heartbeats
while a step of unknown length runs."""
import sys
import threading
import time
from typing import Callable, Optional, Union

import jax
import numpy as np


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


def format_eta(seconds: float) -> str:
  """H:MM:SS of `seconds` (at least 0)."""
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
                     f"eta {format_eta((self.total - self.done) / max(rate, 1e-9))}")
    return text + f" | {rate:,.1f} {self.unit}/s"

  def close(self) -> None:
    seconds = time.time() - self._start
    self._print(f"{self.done:,} {self.unit} in {format_eta(seconds)} "
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
                  else f"{format_eta(now - start)} so far")
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
