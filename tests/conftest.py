"""Test setup: fake CPU devices (8 or 1, tests/device_split.py), TensorFlow kept off accelerators.

XLA_FLAGS must be set before JAX is imported anywhere, so it lives here.
"""
import os
import pathlib
import signal
import sys

# Tests import the config files (`from configs import pretrain`) and their helpers (`from tests
# import ...`) from the repo root.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

# The worker's fake CPU devices: 8, or 1 where pytest.ini's --tx says so (tests/device_split.py).
from tests import device_split  # noqa: E402

# The suite compiles far more than it runs (tiny models, a few steps): XLA's CPU backend at
# optimization level 0 compiles about 1.6x faster (a tiny pretraining step: 13-24 s vs 20-39 s on a
# loaded machine) and tests/test_finetune.py used 93 s of CPU instead of 111 s. Every tolerance and bitwise check
# holds at either level; user runs keep the default level.
os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "")
    + f" --xla_force_host_platform_device_count={device_split.DEVICES}"
    + " --xla_backend_optimization_level=0"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
# PyPI's Linux torch is a CUDA build that brings triton, and transformers' generation code
# imports torch._dynamo, which imports triton: triton's native libraries crash the process
# (a segmentation fault in triton/knobs.py) beside JAX's and TensorFlow's. The suite runs on
# the CPU and never uses triton, so it imports as missing here (torch then runs without it).
sys.modules.setdefault("triton", None)
# A suite started by nohup, or as a background job of a non-interactive shell, inherits SIGHUP,
# SIGINT and SIGQUIT ignored, and the programs it starts would too (an ignored signal stays
# ignored, as documented): the tests that send them expect a terminal's defaults.
for _signal in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT):
  if signal.getsignal(_signal) == signal.SIG_IGN:
    signal.signal(_signal, signal.default_int_handler if _signal == signal.SIGINT
                  else signal.SIG_DFL)

import jax  # noqa: E402
import pytest  # noqa: E402

# Tests compile the same small steps many times, in both xdist workers and in the command-line
# runs they start as subprocesses (which inherit the environment): one compilation cache for the
# whole session. The key covers the program, the XLA flags and the devices, so a hit is the same
# executable.
# The run's own folder in the temp directory, removed when the session ends; and the guard
# that fails a test which ended its worker instead of running it again (tests/worker_guard.py).
from tests.worker_guard import RUN_DIR as _RUN_DIR  # noqa: E402
from tests.worker_guard import pytest_runtest_logfinish  # noqa: E402,F401
from tests.worker_guard import pytest_runtest_setup  # noqa: E402,F401
from tests.worker_guard import pytest_sessionfinish  # noqa: E402,F401


def pytest_configure(config):
  # Which worker runs which file, by its device count (a plugin: its hooks run beside the guard's).
  config.pluginmanager.register(device_split, "device_split")


os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(_RUN_DIR, "xla_cache"))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0.5")
jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
jax.config.update("jax_persistent_cache_min_compile_time_secs",
                  float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]))

# Tiny BPE and SentencePiece tokenizer files (trained once per worker on first use).
from tests.tokenizer_fixtures import albert_dir, bpe_dir, deberta_dir  # noqa: E402,F401
from tests.fixtures import finetuning  # noqa: E402
from tests.fixtures import pretraining  # noqa: E402

# Optional real public data (vocabularies, GLUE, SQuAD, CoNLL-2003, BEIR, STS-B in the layout
# its README describes): $BERT_JAX_REAL_DATA, else a shared/data folder beside the repository.
SHARED_DATA = pathlib.Path(os.environ.get("BERT_JAX_REAL_DATA") or
                           pathlib.Path(__file__).resolve().parents[2] / "shared" / "data")


@pytest.fixture
def shared_data():
  """The optional real-data folder; tests that need it skip without it."""
  if not SHARED_DATA.is_dir():
    pytest.skip(f"needs the real-data folder {SHARED_DATA} (not part of the core suite)")
  return SHARED_DATA


# Data and a pretraining run that several test files use. Session-scoped: each xdist worker builds
# them once, on first use, for every file it runs (--dist loadfile), and no test writes into them.


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
  """A small Google-layout pretraining corpus (tests/fixtures/pretraining.py); its path."""
  return pretraining.write_corpus(tmp_path_factory.mktemp("corpus") / "corpus.txt")


@pytest.fixture(scope="session")
def pretrained(tmp_path_factory):
  """A pretraining workdir after 3 steps of the tiny variant (seq 32, batch 8)."""
  return finetuning.pretrain_tiny(tmp_path_factory.mktemp("pretrain"))


@pytest.fixture(scope="session")
def glue_dir(tmp_path_factory):
  """GLUE TSV layout with MRPC (BOM on train, 32 / 13 / 11 rows)."""
  return finetuning.write_glue_dir(tmp_path_factory.mktemp("glue"))


@pytest.fixture(scope="session")
def squad_dir(tmp_path_factory):
  """SQuAD v1.1 train and dev files and a v2.0 dev file of two paragraphs."""
  return finetuning.write_squad_dir(tmp_path_factory.mktemp("squad"))
