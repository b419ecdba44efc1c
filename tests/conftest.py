"""Test setup: 8 fake CPU devices, TensorFlow kept off accelerators.

XLA_FLAGS must be set before JAX is imported anywhere, so it lives here.
"""
import os

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import pathlib  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402

# Tests import the config files (`from configs import pretrain`) from the repo root.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import pytest  # noqa: E402

# Tests compile the same small steps many times: share compilations in-session.
jax.config.update("jax_compilation_cache_dir", tempfile.mkdtemp(prefix="bert_jax_xla_cache_"))
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)

# Tiny BPE and SentencePiece tokenizer files (trained once per worker on first use).
from tests.tokenizer_fixtures import albert_dir, bpe_dir, deberta_dir  # noqa: E402,F401

SHARED_DATA = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture
def shared_data():
  """The optional ../shared/data folder; tests that need it skip without it."""
  if not SHARED_DATA.is_dir():
    pytest.skip(f"needs the real-data folder {SHARED_DATA} (not part of the core suite)")
  return SHARED_DATA
