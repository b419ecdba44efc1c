"""benchmarks/gpu_end_to_end.sh --dry_run: the GPU machine's whole chain, tiny, on the CPU:
step-only speed, pretraining from prepared data, SIGKILL and resume, export, STS-B fine-tuning
from the export. The dry run's data come from the package's built-in corpus and a synthetic
STS-B, so it runs in a plain clone."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_end_to_end_dry_run_resumes_exactly_and_reports_every_figure(tmp_path):
  out = tmp_path / "e2e"
  proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_end_to_end.sh"), "--dry_run",
                         "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                        timeout=1200, env=dict(os.environ, PYTHON=sys.executable))
  log = out / "e2e.log"
  assert proc.returncode == 0, (proc.returncode, proc.stdout[-2000:], proc.stderr[-3000:],
                                log.read_text()[-3000:] if log.exists() else "no e2e.log")
  result = json.loads((out / "e2e.json").read_text())
  assert result["resumed_losses_equal"] and result["resumed_steps_compared"] >= 3
  assert result["killed_after_step"] < result["steps"]  # killed before the end: a real resume
  assert result["step_only_tokens_per_second"] > 0 and result["program_tokens_per_second"] > 0
  assert 0.0 <= result["input_wait_share"] < 1.0
  assert -1.0 <= result["stsb_dev_pearson"] <= 1.0
  assert (out / "straight" / "export" / "bundle.json").exists()  # what the fine-tune read
  assert (out / "data" / "corpus.txt").stat().st_size > 500_000  # cut from the built-in corpus
  assert len((out / "data" / "glue" / "STS-B" / "train.tsv").read_text().splitlines()) == 97
  table = (out / "e2e.md").read_text()
  for row in ("step only (tokens/s)", "whole program (tokens/s)", "input wait share",
              "SIGKILL + resume", "STS-B dev Pearson"):
    assert f"| {row} |" in table
