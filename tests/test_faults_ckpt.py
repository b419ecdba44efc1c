"""Pretraining faults around checkpoints and outputs.

A write that fails (metrics, TensorBoard, checkpoint, export) ends the program non-zero in
one line; a workdir whose checkpoints are all unreadable, or whose export has no checkpoint,
stops the run with nothing moved; a resume with other settings or another vocabulary is
refused; a workdir resolves to its newest state; Ctrl-C and SIGHUP save like SIGTERM.
"""
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys

import pytest

from bert_jax.checkpoints import loading
from bert_jax.checkpoints import run_checkpoints as ckpt_lib
from bert_jax import pretrain
from bert_jax.runtime import train_log
from tests.fixtures.pretraining import small_config
from tests.fixtures.repo import ROOT
from tests.fixtures.repo import child_env


def _config(corpus_file, **overrides):
  return small_config(corpus_file, fill_mask_example="", **overrides)


@pytest.fixture(scope="module")
def finished(corpus, tmp_path_factory):
  """A finished 6-step run with its export (checkpoints 3 and 6)."""
  workdir = tmp_path_factory.mktemp("finished") / "run"
  pretrain.train_and_export(_config(corpus), str(workdir))
  return workdir


def _copy(finished_dir, tmp_path, name="w"):
  workdir = tmp_path / name
  shutil.copytree(finished_dir, workdir)
  return workdir


def _snapshot(workdir):
  """Every file of a workdir with its contents (bytes), but the lock file."""
  return {str(p.relative_to(workdir)): p.read_bytes() for p in sorted(workdir.rglob("*"))
          if p.is_file() and p.name != "bert_jax.lock"}


def _damage(workdir, *steps):
  """Truncates the largest state file of each checkpoint (as the issue's probe did)."""
  for step in steps:
    files = [f for f in (workdir / "checkpoints" / str(step) / "state").rglob("*") if f.is_file()]
    largest = max(files, key=lambda f: f.stat().st_size)
    largest.write_bytes(largest.read_bytes()[:100])


# -- 1. A failed write: non-zero exit, one line ---------------------------------------------

# Runs bert_jax.pretrain's command line; from the moment named by argv[1] on, files may not
# grow past a few bytes (RLIMIT_FSIZE; SIGXFSZ is ignored, so writes fail with EFBIG as on a
# full disk). TensorBoard writes from a thread of its own: its writer fails there instead.
_DRIVER = r"""
import errno, resource, sys
from bert_jax.checkpoints import bundle
from bert_jax.checkpoints import run_checkpoints as checkpoint
from bert_jax import pretrain
from bert_jax.runtime import train_log
import tensorboardX.record_writer

def full_disk(limit):
  resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

def before(owner, name, action):
  original = getattr(owner, name)
  def wrapped(*args, **kwargs):
    action()
    return original(*args, **kwargs)
  setattr(owner, name, wrapped)

which = sys.argv[1]
if which == "metrics":  # full before the first metrics line
  before(train_log.RunLogger, "log", lambda: full_disk(0))
elif which == "checkpoint":  # full before the first checkpoint (the metrics lines still fit)
  before(checkpoint.TrainCheckpoints, "save", lambda: full_disk(1 << 14))
elif which == "export":  # full after training, before the export
  before(bundle, "save_bundle", lambda: full_disk(1 << 14))
elif which == "tensorboard":
  def write(self, data):
    raise OSError(errno.ENOSPC, "No space left on device")
  before(train_log.RunLogger, "log", lambda: setattr(
      tensorboardX.record_writer.RecordWriter, "write", write))
pretrain.main(sys.argv[2:])
"""


@pytest.mark.slow
@pytest.mark.parametrize("writer,named", [
    ("metrics", r"writing \S+/metrics.jsonl failed \(OSError: File too large\)"),
    ("tensorboard", r"writing TensorBoard events to \S+/tensorboard failed \(OSError: No space "
                    r"left on device\)"),
    # The file past the limit is named where the failing writer names it (TensorStore does).
    ("checkpoint", r"saving a checkpoint to \S+/checkpoints failed \(\w+: File too large"
                   r"( \(\S+/checkpoints/\S+\))?\)"),
    # The export is written beside its folder and swapped in: the file named is in the
    # temporary sibling (.export.partial-...).
    ("export", r"writing (the export to )?\S+/export failed \(\w+: File too large"
               r"( \(\S+/\.?export\S*\))?\)"),
])
def test_a_failed_write_ends_the_program_non_zero_in_one_line(corpus, tmp_path, writer, named):
  workdir = tmp_path / "w"
  args = ["--config", "configs/pretrain.py:tiny", "--workdir", str(workdir)] + [
      f"--config.{k}={v}" for k, v in (
          ("seq_len", 32), ("batch_size", 8), ("total_steps", 6), ("warmup_steps", 2),
          ("log_every", 1), ("checkpoint_every", 3), ("data.source", "files"),
          ("data.files", corpus), ("data.max_predictions_per_seq", 5),
          ("fill_mask_example", ""))]
  proc = subprocess.run(
      [sys.executable, "-c", _DRIVER, writer] + args, cwd=ROOT, capture_output=True, text=True,
      timeout=600, preexec_fn=lambda: signal.signal(signal.SIGXFSZ, signal.SIG_IGN),
      env=dict(os.environ, PYTHONPATH=str(ROOT)))
  assert proc.returncode == 1, proc.stderr[-3000:]
  assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
  # One line of the program's own; Orbax's threads may still log theirs (absl format) after it.
  ours = [l for l in proc.stderr.splitlines() if l.startswith("bert_jax.pretrain: ")]
  assert len(ours) == 1, proc.stderr[-3000:]
  assert "stopping" in ours[0] and re.search(named, ours[0]), ours[0]
  after = proc.stderr.split(ours[0])[1].strip().splitlines()
  assert all(re.match(r"[EWI]\d{4} ", l) for l in after), after
  if writer == "metrics":  # it stopped at the first step
    assert (workdir / "metrics.jsonl").read_text() == ""
  if writer == "export":
    assert not (workdir / "export").exists()


def test_a_tensorboard_thread_failure_is_raised_at_close(tmp_path, monkeypatch):
  import tensorboardX.record_writer  # pylint: disable=g-import-not-at-top
  logger = train_log.RunLogger(str(tmp_path), total_steps=2)

  def write(self, data):
    raise OSError(28, "No space left on device")
  monkeypatch.setattr(tensorboardX.record_writer.RecordWriter, "write", write)
  logger.log(1, {"loss": 1.0})  # the thread fails after this returns
  with pytest.raises(train_log.write_errors.OutputWriteError, match="TensorBoard events"):
    logger.close()


# -- 2. No readable checkpoint: stop, nothing moved ------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("init", [False, True])
def test_a_workdir_whose_checkpoints_are_all_unreadable_stops_with_nothing_moved(
    corpus, finished, tmp_path, init):
  workdir = _copy(finished, tmp_path)
  _damage(workdir, 3, 6)
  before = _snapshot(workdir)
  overrides = {"init_checkpoint": str(finished / "export")} if init else {}
  with pytest.raises(ckpt_lib.UnreadableCheckpointsError) as e:
    pretrain.train_and_export(_config(corpus, **overrides), str(workdir))
  message = str(e.value)
  assert "none of its checkpoints can be read (step 6: " in message and "step 3: " in message
  assert "--config.start_over=True" in message and "nothing was moved" in message
  assert "\n" not in message and "tensorstore_spec" not in message
  assert _snapshot(workdir) == before  # metrics.jsonl, export/, checkpoints: byte for byte


@pytest.mark.slow
def test_start_over_sets_the_earlier_run_aside_and_trains_anew(corpus, finished, tmp_path):
  workdir = _copy(finished, tmp_path)
  _damage(workdir, 3, 6)
  old_metrics = (workdir / "metrics.jsonl").read_bytes()
  pretrain.train_and_export(_config(corpus, start_over=True), str(workdir))
  assert sorted(os.listdir(workdir / "checkpoints_unreadable")) == ["3", "6"]
  aside = workdir / "before_start_over"
  assert sorted(os.listdir(aside)) == ["export", "metrics.jsonl", "tensorboard"]
  assert (aside / "metrics.jsonl").read_bytes() == old_metrics
  assert json.loads((workdir / "export" / "bundle.json").read_text())["step"] == 6


@pytest.mark.slow
def test_the_fallback_from_one_unreadable_checkpoint_stays(corpus, finished, tmp_path, capsys):
  workdir = _copy(finished, tmp_path)
  _damage(workdir, 6)
  pretrain.train(_config(corpus, total_steps=7), str(workdir))
  out = capsys.readouterr().out
  assert "checkpoint step 6 unreadable" in out and "resumed from" in out and "/3 " in out
  assert os.listdir(workdir / "checkpoints_unreadable") == ["6"]


@pytest.mark.slow
def test_an_export_without_a_checkpoint_is_never_overwritten(corpus, finished, tmp_path):
  workdir = _copy(finished, tmp_path)
  shutil.rmtree(workdir / "checkpoints")
  before = _snapshot(workdir)
  with pytest.raises(ValueError, match=r"holds \S+/export but no checkpoint to continue it "
                                       r"from.*--config.start_over=True"):
    pretrain.train_and_export(_config(corpus), str(workdir))
  assert _snapshot(workdir) == before


# -- 3. Resume compares the whole config and the vocabulary ----------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("override,named", [
    ({"optimizer.b1": 0.5}, "optimizer.b1 0.8 -> 0.5"),
    ({"optimizer.weight_decay": 0.1}, "optimizer.weight_decay 0.01 -> 0.1"),
    ({"model.dropout_rate": 0.2}, "model.dropout_rate 0.0 -> 0.2"),
    ({"batch_size": 16}, "batch_size 8 -> 16"),
])
def test_resume_with_another_setting_of_the_same_shapes_is_refused(
    corpus, finished, tmp_path, override, named):
  workdir = _copy(finished, tmp_path)
  before = _snapshot(workdir)
  with pytest.raises(ckpt_lib.ResumeMismatchError, match="was saved with other settings") as e:
    pretrain.train(_config(corpus, total_steps=8, **override), str(workdir))
  assert named in str(e.value) and "nothing was moved" in str(e.value)
  key = next(iter(override))
  if key == "batch_size":
    assert "cannot change on resume" in str(e.value)
  else:
    assert f"--config.resume_allow_changes={key}" in str(e.value)
  assert _snapshot(workdir) == before


@pytest.mark.slow
def test_resume_allow_changes_lets_a_named_key_change(corpus, finished, tmp_path):
  workdir = _copy(finished, tmp_path)
  summary = pretrain.train(_config(corpus, total_steps=7, **{
      "optimizer.weight_decay": 0.1, "resume_allow_changes": "optimizer.weight_decay",
      "log_every": 2}), str(workdir))
  assert summary["step"] == 7
  with pytest.raises(ValueError, match="resume_allow_changes names no config key: optimiser.b1"):
    pretrain.train(_config(corpus, resume_allow_changes="optimiser.b1"), str(workdir))
  with pytest.raises(ckpt_lib.ResumeMismatchError, match="cannot change on resume"):
    pretrain.train(_config(corpus, batch_size=16, resume_allow_changes="batch_size"),
                   str(workdir))


def _permuted_vocab(tmp_path):
  from bert_jax.data.tokenizers import wordpiece  # pylint: disable=g-import-not-at-top
  tokens = pathlib.Path(wordpiece.default_vocab_file()).read_text(encoding="utf-8").split("\n")
  tokens[1996], tokens[1997] = tokens[1997], tokens[1996]  # 'the' and 'of': same size
  path = tmp_path / "permuted_vocab.txt"
  path.write_text("\n".join(tokens), encoding="utf-8")
  return str(path)


@pytest.mark.slow
def test_a_permuted_vocab_is_refused_on_resume_and_as_init_checkpoint(corpus, finished,
                                                                      tmp_path):
  vocab = _permuted_vocab(tmp_path)
  workdir = _copy(finished, tmp_path)
  before = _snapshot(workdir)
  with pytest.raises(ckpt_lib.ResumeMismatchError,
                     match=r"another vocabulary.*first difference at id 1996: 'the' vs 'of'"):
    pretrain.train(_config(corpus, total_steps=8, **{"data.vocab_file": vocab}), str(workdir))
  assert _snapshot(workdir) == before
  with pytest.raises(ValueError, match=r"init_checkpoint \S+ was trained with another "
                                       r"vocabulary.*id 1996"):
    pretrain.train(_config(corpus, init_checkpoint=str(finished / "export"),
                           **{"data.vocab_file": vocab}), str(tmp_path / "new"))


# -- 4. A workdir resolves to its newest state -----------------------------------------------

@pytest.mark.slow
def test_a_workdir_resolves_to_a_checkpoint_newer_than_its_export(finished, tmp_path, capsys):
  assert loading.load_pretrained(str(finished)).source == str(finished / "export")
  assert "note:" not in capsys.readouterr().err
  workdir = _copy(finished, tmp_path)
  info = workdir / "export" / "bundle.json"
  info.write_text(info.read_text().replace('"step": 6', '"step": 3'))  # resumed, not exported
  pretrained = loading.load_pretrained(str(workdir))
  assert pretrained.source == f"{workdir / 'checkpoints'}/6"
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "(step 6) is newer than" in err and "(step 3)" in err
  assert loading.read_model_config(str(workdir)) == pretrained.config


# -- 5. Ctrl-C and a closed terminal save like SIGTERM ----------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGHUP, 129)])
def test_sigint_or_sighup_saves_a_checkpoint_and_exits_with_its_status(
    corpus, tmp_path, monkeypatch, capsys, sig, status):
  original = train_log.RunLogger.log

  def log(self, step, *args, **kwargs):
    original(self, step, *args, **kwargs)
    if step == 2:
      os.kill(os.getpid(), sig)  # Ctrl-C, or the terminal closing, during step 3
  monkeypatch.setattr(train_log.RunLogger, "log", log)
  # As in a terminal: a suite started in the background (`cmd &`, nohup) inherits SIGINT (and
  # under nohup SIGHUP) ignored, which the run rightly leaves ignored (it then goes on to its end).
  handler = signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL
  previous = signal.signal(sig, handler)
  workdir = tmp_path / "w"
  try:
    with pytest.raises(SystemExit) as e:
      pretrain.train_and_export(_config(corpus), str(workdir))
    after = signal.getsignal(sig)
  finally:
    signal.signal(sig, previous)
  assert e.value.code == status
  assert os.listdir(workdir / "checkpoints") == ["2"]
  assert f"{sig.name}: saved checkpoint at step 2 to {workdir / 'checkpoints'}/2" in (
      capsys.readouterr().out)
  assert not (workdir / "export").exists()
  assert after is handler  # the run restored the handler it found


@pytest.mark.slow
@pytest.mark.parametrize("during, sig", [("the last checkpoint", signal.SIGINT),
                                         ("the export", signal.SIGTERM)])
def test_a_signal_once_training_is_over_lets_the_last_checkpoint_and_the_export_finish(
    corpus, tmp_path, monkeypatch, capsys, during, sig):
  """Training is done: a signal costs neither its last checkpoint nor its export; the fill-mask
  example is left out, and the run ends in order (status 0, no traceback)."""
  from bert_jax.checkpoints import bundle  # pylint: disable=g-import-not-at-top
  owner, name = ((ckpt_lib.TrainCheckpoints, "close") if during == "the last checkpoint" else
                 (bundle, "save_bundle"))
  original = getattr(owner, name)

  def signalled(*args, **kwargs):
    os.kill(os.getpid(), sig)
    return original(*args, **kwargs)
  monkeypatch.setattr(owner, name, signalled)
  previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
  workdir = tmp_path / "w"
  try:
    pretrain.train_and_export(small_config(corpus, fill_mask_example="the old [MASK] walked ."),
                              str(workdir))
  finally:
    signal.signal(signal.SIGINT, previous)
  out, err = capsys.readouterr()
  assert sorted(os.listdir(workdir / "checkpoints")) == ["3", "6"]
  assert loading.load_pretrained(str(workdir)).source == str(workdir / "export")
  assert f"{sig.name} arrived while the last checkpoint and the export were written; they are " \
         "complete" in out
  assert "fill-mask example" not in out
  assert f"{sig.name} once training is over: its last writes" in err
  assert "Traceback" not in err


@pytest.mark.slow
def test_a_signal_before_an_evaluation_stops_the_run_without_running_it(corpus, tmp_path,
                                                                         monkeypatch, capsys):
  """A preemption's grace is short: the held-out evaluation looks for a signal before each
  batch, and the run saves and stops at once instead of evaluating first."""
  original = train_log.RunLogger.log

  def log(self, step, *args, **kwargs):
    original(self, step, *args, **kwargs)
    if step == 3 and not kwargs.get("prefix"):
      os.kill(os.getpid(), signal.SIGTERM)  # after step 3's log line, before its evaluation
  monkeypatch.setattr(train_log.RunLogger, "log", log)
  workdir = tmp_path / "w"
  with pytest.raises(SystemExit) as e:
    pretrain.train_and_export(_config(corpus, eval_every=3, eval_batches=4,
                                      **{"data.eval_every_nth_document": 5}), str(workdir))
  assert e.value.code == 143
  assert os.listdir(workdir / "checkpoints") == ["3"]
  records = [json.loads(line) for line in (workdir / "metrics.jsonl").read_text().splitlines()]
  assert [r["step"] for r in records] == [1, 2, 3]  # no evaluation record
  assert "SIGTERM: saved checkpoint at step 3" in capsys.readouterr().out


# Pretrains the 6-step config of tests/fixtures/pretraining.py on argv[1] into argv[2]; with
# argv[3] == "twice", Ctrl-C comes after step 2 and again once the save of step 2 has begun.
_TWICE = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
from bert_jax.checkpoints import run_checkpoints as ckpt_lib
from bert_jax import pretrain
from bert_jax.runtime import train_log
from tests.fixtures.pretraining import small_config
if sys.argv[3] == "twice":
  # The save the second Ctrl-C cuts short never commits, however fast the disk.
  import asyncio
  from orbax.checkpoint._src.path import atomicity
  async def held(*args, **kwargs):
    await asyncio.sleep(3600)
  atomicity.AtomicRenameTemporaryPath.finalize = held
  log, save = train_log.RunLogger.log, ckpt_lib.TrainCheckpoints.save
  def logged(self, step, *args, **kwargs):
    log(self, step, *args, **kwargs)
    if step == 2:
      os.kill(os.getpid(), signal.SIGINT)
  def saved(self, *args, **kwargs):
    save(self, *args, **kwargs)
    os.kill(os.getpid(), signal.SIGINT)
  train_log.RunLogger.log, ckpt_lib.TrainCheckpoints.save = logged, saved
pretrain.train_and_export(small_config(sys.argv[1], fill_mask_example=""), sys.argv[2])
"""


@pytest.mark.slow
def test_a_second_ctrl_c_during_the_save_exits_at_once_and_the_run_goes_on_after(
    corpus, tmp_path):
  """Ctrl-C twice: one line, status 130, no traceback; the same command then trains the run
  to its end, and a save the second Ctrl-C cut short is not left behind."""
  def run(how):
    return subprocess.run([sys.executable, "-c", _TWICE, corpus, str(tmp_path / "w"), how],
                          cwd=ROOT, env=child_env(), capture_output=True, text=True,
                          timeout=300)
  proc = run("twice")
  assert proc.returncode == 130, proc.stdout + proc.stderr
  assert proc.stdout.endswith("SIGINT again: exiting at once; a checkpoint or export being "
                              "written is left unfinished, the newest whole checkpoint stays, "
                              "and the same command goes on from it\n"), proc.stdout
  assert "Traceback" not in proc.stderr and "KeyboardInterrupt" not in proc.stderr
  proc = run("once")
  assert proc.returncode == 0, proc.stdout + proc.stderr
  assert sorted(os.listdir(tmp_path / "w" / "checkpoints")) == ["3", "6"]
  assert (tmp_path / "w" / "export").is_dir()


def test_a_save_cut_short_is_removed_by_the_next_writer_of_the_folder(tmp_path):
  """A process that ended during an asynchronous save leaves `<step>.orbax-checkpoint-tmp`;
  the next run saving into the folder removes it and keeps every whole step."""
  folder = tmp_path / "checkpoints"
  # The child holds step 2's rename back, so the process ends while that save is unfinished
  # however fast or slow the disk is: it waits for the temporary folder, then exits at once.
  cut = ("import asyncio, os, sys, time, jax.numpy as jnp\n"
         "from orbax.checkpoint._src.path import atomicity\n"
         "from bert_jax.checkpoints import run_checkpoints as ckpt_lib\n"
         "c = ckpt_lib.TrainCheckpoints(sys.argv[1])\n"
         "state = {'params': {f'w{i}': jnp.ones((256, 256)) for i in range(20)}}\n"
         "c.save(1, state, {'a': 1}); c.wait()\n"
         "async def held(*args, **kwargs):\n"
         "  await asyncio.sleep(3600)\n"
         "atomicity.AtomicRenameTemporaryPath.finalize = held\n"
         "c.save(2, state, {'a': 1})\n"
         "tmp = os.path.join(sys.argv[1], '2.orbax-checkpoint-tmp')\n"
         "deadline = time.time() + 120\n"
         "while not os.path.isdir(tmp) and time.time() < deadline:\n"
         "  time.sleep(0.01)\n"
         "os._exit(0)\n")
  subprocess.run([sys.executable, "-c", cut, str(folder)], cwd=ROOT, env=child_env(),
                 check=True, capture_output=True, timeout=300)
  assert sorted(os.listdir(folder)) == ["1", "2.orbax-checkpoint-tmp"]
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  ckpts = ckpt_lib.TrainCheckpoints(str(folder))
  ckpts.save(3, {"params": {"w": jnp.ones((3,))}}, {"a": 1})
  ckpts.close()
  assert sorted(os.listdir(folder)) == ["1", "3"]


def test_reading_a_step_layout_prints_no_missing_metadata_warning(tmp_path, caplog):
  """An item of a step (checkpoints/N/state) has no step metadata file of its own: orbax
  warned on every resume until the read filtered that one warning (seen on the H200)."""
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  ckpts = ckpt_lib.TrainCheckpoints(str(tmp_path / "checkpoints"))
  ckpts.save(5, {"params": {"w": jnp.ones((3,))}}, {"a": 1})
  ckpts.wait()
  other = jax.eval_shape(lambda: {"params": {"w": jnp.ones((4,))}})
  with caplog.at_level("WARNING"):
    assert ckpts._layout_mismatch(5, other) == ["params/w: saved (3,), this run (4,)"]
  ckpts.close()
  assert not [r for r in caplog.records if "Metadata file does not exist" in r.getMessage()]


# Saves steps 3 and 6 of a state of 60 arrays sharded over 8 devices, or restores the newest
# readable one (argv[1]: save / restore). Many arrays read at once: when one read fails, the
# others are still in flight.
_FALLBACK_CHILD = r"""
import os, sys
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
import jax, numpy as np
from jax.sharding import NamedSharding, PartitionSpec
from bert_jax.checkpoints import run_checkpoints as checkpoint
which, directory = sys.argv[1:3]
mesh = jax.make_mesh((8,), ("d",), axis_types=(jax.sharding.AxisType.Auto,))
sharding = NamedSharding(mesh, PartitionSpec("d"))
ckpts = checkpoint.TrainCheckpoints(directory, async_save=False)
if which == "save":
  rng = np.random.default_rng(0)
  state = {"params": {f"w{i}": jax.device_put(rng.normal(size=(256, 64)).astype(np.float32),
                                              sharding) for i in range(60)}}
  for step in (3, 6):
    ckpts.save(step, state, {"step": step})
else:
  abstract = {"params": {f"w{i}": jax.ShapeDtypeStruct((256, 64), np.float32, sharding=sharding)
                         for i in range(60)}}
  print("restored step", ckpts.restore_latest(abstract)[0])
ckpts.close()
"""


@pytest.mark.slow  # three child processes of a few seconds each
def test_a_fallback_from_a_damaged_checkpoint_leaves_no_reads_behind(tmp_path):
  """A damaged data file under the newest step's state fails the reads of many arrays; the
  first failure is the restore's, and the fallback to the step before says so in one line.
  The reads still in flight then finished inside the restore: none is left to print its
  traceback into the program's output later ("Exception ignored in: <coroutine ...>", "Event
  loop is closed", "Future exception was never retrieved"). It came and went from run to run,
  so the restore runs three times."""
  def child(which, directory):
    return subprocess.run([sys.executable, "-c", _FALLBACK_CHILD, which, str(directory)],
                          cwd=ROOT, env=child_env(), capture_output=True, text=True,
                          timeout=300)
  saved = tmp_path / "saved" / "checkpoints"
  done = child("save", saved)
  assert done.returncode == 0, done.stderr[-3000:]
  # The first data file holds the arrays' zarr metadata: every array's read fails.
  first = sorted((saved / "6" / "state").rglob("d/*"))[0]
  first.write_bytes(first.read_bytes()[:100])
  for run in range(3):
    workdir = tmp_path / f"run{run}"
    shutil.copytree(saved.parent, workdir)
    done = child("restore", workdir / "checkpoints")
    assert done.returncode == 0, done.stderr[-3000:]
    fallback = [line for line in done.stdout.splitlines() if "unreadable" in line]
    assert len(fallback) == 1 and fallback[0].startswith("WARNING: checkpoint step 6 "
                                                         "unreadable ("), done.stdout
    assert fallback[0].endswith("; falling back to step 3"), fallback
    assert done.stdout.splitlines()[-1] == "restored step 3"
    for sign in ("Exception ignored", "Traceback", "Event loop is closed", "never retrieved",
                 "destroyed but it is pending"):
      assert sign not in done.stderr, done.stderr[-3000:]
