"""SIGTERM (preemption), SIGINT (Ctrl-C) and SIGHUP ask a training loop to save and stop.

The entry points call `StopSignals.reached()` before each step (and evaluation batch): after
a signal they save, print where, and return; the same command resumes. In a multi-process
run every process stops at the same check (peer_processes.StopAgreement). The exit status is
128 + the signal's number, so job controllers (Kubernetes' OnFailure, Slurm's requeue)
restart a preempted run instead of taking it for finished. During the first compile
(`first_compile`) nothing has been trained, so the process exits at once. Once training is over
(`training_over`), a signal lets the last writes (checkpoint, export, results) finish and is
noted; a second Ctrl-C exits at once, in one line, leaving what was being written to the same
command.
"""
import itertools
import os
import signal
import sys
import threading
from typing import Optional

from bert_jax.runtime import peer_processes

# The signals that stop a training run after a save (SIGHUP: a run started in a terminal that
# closed would otherwise die at once and lose every step since its last checkpoint).
STOPPING = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# The exit statuses of a process that ended in order: done, or stopped by one of them.
ORDERLY_STATUSES = (0,) + tuple(128 + int(sig) for sig in STOPPING)
# Numbers the agreements of one process, so that each run's keys are its own.
_GENERATIONS = itertools.count(1)


def exit_status(signal_name: str) -> int:
  """The exit status of a run stopped by `signal_name` ('SIGTERM', 'SIGINT'): 128 + its number."""
  return 128 + int(signal.Signals[signal_name])


class StopSignals:
  """Installs the handlers; `name` is the signal that stops the run, None before one.

  In a multi-process run `name` is the first signal any process received, set when `reached()`
  first says True. A second Ctrl-C during the save exits at once. After `training_over()` a
  signal is noted in `name` and said in a line, and the last writes go on; a multi-process run
  never leaves then (a process that left would strand the others in the last checkpoint's and
  export's collectives), a single process leaves at a second Ctrl-C.
  """

  def __init__(self, starting: bool = False):
    self.name = None
    # Until `started()`, a signal ends the program at once: nothing is trained yet.
    self._starting = starting
    self._over = False
    self._interrupts = 0  # Ctrl-Cs: the second one exits at once
    self._agreement = None
    if peer_processes.client() is not None:
      self._agreement = peer_processes.StopAgreement(next(_GENERATIONS))
    # A signal the process was started to ignore (SIGINT of a `nohup` or `cmd &` job) stays so.
    self._previous = {sig: signal.signal(sig, self._handle)
                      for sig in STOPPING if signal.getsignal(sig) is not signal.SIG_IGN}

  def _handle(self, signum, frame):
    del frame
    name = signal.Signals(signum).name
    self._interrupts += name == "SIGINT"
    if self._interrupts > 1 and not (self._over and self._agreement is not None):
      _exit_at_once(name, AGAIN, self)
    if self._over:
      _say_after_training(name, again_exits=self._agreement is None)
      self.name = self.name or name
      return
    self.name = name
    if self._starting:
      _exit_at_once(name, f"{name}: stopped while starting the run, {NOTHING_TRAINED}", self)
    if self._agreement is not None:  # (a handler must not wait on the network)
      threading.Thread(target=self._agreement.post, args=(self.name,), daemon=True).start()

  def reached(self) -> bool:
    """Whether the run stops here (a signal, or the check all processes agreed on); the caller
    saves, then stops."""
    if self._agreement is None:
      return self.name is not None
    if self._agreement.reached():
      self.name = self._agreement.name
      return True
    return False

  def started(self) -> None:
    """Training begins: from now on a signal stops the run after a save."""
    self._starting = False

  def training_over(self) -> None:
    """Training is over: from now on a signal lets the last writes finish (`name` says it came),
    and the program ends after them."""
    self._over = True

  def post_exit(self, name: str) -> None:
    """This process ends at once on `name` before its first step: the others end too."""
    if self._agreement is not None:
      peer_processes.record_exit(exit_status(name))
      self._agreement.post(name, exited=True)

  def restore(self) -> None:
    if self._agreement is not None:
      self._agreement.close()
      for sig in self._previous:
        signal.signal(sig, _after_training)
      return
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)


def _after_training(signum, frame) -> None:
  """A multi-process run's handler after `restore()`: the run finishes its writes."""
  del frame
  _say_after_training(signal.Signals(signum).name, again_exits=False)


def _say_after_training(name: str, again_exits: bool) -> None:
  print(f"{name} once training is over: its last writes (checkpoint, export, results) finish, "
        "then the program exits" + ("; Ctrl-C again exits at once and leaves them to the same "
                                    "command" if again_exits else " (collective, seconds)"),
        file=sys.stderr, flush=True)


NOTHING_TRAINED = ("before the first step: nothing trained yet to save; exiting (the same "
                   "command starts again)")
# What a second Ctrl-C says as it ends the program at once.
AGAIN = ("SIGINT again: exiting at once; a checkpoint or export being written is left unfinished, "
         "the newest whole checkpoint stays, and the same command goes on from it")


def _exit_at_once(name: str, line: str, stop: Optional[StopSignals]) -> None:
  """Prints `line` and ends the process with `name`'s status at once; in a multi-process run
  the others end too (`stop`)."""
  if stop is not None:
    stop.post_exit(name)
  print(line, flush=True)
  for stream in (sys.stdout, sys.stderr):
    try:
      stream.flush()
    except (OSError, ValueError):
      pass
  os._exit(exit_status(name))  # pylint: disable=protected-access


class first_compile:  # pylint: disable=invalid-name
  """Around a run's first compile: SIGINT / SIGTERM end the process within a second.

  Python runs handlers between bytecodes in the main thread, which XLA's compiler holds in C++
  for a long time. The C handler still writes to the wakeup fd (`signal.set_wakeup_fd`): a
  thread reading it says what is lost (`lost`; nothing trained since the start) and exits with
  `exit_status`. `doing` replaces 'compiling {what}' for a block doing more than compile; with
  `stop` (multi-process) the others end too. Outside the main thread it does nothing.
  """

  def __init__(self, what: str = "the train step", lost: str = NOTHING_TRAINED,
               doing: Optional[str] = None, stop: Optional[StopSignals] = None):
    self.doing, self.lost, self.stop = doing or f"compiling {what}", lost, stop
    self._active = False

  def __enter__(self):
    if threading.current_thread() is not threading.main_thread():
      return self
    self._active = True
    self._lock = threading.Lock()
    self._done = False
    self._arrived = None  # the signal's name, once the main thread's handler has run
    self._read, self._write = os.pipe()
    os.set_blocking(self._write, False)  # (set_wakeup_fd requires it)
    # A signal the process ignores (a `nohup` or `cmd &` job's SIGINT) stays ignored.
    self._handlers = {sig: signal.signal(sig, self._record)
                      for sig in STOPPING if signal.getsignal(sig) not in (signal.SIG_IGN, None)}
    self._wakeup = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
    threading.Thread(target=self._watch, daemon=True, name="stop-during-compile").start()
    return self

  def _record(self, signum, frame):
    del frame
    self._arrived = signal.Signals(signum).name

  def _watch(self) -> None:
    try:
      while True:
        data = os.read(self._read, 64)
        for number in data:
          if number == 0:  # __exit__'s word (no signal has the number 0)
            return
          if number in STOPPING and number in self._handlers:
            self._exit(signal.Signals(number).name)
          elif self._wakeup >= 0:  # another signal: for the wakeup fd the block replaced
            os.write(self._wakeup, bytes([number]))
    except OSError:
      return
    finally:
      os.close(self._read)

  def _exit(self, name: str) -> None:
    with self._lock:
      if self._done:
        return
      self._done = True
      _exit_at_once(name, f"{name}: stopped while {self.doing}, {self.lost}", self.stop)

  def __exit__(self, *exc):
    if not self._active:
      return
    with self._lock:
      done, self._done = self._done, True
    signal.set_wakeup_fd(self._wakeup)
    for sig, handler in self._handlers.items():
      signal.signal(sig, handler)
    try:
      os.write(self._write, b"\0")
    except OSError:
      pass
    os.close(self._write)
    if self._arrived and not done:
      self._done = False
      self._exit(self._arrived)
