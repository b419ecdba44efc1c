"""A fine-tune killed at the end of its training (SIGKILL: an OOM kill, a preemption that does not
wait) never trains again: each seed's end-of-training checkpoint is committed before anything
that says the seed is done (its predictions, the results, the export, run.json) is written, so
the same command resumes from that checkpoint, or finds the finished run, to the results of the
run that was never killed. A resumed run's metrics.jsonl holds each record once."""
import json
import pathlib
import re

from flax import traverse_util
import numpy as np
import pytest

from bert_jax.checkpoints import bundle
from bert_jax.finetuning import seed_run
from tests.fixtures import kills

# 32 training rows in batches of 8: 4 steps a seed, 2 seeds; no periodic checkpoint, so the
# end-of-training checkpoints (steps 4 and 8) are the only ones.
_SEEDS, _STEPS = 2, 4


def _args(glue_dir, pretrained) -> list:
  """tests/fixtures/finetuning.py's glue_config on the command line, with 2 seeds."""
  return ["--config", "configs/glue.py:task=mrpc", f"--config.data_dir={glue_dir}",
          f"--config.init_checkpoint={pretrained}", "--config.max_seq_length=32",
          "--config.batch_size=8", "--config.eval_batch_size=16", "--config.num_epochs=1.0",
          "--config.log_every=1", "--config.learning_rate=1e-4", f"--config.seeds={_SEEDS}"]


def _trained(output: str) -> set:
  """The (seed, step) of every training step a run's output says it ran (log_every=1)."""
  return {(int(s), int(k)) for s, k in re.findall(r"^seed(\d+)_train step (\d+)/", output,
                                                  re.MULTILINE)}


def _outputs(workdir: pathlib.Path) -> tuple:
  """The results, the predictions and the exported params."""
  files = {name: (workdir / name).read_bytes() for name in (
      "eval_results.json", "eval_results_per_seed.json", "predictions/MRPC.tsv")}
  params = traverse_util.flatten_dict(bundle.load_bundle(str(workdir / "export")).params,
                                      sep="/")
  return files, params


def _records(workdir: pathlib.Path) -> list:
  """metrics.jsonl's records as (step, their metric names), in the order written."""
  return [(r["step"], tuple(sorted(k for k in r if k != "step")))
          for r in map(json.loads, (workdir / "metrics.jsonl").read_text().splitlines())]


def _writer_free(path: pathlib.Path) -> str:
  """`path` with the writer's process id and host in a temporary name (.NAME.partial-PID-HOST)
  left out: two runs of the same command write through differently named temporaries."""
  return re.sub(r"\.partial-\d+-[0-9a-f]+", ".partial", str(path))


@pytest.mark.slow
def test_a_kill_at_any_rename_after_training_never_trains_again(pretrained, glue_dir, tmp_path):
  args = _args(glue_dir, pretrained)
  straight = kills.run("bert_jax.finetune", tmp_path / "straight", args)
  assert straight.returncode == 0, straight.output[-3000:]
  everything = {(s, k) for s in range(_SEEDS) for k in range(1, _STEPS + 1)}
  assert _trained(straight.output) == everything
  want, records = _outputs(tmp_path / "straight"), _records(tmp_path / "straight")
  assert len(records) == len(set(records))
  points = straight.renames[1:]  # after run.json's first (before the first step)
  # Each end-of-training checkpoint's commit (killed right after it), each seed's predictions,
  # the results, the export and run.json "finished" (killed right before each).
  assert sum(r.commit for r in points) == _SEEDS
  assert {pathlib.Path(r.dst).name for r in points} >= {
      "4", "8", "MRPC.tsv", "eval_results.json", "eval_results_per_seed.json", "export",
      "run.json"}
  for point in points:
    workdir = tmp_path / f"killed_{point.number}"
    killed = kills.run("bert_jax.finetune", workdir, args, kill_at=point.number)
    where = (f"killed {'after' if point.commit else 'before'} rename {point.number}, "
             f"{point.src} -> {point.dst}")
    assert killed.returncode == kills.KILLED, (where, killed.output[-3000:])
    # The same rename as in the run never killed (a temporary folder is named for its writer).
    assert (_writer_free(pathlib.Path(killed.renames[-1].dst).relative_to(workdir))
            == _writer_free(pathlib.Path(point.dst).relative_to(tmp_path / "straight"))), where
    again = kills.run("bert_jax.finetune", workdir, args)
    assert again.returncode == 0, (where, again.output[-3000:])
    assert re.search(r"resumed from \S+/finetune_checkpoints/\d+|holds this run, finished",
                     again.output), (where, again.output[-3000:])
    # No step is trained twice: the run that was killed and the one that finished share none.
    assert not _trained(killed.output) & _trained(again.output), (where, again.output[-3000:])
    assert _trained(killed.output) | _trained(again.output) == everything, where
    got = _outputs(workdir)
    assert got[0] == want[0], where
    assert got[1].keys() == want[1].keys(), where
    for k in want[1]:
      np.testing.assert_array_equal(got[1][k], want[1][k], err_msg=f"{where}: {k}")
    # Every record once, each seed's evaluation among them, as in the run never killed.
    assert sorted(_records(workdir)) == sorted(records), where


def test_a_resumed_run_drops_the_records_logged_after_its_checkpoint(tmp_path):
  """What a resumed run drops from metrics.jsonl: the records it is about to log again."""
  def record(seed, kind, step):
    return {"step": step, f"seed{seed}_{kind}_x": 1.0}
  written = ([record(0, "train", k) for k in range(1, 5)] + [record(0, "train_epoch", 4),
             record(0, "eval", 4)] + [record(1, "train", k) for k in range(1, 5)]
             + [record(1, "train_epoch", 2), record(1, "train_epoch", 4), record(1, "eval", 4)])

  def kept(seed, step, batch):
    (tmp_path / "metrics.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in written) + '{"step": 5, "seed1_tr')  # torn
    seed_run.drop_records_after(str(tmp_path), seed, step, batch)
    return [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]

  # Seed 0's end of training: its steps and its epoch, not its evaluation nor seed 1.
  assert kept(0, 4, 0) == written[:5]
  # Seed 1's end of training: everything but its evaluation.
  assert kept(1, 4, 0) == written[:-1]
  # Seed 1 at a save within its epoch, after step 2 (that epoch's record came after the save).
  assert kept(1, 2, 2) == written[:6] + written[6:8]
  # Seed 1 at the start of an epoch, after step 2: the epoch that ended there is kept.
  assert kept(1, 2, 0) == written[:6] + written[6:8] + [written[10]]
