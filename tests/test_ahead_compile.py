"""A step's programs compiled ahead in a background thread (bert_jax.runtime.ahead_compile)."""
import contextlib
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.runtime import ahead_compile
from bert_jax.runtime import time_split


def _step(state, batch):
  return {"w": state["w"] + batch["x"].sum()}, (batch["x"] * state["w"]).sum(axis=-1)


def _batch(length: int) -> dict:
  return {"x": jnp.arange(4 * length, dtype=jnp.float32).reshape(4, length)}


def _recording(names: list):
  """A tracing context that records the name of each thread entering it."""
  @contextlib.contextmanager
  def context():
    names.append(threading.current_thread().name)
    yield
  return context


def test_results_are_the_jitted_functions_and_each_shape_compiles_once():
  jitted = jax.jit(_step, donate_argnums=(0,))
  threads = []
  step = ahead_compile.AheadCompiled(jitted, _recording(threads))
  state = {"w": jnp.ones(())}
  clock = time_split.compile_clock()
  background = clock.background_seconds
  step.ahead(ahead_compile.spec(state), ahead_compile.spec(_batch(16)))
  step.ahead(ahead_compile.spec(state), ahead_compile.spec(_batch(16)))  # known: not again
  step.program(state, _batch(16))  # waits for the background thread's program
  assert len(threads) == 1 and threads[0].startswith("bert_jax-ahead-lower")
  assert clock.background_seconds > background  # its compilation counted apart
  want_state, want_out = {"w": jnp.ones(())}, []
  for length in (8, 16, 8):
    want_state, out = jax.jit(_step)(want_state, _batch(length))
    want_out.append(out)
    state, out = step(state, _batch(length))
    np.testing.assert_array_equal(out, want_out[-1])
  np.testing.assert_array_equal(state["w"], want_state["w"])
  assert len(threads) == 2  # length 8, compiled where it was first called
  assert threads[1] == threading.current_thread().name
  step.close()


def test_a_queued_program_the_caller_needs_first_is_compiled_by_the_caller():
  entered, release = threading.Event(), threading.Event()
  names = []

  class Blocking:
    """Holds the background thread in its first compilation until released."""

    def __enter__(self):
      names.append(threading.current_thread().name)
      if threading.current_thread() is not threading.main_thread() and not entered.is_set():
        entered.set()
        release.wait(10)

    def __exit__(self, *exc):
      return False

  step = ahead_compile.AheadCompiled(jax.jit(_step), Blocking)
  state = {"w": jnp.ones(())}
  step.ahead(ahead_compile.spec(state), ahead_compile.spec(_batch(24)))  # running, held
  step.ahead(ahead_compile.spec(state), ahead_compile.spec(_batch(32)))  # queued behind it
  assert entered.wait(10)
  _, out = step(state, _batch(32))  # not started yet: taken from the queue
  assert names[-1] == threading.current_thread().name
  np.testing.assert_array_equal(out, jax.jit(_step)(state, _batch(32))[1])
  release.set()
  step(state, _batch(24))  # the background thread's
  assert len(names) == 2
  step.close()


def test_a_failed_compilation_raises_at_the_call_that_needs_it_and_close_drops_the_queue():
  def bad(state, batch):
    if batch["x"].shape[-1] == 8:
      raise ValueError("no program for length 8")
    return _step(state, batch)

  step = ahead_compile.AheadCompiled(jax.jit(bad))
  state = {"w": jnp.ones(())}
  step.ahead(ahead_compile.spec(state), ahead_compile.spec(_batch(8)))
  step(state, _batch(16))  # other shapes are unaffected
  with pytest.raises(ValueError, match="no program for length 8"):
    step(state, _batch(8))
  step.close()
  with pytest.raises(ValueError, match="no program for length 8"):  # compiled here now
    step(state, _batch(8))
  step(state, _batch(16))


def test_without_background_ahead_queues_nothing_and_calls_compile_where_they_are():
  names = []
  step = ahead_compile.AheadCompiled(jax.jit(_step), _recording(names), background=False)
  state = {"w": jnp.ones(())}
  step.ahead(ahead_compile.spec(state), ahead_compile.spec(_batch(8)))
  assert names == []
  step(state, _batch(8))
  assert names == [threading.current_thread().name]
  step.close()


def _lowered_ahead():
  """Waits until everything queued so far is lowered (one lowering thread, in queue order)."""
  ahead_compile._pool("lower").submit(lambda: None).result(timeout=60)


def test_every_steps_queued_programs_are_lowered_by_one_thread_in_queue_order():
  order = []

  def tracing(name):
    @contextlib.contextmanager
    def context():
      order.append((name, threading.current_thread().name))
      yield
    return context

  train = ahead_compile.AheadCompiled(jax.jit(_step), tracing("train"))
  predict = ahead_compile.AheadCompiled(jax.jit(lambda s, b: _step(s, b)[1]), tracing("eval"))
  state = {"w": jnp.ones(())}
  for step, name in ((train, "train"), (predict, "eval")):
    for length in (5, 6):
      step.ahead(ahead_compile.spec(state), ahead_compile.spec(_batch(length)))
  _lowered_ahead()
  assert [name for name, _ in order] == ["train", "train", "eval", "eval"]
  assert len({thread for _, thread in order}) == 1
  assert order[0][1].startswith("bert_jax-ahead-lower")
  for length in (5, 6):  # compiled in the other stage: waited for, not compiled here
    np.testing.assert_array_equal(predict.program(state, _batch(length))(state, _batch(length)),
                                  _step(state, _batch(length))[1])
  assert len(order) == 4
  train.close()
  predict.close()


def test_then_queues_the_next_shapes_once_the_callers_program_is_lowered():
  events = []

  @contextlib.contextmanager
  def context():
    events.append(("trace", threading.current_thread().name))
    yield

  class Recorded:
    """jax.jit(_step) whose lowering is recorded, to see what `then` runs after."""
    jitted = jax.jit(_step)

    def lower(self, *args):
      lowered = self.jitted.lower(*args)
      events.append(("lowered", threading.current_thread().name))
      return lowered

  step = ahead_compile.AheadCompiled(Recorded(), context)
  state = {"w": jnp.ones(())}

  def queue():
    events.append(("then", threading.current_thread().name))
    step.ahead(ahead_compile.spec(state), ahead_compile.spec(_batch(12)))

  here = threading.current_thread().name
  program = step.program(state, _batch(10), then=queue)
  np.testing.assert_array_equal(program(state, _batch(10))[1], jax.jit(_step)(state, _batch(10))[1])
  _lowered_ahead()
  step.program(state, _batch(12))  # compiled in the background: waited for
  assert events[:3] == [("trace", here), ("lowered", here), ("then", here)]
  assert [e for e, _ in events[3:]] == ["trace", "lowered"] and events[3][1] != here
  calls = []
  step.program(state, _batch(10), then=lambda: calls.append(1))  # known: `then` runs at once
  assert calls == [1]
  step.close()


def test_close_during_a_lowering_drops_its_compilation_and_a_later_call_compiles_here():
  entered, release = threading.Event(), threading.Event()
  compiled = []

  class Held:
    """jax.jit(_step) whose background lowering waits for `release` and whose compilations
    are recorded by thread."""
    jitted = jax.jit(_step)

    def lower(self, *args):
      if threading.current_thread() is not threading.main_thread():
        entered.set()
        release.wait(10)
      lowered = self.jitted.lower(*args)

      class Lowered:
        def compile(self):
          compiled.append(threading.current_thread().name)
          return lowered.compile()
      return Lowered()

  step = ahead_compile.AheadCompiled(Held())
  state = {"w": jnp.ones(())}
  step.ahead(ahead_compile.spec(state), ahead_compile.spec(_batch(8)))
  assert entered.wait(10)
  step.close()  # while the background thread lowers
  release.set()
  _, out = step(state, _batch(8))  # waits for the lowering, then compiles here
  np.testing.assert_array_equal(out, jax.jit(_step)(state, _batch(8))[1])
  assert compiled == [threading.current_thread().name]
