"""docs/troubleshooting.md's exit-status table, row by row: each program run into each case.

Every case is a real program started as a subprocess; where the table promises one line on
stderr, stderr is that one line. The signal rows are checked on a tiny pretraining's first
compile, where a signal ends the program at once with its status (nothing trained yet to save;
tests/test_stop_during_compile.py), rather than by training.
"""
import pathlib
import re
import signal
import subprocess
import sys

import pytest

from tests.fixtures.repo import ROOT, child_env

TABLE = ROOT / "docs" / "troubleshooting.md"

# The one line of a signal before the first step: during the compile, or just before it while
# the run starts (the signal can reach it on either side of the line the test waits for).
_EARLY_STOP = (r"stopped while (compiling the train step|starting the run), before the first "
               r"step: nothing trained yet to save; exiting \(the same command starts again\)")


def _table_statuses() -> list[int]:
  """The statuses of the table under '## Exit statuses', in its order."""
  text = TABLE.read_text(encoding="utf-8").split("## Exit statuses", 1)[1].split("\n## ", 1)[0]
  return [int(m) for m in re.findall(r"^\|\s*(\d+)\s*\|", text, flags=re.M)]


def _run(*args, stdin=None) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env=child_env(), input=stdin,
                        capture_output=True, text=True, timeout=300)


def _one_line(err: str, start: str) -> None:
  """stderr is one line, starting with `start` (no traceback, no third-party log)."""
  assert err.endswith("\n") and err.count("\n") == 1, err
  assert err.startswith(start), err


def _tiny_pretrain(workdir, corpus, *overrides):
  return ["bert_jax.pretrain", "--config", "configs/pretrain.py:tiny", "--workdir", str(workdir),
          "--config.seq_len=32", "--config.batch_size=8", "--config.data.source=files",
          f"--config.data.files={corpus}", "--config.data.max_predictions_per_seq=5",
          "--config.fill_mask_example=", *overrides]


# The statuses the cases below cover; a row added to the table without a case fails
# test_every_row_of_the_table_has_a_case.
COVERED = {0, 1, 2, 129, 130, 141, 143}


def test_every_row_of_the_table_has_a_case():
  statuses = _table_statuses()
  assert len(statuses) == len(set(statuses)), statuses
  assert set(statuses) == COVERED, statuses


@pytest.mark.slow  # about 10 programs started, 3 of them up to their first compile (~1 min)
def test_each_status_of_the_table(pretrained, glue_dir, corpus, tmp_path):
  # 0: the program did what it was asked.
  done = _run("bert_jax.fill_mask", "--checkpoint", pretrained, "the [MASK] sat on the mat .")
  assert done.returncode == 0, done.stderr
  assert done.stdout.strip() and "Traceback" not in done.stderr

  # 1: an error, in one line `bert_jax.PROGRAM: ...`: a bad config ...
  bad = _run(*_tiny_pretrain(tmp_path / "w1", tmp_path / "none" / "x.txt"))
  assert bad.returncode == 1, bad.stderr
  _one_line(bad.stderr, "bert_jax.pretrain: ")
  assert "x.txt" in bad.stderr
  # ... or bad input: a workdir whose run record is binary, named with what to do.
  workdir = tmp_path / "ft"
  workdir.mkdir()
  (workdir / "run.json").write_bytes(b"\x00\xff\xfe\x00")
  refused = _run("bert_jax.finetune", "--config", "configs/glue.py:task=mrpc", "--workdir",
                 str(workdir), f"--config.init_checkpoint={pretrained}",
                 f"--config.data_dir={glue_dir}")
  assert refused.returncode == 1, refused.stderr
  _one_line(refused.stderr, "bert_jax.finetune: ")
  assert f"{workdir / 'run.json'} is not a run record" in refused.stderr
  assert "move it away or give a new --workdir" in refused.stderr

  # 2: a tool refused its input in one `bert_jax.TOOL: error: ...` line ...
  for tool, args in [("bert_jax.embed", ["--input", str(tmp_path / "in.txt"),
                                         "--output", str(tmp_path / "out.npy")]),
                     ("bert_jax.fill_mask", ["the [MASK] ."]),
                     ("bert_jax.convert", ["--from", "hf", "--dst", str(tmp_path / "out")]),
                     ("bert_jax.retrieval_eval", ["--beir_dir", str(tmp_path / "beir")])]:
    src = "--src" if tool == "bert_jax.convert" else "--checkpoint"
    tool_run = _run(tool, src, str(tmp_path / "no_such_model"), *args)
    assert tool_run.returncode == 2, (tool, tool_run.stderr)
    _one_line(tool_run.stderr, f"{tool}: error: ")
    assert "no_such_model" in tool_run.stderr, tool_run.stderr
  # ... or bad usage.
  for program in ("bert_jax.pretrain", "bert_jax.finetune", "bert_jax.embed"):
    usage = _run(program, "--no_such_flag")
    assert usage.returncode == 2, (program, usage.stderr)
    _one_line(usage.stderr, f"{program}: ")
    assert "no_such_flag" in usage.stderr

  # 141: tokenize wrote into a pipe its reader closed; what the reader took was written.
  texts = tmp_path / "texts.txt"
  texts.write_text("the cat sat on the mat .\n" * 200_000, encoding="utf-8")
  with open(texts, "rb") as stdin:
    tokenize = subprocess.Popen(
        [sys.executable, "-m", "bert_jax.tokenize", "--vocab",
         str(pathlib.Path(pretrained).parent / "vocab.txt")],
        cwd=ROOT, env=child_env(), stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = tokenize.stdout.readline()
    tokenize.stdout.close()  # `| head -1`
    err = tokenize.stderr.read().decode()
    assert tokenize.wait(timeout=300) == 141, err
  assert first.strip() and "Traceback" not in err

  # 129, 130, 143: SIGHUP, Ctrl-C, SIGTERM; during the first compile the program ends at once
  # with the signal's status, saying nothing was trained yet.
  for sig, status in [(signal.SIGHUP, 129), (signal.SIGINT, 130), (signal.SIGTERM, 143)]:
    proc = subprocess.Popen(
        [sys.executable, "-m", *_tiny_pretrain(tmp_path / sig.name, corpus,
                                               "--config.compile_cache=off")],
        cwd=ROOT, env=child_env(PYTHONUNBUFFERED="1"), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines = []
    for line in proc.stdout:
      lines.append(line)
      if line.startswith("compiling the train step"):
        break
    else:
      pytest.fail("".join(lines) + proc.stderr.read())
    # At once: a signal after that line and before the compile starts ends the run the same way.
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == status, out + err
    assert re.fullmatch(f"{sig.name}: {_EARLY_STOP}\n", out), out + err
    assert "Traceback" not in err


@pytest.mark.slow  # a fine-tune of 32 MRPC rows (about 40 s on 2 cores), then the same command
def test_a_finished_finetune_given_again_prints_its_results_and_exits_0(pretrained, glue_dir,
                                                                        tmp_path):
  command = ["bert_jax.finetune", "--config", "configs/glue.py:task=mrpc", "--workdir",
             str(tmp_path / "mrpc"), f"--config.data_dir={glue_dir}",
             f"--config.init_checkpoint={pretrained}", "--config.max_seq_length=32",
             "--config.batch_size=8", "--config.eval_batch_size=16", "--config.num_epochs=1.0"]
  first = _run(*command)
  assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
  again = _run(*command)
  assert again.returncode == 0, again.stderr
  assert "holds this run, finished" in again.stdout, again.stdout
  assert "Traceback" not in again.stderr


@pytest.mark.parametrize("program, spec, key, takes", [
    ("bert_jax.finetune", "configs/pretrain.py:tiny", "task", "configs/glue.py:task=TASK"),
    ("bert_jax.pretrain", "configs/glue.py:task=mrpc", "objective", "configs/pretrain.py:VARIANT"),
    ("bert_jax.prepare_data", "configs/ner.py", "objective", "configs/pretrain.py:VARIANT"),
])
def test_another_programs_config_is_one_line_naming_what_the_program_takes(program, spec, key,
                                                                           takes, tmp_path):
  where = ["--out", str(tmp_path / "out")] if "prepare" in program else [
      "--workdir", str(tmp_path / "w")]
  proc = _run(program, "--config", spec, *where)
  assert proc.returncode == 1
  _one_line(proc.stderr, f"{program}: error: --config {spec}: not a config of this program (it has no "
                         f"'{key}' key); {program} takes {takes}")
  assert not any(tmp_path.iterdir())  # nothing written
