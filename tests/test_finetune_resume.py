"""Fine-tuning survives preemption: SIGTERM mid-epoch and a kill after a checkpoint
both resume to the uninterrupted run's results, bitwise on the CPU, for GLUE and SQuAD."""
import json
import pathlib
import shutil

from flax import traverse_util
import numpy as np
import pytest

from bert_jax.checkpoints import bundle
from bert_jax.checkpoints import run_checkpoints as ckpt_lib
from bert_jax import finetune
from tests.fixtures.finetuning import glue_config
from tests.fixtures.finetuning import squad_config
from tests.fixtures.repo import ROOT


def _outputs(workdir: pathlib.Path) -> tuple:
  """eval_results.json, every predictions file, and the exported params."""
  files = {p.name: p.read_text() for p in sorted(workdir.iterdir())
           if p.is_file() and p.suffix in (".json", ".tsv", ".txt") and p.name != "metrics.jsonl"}
  params = bundle.load_bundle(str(workdir / "export")).params
  return files, params


def _assert_same(a: tuple, b: tuple) -> None:
  assert a[0] == b[0]  # eval results and predictions, byte for byte
  flat_a, flat_b = (traverse_util.flatten_dict(p, sep="/") for p in (a[1], b[1]))
  assert flat_a.keys() == flat_b.keys()
  for k in flat_a:
    np.testing.assert_array_equal(flat_a[k], flat_b[k], err_msg=k)


def _kill_after_a_checkpoint_resumes(config, killed: pathlib.Path, stop_at: tuple,
                                     periodic: int, want: dict, straight: pathlib.Path) -> None:
  """Stops at `stop_at` (seed, step), leaves only the periodic checkpoint of step `periodic`
  (what a kill between the two leaves), and checks the same command resumes to `want`."""
  finetune.finetune(config(), str(killed), preempt_at=stop_at)
  ckpts = killed / "finetune_checkpoints"
  last = stop_at[1]  # seed 0: checkpoint steps are the seed's steps
  assert sorted(int(p.name) for p in ckpts.iterdir() if p.name.isdigit()) == [periodic, last]
  shutil.rmtree(ckpts / str(last))
  assert finetune.finetune(config(), str(killed)) == want
  _assert_same(_outputs(killed), _outputs(straight))


@pytest.mark.slow
def test_glue_sigterm_mid_epoch_and_a_kill_after_a_checkpoint_resume_to_the_same_results(
    pretrained, glue_dir, tmp_path, capsys):
  # 32 training rows in batches of 8: 4 steps an epoch, 8 a seed, 2 seeds.
  config = lambda: glue_config(glue_dir, pretrained, seeds=2, num_epochs=2.0,  # noqa: E731
                                checkpoint_every=3)
  straight = tmp_path / "straight"
  want = finetune.finetune(config(), str(straight))

  # SIGTERM before seed 1's step 5 (its second epoch's second batch): saved there, no results.
  stopped = tmp_path / "sigterm"
  out = finetune.finetune(config(), str(stopped), preempt_at=(1, 5))
  assert out == {"stopped_by": "SIGTERM", "seed": 1, "step": 5}
  assert "SIGTERM: saved checkpoint at seed 1 step 5 to " in capsys.readouterr().out
  assert not (stopped / "eval_results.json").exists() and not (stopped / "export").exists()
  assert finetune.finetune(config(), str(stopped)) == want
  assert "seed 1, epoch 2, batch 1; 1 seed(s) done before it" in capsys.readouterr().out
  _assert_same(_outputs(stopped), _outputs(straight))

  # A kill (no save at the kill) after seed 0's periodic checkpoint at step 3.
  _kill_after_a_checkpoint_resumes(config, tmp_path / "killed", (0, 5), 3, want, straight)


@pytest.mark.slow
def test_squad_sigterm_mid_epoch_and_a_kill_after_a_checkpoint_resume_to_the_same_results(
    pretrained, squad_dir, tmp_path):
  config = lambda: squad_config(squad_dir, pretrained, num_epochs=3.0,  # noqa: E731
                                 checkpoint_every=1)
  straight = tmp_path / "straight"
  want = finetune.finetune(config(), str(straight))
  stopped = tmp_path / "sigterm"
  out = finetune.finetune(config(), str(stopped), preempt_at=(0, 1))
  assert out["stopped_by"] == "SIGTERM"
  assert finetune.finetune(config(), str(stopped)) == want
  _assert_same(_outputs(stopped), _outputs(straight))

  # A kill (no save at the kill) after the periodic checkpoint of step 1 (3 steps, one an epoch).
  _kill_after_a_checkpoint_resumes(config, tmp_path / "killed", (0, 2), 1, want, straight)


@pytest.mark.slow
def test_a_resume_with_other_settings_is_refused_in_one_line_and_nothing_moves(
    pretrained, glue_dir, tmp_path):
  workdir = tmp_path / "run"
  finetune.finetune(glue_config(glue_dir, pretrained), str(workdir), preempt_at=(0, 2))
  before = sorted(str(p.relative_to(workdir)) for p in workdir.rglob("*"))
  with pytest.raises(ckpt_lib.ResumeMismatchError,
                     match=r"was saved with other settings \(learning_rate 0.0001 -> 0.001\); "
                           r"to change them on purpose pass "
                           r"--config.resume_allow_changes=learning_rate"):
    finetune.finetune(glue_config(glue_dir, pretrained, learning_rate=1e-3), str(workdir))
  assert sorted(str(p.relative_to(workdir)) for p in workdir.rglob("*")) == before
  # Changing how often to log is allowed.
  results = finetune.finetune(glue_config(glue_dir, pretrained, log_every=2), str(workdir))
  assert "accuracy" in results
  assert json.loads((workdir / "eval_results.json").read_text()) == results


def test_checkpoint_keys_with_eval_only_are_refused_as_unread():
  from bert_jax import config_help  # pylint: disable=g-import-not-at-top
  from bert_jax.configuration import reads as config_reads  # pylint: disable=g-import-not-at-top
  module = config_help.load_module(ROOT / "configs" / "glue.py")
  config = module.get_config("task=mrpc")
  config.eval_only = True
  config.checkpoint_every = 10
  with pytest.raises(ValueError, match=r"^--config.checkpoint_every is not read by this run: it "
                                       r"is read only when eval_only=False"):
    config_reads.resolve(config, ["checkpoint_every"], module.READ_ONLY_WHEN,
                         module.get_config("task=mrpc"))


@pytest.mark.slow
def test_a_log_window_cut_by_a_resume_is_logged_whole(pretrained, glue_dir, tmp_path):
  """Stopped after step 5 with a line every 4 steps: the resumed run's line at step 8 is the
  uninterrupted run's, over steps 5 to 8, not a mean of 6 to 8."""
  config = lambda: glue_config(glue_dir, pretrained, num_epochs=2.0,  # noqa: E731
                                log_every=4, checkpoint_every=100)

  def losses(workdir):
    with open(workdir / "metrics.jsonl") as f:
      return {r["step"]: r["seed0_train_loss"] for r in map(json.loads, f)
              if "seed0_train_loss" in r}
  straight, stopped = tmp_path / "straight", tmp_path / "stopped"
  finetune.finetune(config(), str(straight))
  assert finetune.finetune(config(), str(stopped), preempt_at=(0, 5))["step"] == 5
  finetune.finetune(config(), str(stopped))
  want, got = losses(straight), losses(stopped)
  assert sorted(want) == sorted(got) == [4, 8] and got == want, (got, want)
