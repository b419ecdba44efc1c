"""The host process's memory while a program runs: glibc's malloc and Python's collector.

On a CPU machine, a step's buffers come back from freed memory instead of fresh pages. By default each computation ran on its own thread with its own glibc arena, whose large
blocks are mapped and unmapped each time, so every step faulted in fresh zeroed pages. On a
machine with no accelerator start-up therefore sets synchronous dispatch (the calling
thread's main heap) and mallopt SETTINGS (no separate mappings) so freed blocks are reused;
each alone changed nothing. The price: the peak heap stays, and the host waits for each step.
BERT_JAX_HOST_MALLOC=default keeps the defaults (`apply_malloc`).

Python's garbage collector makes fewer, cheaper collections (`tuned_gc`). Tracing builds and
drops millions of small objects, and every collection holds the GIL that the step loop and
background tracing need. For a program's run: gc.freeze() so what is alive at start
(libraries) is never traversed again, and a young-generation threshold of 10,000 instead of
700. Cycles are still collected, later. Both are undone after the run; a caller that froze
objects itself keeps them frozen.
"""
import contextlib
import ctypes
import gc
import os
import sys
from typing import Iterator

# mallopt's parameter numbers (glibc's malloc.h).
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_MAX = -1, -2, -4
SETTINGS = ((_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, 2**31 - 1), (_M_TOP_PAD, 256 << 20))
ENV = "BERT_JAX_HOST_MALLOC"


def keep_freed_memory() -> bool:
  """Sets SETTINGS with glibc's mallopt; False (nothing set) without glibc or if one fails."""
  if not sys.platform.startswith("linux"):
    return False
  try:
    libc = ctypes.CDLL(None)
    mallopt = libc.mallopt
    libc.gnu_get_libc_version  # pylint: disable=pointless-statement  # glibc, not musl
  except (OSError, AttributeError):
    return False
  mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
  return all([mallopt(param, value) == 1 for param, value in SETTINGS])


def apply_malloc(cpu_only: bool, environ=os.environ) -> bool:
  """SETTINGS on a machine with no accelerator, unless BERT_JAX_HOST_MALLOC=default; whether
  they were set."""
  setting = environ.get(ENV, "")
  if setting not in ("", "default"):
    raise SystemExit(f"{ENV}={setting!r}: the one value it takes is 'default' (JAX's and "
                     "glibc's defaults)")
  if not cpu_only or setting == "default" or not keep_freed_memory():
    return False
  import jax  # pylint: disable=g-import-not-at-top
  jax.config.update("jax_cpu_enable_async_dispatch", False)
  return True


YOUNG_THRESHOLD = 10000


@contextlib.contextmanager
def tuned_gc() -> Iterator[None]:
  """The settings above inside the block; the caller's thresholds and generations after it."""
  thresholds = gc.get_threshold()
  freeze = gc.get_freeze_count() == 0  # gc.unfreeze() would also thaw a caller's own freeze
  if freeze:
    gc.freeze()
  if thresholds[0]:  # 0: automatic collection is off, and stays off
    gc.set_threshold(max(YOUNG_THRESHOLD, thresholds[0]), *thresholds[1:])
  try:
    yield
  finally:
    gc.set_threshold(*thresholds)
    if freeze:
      gc.unfreeze()
