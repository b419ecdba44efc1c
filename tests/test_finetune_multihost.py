"""Fine-tuning as 2 processes (launch/local_multiprocess.sh): every process reaches the end.

The GLUE config is the default one (length buckets, eval, export, the train and eval steps
compiled ahead in a background thread); only the data and the checkpoint are the test's.
Each process cuts its rows out of the same global batches, so the run's losses are those of
one process over all the devices.
"""
import json
import signal
import subprocess
import sys

import numpy as np
import pytest

from bert_jax import finetune
from tests.fixtures import multiprocess
from tests.fixtures.repo import LAUNCH
from tests.fixtures.repo import ROOT
from tests.fixtures.repo import child_env
from tests.fixtures.repo import load_config

# Two fine-tuning processes and one in this process: an end-to-end run.
# The one-process run it compares with has 8 fake CPU devices (tests/device_split.py).
pytestmark = [pytest.mark.slow, pytest.mark.multiprocess, pytest.mark.multidevice]


def test_two_process_glue_run_reaches_the_end_and_matches_one_process(
    pretrained, glue_dir, tmp_path):
  workdir = tmp_path / "two_processes"
  args = [str(LAUNCH), "2", sys.executable, "-m", "bert_jax.finetune",
          "--config", "configs/glue.py:task=mrpc", "--workdir", str(workdir),
          f"--config.init_checkpoint={pretrained}", f"--config.data_dir={glue_dir}"]
  proc = subprocess.Popen(args, cwd=ROOT, env=child_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)

  # Meanwhile: the same run in this process (8 devices).
  c = load_config("glue", "task=mrpc")
  c.data_dir, c.init_checkpoint = glue_dir, pretrained
  want = finetune.finetune(c, str(tmp_path / "one_process"))

  out, _ = proc.communicate(timeout=900)
  assert proc.returncode == 0, out[-5000:]
  lines = out.splitlines()
  assert any(l.startswith("[0] time: compile ") for l in lines), out[-3000:]
  assert not any(l.startswith("[1] time: ") for l in lines)  # only process 0 reports
  assert any(l.startswith("[0] wrote ") and "export" in l for l in lines), out[-3000:]
  got = json.loads((workdir / "eval_results.json").read_text())
  assert set(got) == set(want)
  for key in ("accuracy", "f1"):
    np.testing.assert_allclose(got[key], want[key], atol=1e-6)
  def losses(run_dir):
    records = [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["seed0_train_loss"] for r in records if "seed0_train_loss" in r]

  mp, ref = losses(workdir), losses(tmp_path / "one_process")
  assert len(mp) == len(ref) >= 1
  np.testing.assert_allclose(mp, ref, atol=1e-5, rtol=0)


def test_a_sigterm_to_one_process_stops_both_at_one_step_and_the_same_command_finishes(
    pretrained, glue_dir, tmp_path):
  # Batches of 4: 8 steps an epoch, so that the signal lands in training.
  args = ["--config", "configs/glue.py:task=mrpc", f"--config.init_checkpoint={pretrained}",
          f"--config.data_dir={glue_dir}", "--config.log_every=1", "--config.batch_size=4"]
  job = multiprocess.Job("bert_jax.finetune", 2, tmp_path / "run", args)
  job.wait_for("seed0_train step 2/")
  job.signal(signal.SIGTERM, 1)  # process 0, which prints, hears of it from process 1
  assert job.statuses(60) == [143, 143], job.all_text()
  saved = job.checkpoints("finetune_checkpoints")
  assert len(saved) == 1 and saved[0] >= 2, saved
  assert f"SIGTERM: saved checkpoint at seed 0 step {saved[0]}" in job.text(0), job.all_text()
  assert not (job.workdir / "eval_results.json").exists()

  finished = multiprocess.Job("bert_jax.finetune", 2, job.workdir, args)
  assert finished.statuses(900) == [0, 0], finished.all_text()
  assert json.loads((job.workdir / "eval_results.json").read_text())["accuracy"] > 0
