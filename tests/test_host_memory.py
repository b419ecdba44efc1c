"""The garbage collector's settings while a program runs (bert_jax.runtime.host_memory)."""
import gc

from bert_jax.runtime import host_memory


def test_tuned_raises_the_young_threshold_freezes_and_restores_both():
  before = gc.get_threshold()
  gc.set_threshold(700, 10, 10)
  try:
    with host_memory.tuned_gc():
      assert gc.get_threshold() == (host_memory.YOUNG_THRESHOLD, 10, 10)
      assert gc.get_freeze_count() > 0  # what was alive at the start is frozen
    assert gc.get_threshold() == (700, 10, 10)
    assert gc.get_freeze_count() == 0
  finally:
    gc.set_threshold(*before)


def test_tuned_leaves_automatic_collection_off_when_it_was_off():
  before = gc.get_threshold()
  gc.set_threshold(0)
  try:
    with host_memory.tuned_gc():
      assert gc.get_threshold()[0] == 0
    assert gc.get_threshold()[0] == 0
  finally:
    gc.set_threshold(*before)


def _frozen(obj) -> bool:
  """Whether `obj` is in the permanent generation (gc.get_objects lists the others only)."""
  return not any(o is obj for o in gc.get_objects())


def test_tuned_leaves_a_callers_own_freeze_in_place():
  probe = [object()]  # a container the collector tracks
  gc.freeze()
  try:
    frozen = gc.get_freeze_count()
    assert _frozen(probe)
    with host_memory.tuned_gc():
      pass
    # Still frozen: gc.unfreeze would have thawed it. (The count itself may drop by a few
    # while the suite's other threads free frozen objects; nothing here thaws a whole freeze.)
    assert _frozen(probe)
    assert gc.get_freeze_count() > frozen // 2
  finally:
    gc.unfreeze()
