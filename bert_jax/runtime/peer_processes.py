"""The other processes of a multi-process run: one stop step agreed by all, a lost one noticed.

Hosts get their SIGTERM at different moments; a process that saved alone would wait in the
next collective for ever. So a signal is posted to the JAX coordination service, each process
reports its stop-check count at a barrier, and all stop at the next check after the largest
(as JAX's preemption sync point, which is not used: it hears SIGTERM alone and does not say
which signal came). Until a signal arrives a check only takes a lock.

`Watchdog` asks the service which processes are alive and ends this one naming a lost one; a
process ending in order first records its exit status (`record_exit`), so it is not taken
for lost.
"""
import os
import signal
import sys
import threading
import time
import weakref
from typing import Optional

# Every key this module writes in the coordination service's store starts with this.
_PREFIX = "bert_jax/"
# How long the watchdog waits between two questions to the service.
_WATCH_INTERVAL_SECONDS = 2.0
# How long a listener blocks on the store before looking whether it was closed.
_LISTEN_MS = 1000
# The barrier of an agreement waits this long for the other processes' listeners.
_BARRIER_MS = 600_000
# How long process 0 waits at its exit for the others to leave.
_LEAVE_LAST_SECONDS = 30.0
# The status a process ends with when another was lost.
LOST_PEER_STATUS = 1
# This process's Watchdog, once started.
_WATCHDOG = None
# The agreements of this process (their listeners end at its exit).
_AGREEMENTS = weakref.WeakSet()
# This process has recorded its exit status: it is on its way out.
_EXITING = False


def client():
  """The coordination service's client of this process, or None in a one-process run."""
  if "jax" not in sys.modules:  # a tool that never started JAX (nor its distributed runtime)
    return None
  from jax._src import distributed  # pylint: disable=g-import-not-at-top
  return distributed.global_state.client


def _say(line: str) -> None:
  for stream in (sys.stdout, sys.stderr):
    try:
      stream.flush()
    except (OSError, ValueError):
      pass
  print(line, file=sys.stderr, flush=True)


def _end(status: int) -> None:
  """Ends this process now (a lost peer, or one that ended before its first step)."""
  from absl import logging  # pylint: disable=g-import-not-at-top
  if client() is not None:
    _leave()
  logging.flush()
  os._exit(status)  # pylint: disable=protected-access


def settle_before_failing() -> None:
  """Before a multi-process program ends with an error, names a lost process first (gloo's
  "connection reset by peer" does not say which)."""
  if _WATCHDOG is not None:
    _WATCHDOG.settle()
    _WATCHDOG.failing = True


def record_exit(status: int) -> None:
  """Records this process's exit status for the others' watchdogs; process 0 then waits for
  the others to leave. Ends this module's threads: a daemon thread inside the runtime at
  shutdown aborts the process."""
  global _EXITING
  c = client()
  if c is None:
    return
  _EXITING = True
  import jax  # pylint: disable=g-import-not-at-top
  try:
    c.key_value_set(f"{_PREFIX}exit/{jax.process_index()}", str(status), allow_overwrite=True)
  except Exception:  # pylint: disable=broad-except
    return  # the service is gone: nobody is left to tell
  _leave()


def _leave() -> None:
  """Ends this module's threads and leaves the service; the others disconnect now, so process 0
  sees them go at once rather than after their heartbeats time out."""
  me = threading.current_thread()
  if _WATCHDOG is not None and me is not _WATCHDOG.thread:
    _WATCHDOG.stop()
  for agreement in list(_AGREEMENTS):
    agreement.close()
    if me is not agreement.thread:
      agreement.thread.join(2 * _LISTEN_MS / 1000)
  import jax  # pylint: disable=g-import-not-at-top
  if jax.process_index() == 0:
    _leave_last()
  else:
    disconnect = threading.Thread(target=jax.distributed.shutdown, daemon=True,
                                  name="disconnect")
    disconnect.start()
    disconnect.join(_LEAVE_LAST_SECONDS / 3)


def _leave_last() -> None:
  """On process 0, waits (at most `_LEAVE_LAST_SECONDS`) for the others to leave: a client still
  shutting down when the service goes away fails fatally."""
  c = client()
  import jax  # pylint: disable=g-import-not-at-top
  if c is None or jax.process_count() == 1:
    return
  everyone = list(range(jax.process_count()))

  def wait():
    # Answered once each live process's watchdog has asked too, or it has left.
    while set(c.get_live_nodes(everyone)) - {0}:
      time.sleep(0.1)

  waiter = threading.Thread(target=wait, daemon=True, name="leave-last")
  waiter.start()
  waiter.join(_LEAVE_LAST_SECONDS)


class Watchdog:
  """A daemon thread that ends this process when another one of the run is lost.

  heartbeat_timeout (seconds) is for the message; `orderly` are the exit statuses of a process
  that ended in order.
  """

  def __init__(self, heartbeat_timeout: int, orderly: tuple[int, ...]):
    import jax  # pylint: disable=g-import-not-at-top
    global _WATCHDOG
    self._client, self._timeout, self._orderly = client(), heartbeat_timeout, orderly
    self._me, self._count = jax.process_index(), jax.process_count()
    self._rounds, self._round_done = 0, threading.Condition()
    self.failing = False  # this process is ending with an error of its own
    self._stopped = threading.Event()
    self.thread = threading.Thread(target=self._watch, daemon=True, name="peer-watchdog")
    self.thread.start()
    _WATCHDOG = self

  def _watch(self) -> None:
    everyone = list(range(self._count))
    while not self._stopped.is_set():
      try:
        live = self._client.get_live_nodes(everyone)
        ended = {int(k.rsplit("/", 1)[1]): int(v)
                 for k, v in self._client.key_value_dir_get(f"{_PREFIX}exit/")}
      except Exception:  # pylint: disable=broad-except
        if _EXITING:
          return  # this process shut the service down on its way out
        self._lost(0, "is gone, and with it the coordination service it hosts")
        return
      for process, status in sorted(ended.items()):
        if process != self._me:  # one failing while it is still here (process 0 leaves last)
          self._check_ended(process, status)
      for process in sorted(set(everyone) - set(live) - set(ended)):
        self._lost(process, "stopped without a word (killed, out of memory, or its host lost; "
                            f"noticed after the {self._timeout} s heartbeat timeout)")
      with self._round_done:
        self._rounds += 1
        self._round_done.notify_all()
      self._stopped.wait(_WATCH_INTERVAL_SECONDS)

  def stop(self) -> None:
    """Ends the thread once its pending question is answered."""
    self._stopped.set()
    self.thread.join(_WATCH_INTERVAL_SECONDS + 3)

  def settle(self) -> None:
    """Waits for a watchdog round starting after now: a lost process ends this one, named."""
    with self._round_done:
      first = self._rounds + 2
      self._round_done.wait_for(lambda: self._rounds >= first,
                                self._timeout + 3 * _WATCH_INTERVAL_SECONDS)

  def _check_ended(self, process: int, status: int) -> None:
    """Ends this process unless `process` ended in order (status 0, or an agreed stop's)."""
    if status not in self._orderly:
      self._lost(process, f"ended with status {status} (its own output says why)")

  def _lost(self, process: int, why: str) -> None:
    if self.failing or _EXITING:
      return  # (a process that fails or ends on its own says why itself)
    _say(f"bert_jax: process {process} of {self._count} {why}; ending process {self._me} "
         f"too (status {LOST_PEER_STATUS}): the same command resumes from the last checkpoint")
    _end(LOST_PEER_STATUS)


class StopAgreement:
  """One stop point agreed by every process, after a signal that reached any of them.

  `post(name)` makes a signal known (any process, any thread); `reached()`, called at the same
  places in the same order on every process, is True at the same check on all. `name` is the
  first signal posted. `generation` tells this run's keys from an earlier agreement's.
  """

  def __init__(self, generation: int):
    import jax  # pylint: disable=g-import-not-at-top
    self._client = client()
    self._me = jax.process_index()
    self._base = f"{_PREFIX}stop/{generation}/"
    self._lock = threading.Lock()
    self._checks = 0
    self._stop_at: Optional[int] = None
    self.name: Optional[str] = None
    self._closed = False
    self.thread = threading.Thread(target=self._listen, daemon=True, name="stop-agreement")
    self.thread.start()
    _AGREEMENTS.add(self)

  def post(self, name: str, exited: bool = False) -> None:
    """Makes signal `name` known; the first posted wins. exited: this process ends at once
    (nothing trained yet), so the others end too."""
    try:
      self._client.key_value_set(self._base + ("exited" if exited else "notice"), name)
    except Exception:  # pylint: disable=broad-except
      pass  # another process posted first (the key exists), or the service is gone

  def reached(self) -> bool:
    """One check: whether every process stops here."""
    with self._lock:
      self._checks += 1
      return self._stop_at is not None and self._checks >= self._stop_at

  def close(self) -> None:
    """Ends the listener (within a second); a stop not yet agreed is not waited for."""
    self._closed = True

  def _listen(self) -> None:
    agreed = False
    while not self._closed:
      try:
        exited = self._client.key_value_try_get(self._base + "exited")
      except Exception:  # pylint: disable=broad-except
        exited = None  # (not posted)
      if exited:
        _say(f"{exited}: another process stopped before the first step (nothing trained yet "
             f"to save); process {self._me} ends too (the same command starts again)")
        _end(128 + int(signal.Signals[exited]))  # as stop_signals.exit_status
      if agreed:
        time.sleep(_LISTEN_MS / 1000)
        continue
      try:
        notice = self._client.blocking_key_value_get(self._base + "notice", _LISTEN_MS)
      except Exception:  # pylint: disable=broad-except
        continue  # (not posted within the wait: ask again)
      self._agree(notice)
      agreed = True

  def _agree(self, name: str) -> None:
    """Reports this process's check count, meets the others, stops after the largest."""
    with self._lock:  # no check is made until the point is set
      try:
        self._client.key_value_set(f"{self._base}checks/{self._me}", str(self._checks))
        self._client.wait_at_barrier(self._base + "barrier", _BARRIER_MS)
        counts = [int(v) for _, v in self._client.key_value_dir_get(self._base + "checks/")]
      except Exception as e:  # pylint: disable=broad-except
        # A process is gone (the watchdog ends this one) or the service is: no stop point.
        _say(f"bert_jax: {name} could not be agreed with the other processes ({e}); "
             "not stopping on it")
        return
      self.name = name
      self._stop_at = max(counts) + 1
