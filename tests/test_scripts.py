"""Launch and benchmark scripts check their arguments before any long work."""
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _run(*argv, timeout=60):
  return subprocess.run(list(argv), cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                        check=False, env=dict(os.environ, JAX_PLATFORMS="cpu"))


def test_cpu_smoke_help_prints_usage_and_starts_nothing(tmp_path):
  proc = _run("bash", "launch/cpu_smoke.sh", "--help")
  assert proc.returncode == 0 and proc.stdout.startswith("usage: launch/cpu_smoke.sh [WORKDIR]")
  assert not (ROOT / "--help").exists()
  proc = _run("bash", "launch/cpu_smoke.sh", "--steps=3")
  assert proc.returncode == 2 and "unknown option --steps=3" in proc.stderr


def test_exact_resume_checks_kill_after_against_steps_first():
  proc = _run(sys.executable, "benchmarks/exact_resume.py", "--steps", "20",
              "--workdir", "/nonexistent/never_written")
  assert proc.returncode == 2
  assert "--kill_after 25 must be between 0 and --steps 20" in proc.stderr.splitlines()[-1]
  proc = _run(sys.executable, "benchmarks/exact_resume.py", "--program", "finetune",
              "--workdir", "/nonexistent/never_written")
  assert proc.returncode == 2 and "--program finetune needs --config" in proc.stderr


def test_memory_benchmark_fits_only_when_asked_and_checks_variant_names():
  proc = _run(sys.executable, "benchmarks/memory.py", "--help")
  assert "none by default" in proc.stdout
  proc = _run(sys.executable, "benchmarks/memory.py", "--variants", "tiny,huge")
  assert proc.returncode == 2 and "unknown variants ['huge']" in proc.stderr


def test_finetune_speed_extrapolates_a_partial_reference_epoch(tmp_path):
  sys.path.insert(0, str(ROOT / "benchmarks"))
  try:
    import finetune_speed  # pylint: disable=g-import-not-at-top
  finally:
    sys.path.remove(str(ROOT / "benchmarks"))
  log = tmp_path / "train_log.jsonl"
  # 30 s to step 10 (compilation included), then 2 s a step.
  log.write_text("\n".join('{"step": %d, "seconds": %d}' % (s, 30 + 2 * (s - 10))
                           for s in (10, 20, 30)) + "\n")
  assert finetune_speed.hf_epoch_seconds(str(log), 100) == 30 + 2 * 90
  assert finetune_speed.hf_epoch_seconds(str(log), 30) == 70  # the whole epoch was run


def test_benchmarks_that_read_real_data_ask_for_it_by_name():
  proc = _run(sys.executable, "benchmarks/embed_speed.py", "--model_dir", "m", "--bundle", "b")
  assert proc.returncode == 2 and "give --sts_train" in proc.stderr
  env = {k: v for k, v in os.environ.items() if k != "GLUE_DIR"}
  proc = subprocess.run([sys.executable, "benchmarks/gpu_end_to_end.py", "--prepare",
                         "--data", "/nonexistent/never_written"], cwd=ROOT, capture_output=True,
                        text=True, timeout=60, check=False, env=env)
  assert proc.returncode == 1 and "--prepare needs --glue_dir" in proc.stderr


def test_moved_experiments_still_start_from_the_repository_root():
  for script in ("step_variants", "deberta_emd"):
    proc = _run(sys.executable, f"benchmarks/experiments/{script}.py", "--help")
    assert proc.returncode == 0 and proc.stdout.startswith("usage:"), proc.stderr[-2000:]
