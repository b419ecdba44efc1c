"""SIGTERM (preemption) and SIGINT (Ctrl-C) ask a training loop to save and stop.

Both entry points (bert_jax.pretrain, bert_jax.finetune) check `StopSignals.name` before
each step: once a signal has arrived they save a checkpoint, wait for it, print where it
is and return; the same command resumes.
"""
import signal


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
