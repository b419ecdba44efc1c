"""Where a program's wall time went: compilation, and the phases it names.

Compile time is what JAX's monitoring events report (a cache load included); compilations in
other threads (ahead_compile.py) are printed apart, the main thread's waits for them count as
compile. `other` is the rest since the process started, so the parts add up to the total.
"""
import collections
import contextlib
import os
import threading
import time
from typing import Optional

from jax import monitoring

_COMPILE_EVENTS = ("/jax/core/compile/jaxpr_trace_duration",
                   "/jax/core/compile/jaxpr_to_mlir_module_duration",
                   "/jax/core/compile/backend_compile_duration")
_BACKEND_COMPILE = _COMPILE_EVENTS[-1]


class _CompileClock:
  """Seconds JAX spent compiling: `seconds` held the run up (main-thread compiles and waits),
  `background_seconds` ran beside it in other threads."""

  def __init__(self):
    self.seconds, self.background_seconds, self.programs = 0.0, 0.0, 0
    self._lock = threading.Lock()
    monitoring.register_event_duration_secs_listener(self._on_event)

  def _on_event(self, event: str, duration: float, **_) -> None:
    if event in _COMPILE_EVENTS:
      main = threading.current_thread() is threading.main_thread()
      with self._lock:
        if main:
          self.seconds += duration
        else:
          self.background_seconds += duration
        self.programs += event == _BACKEND_COMPILE

  def waited(self, seconds: float) -> None:
    """The main thread waited `seconds` for a compilation running in another thread."""
    with self._lock:
      self.seconds += seconds


_clock = None
_clock_lock = threading.Lock()


def compile_clock() -> _CompileClock:
  """The process's one listener (JAX keeps listeners for the process's life)."""
  global _clock
  with _clock_lock:
    if _clock is None:
      _clock = _CompileClock()
  return _clock


def process_start_time() -> float:
  """When this process started (time.time() scale), from /proc on Linux; else now."""
  try:
    with open("/proc/self/stat") as f:
      ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/stat") as f:
      boot = next(int(line.split()[1]) for line in f if line.startswith("btime"))
    return boot + ticks / os.sysconf("SC_CLK_TCK")
  except (OSError, ValueError, IndexError, StopIteration):
    return time.time()


class TimeSplit:
  """Wall time by phase since the process started, compilations apart (counted from the first
  `compile_clock()` call: make it where the program's module is imported)."""

  def __init__(self):
    self._clock = compile_clock()
    self._start = process_start_time()
    self.phases = collections.OrderedDict()
    self.counts = collections.Counter()  # how many times each phase ran

  @contextlib.contextmanager
  def phase(self, name: str):
    t, compiled = time.time(), self._clock.seconds
    try:
      yield
    finally:
      own = (time.time() - t) - (self._clock.seconds - compiled)
      self.phases[name] = self.phases.get(name, 0.0) + max(own, 0.0)
      self.counts[name] += 1

  def mean(self, name: str) -> Optional[float]:
    """The mean seconds of one `name` phase, compilations apart (None: none ran yet)."""
    return self.phases[name] / self.counts[name] if self.counts[name] else None

  def seconds(self) -> dict[str, float]:
    """{'compile', each phase, 'other', 'total'} in seconds; the parts add up to the total."""
    total = time.time() - self._start
    out = {"compile": self._clock.seconds, **self.phases}
    out["other"] = max(total - sum(out.values()), 0.0)
    out["total"] = total
    return out

  def line(self) -> str:
    s = self.seconds()
    ahead = self._clock.background_seconds
    parts = [f"compile {s.pop('compile'):.0f} s ({self._clock.programs} programs"
             + (f"; {ahead:.0f} s more compiled ahead, beside the work)" if ahead >= 0.5 else ")")]
    total = s.pop("total")
    parts += [f"{name} {value:.0f} s" for name, value in s.items()]
    return f"time: {', '.join(parts)}; total {total:.0f} s"
