"""What a signal does in each phase of a run (bert_jax.runtime.stop_signals), in a child process.

During training the first signal asks for a save and a stop, and a second Ctrl-C exits at once
in one line; once training is over a signal lets the last writes finish and says so, and a
second Ctrl-C exits at once. No phase ends in a traceback.
"""
import os
import subprocess
import sys

import pytest

from bert_jax.runtime import stop_signals
from tests.fixtures.repo import ROOT, child_env

# Installs the run's handlers, enters the phase argv[1] names, and sends itself the signals
# of argv[2:] one by one, saying after each what the run would see.
_CHILD = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
from bert_jax.runtime import stop_signals
stop = stop_signals.StopSignals()
stop.started()
if sys.argv[1] == "over":
  stop.training_over()
for name in sys.argv[2:]:
  os.kill(os.getpid(), signal.Signals[name])
  print(f"after {name}: name={stop.name} reached={stop.reached()}", flush=True)
stop.restore()
print("restored", flush=True)
"""


def _run(phase: str, *signals: str) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-c", _CHILD, phase, *signals], cwd=ROOT,
                        env=child_env(), capture_output=True, text=True, timeout=120)


def test_a_signal_during_training_asks_for_a_save_and_a_stop():
  proc = _run("training", "SIGTERM")
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout == "after SIGTERM: name=SIGTERM reached=True\nrestored\n"


def test_a_second_ctrl_c_during_the_save_exits_at_once_in_one_line():
  proc = _run("training", "SIGINT", "SIGINT")
  assert proc.returncode == 130 == stop_signals.exit_status("SIGINT")
  assert proc.stdout == ("after SIGINT: name=SIGINT reached=True\n"
                         f"{stop_signals.AGAIN}\n")
  assert "Traceback" not in proc.stderr and "KeyboardInterrupt" not in proc.stderr


@pytest.mark.parametrize("first", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_once_training_is_over_a_signal_lets_the_writes_finish_and_says_so(first):
  proc = _run("over", first)
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout == f"after {first}: name={first} reached=True\nrestored\n"
  assert proc.stderr.startswith(f"{first} once training is over: its last writes (checkpoint, "
                                "export, results) finish, then the program exits; Ctrl-C again "
                                "exits at once")
  assert proc.stderr.count("\n") == 1, proc.stderr


def test_once_training_is_over_a_second_ctrl_c_exits_at_once():
  proc = _run("over", "SIGTERM", "SIGINT", "SIGINT")
  assert proc.returncode == 130, proc.stderr
  # The SIGTERM is the signal the run saw; each later one is said too, and the second Ctrl-C
  # ends the program.
  assert proc.stdout == ("after SIGTERM: name=SIGTERM reached=True\n"
                         "after SIGINT: name=SIGTERM reached=True\n"
                         f"{stop_signals.AGAIN}\n")
  assert proc.stderr.count("once training is over") == 2
  assert "Traceback" not in proc.stderr


def test_the_line_of_a_second_ctrl_c_names_what_is_kept():
  assert stop_signals.AGAIN.startswith("SIGINT again: exiting at once;")
  assert "the newest whole checkpoint stays" in stop_signals.AGAIN
  assert os.linesep not in stop_signals.AGAIN
