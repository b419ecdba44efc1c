"""On a CPU machine, a step's buffers come back from freed memory instead of fresh pages.

XLA:CPU takes a step's buffers from malloc and frees them when the step ends. By default they
went back to the kernel: JAX ran each computation on a thread of its own, glibc gives such a
thread an arena of its own, and an arena's blocks above 64 MiB (a step's temporaries are one
buffer, hundreds of MiB at MiniLM's size) are always mapped on their own and unmapped on free.
So every step mapped its buffers afresh, and the kernel zeroed each page at its first touch: a
third of a CPU fine-tuning run's time went to system time (benchmarks/README.md has the
figures, before and after).

On a machine with no accelerator, program start-up (bert_jax.runtime.startup, before JAX's
backend starts) sets:

  jax_cpu_enable_async_dispatch False  a one-device computation runs on the calling thread,
                                       whose allocations come from glibc's main heap
  mallopt M_MMAP_MAX 0                 no block is mapped on its own: large ones come from
                                       the heap too, and are reused once freed
  mallopt M_TRIM_THRESHOLD 2 GiB       the heap keeps up to 2 GiB of free memory at its top
  mallopt M_TOP_PAD 256 MiB            the heap grows 256 MiB at a time (address space; pages
                                       are touched when used)

With these, the same run takes a tenth of the page faults and a sixth of the system time; each
part alone changed nothing. The compilations' threads keep their own arenas (one shared arena did as well for the
steps, but made a cold run's compilations 50% slower). The price: the process keeps its peak
heap for reuse instead of returning it (a cold run's peak resident memory 3.2 GB instead of
2.8 GB), and the host waits for each step before preparing the next (what it does between
steps is a few milliseconds). Results are unchanged: the same programs on the same data. On an
accelerator host, or without glibc, nothing is set. BERT_JAX_HOST_MALLOC=default keeps JAX's
and glibc's defaults.
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
  """On a machine with no accelerator (`cpu_only`), unless BERT_JAX_HOST_MALLOC=default: the
  settings above; whether they were set."""
  setting = environ.get(ENV, "")
  if setting not in ("", "default"):
    raise SystemExit(f"{ENV}={setting!r}: the one value it takes is 'default' (JAX's and "
                     "glibc's defaults)")
  if not cpu_only or setting == "default" or not keep_freed_memory():
    return False
  import jax  # pylint: disable=g-import-not-at-top
  jax.config.update("jax_cpu_enable_async_dispatch", False)
  return True
