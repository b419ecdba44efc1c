"""A signal that reaches some processes of a multi-process run stops all of them at one step.

Each case starts bert_jax.pretrain as 2 or 4 CPU processes of one JAX job (one device each,
the launcher's flags given directly so that each process's exit status is seen), signals
some of them at a chosen moment, and checks that every process ended within a minute with
the same status, that one checkpoint was saved by all of them at the step they agreed on,
and that the same command resumes to the losses of the run nobody stopped: bitwise, since
with data.host_invariant_stream every process builds the same global batches.

The config is the default tiny one (the fill-mask example and the export included); only
the step count and the log, checkpoint and evaluation frequencies are the test's.
"""
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from bert_jax.checkpoints import folder as checkpoint_folder
from tests.fixtures import multiprocess
from tests.fixtures.repo import LAUNCH
from tests.fixtures.repo import ROOT
from tests.fixtures.repo import child_env

pytestmark = [pytest.mark.slow, pytest.mark.multiprocess]

STEPS = 16
ARGS = ["--config", "configs/pretrain.py:tiny", f"--config.total_steps={STEPS}",
        "--config.log_every=1", f"--config.checkpoint_every={STEPS}",
        "--config.data.host_invariant_stream=True"]
# Every case ends within this many seconds of its last signal.
STOP_SECONDS = 60


class Job(multiprocess.Job):
  """A pretraining run of N processes with the file's arguments."""

  def __init__(self, n: int, workdir: pathlib.Path, cache: pathlib.Path, *extra: str):
    super().__init__("bert_jax.pretrain", n, workdir, [*ARGS, *extra],
                     JAX_COMPILATION_CACHE_DIR=str(cache))

  def losses(self) -> dict[int, float]:
    records = [json.loads(l) for l in (self.workdir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if "loss" in r}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
  """One compilation cache for the file's runs: each topology compiles its step once."""
  return tmp_path_factory.mktemp("compile_cache")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, cache):
  """The losses of the 2-process run that no signal stops."""
  job = Job(2, tmp_path_factory.mktemp("uninterrupted") / "run", cache)
  assert job.statuses(900) == [0, 0], job.all_text()
  losses = job.losses()
  assert sorted(losses) == list(range(1, STEPS + 1))
  return losses


def _stopped_then_resumed(job: Job, cache, status: int, want: dict[int, float],
                          atol: float = 0.0) -> int:
  """Checks a stopped run: every process ended with `status`, one checkpoint, all of them in
  it; then resumes it with the same command and compares its losses with `want` (bitwise
  unless `atol`). Returns the step it stopped at."""
  statuses = job.statuses(STOP_SECONDS)
  assert statuses == [status] * len(job.procs), job.all_text()
  saved = job.checkpoints("checkpoints")
  assert len(saved) == 1, saved
  step = saved[0]
  assert 0 < step < STEPS
  name = signal.Signals(status - 128).name
  assert f"{name}: saved checkpoint at step {step} to " in job.text(0), job.text(0)[-2000:]
  state = job.workdir / "checkpoints" / str(step) / "state"
  assert {p.name for p in state.glob("ocdbt.process_*")} == {
      f"ocdbt.process_{i}" for i in range(len(job.procs))}

  resumed = Job(len(job.procs), job.workdir, cache)
  assert resumed.statuses(900) == [0] * len(job.procs), resumed.all_text()
  assert f"resuming at step {step}" in resumed.text(), resumed.all_text()
  got = resumed.losses()  # every step, before and after the stop
  assert sorted(got) == sorted(want)
  if atol:
    np.testing.assert_allclose([got[k] for k in sorted(got)], [want[k] for k in sorted(want)],
                               atol=atol, rtol=0)
  else:
    assert got == want
  return step


@pytest.mark.parametrize("who, at", [(1, 2), (0, STEPS - 5)], ids=["process1-early",
                                                                   "process0-late"])
def test_sigterm_to_one_process_stops_every_process_at_one_step(tmp_path, cache, uninterrupted,
                                                                who, at):
  job = Job(2, tmp_path / "run", cache)
  job.wait_for(f"step {at}/")
  job.signal(signal.SIGTERM, who)
  step = _stopped_then_resumed(job, cache, 143, uninterrupted)
  assert step >= at


def test_signals_to_two_processes_a_step_apart_agree_on_the_first(tmp_path, cache,
                                                                  uninterrupted):
  job = Job(2, tmp_path / "run", cache)
  job.wait_for("step 3/")
  job.signal(signal.SIGINT, 1)
  job.wait_for("step 4/")
  job.signal(signal.SIGTERM, 0)
  # The first signal posted decides the status of every process: SIGINT's 130.
  _stopped_then_resumed(job, cache, 130, uninterrupted)


@pytest.mark.parametrize("who, at", [(1, 4), (0, 6)], ids=["during-a-save",
                                                           "during-an-evaluation"])
def test_sigterm_during_a_save_or_an_evaluation(tmp_path, cache, uninterrupted, who, at):
  # A checkpoint every 4 steps is saved in the background while step 5 runs; an evaluation
  # of 20 held-out batches follows step 6.
  extra = ("--config.checkpoint_every=4", "--config.eval_every=6", "--config.eval_batches=20")
  job = Job(2, tmp_path / "run", cache, *extra)
  job.wait_for(f"step {at}/")
  job.signal(signal.SIGTERM, who)
  assert job.statuses(STOP_SECONDS) == [143, 143], job.all_text()
  saved = job.checkpoints("checkpoints")
  # The periodic checkpoint of step 4, and the one of the stop (none more: they agreed).
  assert saved[0] == 4 and len(saved) <= 2 and at <= saved[-1] <= at + 3, saved
  assert f"SIGTERM: saved checkpoint at step {saved[-1]} to " in job.text(0), job.all_text()
  resumed = Job(2, job.workdir, cache, *extra)
  assert resumed.statuses(900) == [0, 0], resumed.all_text()
  assert resumed.losses() == uninterrupted


def test_a_signal_during_the_first_compile_ends_every_process_at_once(tmp_path, cache):
  # No compilation cache: the compile takes tens of seconds.
  job = Job(2, tmp_path / "run", cache, "--config.compile_cache=off")
  job.wait_for("compiling the train step, then")
  time.sleep(1.0)
  job.signal(signal.SIGTERM, 1)
  start = time.monotonic()
  assert job.statuses(STOP_SECONDS) == [143, 143], job.all_text()
  assert time.monotonic() - start < 30
  assert "nothing trained yet" in job.text(0) + job.text(1)
  assert not (job.workdir / "checkpoints").exists() or job.checkpoints("checkpoints") == []


def test_four_processes_one_signalled(tmp_path, cache, uninterrupted):
  job = Job(4, tmp_path / "run", cache)
  job.wait_for("step 3/")
  job.signal(signal.SIGTERM, 2)
  # Four devices reduce in another order than two: equal to float32 rounding.
  _stopped_then_resumed(job, cache, 143, uninterrupted, atol=1e-5)


def test_a_killed_process_ends_the_others_with_one_line_and_the_run_resumes(
    tmp_path, cache, uninterrupted):
  workdir = tmp_path / "run"
  args = [str(LAUNCH), "2", sys.executable, "-m", "bert_jax.pretrain", f"--workdir={workdir}",
          *ARGS, "--config.checkpoint_every=4"]
  proc = subprocess.Popen(args, cwd=ROOT, env=child_env(JAX_COMPILATION_CACHE_DIR=str(cache)),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  lines = []
  for line in proc.stdout:
    lines.append(line)
    if line.startswith("[0] step 5/"):
      break
  # Step 4's save commits in the background (both processes' parts written): the kill comes
  # after it, however slow the disk; save(8) waits for it, so the run cannot get far meanwhile.
  deadline = time.monotonic() + 300
  while 4 not in checkpoint_folder.committed_steps(workdir / "checkpoints"):
    assert proc.poll() is None and time.monotonic() < deadline, "".join(lines)[-3000:]
    time.sleep(0.05)
  (pid,) = multiprocess.pids_of(f"--workdir={workdir}", "--process_id=1")
  os.kill(pid, signal.SIGKILL)
  start = time.monotonic()
  out, _ = proc.communicate(timeout=180)
  elapsed = time.monotonic() - start
  out = "".join(lines) + out
  assert proc.returncode == 137, out[-3000:]  # the launcher reports the killed process
  # Process 0 names the lost process in one line, within the heartbeat timeout (60 s) and
  # the watchdog's interval.
  assert "[0] bert_jax: process 1 of 2 stopped without a word" in out, out[-3000:]
  assert elapsed < 60 + 30, elapsed
  assert 4 in sorted(int(p.name) for p in (workdir / "checkpoints").iterdir()
                     if p.name.isdigit())
  resumed = Job(2, workdir, cache, "--config.checkpoint_every=4")
  assert resumed.statuses(900) == [0, 0], resumed.all_text()
  assert resumed.losses() == uninterrupted
