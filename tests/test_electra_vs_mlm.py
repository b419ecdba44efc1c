"""benchmarks/electra_vs_mlm.py: its flags are checked before anything runs."""
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import electra_vs_mlm  # noqa: E402  pylint: disable=g-import-not-at-top

REQUIRED = ["--corpus", "text.txt", "--glue_dir", "glue"]


def test_flags_parse_tasks_into_a_list():
  args = electra_vs_mlm.parse_args(REQUIRED + ["--tasks", "stsb, rte"])
  assert args.tasks == ["stsb", "rte"] and args.seeds == 3


@pytest.mark.parametrize("bad", [["--tasks", "squad"], ["--tasks", ""], ["--steps", "5"],
                                 ["--seeds", "0"]])
def test_bad_flags_are_refused(bad, capsys):
  with pytest.raises(SystemExit):
    electra_vs_mlm.parse_args(REQUIRED + bad)
  assert "error:" in capsys.readouterr().err


def test_corpus_and_glue_dir_are_required(capsys):
  with pytest.raises(SystemExit):
    electra_vs_mlm.parse_args([])
  assert "--corpus" in capsys.readouterr().err
