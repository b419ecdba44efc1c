"""Quiet start-up, set up once on import, before TensorFlow or JAX load (bert_jax.cli and
cpu_tensorflow.py import it).

Unless the command line gives absl's `--verbosity`, third-party logging is silenced:
TensorFlow's C++ logs and native stderr lines at import and accelerator probing, absl and
Orbax INFO logs, and libtpu (JAX_PLATFORMS=cpu on a machine with no TPU or NVIDIA GPU, so
JAX does not load libtpu to find nothing). TF_ENABLE_ONEDNN_OPTS=0 unless set (its ops only
warned on the pipeline's integer ops). Programs print what a run does (train_log.py).
"""
import contextlib
import importlib.abc
import importlib.util
import logging as std_logging
import os
import sys
import tempfile
from typing import Sequence

from absl import logging

from bert_jax.runtime import host_memory
from bert_jax.runtime import xla_flags

def verbose_requested(argv: Sequence[str]) -> bool:
  """Whether a command line gives absl's --verbosity (or -v): third-party logs wanted."""
  return any(a in ("--verbosity", "-v") or a.startswith(("--verbosity=", "-v="))
             for a in argv)


# Decided once, from the program's command line, before anything is imported.
VERBOSE = verbose_requested(sys.argv[1:])


@contextlib.contextmanager
def quiet_native_stderr():
  """Drops what native code writes to file descriptor 2 inside the block, unless VERBOSE; it is
  kept in a temporary file and written out after all when the block raises."""
  if VERBOSE:
    yield
    return
  sys.stderr.flush()
  saved = os.dup(2)
  with tempfile.TemporaryFile() as captured:
    os.dup2(captured.fileno(), 2)
    try:
      yield
    except BaseException:
      os.dup2(saved, 2)
      captured.seek(0)
      os.write(2, captured.read())
      raise
    finally:
      sys.stderr.flush()
      os.dup2(saved, 2)
      os.close(saved)


class _QuietImport(importlib.abc.MetaPathFinder):
  """Runs the first import of tensorflow inside quiet_native_stderr, whichever module comes
  first (cpu_tensorflow or tensorflow_text)."""

  def __init__(self, name: str):
    self.name = name
    self._looking = False

  def find_spec(self, fullname, path=None, target=None):
    if fullname != self.name or self._looking:
      return None
    self._looking = True  # the lookup below must not come back here
    try:
      spec = importlib.util.find_spec(fullname)
    finally:
      self._looking = False
    if spec is None or spec.loader is None:
      return spec
    exec_module = spec.loader.exec_module

    def quiet_exec(module):
      if self in sys.meta_path:  # imported once; a mere find_spec (probing) is not an import
        sys.meta_path.remove(self)
      with quiet_native_stderr():
        exec_module(module)
    spec.loader.exec_module = quiet_exec
    return spec


def _quiet_start_up() -> None:
  """Silences third-party start-up logging unless VERBOSE (see the module docstring)."""
  # TensorFlow only runs the input pipeline and tokenizer ops here, integer and string ops
  # oneDNN does not speed up: on CPUs without AVX-512 it printed "oneDNN supports DT_INT64
  # only on platforms with AVX-512" into every run (TF_CPP_MIN_LOG_LEVEL does not hide it).
  # Off, the pipeline is as fast (benchmarks/README.md) and gives the same batches.
  os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
  if VERBOSE:
    return
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  if "JAX_PLATFORMS" not in os.environ and xla_flags.cpu_only_machine():
    # Otherwise JAX loads libtpu (when installed, e.g. for aot_compile) only to find no
    # TPU, and libtpu prints its lines to stderr. JAX read the variable when it was
    # imported (programs import it before this module), so its config is set too; no
    # backend has started yet at program start.
    import jax  # pylint: disable=g-import-not-at-top
    os.environ["JAX_PLATFORMS"] = "cpu"
    jax.config.update("jax_platforms", "cpu")
  if "tensorflow" not in sys.modules:
    sys.meta_path.insert(0, _QuietImport("tensorflow"))
  logging.set_verbosity(logging.WARNING)
  _quiet_failed_saves()


def _quiet_failed_saves() -> None:
  """A failed checkpoint save ends in one line (checkpoint.CheckpointSaveError), not hundreds:
  Orbax's per-thread tracebacks become one line each, and asyncio's and tensorstore's noise at
  exit is dropped. --verbosity brings all of it back."""
  class OrbaxOneLine(std_logging.Filter):
    def filter(self, record):
      if "/orbax/" in record.pathname and record.exc_info:
        record.exc_info, record.exc_text = None, None
      return True
  std_logging.getLogger("absl").addFilter(OrbaxOneLine())
  # Orbax's abandoned write coroutines and futures, collected at exit after the failure was
  # reported ("coroutine ... was never awaited": a warning at garbage collection).
  import warnings  # pylint: disable=g-import-not-at-top
  warnings.filterwarnings("ignore", message=r"coroutine .* was never awaited",
                          category=RuntimeWarning)
  std_logging.getLogger("asyncio").addFilter(
      lambda record: "exception was never retrieved" not in record.getMessage())
  default_hook = sys.unraisablehook

  def hook(unraisable):
    if not (isinstance(unraisable.exc_value, RuntimeError)
            and str(unraisable.exc_value) == "Event loop is closed"):
      default_hook(unraisable)
  sys.unraisablehook = hook


_quiet_start_up()
xla_flags.apply()  # before any backend starts: XLA reads XLA_FLAGS once
# before the backend starts: it reads jax_cpu_enable_async_dispatch once
HOST_MALLOC = host_memory.apply_malloc(xla_flags.cpu_only_machine())
