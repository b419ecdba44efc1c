"""SIGTERM (preemption), SIGINT (Ctrl-C) and SIGHUP (a closed terminal or a dropped ssh
connection) ask a training loop to save and stop.

Both entry points (bert_jax.pretrain, bert_jax.finetune) call `StopSignals.reached()` before
each step (and fine-tuning before each evaluation batch): once a signal has arrived they save
a checkpoint, wait for it, print where it is and return; the same command resumes. In a
multi-process run a signal that reaches any process stops every process at the same check
(bert_jax.runtime.peer_processes.StopAgreement), so that they save one checkpoint together.
The program then exits with 128 + the signal's number (SIGTERM 143, SIGINT 130, SIGHUP
129), as a shell reports a process the signal ended: a job controller that restarts failed
jobs (Kubernetes' OnFailure, Slurm's requeue) restarts a preempted run instead of taking it
for finished.

A signal during the first compile (`first_compile`) cannot wait for the next step: XLA's
compiler holds the main thread in C++ for tens of seconds, and Python runs a signal handler
only once it returns. Nothing has been trained then, so the program says so and exits at
once with the same status.
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
  """Installs the handlers; `name` is the signal that stops the run ('SIGTERM' / 'SIGINT').

  In one process `name` is the signal that arrived, None before. In a multi-process run it is
  the first signal any process received, set on every process when `reached()` first says
  True. A second Ctrl-C while the checkpoint is being saved interrupts at once. `restore()`
  puts the previous handlers back; in a multi-process run a signal after that (the last
  checkpoint and the export, collective and seconds long) is noted and the run finishes,
  since a process that left would leave the others waiting.
  """

  def __init__(self, starting: bool = False):
    self.name = None
    # Until `started()`, a signal ends the program at once: nothing is trained yet.
    self._starting = starting
    self._agreement = None
    if peer_processes.client() is not None:
      self._agreement = peer_processes.StopAgreement(next(_GENERATIONS))
    # A signal the process was started to ignore (SIGINT of a `nohup` or `cmd &` job) stays so.
    self._previous = {sig: signal.signal(sig, self._handle)
                      for sig in STOPPING if signal.getsignal(sig) is not signal.SIG_IGN}

  def _handle(self, signum, frame):
    del frame
    if signum == signal.SIGINT and self.name == "SIGINT":
      raise KeyboardInterrupt
    self.name = signal.Signals(signum).name
    if self._starting:
      _exit_before_the_first_step(self.name, "starting the run", NOTHING_TRAINED, self)
    if self._agreement is not None:  # (a handler must not wait on the network)
      threading.Thread(target=self._agreement.post, args=(self.name,), daemon=True).start()

  def reached(self) -> bool:
    """Whether the run stops here: a signal arrived (in one process), or this is the check
    every process agreed on (in several); the caller saves, then stops."""
    if self._agreement is None:
      return self.name is not None
    if self._agreement.reached():
      self.name = self._agreement.name
      return True
    return False

  def started(self) -> None:
    """Training begins: from now on a signal stops the run after a save."""
    self._starting = False

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
  """A multi-process run's handler once training is over: the run finishes its writes."""
  del frame
  print(f"{signal.Signals(signum).name} once training is over: its last writes (checkpoint, "
        "export; collective, seconds) finish, then the program exits", file=sys.stderr,
        flush=True)


NOTHING_TRAINED = ("before the first step: nothing trained yet to save; exiting (the same "
                   "command starts again)")


def _exit_before_the_first_step(name: str, doing: str, lost: str,
                                stop: Optional[StopSignals]) -> None:
  """Says what a signal before the first step stopped and ends the process with its status;
  in a multi-process run the others end too (`stop`)."""
  if stop is not None:
    stop.post_exit(name)
  print(f"{name}: stopped while {doing}, {lost}", flush=True)
  for stream in (sys.stdout, sys.stderr):
    try:
      stream.flush()
    except (OSError, ValueError):
      pass
  os._exit(exit_status(name))  # pylint: disable=protected-access


class first_compile:  # pylint: disable=invalid-name
  """Around a run's first compile: SIGINT / SIGTERM end the process within a second.

    with stop_signals.first_compile("the train step"):
      step = jax.jit(fn).lower(*args).compile()

  Python runs signal handlers in the main thread between bytecodes, and the compiler keeps
  the main thread in C++ (33 s for the tiny model on a loaded 2-core CPU). The C-level
  handler still writes the signal's number to the wakeup fd (`signal.set_wakeup_fd`): a
  thread reading it prints what is lost (nothing: no step has run since the start or the
  checkpoint it resumed) and ends the process with `exit_status`, as a stop after a save
  does. A signal that arrives just as the block ends is acted on the same way by the main
  thread. Outside the main thread (where no handler can be installed) it does nothing.

  Args:
    what: what is being compiled, for the message.
    lost: what the stop loses, for the message (a tool that writes nothing before the compile
      ends says so).
    doing: the message's whole phrase for a block that does more than compile (the zero-shot
      scoring before the first step: its first batch compiles, the others run), instead of
      'compiling {what}'.
    stop: the run's StopSignals, in a multi-process run: the other processes end too (they
      cannot train a step without this one).
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
      _exit_before_the_first_step(name, self.doing, self.lost, self.stop)

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
