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


def test_memory_benchmark_fits_only_when_asked_and_checks_variant_names():
  proc = _run(sys.executable, "benchmarks/memory.py", "--help")
  assert "none by default" in proc.stdout
  proc = _run(sys.executable, "benchmarks/memory.py", "--variants", "tiny,huge")
  assert proc.returncode == 2 and "unknown variants ['huge']" in proc.stderr
