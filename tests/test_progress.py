"""train_log.Progress: what long programs print while they work."""
import io
import re

from bert_jax.runtime import train_log


def test_progress_prints_at_once_then_with_rate_and_eta_then_the_total():
  f = io.StringIO()
  p = train_log.Progress("encoding", 10, "texts", every=0.0, file=f)
  p.update(4)
  p.close()
  lines = f.getvalue().splitlines()
  assert lines[0] == "encoding: 0/10 texts"
  assert re.fullmatch(r"encoding: 4/10 texts \(40%\) \| [\d,.]+ texts/s \| eta \d:\d\d:\d\d",
                      lines[1]), lines[1]
  assert re.fullmatch(r"encoding: 4 texts in \d:\d\d:\d\d \([\d,.]+ texts/s\)", lines[2])


def test_progress_waits_between_lines_and_is_silent_when_disabled():
  f = io.StringIO()
  p = train_log.Progress("x", 0, "lines", every=3600.0, file=f)
  p.update(5)
  assert f.getvalue() == "x: 0 lines\n"  # the next line only after `every` seconds
  quiet = io.StringIO()
  q = train_log.Progress("x", 3, "texts", enabled=False, file=quiet)
  q.update(3)
  q.close()
  assert quiet.getvalue() == ""


def test_a_heartbeat_beats_until_the_step_ends_and_at_start_false_is_silent_when_quick():
  import time  # pylint: disable=g-import-not-at-top
  out = io.StringIO()
  with train_log.Heartbeat("converting", every=0.05, file=out):
    time.sleep(0.2)
  lines = out.getvalue().splitlines()
  assert lines[0] == "converting ..." and len(lines) >= 2
  assert all(re.fullmatch(r"converting: 0:00:00 so far", x) for x in lines[1:])
  quick = io.StringIO()  # ends (or fails in one line) before its first beat: nothing printed
  with train_log.Heartbeat("converting", every=5.0, file=quick, at_start=False):
    pass
  assert quick.getvalue() == ""
  slow = io.StringIO()
  with train_log.Heartbeat("converting", every=0.05, file=slow, at_start=False):
    time.sleep(0.2)
  assert slow.getvalue().startswith("converting: 0:00:00 so far\n")
