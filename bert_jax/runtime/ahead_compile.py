"""A jitted step's executables, one per input shape, compiled ahead of their first use.

A fine-tuning run with length buckets knows every program it will need before its first
step; queued here in order of first use, they compile while earlier steps run instead of
stopping the run. One thread traces and lowers (tracing holds the GIL), two compile (XLA
releases it). `program(..., then=queue_the_rest)` queues the others only once the first is
lowered, so they trace beside its compilation, not its tracing.

A call runs the executable for its arguments' shapes, waiting for it or compiling it itself:
the same lowering, options and persistent cache as `jax.jit`, and a failed compilation raises
at the call that needs it. The caller's waits count as compile time (time_split.py).
`close()` drops the queue; running work finishes (XLA cannot stop it). Not on a GPU: XLA's
autotuning there would time kernels against the running step and take its memory.
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
  """`jitted`'s executables by argument shapes.

  context: a fresh context manager (mesh and logical axis rules) entered around every
  compilation, in whichever thread runs it. background: None means unless the backend is a GPU.
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
    """The executable for `args` (arrays or specs): compiled, waited for, or compiled here;
    `then` is called once no tracing of this call is left."""
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
