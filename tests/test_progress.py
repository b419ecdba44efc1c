"""console.Progress: what long programs print while they work."""
import io
import re

from bert_jax.runtime import console
from bert_jax.runtime import train_log


def test_progress_prints_at_once_then_with_rate_and_eta_then_the_total():
  f = io.StringIO()
  p = console.Progress("encoding", 10, "texts", every=0.0, file=f)
  p.update(4)
  p.close()
  lines = f.getvalue().splitlines()
  assert lines[0] == "encoding: 0/10 texts"
  assert re.fullmatch(r"encoding: 4/10 texts \(40%\) \| [\d,.]+ texts/s \| eta \d:\d\d:\d\d",
                      lines[1]), lines[1]
  assert re.fullmatch(r"encoding: 4 texts in \d:\d\d:\d\d \([\d,.]+ texts/s\)", lines[2])


def test_progress_waits_between_lines_and_is_silent_when_disabled():
  f = io.StringIO()
  p = console.Progress("x", 0, "lines", every=3600.0, file=f)
  p.update(5)
  assert f.getvalue() == "x: 0 lines\n"  # the next line only after `every` seconds
  quiet = io.StringIO()
  q = console.Progress("x", 3, "texts", enabled=False, file=quiet)
  q.update(3)
  q.close()
  assert quiet.getvalue() == ""


def test_a_heartbeat_beats_until_the_step_ends_and_at_start_false_is_silent_when_quick():
  import time  # pylint: disable=g-import-not-at-top
  out = io.StringIO()
  with console.Heartbeat("converting", every=0.05, file=out):
    time.sleep(0.2)
  lines = out.getvalue().splitlines()
  assert lines[0] == "converting ..." and len(lines) >= 2
  assert all(re.fullmatch(r"converting: 0:00:00 so far", x) for x in lines[1:])
  quick = io.StringIO()  # ends (or fails in one line) before its first beat: nothing printed
  with console.Heartbeat("converting", every=5.0, file=quick, at_start=False):
    pass
  assert quick.getvalue() == ""
  slow = io.StringIO()
  with console.Heartbeat("converting", every=0.05, file=slow, at_start=False):
    time.sleep(0.2)
  assert slow.getvalue().startswith("converting: 0:00:00 so far\n")


def test_a_heartbeat_says_its_status_and_waits_while_the_program_prints_its_own_lines():
  import time  # pylint: disable=g-import-not-at-top
  done = []
  out = io.StringIO()
  with console.Heartbeat("evaluating dev", every=0.05, file=out, at_start=False,
                         status=lambda: f"{len(done)} of 4 batches"):
    for _ in range(4):
      time.sleep(0.08)
      done.append(1)
  lines = out.getvalue().splitlines()
  assert lines and all(re.fullmatch(r"evaluating dev: [0-3] of 4 batches \(0 s\)", x)
                       for x in lines), lines
  touched = io.StringIO()  # a line of the program's own every 0.02 s: no beat comes between
  with console.Heartbeat("training", every=0.5, file=touched, at_start=False) as beat:
    for _ in range(100):
      time.sleep(0.02)
      beat.touch()
  assert touched.getvalue() == ""
  early = io.StringIO()  # the first beat sooner than the next ones
  with console.Heartbeat("loading", every=5.0, first=0.05, file=early, at_start=False):
    time.sleep(0.3)
  assert early.getvalue() == "loading: 0:00:00 so far\n"
  assert console.BEAT_SECONDS < 10  # a beat late by a busy second still lands within 10 s


def test_progress_as_a_context_beats_while_a_unit_takes_long_and_closes_unless_it_failed():
  import time  # pylint: disable=g-import-not-at-top
  out = io.StringIO()
  with console.Progress("embedding", 10, "texts", every=0.05, file=out) as shown:
    time.sleep(0.2)  # the first batch compiles
    shown.update(10)
  lines = out.getvalue().splitlines()
  assert lines[0] == "embedding: 0/10 texts"
  assert "embedding: 0/10 texts so far (0 s)" in lines
  assert re.fullmatch(r"embedding: 10 texts in \d:\d\d:\d\d \([\d,.]+ texts/s\)", lines[-1])
  failed = io.StringIO()
  try:
    with console.Progress("embedding", 10, "texts", every=0.05, file=failed):
      raise ValueError("a bad batch")
  except ValueError:
    pass
  time.sleep(0.1)
  assert failed.getvalue() == "embedding: 0/10 texts\n"  # no closing line, no beat after it


def test_eta_arithmetic():
  assert console.eta_seconds(80, 5.0) == 16.0
  assert console.eta_seconds(80, 5.0, later_seconds=30.0) == 46.0
  assert console.eta_seconds(80, None) is None  # no pace to trust yet
  assert console.eta_seconds(0, None, later_seconds=12.0) == 12.0  # only the evaluation left


def _log_lines(tmp_path, monkeypatch, capsys, windows, total, plan=None):
  """The progress lines of a run whose log windows are (step, seconds, prefix)."""
  now = [1000.0]
  monkeypatch.setattr(train_log.time, "time", lambda: now[0])
  logger = train_log.RunLogger(str(tmp_path), total_steps=total)
  if plan:
    logger.plan_after(*plan)
  capsys.readouterr()
  last = {}
  for step, seconds, prefix in windows:
    now[0] += seconds
    steps = step - last.get(prefix, 0)
    last[prefix] = step
    logger.log(step, {"loss": 1.0}, prefix=prefix, steps_per_sec=steps / seconds)
  logger.close()
  return [line.split(" | ")[-1] for line in capsys.readouterr().out.splitlines()]


def test_the_first_eta_waits_for_a_pace_without_the_first_compile(tmp_path, monkeypatch, capsys):
  # 100 steps: the first 10 take 30 s (the compile), every later 10 take 2 s: 16 s are left
  # at step 20, where the first window's pace (10 steps in 30 s) would say 4:00.
  windows = [(10, 30.0, "")] + [(step, 2.0, "") for step in range(20, 101, 10)]
  etas = _log_lines(tmp_path, monkeypatch, capsys, windows, 100)
  assert etas[0] == "eta at the next line"
  assert etas[1:4] == ["eta 0:00:16", "eta 0:00:14", "eta 0:00:12"]
  assert etas[-1] == "eta 0:00:00"


def test_the_eta_counts_time_between_log_lines(tmp_path, monkeypatch, capsys):
  """An evaluation between two log lines (its window restarts after it) slows the pace."""
  windows = [(10, 30.0, ""), (20, 2.0, ""), (30, 12.0, ""), (40, 2.0, "")]
  etas = _log_lines(tmp_path, monkeypatch, capsys, windows, 100)
  assert etas[2] == "eta 0:00:49"  # 20 steps in 14 s since the first line: 70 left
  assert etas[3] == "eta 0:00:32"  # 30 steps in 16 s: 60 left


def test_the_eta_counts_later_seeds_and_their_evaluations(tmp_path, monkeypatch, capsys):
  # Seed 0 of 3, 20 steps each; an evaluation took 9 s (the zero-shot one): 3 more to come.
  windows = [(10, 30.0, "seed0_train_"), (20, 2.0, "seed0_train_")]
  etas = _log_lines(tmp_path, monkeypatch, capsys, windows, 20, plan=(40, 27.0))
  assert etas == ["eta at the next line", "eta 0:00:35"]  # 40 steps at 5/s + 27 s
  # Before any evaluation ran, the ETA names them.
  etas = _log_lines(tmp_path / "b", monkeypatch, capsys, windows, 20,
                    plan=(40, 0.0, "3 evaluations"))
  assert etas[1] == "eta 0:00:08 + 3 evaluations"
  # A later seed starts from its first line's own window (the step is compiled by then).
  windows = [(10, 30.0, "seed0_train_"), (20, 2.0, "seed0_train_"), (10, 4.0, "seed1_train_")]
  etas = _log_lines(tmp_path / "c", monkeypatch, capsys, windows, 20)
  assert etas[2] == "eta 0:00:04"  # 10 steps left at 10 steps in 4 s
