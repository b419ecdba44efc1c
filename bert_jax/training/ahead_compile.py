"""A jitted step's executables, one per input shape, compiled ahead of their first use.

    step = AheadCompiled(jax.jit(fn, ...), context=lambda: sharding.mesh_context(mesh, rules))
    step.ahead(state_spec, batch_spec)   # queued: compiled by one background thread
    state, out = step(state, batch)      # the executable for these shapes

A fine-tuning run with length buckets runs one train program and one eval program per
length, and it knows every length of the epoch before its first step. Compiled where they
are first used, each program stops the run for its compilation; queued here in the order
of first use, they compile while the steps before them run (on an accelerator the host is
idle then; on a CPU the compiler's one thread takes what the step leaves).

A call runs the executable compiled for its arguments' shapes and dtypes: it waits for one
being compiled, compiles one still queued itself (taking it from the queue), and compiles
one never queued itself, as `jax.jit` would. The programs and results are those of the
jitted function: the same lowering, the same compile options, the same persistent cache.
A compilation that fails raises at the call that needs it, as it did before. Time the
caller spends waiting counts as compile time in the run's time split
(bert_jax.runtime.time_split), and the background compilations count apart.

`close()` drops what is still queued; a compilation already running finishes (XLA cannot
stop one), so a process exits at most one compilation later.

Not on a GPU: there XLA autotunes a program by timing its kernels on the device, which beside
a running step would time them against that step and take device memory from it. There
`ahead` queues nothing and each program compiles where it is first needed.
"""
import concurrent.futures
import contextlib
import threading
import time
from typing import Any, Callable, ContextManager, Optional

import jax

from bert_jax.runtime import time_split


def spec(tree: Any) -> Any:
  """The shapes, dtypes and shardings of `tree`'s arrays (ShapeDtypeStructs), no data."""
  return jax.tree.map(lambda x: jax.ShapeDtypeStruct(
      x.shape, x.dtype, sharding=getattr(x, "sharding", None),
      weak_type=jax.typeof(x).weak_type), tree)


def _signature(args: tuple) -> tuple:
  leaves, treedef = jax.tree.flatten(args)
  return treedef, tuple((tuple(x.shape), str(x.dtype), jax.typeof(x).weak_type) for x in leaves)


class AheadCompiled:
  """`jitted`'s executables by argument shapes; see the module docstring.

  Args:
    jitted: a `jax.jit` function.
    context: a fresh context manager for tracing (the mesh and the logical axis rules),
      entered around every compilation, in whichever thread runs it.
    background: whether `ahead` compiles in a background thread (None: unless the default
      backend is a GPU, see the module docstring); False: it does nothing.
  """

  def __init__(self, jitted: Callable,
               context: Callable[[], ContextManager] = contextlib.nullcontext,
               background: Optional[bool] = None):
    self._jitted, self._context = jitted, context
    self._background = background
    self._programs: dict[tuple, concurrent.futures.Future] = {}
    self._lock = threading.Lock()
    self._pool: Optional[concurrent.futures.ThreadPoolExecutor] = None

  def _compile(self, args: tuple):
    with self._context():
      return self._jitted.lower(*args).compile()

  def ahead(self, *specs) -> None:
    """Queues the program for arguments of these shapes (`spec` of them), unless it is known."""
    if self._background is None:
      self._background = jax.default_backend() != "gpu"
    if not self._background:
      return
    key = _signature(specs)
    with self._lock:
      if key in self._programs:
        return
      if self._pool is None:
        self._pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="bert_jax-ahead-compile")
      self._programs[key] = self._pool.submit(self._compile, specs)

  def program(self, *args):
    """The executable for `args` (arrays or specs): compiled, waited for, or compiled here."""
    key = _signature(args)
    with self._lock:
      future = self._programs.get(key)
      if future is None or future.cancel():  # never queued, or queued and not started yet
        future = self._programs[key] = concurrent.futures.Future()
        mine = True
      else:
        mine = False
    if mine:
      try:
        future.set_result(self._compile(args))
      except BaseException as e:  # the next call with these shapes raises it again
        future.set_exception(e)
        with self._lock:
          del self._programs[key]
        raise
    elif not future.done():
      start = time.time()
      concurrent.futures.wait([future])
      time_split.compile_clock().waited(time.time() - start)
    return future.result()

  def __call__(self, *args):
    return self.program(*args)(*args)

  def close(self) -> None:
    """Drops the queued compilations (a running one finishes); later calls compile here."""
    with self._lock:
      pool, self._pool = self._pool, None
      for key in [k for k, f in self._programs.items() if f.cancel()]:
        del self._programs[key]
    if pool is not None:
      pool.shutdown(wait=False, cancel_futures=True)
