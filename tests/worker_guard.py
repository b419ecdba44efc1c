"""The suite's run folder and its guard against a test that ends its worker process.

pytest.ini's timeout (pytest-timeout, thread method) ends a worker whose test hangs; xdist
then reports the test failed, starts a replacement worker and, with --dist loadfile, schedules
the file's unfinished tests on it, that test included. This guard fails such a test at once on
its second try instead of letting it abort or hang again. A marker file per running test lives
in the run folder, made by the first process that imports this module (the xdist controller;
workers and subprocesses inherit it through BERT_JAX_TEST_RUN_DIR) and removed when that
process's session ends, so nothing is left in the temp directory.
"""
import hashlib
import os
import shutil
import signal
import tempfile

import pytest

RUN_DIR = os.environ.get("BERT_JAX_TEST_RUN_DIR")
_OWN_RUN_DIR = RUN_DIR is None
if _OWN_RUN_DIR:
  RUN_DIR = tempfile.mkdtemp(prefix="bert_jax_tests_")
  os.environ["BERT_JAX_TEST_RUN_DIR"] = RUN_DIR


def _marker(nodeid: str) -> str:
  return os.path.join(RUN_DIR, "running", hashlib.sha1(nodeid.encode()).hexdigest())


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
  marker = _marker(item.nodeid)
  if os.path.exists(marker):
    pytest.fail("this test ended its worker process on its first try (an abort, a crash or "
                "pytest.ini's timeout: see the output above); not run again", pytrace=False)
  os.makedirs(os.path.dirname(marker), exist_ok=True)
  with open(marker, "w") as f:
    f.write(item.nodeid)


def pytest_runtest_logfinish(nodeid, location):  # pylint: disable=unused-argument
  try:
    os.remove(_marker(nodeid))
  except FileNotFoundError:
    pass


def pytest_sessionfinish(session):
  if hasattr(session.config, "workerinput"):
    # The worker has reported every result. Its remaining clean-up (pytest's repeated
    # gc.collect() calls, each running jax's garbage callback over a large heap) can outlast
    # the 5 s execnet waits before it sends the worker a SIGINT, which then surfaces as a
    # KeyboardInterrupt traceback inside an unraisable-exception warning. Let the clean-up
    # finish instead; execnet still ends a worker that is stuck after 10 more seconds.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
  if _OWN_RUN_DIR:
    shutil.rmtree(RUN_DIR, ignore_errors=True)
  # A run whose tests all passed leaves no folder in the temp directory: the retention policy
  # (pytest.ini) drops a passed test's tmp_path, not the folders fixtures made with
  # tmp_path_factory (hundreds of MB). The controller (or a run without workers) removes the
  # run's base folder once every worker has ended; a run with a failure keeps it whole.
  factory = getattr(session.config, "_tmp_path_factory", None)
  if (session.testsfailed == 0 and factory is not None
      and not hasattr(session.config, "workerinput")):
    shutil.rmtree(factory.getbasetemp(), ignore_errors=True)
