"""One run per workdir: the lock file, its stale takeover, and the CLI's one-line refusal."""
import errno
import json
import os
import pathlib
import socket
import subprocess
import sys

import pytest

from bert_jax.runtime import workdirs

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _dead_pid() -> int:
  proc = subprocess.Popen([sys.executable, "-c", "pass"])
  proc.wait()
  return proc.pid


def _write_lock(workdir: pathlib.Path, host: str, pid: int) -> pathlib.Path:
  path = workdir / workdirs.LOCK_FILE
  path.write_text(json.dumps({"host": host, "pid": pid, "started": "2026-11-23 10:00:00"}))
  return path


def test_a_second_holder_is_refused_and_the_lock_is_released(tmp_path):
  with workdirs.hold(str(tmp_path)):
    holder = json.loads((tmp_path / workdirs.LOCK_FILE).read_text())
    assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
    with pytest.raises(workdirs.WorkdirInUseError, match=f"pid {os.getpid()}"):
      with workdirs.hold(str(tmp_path)):
        pass
    assert (tmp_path / workdirs.LOCK_FILE).exists()  # the refused run removed nothing
  assert not (tmp_path / workdirs.LOCK_FILE).exists()


def test_a_lock_of_a_dead_process_on_this_host_is_taken_over(tmp_path):
  _write_lock(tmp_path, socket.gethostname(), _dead_pid())
  with workdirs.hold(str(tmp_path)):
    assert json.loads((tmp_path / workdirs.LOCK_FILE).read_text())["pid"] == os.getpid()
  assert sorted(os.listdir(tmp_path)) == []


def test_a_lock_from_another_host_is_refused_with_the_file_to_delete(tmp_path):
  path = _write_lock(tmp_path, "other-host", 4242)
  with pytest.raises(workdirs.WorkdirInUseError,
                     match=r"host other-host, pid 4242.*delete .*bert_jax.lock"):
    with workdirs.hold(str(tmp_path)):
      pass
  assert path.exists()


def test_pretrain_on_a_workdir_in_use_stops_at_once_with_one_line(tmp_path):
  workdir = tmp_path / "run"
  workdir.mkdir()
  _write_lock(workdir, socket.gethostname(), os.getpid())  # this live process holds it
  proc = subprocess.run(
      [sys.executable, "-m", "bert_jax.pretrain", "--config", "configs/pretrain.py:tiny",
       "--workdir", str(workdir)],
      cwd=ROOT, capture_output=True, text=True, timeout=300,
      env=dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT)))
  assert proc.returncode != 0
  last = proc.stderr.strip().splitlines()[-1]
  assert last.startswith("bert_jax.pretrain: ") and f"pid {os.getpid()}" in last, proc.stderr[-2000:]
  assert "Traceback" not in proc.stderr
  assert sorted(os.listdir(workdir)) == [workdirs.LOCK_FILE]  # nothing started, nothing moved


def test_the_folders_made_for_a_run_that_wrote_nothing_are_removed(tmp_path):
  with workdirs.hold(str(tmp_path / "runs" / "new")):
    assert (tmp_path / "runs" / "new" / workdirs.LOCK_FILE).exists()
  assert os.listdir(tmp_path) == []  # both folders it made, empty again, are gone
  with workdirs.hold(str(tmp_path / "runs" / "kept")):
    (tmp_path / "runs" / "kept" / "metrics.jsonl").write_text("{}\n")
  assert os.listdir(tmp_path / "runs" / "kept") == ["metrics.jsonl"]
  (tmp_path / "mine").mkdir()  # a folder the user made stays, even empty
  with workdirs.hold(str(tmp_path / "mine")):
    pass
  assert (tmp_path / "mine").is_dir()


def test_a_config_refused_in_one_line_leaves_no_empty_workdir(tmp_path):
  workdir = tmp_path / "refused"
  proc = subprocess.run(
      [sys.executable, "-m", "bert_jax.pretrain", "--config", "configs/pretrain.py:tiny",
       "--workdir", str(workdir), "--config.learning_rate=-1"],
      cwd=ROOT, capture_output=True, text=True, timeout=300,
      env=dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT)))
  assert proc.returncode == 1 and proc.stderr.strip() == (
      "bert_jax.pretrain: error: bad config: learning_rate must be positive and finite, got -1.0")
  assert not workdir.exists()


def test_a_workdir_that_cannot_be_written_is_one_line(tmp_path, monkeypatch):
  """A read-only workdir (fresh, or holding a finished run) is one line, not an OSError traceback."""
  (tmp_path / "file").write_text("")
  with pytest.raises(workdirs.WorkdirNotWritableError,
                     match=r"--workdir .*/file/run cannot be written: Not a directory"):
    with workdirs.hold(str(tmp_path / "file" / "run")):
      pass
  finished = tmp_path / "finished"
  finished.mkdir()

  def read_only(path, *args):
    raise OSError(errno.EROFS, "Read-only file system", str(path))
  monkeypatch.setattr(workdirs.os, "open", read_only)
  with pytest.raises(workdirs.WorkdirNotWritableError,
                     match=r"finished cannot be written: Read-only file system \(.*bert_jax.lock\)"):
    with workdirs.hold(str(finished)):
      pass
  assert isinstance(workdirs.WorkdirNotWritableError("x"), ValueError)  # cli: one line
