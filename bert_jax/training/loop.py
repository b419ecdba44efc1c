"""One training loop's bookkeeping, shared by pretraining and fine-tuning.

Both entry points run the same cycle around their own step: before a step, stop on a signal
(save, wait for the save, say where it is, return); after it, add its metrics to the log
window; at a log step, check the state is finite and take the window's sums, steps and
seconds; at a checkpoint step, save. What each logs, what its checkpoints hold and where
its batches come from stay theirs (bert_jax.pretrain, bert_jax.finetune).
"""
import dataclasses
import time
from typing import Any, Optional

import numpy as np

from bert_jax.runtime import stop_signals
from bert_jax.training import train_core


def due(step: int, every: int, last: Optional[int] = None) -> bool:
  """Whether an action run every `every` steps (0: never) runs after `step`; with `last`,
  also after that step (the run's final one)."""
  return bool(every) and step % every == 0 or step == last


@dataclasses.dataclass
class Window:
  """The steps since the last log line: their summed metrics, how many, how long.

  A window a resume cut in two (its checkpoint saved mid-window) holds all its steps, as the
  uninterrupted run's; `carried` and `carried_steps` are the part from before the resume,
  which `seconds` does not time.
  """
  sums: Any
  steps: int
  seconds: float
  nonfinite_steps: int  # steps skipped so far for a NaN/inf loss or gradient
  carried: Optional[dict] = None
  carried_steps: int = 0

  def timed(self, key: str) -> float:
    """The sum of `key` over the steps `seconds` timed."""
    return float(self.sums[key]) - float((self.carried or {}).get(key, 0.0))


class Loop:
  """The bookkeeping of one loop over steps (one seed's, for fine-tuning).

  Args:
    ckpts: the run's TrainCheckpoints.
    stop: the run's StopSignals (installed once per process).
    on_nan: 'stop' or 'skip' (train_core.check_finite).
    is_writer: whether this process prints.
  """

  def __init__(self, ckpts, stop: stop_signals.StopSignals, on_nan: str, is_writer: bool):
    self.ckpts, self.stop, self.on_nan, self.is_writer = ckpts, stop, on_nan, is_writer
    self.stopped_by: Optional[str] = None
    self._sums, self._steps, self._start = train_core.MetricSums(), 0, time.time()
    self._checked: Optional[tuple[int, int]] = None  # (step, steps skipped) checked last
    self._carried: Optional[tuple[int, dict]] = None  # (steps, sums) from before a resume

  def stop_requested(self, preempt: bool = False) -> bool:
    """Whether the run stops before this step: a stop signal arrived (in a multi-process run,
    this is the step every process agreed on), or `preempt`, a test's SIGTERM. The caller
    saves, then calls `stopped`. Called once before each step, on every process."""
    if self.stop.reached() or preempt:
      self.stopped_by = self.stop.name or "SIGTERM"
    return self.stopped_by is not None

  def stopped(self, where: str, beat=None) -> None:
    """Waits for the save made on a stop signal and says where it is: the program's last line,
    so `beat` (the run's console.Heartbeat) is ended first, its thread joined."""
    self.ckpts.wait()
    if beat is not None:
      beat.end()
    if self.is_writer:
      print(f"{self.stopped_by}: saved checkpoint at {where} to {self.ckpts.describe_latest()}; "
            "exiting (the same command resumes it)", flush=True)

  def add(self, metrics) -> None:
    """A step's metrics (on the devices), into the log window."""
    self._sums.add(metrics)
    self._steps += 1

  def check(self, state, step: int) -> int:
    """The NaN guard (train_core.check_finite), once per step however many actions ask;
    returns the steps skipped so far."""
    if self._checked is None or self._checked[0] != step:
      self._checked = (step, train_core.check_finite(state, step, self.on_nan,
                                                     self.ckpts.describe_latest()))
    return self._checked[1]

  def take_window(self, state, step: int) -> Window:
    """At a log step: the window taken (its sums wait for its steps), the state and the
    earlier saves checked, and a new window started."""
    sums, steps, seconds = self._sums.take(), self._steps, time.time() - self._start
    skipped = self.check(state, step)
    self.ckpts.check_saves()
    carried_steps, carried = self._carried or (0, None)
    self._carried = None
    self.restart_window()
    return Window(sums, steps, seconds, skipped, carried, carried_steps)

  def window_record(self) -> Optional[dict]:
    """The log window so far, for a checkpoint's meta (None when it is empty): a run resumed
    from that checkpoint logs the whole window, as the uninterrupted run does."""
    sums = self._sums.peek() if self._steps else None
    if sums is None:
      return None
    return {"steps": self._steps,
            "sums": {k: [np.asarray(v).tolist(), str(np.asarray(v).dtype)]
                     for k, v in sums.items()}}

  def resume_window(self, record: Optional[dict]) -> None:
    """Goes on with the log window a checkpoint's meta recorded (window_record)."""
    if not record:
      return
    sums = {k: np.asarray(v, dtype) for k, (v, dtype) in record["sums"].items()}
    self._sums.start_from(sums)
    self._steps = int(record["steps"])
    self._carried = (self._steps, sums)

  def restart_window(self) -> None:
    """A new window starts now (after work that is not training, such as an evaluation)."""
    self._steps, self._start = 0, time.time()
