"""launch/local_multiprocess.sh passes Ctrl-C on to every process and waits for each to end."""
import os
import signal
import subprocess
import sys
import time

from tests.fixtures.repo import LAUNCH

_CHILD = """
import os, signal, sys, time
def stop(signum, frame):
  time.sleep(1.0)  # a checkpoint being saved
  print("saved at the signal", signal.Signals(signum).name, flush=True)
  sys.exit(128 + signum)
signal.signal(signal.SIGTERM, stop)
print("started", flush=True)
time.sleep(120)
"""


# A shell started with SIGINT ignored (a suite run as a background job of a non-interactive
# shell) cannot trap it: the launcher starts as a terminal's foreground command would, SIGINT
# at its default.
_SIGINT_DEFAULT = ("import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
                   "os.execvp(sys.argv[1], sys.argv[1:])")


def _launch(tmp_path, log):
  child = tmp_path / "child.py"
  child.write_text(_CHILD)
  return subprocess.Popen([sys.executable, "-c", _SIGINT_DEFAULT, "bash", str(LAUNCH), "2",
                           sys.executable, str(child)], stdout=log, stderr=subprocess.STDOUT,
                          start_new_session=True)


def _wait_for(path, text, count, seconds=60):
  deadline = time.time() + seconds
  while time.time() < deadline:
    if path.read_text().count(text) >= count:
      return
    time.sleep(0.2)
  raise AssertionError(f"{path.read_text()!r} has not {count} x {text!r}")


def test_ctrl_c_stops_every_process_after_it_saved(tmp_path):
  out = tmp_path / "out.txt"
  with out.open("w") as log:
    launcher = _launch(tmp_path, log)
    _wait_for(out, "started", 2)
    os.killpg(launcher.pid, signal.SIGINT)  # a terminal's Ctrl-C: the launcher's group only
    assert launcher.wait(timeout=60) == 130
  text = out.read_text()
  assert "[0] saved at the signal SIGTERM" in text and "[1] saved at the signal SIGTERM" in text


def test_a_second_ctrl_c_kills_at_once(tmp_path):
  out = tmp_path / "out.txt"
  with out.open("w") as log:
    launcher = _launch(tmp_path, log)
    _wait_for(out, "started", 2)
    os.killpg(launcher.pid, signal.SIGINT)
    _wait_for(out, "stopping every process", 1)
    os.killpg(launcher.pid, signal.SIGINT)
    start = time.time()
    assert launcher.wait(timeout=60) == 130
    assert time.time() - start < 0.9  # before the children's saves would end
  assert "saved at the signal" not in out.read_text()
