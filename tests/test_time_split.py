"""The time-split line every fine-tuning run prints."""
import re
import time

import jax
import jax.numpy as jnp

from bert_jax.runtime import time_split


def test_compilations_inside_a_phase_count_as_compile_and_the_parts_add_up():
  split = time_split.TimeSplit()
  before = split.seconds()["compile"]
  with split.phase("train"):
    time.sleep(0.2)
    f = jax.jit(lambda x: jnp.sin(x) @ jnp.cos(x).T + time.time_ns() % 7)  # a new program
    f(jnp.ones((32, 32))).block_until_ready()
  s = split.seconds()
  compiled = s["compile"] - before
  assert compiled > 0
  assert 0.2 <= s["train"] < 0.2 + 0.5  # its own time: the compilation is not in it
  assert abs(sum(v for k, v in s.items() if k != "total") - s["total"]) < 1e-6
  assert s["total"] > s["train"]  # since the process started
  line = split.line()
  assert re.fullmatch(r"time: compile \d+ s \(\d+ programs(; \d+ s more compiled ahead, beside "
                      r"the work)?\), train \d+ s, other \d+ s; total \d+ s", line), line


def test_the_process_start_is_before_now():
  assert time.time() - 24 * 3600 < time_split.process_start_time() <= time.time()
