"""glibc's malloc told to keep what a CPU run frees, so each step reuses its buffers' pages.

XLA:CPU takes a step's buffers from malloc and frees them when the step ends. With glibc's
defaults the memory goes back to the kernel: blocks above the mmap threshold are unmapped on
free, a thread arena's heap is unmapped once it is all free, and the heaps' free tops are
trimmed. So every step maps its buffers afresh, and the kernel zeroes each page at its first
touch. A MiniLM fine-tuning run on a 2-core CPU (CoLA, 4,000 rows, warm compilation cache;
benchmarks/README.md, 2026-11-27) took 6.9 million page faults and 15 s of system time in 48 s.

On a machine with no accelerator, program start-up (bert_jax.runtime.startup, before JAX starts
its threads) sets with mallopt:

  M_ARENA_MAX 1           one arena: XLA's worker threads allocate from the main heap
  M_MMAP_MAX 0            no block is mmapped on its own: large buffers come from the heap too
  M_TRIM_THRESHOLD 2 GiB  the heap keeps up to 2 GiB of free memory at its top
  M_TOP_PAD 256 MiB       the heap grows 256 MiB at a time (address space: pages are touched
                          when used)

Each is needed: without the first three together the page faults stayed at 3.1-6.9 million.
The same run with them: 0.56 million page faults, 2.7 s of system time, 44 s. The price is that
the process keeps its peak heap for reuse instead of returning it. Results are unchanged (the
same programs on the same data). On an accelerator host, or with another C library, nothing is
set. BERT_JAX_HOST_MALLOC=default keeps glibc's defaults.
"""
import ctypes
import os
import sys

# mallopt's parameter numbers (glibc's malloc.h).
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_MAX, _M_ARENA_MAX = -1, -2, -4, -8
SETTINGS = ((_M_ARENA_MAX, 1), (_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, 2**31 - 1),
            (_M_TOP_PAD, 256 << 20))
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
  """keep_freed_memory() on a machine with no accelerator unless BERT_JAX_HOST_MALLOC=default;
  whether it was set."""
  setting = environ.get(ENV, "")
  if setting not in ("", "default"):
    raise SystemExit(f"{ENV}={setting!r}: the one value it takes is 'default' (glibc's own "
                     "malloc settings)")
  return cpu_only and setting != "default" and keep_freed_memory()
