"""Ctrl-C or SIGTERM during a run's first compile ends the program within seconds.

XLA's compiler keeps the main thread in C++, where Python runs no signal handler; with nothing
trained yet there is nothing to save, so the program says so and exits with the signal's
status (bert_jax.runtime.stop_signals.first_compile).
"""
import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from bert_jax.runtime import stop_signals
from tests.fixtures.repo import ROOT
from tests.fixtures.repo import child_env

_MESSAGE = ("stopped while compiling the train step, before the first step: nothing trained "
            "yet to save; exiting (the same command starts again)")

# A stand-in for the compiler: the main thread waits in C (a read from a pipe nobody writes to,
# which Python retries after running a handler) until the signal's status ends the process.
_CHILD = """
import os, signal, sys
from bert_jax.runtime import stop_signals
signal.signal(signal.SIGINT, signal.SIG_IGN if "ignored" in sys.argv else signal.default_int_handler)
read, write = os.pipe()
with stop_signals.first_compile("the train step"):
  print("compiling", flush=True)
  if "at_the_end" in sys.argv:
    os.kill(os.getpid(), signal.SIGTERM)
  elif "ignored" in sys.argv:
    os.kill(os.getpid(), signal.SIGINT)
  else:
    os.read(read, 1)
print("compiled", flush=True)
"""


def _start(*args):
  return subprocess.Popen([sys.executable, "-c", _CHILD, *args], cwd=ROOT, env=child_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_during_the_compile_exits_at_once_with_its_status(sig):
  proc = _start()
  assert proc.stdout.readline() == "compiling\n"
  proc.send_signal(sig)
  start = time.time()
  out, err = proc.communicate(timeout=60)
  assert time.time() - start < 5
  assert proc.returncode == stop_signals.exit_status(sig.name) == 128 + sig
  assert out == f"{sig.name}: {_MESSAGE}\n"
  assert "Traceback" not in err


def test_a_signal_as_the_compile_ends_exits_the_same_way():
  proc = _start("at_the_end")
  out, err = proc.communicate(timeout=60)
  assert proc.returncode == 143
  assert out == f"compiling\nSIGTERM: {_MESSAGE}\n", err


def test_an_ignored_sigint_stays_ignored():
  """A `nohup` or `cmd &` job ignores SIGINT: the compile goes on."""
  proc = _start("ignored")
  out, err = proc.communicate(timeout=60)
  assert proc.returncode == 0, err
  assert out == "compiling\ncompiled\n"


def test_after_the_compile_the_runs_handlers_and_the_wakeup_fd_are_back():
  """After the first step a stop saves first, as before: the run's own handlers are back."""
  stop = stop_signals.StopSignals()
  try:
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with stop_signals.first_compile():
      assert signal.getsignal(signal.SIGTERM) is not before[signal.SIGTERM]
    assert {s: signal.getsignal(s) for s in before} == before
    assert signal.set_wakeup_fd(-1) == -1  # none was set before the block
  finally:
    stop.restore()
  deadline = time.time() + 10
  while any(t.name == "stop-during-compile" for t in threading.enumerate()):
    assert time.time() < deadline, "the watching thread did not end"
    time.sleep(0.05)


def _ctrl_c_during(args: list, compiling: str) -> tuple:
  """Runs `python -m ARGS`, sends SIGINT 1 s after the line starting with `compiling`;
  (its stdout after that line, stderr, exit status, seconds from the signal to the exit)."""
  proc = subprocess.Popen(
      [sys.executable, "-m", *args], cwd=ROOT, env=child_env(PYTHONUNBUFFERED="1"),
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
      preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
  lines = []
  for line in proc.stdout:
    lines.append(line)
    if line.startswith(compiling):
      break
  else:
    pytest.fail("".join(lines) + proc.stderr.read())
  time.sleep(1.0)
  proc.send_signal(signal.SIGINT)
  start = time.time()
  out, err = proc.communicate(timeout=120)
  return out, err, proc.returncode, time.time() - start


@pytest.mark.slow
def test_ctrl_c_during_the_quick_starts_first_compile(tmp_path):
  """The README's quick start stopped while it compiles (no compilation cache: a new user's
  first run): out within seconds, status 130, one line saying nothing was lost."""
  workdir = tmp_path / "tiny"
  out, err, status, seconds = _ctrl_c_during(
      ["bert_jax.pretrain", "--config", "configs/pretrain.py:tiny", "--workdir", str(workdir),
       "--config.compile_cache=off"], "compiling the train step")
  assert status == 130, out + err
  assert seconds < 15, seconds  # 0.1 s on an idle 2-core CPU
  # The signal lands in the compile, or (a machine slow to get there) while the run starts.
  assert out in (f"SIGINT: {_MESSAGE}\n",
                 f"SIGINT: {_MESSAGE.replace('compiling the train step', 'starting the run')}\n")
  assert "Traceback" not in err
  assert not (workdir / "checkpoints").exists() or not os.listdir(workdir / "checkpoints")


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                    reason="libtpu is not installed (pip install -e '.[tpu]')")
def test_ctrl_c_while_aot_compile_compiles_for_a_tpu():
  """aot_compile's compile (minutes for base on a pod slice) stops within seconds too."""
  out, err, status, seconds = _ctrl_c_during(
      ["bert_jax.aot_compile", "--config", "configs/pretrain.py:tiny", "--topology", "v5e:2x2"],
      "compiling tiny for v5e:2x2")
  assert status == 130, out + err
  assert seconds < 15, seconds
  assert out == ("SIGINT: stopped while compiling tiny for v5e:2x2, before its report: nothing "
                 "written; exiting\n")
  assert "Traceback" not in err


# A fine-tune's zero-shot scoring, before its first step, with a scoring that waits in C as
# the compiler does.
_ZERO_SHOT = """
import os, types
from bert_jax.finetuning import evaluation
from bert_jax.runtime import time_split
read, write = os.pipe()

def scoring(*args, **kwargs):
  print("scoring", flush=True)
  os.read(read, 1)

scorer = types.SimpleNamespace(task=types.SimpleNamespace(eval_sets=[]), score=scoring)
evaluation.zero_shot(scorer, None, time_split.TimeSplit(), False)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_during_the_zero_shot_scoring_exits_at_once(sig):
  proc = subprocess.Popen([sys.executable, "-c", _ZERO_SHOT], cwd=ROOT, env=child_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
  assert proc.stdout.readline() == "scoring\n"
  proc.send_signal(sig)
  start = time.time()
  out, err = proc.communicate(timeout=60)
  assert time.time() - start < 5
  assert proc.returncode == 128 + sig, err
  assert out == (f"{sig.name}: stopped while scoring the init checkpoint before training, "
                 "before the first step: nothing trained yet to save; exiting (the same command "
                 "starts again)\n")

