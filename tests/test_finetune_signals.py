"""A fine-tune is never lost: a signal at any moment leaves the finished export or a checkpoint
the same command finishes from; a finished workdir is never replaced by another run."""
import json
import pathlib
import re
import shutil
import time

from flax import traverse_util
import jax
import numpy as np
import pytest

from bert_jax.checkpoints import bundle
from bert_jax.checkpoints import loading
from bert_jax import finetune
from bert_jax.finetuning import evaluation
from bert_jax.runtime import stop_signals
from tests.fixtures.finetuning import glue_config
from tests.fixtures.finetuning import squad_config


def _snapshot(root: pathlib.Path) -> dict:
  return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
          if p.is_file()}


def _results(workdir: pathlib.Path) -> tuple:
  """eval_results.json, the predictions and the exported params."""
  files = {p.name: p.read_text() for p in sorted((workdir / "predictions").iterdir())}
  files["eval_results.json"] = (workdir / "eval_results.json").read_text()
  params = traverse_util.flatten_dict(bundle.load_bundle(str(workdir / "export")).params,
                                      sep="/")
  return files, params


def _assert_same(a: tuple, b: tuple) -> None:
  assert a[0] == b[0]
  assert a[1].keys() == b[1].keys()
  for k in a[1]:
    np.testing.assert_array_equal(a[1][k], b[1][k], err_msg=k)


class _SignalAt(stop_signals.StopSignals):
  """StopSignals whose `name` turns to SIGTERM at its `at`-th reading (every place a run
  looks for a signal: each training step, each evaluation batch, after the export)."""
  at = None
  reads = 0

  @property
  def name(self):
    type(self).reads += 1
    return "SIGTERM" if self.at is not None and type(self).reads >= self.at else None

  @name.setter
  def name(self, value):
    pass


@pytest.mark.slow
def test_a_signal_at_any_moment_leaves_the_export_or_a_checkpoint_that_finishes_the_run(
    pretrained, glue_dir, tmp_path, monkeypatch, capsys):
  monkeypatch.setattr(stop_signals, "StopSignals", _SignalAt)
  # 32 rows in batches of 8: 4 steps an epoch, 2 epochs, 2 seeds, a checkpoint every 3 steps.
  config = lambda: glue_config(glue_dir, pretrained, seeds=2, num_epochs=2.0,  # noqa: E731
                               checkpoint_every=3)
  straight = tmp_path / "straight"
  _SignalAt.at, _SignalAt.reads = None, 0
  want = finetune.finetune(config(), str(straight))
  moments = _SignalAt.reads  # every training step, every eval batch, and after the export
  assert moments >= 20
  assert json.loads((straight / "run.json").read_text())["state"] == "finished"
  # Eleven moments spread from the first read to the last (after the export): steps of both
  # seeds, a checkpoint's step, evaluation batches and the end. Each costs two runs.
  for at in np.unique(np.linspace(1, moments, 11).round().astype(int)):
    workdir = tmp_path / f"signal_{at}"
    _SignalAt.at, _SignalAt.reads = int(at), 0
    out = finetune.finetune(config(), str(workdir))
    if "stopped_by" in out:  # stopped: a checkpoint, no results; the same command finishes
      assert out["stopped_by"] == "SIGTERM"
      assert not (workdir / "eval_results.json").exists()
      assert any(p.name.isdigit() for p in (workdir / "finetune_checkpoints").iterdir()), at
      _SignalAt.at = None
      assert finetune.finetune(config(), str(workdir)) == want, at
    else:  # the signal came after the results and the export: the run is complete
      assert out == want
      assert "arrived while the results were written; they are complete" in (
          capsys.readouterr().out)
    _assert_same(_results(workdir), _results(straight))


@pytest.mark.slow
def test_sigterm_exits_143_after_saving(pretrained, glue_dir, tmp_path, monkeypatch):
  monkeypatch.setattr(stop_signals, "StopSignals", _SignalAt)
  _SignalAt.at, _SignalAt.reads = 2, 0
  monkeypatch.setattr(finetune.cli, "run_config_program",
                      lambda run, *a, **k: run(glue_config(glue_dir, pretrained),
                                               str(tmp_path / "run")))
  with pytest.raises(SystemExit) as e:
    finetune.main([])
  assert e.value.code == 143 == stop_signals.exit_status("SIGTERM")
  assert stop_signals.exit_status("SIGINT") == 130
  assert (tmp_path / "run" / "finetune_checkpoints").is_dir()
  # The stopped run, given where a model is read (embed, Encoder.load, an init checkpoint):
  # the line says it has not finished and how to finish it.
  with pytest.raises(ValueError, match=r"is a fine-tuning run that has not finished .* finish "
                     r"it with the same python -m bert_jax.finetune command \(--workdir "):
    loading.load_pretrained(str(tmp_path / "run"))


@pytest.mark.slow
def test_a_finished_workdir_is_never_replaced_by_another_run(pretrained, glue_dir, squad_dir,
                                                             tmp_path, capsys):
  workdir = tmp_path / "mrpc"
  want = finetune.finetune(glue_config(glue_dir, pretrained), str(workdir))
  before = _snapshot(workdir)
  # Another task, or other settings: one line naming what is there; nothing moved or written.
  with pytest.raises(ValueError, match=r"holds a finished fine-tuning run of mrpc with other "
                     r"settings \(task 'mrpc' -> 'squad'; .*start_over=True"):
    finetune.finetune(squad_config(squad_dir, pretrained), str(workdir))
  with pytest.raises(ValueError, match=r"learning_rate 0.0001 -> 0.001\); this run would "
                                       r"replace its results and export"):
    finetune.finetune(glue_config(glue_dir, pretrained, learning_rate=1e-3), str(workdir))
  assert _snapshot(workdir) == before
  # The same command again: the finished results, nothing run or written.
  capsys.readouterr()
  assert finetune.finetune(glue_config(glue_dir, pretrained, log_every=5), str(workdir)) == want
  out = capsys.readouterr().out
  assert "holds this run, finished" in out and "is missing" not in out
  assert _snapshot(workdir) == before
  # Its export deleted since: written again from the last checkpoint, the same model, the
  # last seed evaluated again to the same results.
  (workdir / "export").rename(tmp_path / "export_kept")
  assert finetune.finetune(glue_config(glue_dir, pretrained), str(workdir)) == want
  assert "but its export/ is missing (moved or deleted since the run wrote it): writing it " \
         "again from the last checkpoint" in capsys.readouterr().out
  rebuilt, kept = (loading.load_pretrained(str(p)) for p in (workdir / "export",
                                                             tmp_path / "export_kept"))
  jax.tree.map(np.testing.assert_array_equal, rebuilt.params, kept.params)
  assert json.loads((workdir / "run.json").read_text())["state"] == "finished"
  # Without a checkpoint to write it from: named, not silently reported as complete.
  shutil.rmtree(workdir / "export")
  (workdir / "finetune_checkpoints").rename(tmp_path / "checkpoints_kept")
  assert finetune.finetune(glue_config(glue_dir, pretrained), str(workdir)) == want
  assert "note: its export/ is missing (moved or deleted since the run wrote it)" in (
      capsys.readouterr().out)
  (tmp_path / "export_kept").rename(workdir / "export")
  (tmp_path / "checkpoints_kept").rename(workdir / "finetune_checkpoints")
  before = _snapshot(workdir)
  # start_over: the finished run set aside whole, then the new run.
  finetune.finetune(glue_config(glue_dir, pretrained, learning_rate=1e-3, start_over=True),
                    str(workdir))
  aside = workdir / "before_start_over"
  assert {k: v for k, v in _snapshot(aside).items()} == before
  assert json.loads((workdir / "run.json").read_text())["config"]["learning_rate"] == 1e-3


@pytest.mark.slow
def test_a_start_over_run_that_stopped_is_resumed_by_the_same_command(pretrained, glue_dir,
                                                                      tmp_path, monkeypatch,
                                                                      capsys):
  """A job controller gives the same start_over command again after a preemption: it resumes
  the run that command began (to the uninterrupted run's results) instead of setting it aside
  and training from step 0 each time."""
  monkeypatch.setattr(stop_signals, "StopSignals", _SignalAt)
  again = lambda: glue_config(glue_dir, pretrained, learning_rate=1e-3,  # noqa: E731
                              start_over=True)
  _SignalAt.at, _SignalAt.reads = None, 0
  straight, workdir = tmp_path / "straight", tmp_path / "stopped"
  for w in (straight, workdir):
    finetune.finetune(glue_config(glue_dir, pretrained), str(w))  # the run set aside
  want = finetune.finetune(again(), str(straight))
  _SignalAt.at, _SignalAt.reads = 3, 0
  stopped = finetune.finetune(again(), str(workdir))
  assert stopped["stopped_by"] == "SIGTERM"
  assert "starting over: moved the earlier run's" in capsys.readouterr().out
  _SignalAt.at = None
  assert finetune.finetune(again(), str(workdir)) == want
  assert "starting over" not in capsys.readouterr().out
  assert sorted(p.name for p in workdir.iterdir() if p.name.startswith("before_start_over")) == [
      "before_start_over"]
  _assert_same(_results(workdir), _results(straight))


@pytest.mark.slow
def test_a_long_evaluation_says_how_far_it_is(pretrained, glue_dir, tmp_path, monkeypatch,
                                              capsys):
  monkeypatch.setattr(evaluation, "PROGRESS_SECONDS", 0.01)
  gather = evaluation.multihost_utils.process_allgather

  def slow_gather(*args, **kwargs):  # every batch takes longer than a beat
    time.sleep(0.1)
    return gather(*args, **kwargs)
  monkeypatch.setattr(evaluation.multihost_utils, "process_allgather", slow_gather)
  finetune.finetune(glue_config(glue_dir, pretrained, eval_batch_size=8), str(tmp_path / "run"))
  out = capsys.readouterr().out
  # 13 rows in batches of 8; the line comes from a thread, whichever batch is running.
  assert re.search(r"seed 0: evaluating dev: [0-2] of 2 batches \(\d+ s\)", out)
  assert re.search(r"seed 0: evaluating test: [0-2] of 2 batches \(\d+ s\)", out)
