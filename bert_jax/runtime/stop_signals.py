"""SIGTERM (preemption) and SIGINT (Ctrl-C) ask a training loop to save and stop.

Both entry points (bert_jax.pretrain, bert_jax.finetune) check `StopSignals.name` before
each step: once a signal has arrived they save a checkpoint, wait for it, print where it
is and return; the same command resumes. The program then exits with 128 + the signal's
number (SIGTERM 143, SIGINT 130), as a shell reports a process the signal ended: a job
controller that restarts failed jobs (Kubernetes' OnFailure, Slurm's requeue) restarts a
preempted run instead of taking it for finished.
"""
import signal


def exit_status(signal_name: str) -> int:
  """The exit status of a run stopped by `signal_name` ('SIGTERM', 'SIGINT'): 128 + its number."""
  return 128 + int(signal.Signals[signal_name])


class StopSignals:
  """Installs the handlers; `name` is the signal that arrived ('SIGTERM' / 'SIGINT'), None before.

  A second Ctrl-C while the checkpoint is being saved interrupts at once. `restore()` puts
  the previous handlers back.
  """

  def __init__(self):
    self.name = None
    # A signal the process was started to ignore (SIGINT of a `nohup` or `cmd &` job) stays so.
    self._previous = {sig: signal.signal(sig, self._handle)
                      for sig in (signal.SIGTERM, signal.SIGINT)
                      if signal.getsignal(sig) is not signal.SIG_IGN}

  def _handle(self, signum, frame):
    del frame
    if signum == signal.SIGINT and self.name == "SIGINT":
      raise KeyboardInterrupt
    self.name = signal.Signals(signum).name

  def restore(self) -> None:
    for sig, handler in self._previous.items():
      signal.signal(sig, handler)
