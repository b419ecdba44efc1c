"""A jitted step's executables, one per input shape, compiled ahead of their first use.

    step = AheadCompiled(jax.jit(fn, ...), context=lambda: sharding.mesh_context(mesh, rules))
    step.ahead(state_spec, batch_spec)   # queued: compiled in background threads
    state, out = step(state, batch)      # the executable for these shapes

A fine-tuning run with length buckets runs one train program and one eval program per
length, and it knows every length of the epoch before its first step. Compiled where they
are first used, each program stops the run for its compilation; queued here in the order
of first use, they compile while the steps before them run (on an accelerator the host is
idle then; on a CPU the compiler's one thread takes what the step leaves).

Queued programs go through two stages, shared by the steps that are alive: one thread
traces and lowers them, one at a time, in the order they were queued (the train step's lengths
before the eval step's), and two threads compile what it has lowered. Tracing holds Python's
GIL, so two traces at once each take about twice as long; XLA's compilation (and a load from
the persistent cache) does not, so two of them keep both cores of a small host busy while the
caller waits for one. The first program of a run is the one the run waits for:
`program(..., then=queue_the_rest)` queues the others only once that one is lowered, so that
they trace while XLA compiles it (or loads it from the cache), not beside its tracing.

A call runs the executable compiled for its arguments' shapes and dtypes: it waits for one
being compiled, compiles one still queued itself (taking it from the queue), and compiles
one never queued itself, as `jax.jit` would. The programs and results are those of the
jitted function: the same lowering, the same compile options, the same persistent cache.
A compilation that fails raises at the call that needs it, as it did before. Time the
caller spends waiting counts as compile time in the run's time split
(bert_jax.runtime.time_split), and the background compilations count apart.

`close()` drops what is still queued; a lowering or compilation already running finishes
(XLA cannot stop one), so a process exits at most one lowering and two compilations later.

Not on a GPU: there XLA autotunes a program by timing its kernels on the device, which beside
a running step would time them against that step and take device memory from it. There
`ahead` queues nothing and each program compiles where it is first needed.
"""
import concurrent.futures
import contextlib
import threading
import time
import weakref
from typing import Any, Callable, ContextManager, Optional

import jax

from bert_jax.runtime import time_split

# The stages' executors, shared by the steps that hold them: when the last of those steps is
# gone, so are its threads (an executor's threads end once it is garbage).
_pools_lock = threading.Lock()
_pools: "weakref.WeakValueDictionary[str, concurrent.futures.ThreadPoolExecutor]" = (
    weakref.WeakValueDictionary())


def _pool(stage: str) -> concurrent.futures.ThreadPoolExecutor:
  """The threads of a stage, 'lower' (one) or 'compile' (two): see the module docstring."""
  with _pools_lock:
    pool = _pools.get(stage)
    if pool is None:
      pool = _pools[stage] = concurrent.futures.ThreadPoolExecutor(
          max_workers=1 if stage == "lower" else 2,
          thread_name_prefix=f"bert_jax-ahead-{stage}")
    return pool


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
    self._closed = False
    self._stages: tuple = ()  # the 'lower' and 'compile' executors, once it queues

  def _compile(self, args: tuple, then: Optional[Callable[[], None]] = None):
    with self._context():
      lowered = self._jitted.lower(*args)
      if then is not None:
        then()
      return lowered.compile()

  def _lower_ahead(self, key: tuple, args: tuple, future: concurrent.futures.Future) -> None:
    """The 'lower' stage of a queued program: lowers it and hands it to the 'compile' stage."""
    if not future.set_running_or_notify_cancel():  # taken by a caller, or dropped by close()
      return
    try:
      with self._context():
        lowered = self._jitted.lower(*args)
    except BaseException as e:  # raised at the call that needs it
      future.set_exception(e)
      return

    def compile_it():
      with self._lock:
        dropped = self._closed and self._programs.get(key) is future
        if dropped:  # close() came after its lowering: not compiled, a later call compiles
          del self._programs[key]
      if dropped:
        future.set_exception(concurrent.futures.CancelledError())
        return
      try:
        future.set_result(lowered.compile())
      except BaseException as e:
        future.set_exception(e)
    self._stages[1].submit(compile_it)

  def ahead(self, *specs) -> None:
    """Queues the program for arguments of these shapes (`spec` of them), unless it is known."""
    if self._background is None:
      self._background = jax.default_backend() != "gpu"
    if not self._background:
      return
    key = _signature(specs)
    with self._lock:
      if key in self._programs or self._closed:
        return
      future = self._programs[key] = concurrent.futures.Future()
      self._stages = self._stages or (_pool("lower"), _pool("compile"))
    self._stages[0].submit(self._lower_ahead, key, specs, future)

  def program(self, *args, then: Optional[Callable[[], None]] = None):
    """The executable for `args` (arrays or specs): compiled, waited for, or compiled here.

    `then` (None: nothing) is called once, as soon as no tracing of this call is left:
    after lowering the program here, else before waiting for it or returning it.
    """
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
        future.set_result(self._compile(args, then))
      except BaseException as e:  # the next call with these shapes raises it again
        future.set_exception(e)
        with self._lock:
          del self._programs[key]
        raise
      return future.result()
    if then is not None:
      then()
    if not future.done():
      start = time.time()
      concurrent.futures.wait([future])
      time_split.compile_clock().waited(time.time() - start)
    if future.cancelled() or isinstance(future.exception(), concurrent.futures.CancelledError):
      return self.program(*args)  # dropped by close() after its lowering: compiled here
    return future.result()

  def __call__(self, *args):
    return self.program(*args)(*args)

  def close(self) -> None:
    """Drops this step's queued compilations (a running one finishes); later calls compile
    here, and `ahead` queues nothing more."""
    with self._lock:
      self._closed = True
      for key in [k for k, f in self._programs.items() if f.cancel()]:
        del self._programs[key]
