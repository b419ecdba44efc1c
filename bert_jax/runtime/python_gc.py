"""Python's garbage collector while a training program runs: fewer, cheaper collections.

Tracing builds and drops millions of small objects, and every collection holds the GIL that
the step loop and background tracing need. For a program's run (`tuned`): gc.freeze() so what
is alive at start (libraries) is never traversed again, and a young-generation threshold of
10,000 instead of 700. Cycles are still collected, later. Both are undone after the run; a
caller that froze objects itself keeps them frozen.
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
