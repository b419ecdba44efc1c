"""Quiet start-up, set up once on import: every program imports this module (through
bert_jax.cli) before TensorFlow or JAX load, and so do library modules that load
TensorFlow (bert_jax.runtime.cpu_tensorflow). TensorFlow's oneDNN ops are off
(TF_ENABLE_ONEDNN_OPTS=0 unless set: they only printed a warning for the input
pipeline's integer ops);
unless the command line gives absl's `--verbosity`
(`--verbosity=0` shows INFO logs), third-party logging is silenced:
TensorFlow's C++ logs (TF_CPP_MIN_LOG_LEVEL=3, which hides "failed call to
cuInit" on CPU machines), the native stderr lines of TensorFlow's import
(CUDA stub probes) and of its accelerator probe (see `quiet_native_stderr`),
libtpu's lines after `pip install -e '.[tpu]'` on a machine without TPUs
(JAX_PLATFORMS=cpu when the machine has neither TPU chips nor NVIDIA GPUs and
JAX_PLATFORMS is unset, so JAX does not load libtpu to find nothing), and
absl / Orbax INFO logs (absl logging at WARNING). What a run does is printed
by the programs themselves (bert_jax.runtime.train_log).
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

from bert_jax.runtime import host_malloc
from bert_jax.runtime import xla_flags

def verbose_requested(argv: Sequence[str]) -> bool:
  """Whether a command line gives absl's --verbosity (or -v): third-party logs wanted."""
  return any(a in ("--verbosity", "-v") or a.startswith(("--verbosity=", "-v="))
             for a in argv)


# Decided once, from the program's command line, before anything is imported.
VERBOSE = verbose_requested(sys.argv[1:])


@contextlib.contextmanager
def quiet_native_stderr():
  """Drops what native code writes to stderr inside the block, unless VERBOSE.

  For library start-up probes that write to file descriptor 2 directly, below
  any log level (TensorFlow's CUDA stub lines at import, libtpu's lines when
  TensorFlow looks for TPUs). The output is kept in a temporary file and
  written out after all when the block raises, so no error is lost.
  """
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
  """Runs the first import of one module (tensorflow) inside quiet_native_stderr.

  TensorFlow is imported by bert_jax.runtime.cpu_tensorflow and, inside data modules, by
  tensorflow_text; this catches whichever comes first.
  """

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
  """A failed checkpoint save ends in one line (checkpoint.CheckpointSaveError), not hundreds.

  Orbax logs the failure from each of its background threads with a traceback
  (kept as one line each: the message), its abandoned write futures are
  reported by asyncio at exit, and tensorstore's callbacks into Orbax's finished
  event loops raise 'Event loop is closed', printed as unraisable exceptions
  (both dropped). --verbosity brings all of it back.
  """
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
HOST_MALLOC = host_malloc.apply(xla_flags.cpu_only_machine())
