"""On a CPU machine, a step's buffers come back from freed memory instead of fresh pages.

By default each computation ran on its own thread with its own glibc arena, whose large
blocks are mapped and unmapped each time, so every step faulted in fresh zeroed pages. On a
machine with no accelerator start-up therefore sets synchronous dispatch (the calling
thread's main heap) and mallopt SETTINGS (no separate mappings) so freed blocks are reused;
each alone changed nothing. The price: the peak heap stays, and the host waits for each step.
BERT_JAX_HOST_MALLOC=default keeps the defaults.
"""
import ctypes
import os
import sys

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


def apply(cpu_only: bool, environ=os.environ) -> bool:
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
