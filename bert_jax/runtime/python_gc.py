"""Python's garbage collector while a training program runs: fewer, cheaper collections.

Tracing a step builds and drops millions of small Python objects (JAX's tracers and jaxpr
equations, Flax's scopes), and each collection of CPython's cyclic collector holds the GIL:
the step loop's thread and the background tracing (bert_jax.runtime.ahead_compile) wait for
it alike: over a second of a short CPU fine-tuning run went to them (benchmarks/README.md has
the figures, before and after).

For the run of a program (`tuned`, around bert_jax.cli's call of it):

  gc.freeze()                    what is alive when the run starts (the imported libraries'
                                 modules, functions and caches) is never traversed again
  gc.set_threshold(10000, ...)   a young-generation collection every 10,000 net allocations
                                 instead of CPython's 700; the older generations' unchanged

With both, the same run collects a third as often, the full collections all during the imports
before the run. Garbage cycles are still collected (later, in larger batches), and what the
program computes is the same. Both are undone when the run ends, so a process that
calls a program (as the tests do) keeps its own settings; a caller that froze objects itself
keeps them frozen (nothing is frozen or unfrozen here then).
"""
import contextlib
import gc
from typing import Iterator

YOUNG_THRESHOLD = 10000


@contextlib.contextmanager
def tuned() -> Iterator[None]:
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
