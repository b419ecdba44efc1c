"""The suite's own guards (pytest.ini): a test that hangs or a worker that aborts fails that
test, and the run goes on to the end instead of waiting forever on a dead or stuck worker; a
file marked multidevice runs on the worker of 8 devices, the others on the workers of 1."""
import os
import pathlib
import subprocess
import sys
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_a_hung_test_and_an_aborted_worker_fail_and_the_run_goes_on(tmp_path):
  tests = tmp_path / "tests"
  tests.mkdir()
  (tests / "test_hang.py").write_text("import time\n\ndef test_hang():\n  time.sleep(600)\n")
  (tests / "test_abort.py").write_text("import os\n\ndef test_abort():\n  os.abort()\n")
  # Which worker runs which file (tests/device_split.py): the marked file on the worker of 8
  # devices, the others on those of 1.
  devices = ("import os\n{}\n\ndef test_devices():\n"
             "  assert os.environ['BERT_JAX_TEST_DEVICES'] == '{}'\n")
  (tests / "test_ok.py").write_text(devices.format("", "1"))
  (tests / "test_multi.py").write_text(devices.format(
      "import pytest\npytestmark = pytest.mark.multidevice", "8"))
  t0 = time.time()
  # The project's pytest.ini (its workers, the timeout's method), with a 10 s timeout.
  out = subprocess.run(
      [sys.executable, "-m", "pytest", "-q", "-c", str(ROOT / "pytest.ini"), "--rootdir",
       str(tmp_path), "-p", "no:cacheprovider", "-p", "tests.worker_guard", "-p",
       "tests.device_split", "-o", "timeout=10", str(tests)],
      cwd=tmp_path, capture_output=True, text=True, timeout=300,
      env={k: v for k, v in os.environ.items() if k != "BERT_JAX_TEST_RUN_DIR"}
      | {"PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path), "COLUMNS": "100"})
  assert time.time() - t0 < 240, out.stdout[-3000:]
  assert out.returncode == 1, out.stdout[-3000:]
  last = out.stdout.strip().splitlines()[-1]
  assert "2 failed, 2 passed" in last, out.stdout[-3000:]
  assert "test_hang.py::test_hang" in out.stdout and "test_abort.py::test_abort" in out.stdout
  # Each failed once more at once, in setup, and was not run again. (The short summary may
  # repeat the message or cut it, by terminal width; the section headers do not change.)
  assert out.stdout.count("ERROR at setup of") == 2, out.stdout[-3000:]
  assert "not run again" in out.stdout
  assert not list(tmp_path.glob("bert_jax*"))  # the run folder is removed at the end
