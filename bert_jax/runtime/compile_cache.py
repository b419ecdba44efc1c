"""JAX's persistent compilation cache, on by default for every training program.

A second run of the same program with the same shapes loads its executables from disk
instead of compiling them again (a fine-tune's one shape per length bucket, large's
minutes-long first compile). With it JAX also keeps XLA's GPU autotuning results there
(`jax_persistent_cache_enable_xla_caches`), so a second process skips the autotuning too.
The cache's key covers the program, the XLA flags, the devices and the versions, so a hit is
the same executable.

`compile_cache` config key: 'auto' (JAX_COMPILATION_CACHE_DIR if set, else
$XDG_CACHE_HOME/bert_jax/jax, by default ~/.cache/bert_jax/jax), a directory (local or
gs://), or 'off'.

JAX writes only programs that took at least `jax_persistent_cache_min_compile_time_secs` to
compile (1 s by default); the cache on, it is MIN_COMPILE_SECONDS unless
JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS says otherwise. A fine-tuning run's own small
programs (the init with the loaded weights on the way to the first step, an eval step of a
short length: a fraction of a second each to compile, a few milliseconds to load; figures in
benchmarks/README.md) are then loaded too. Eager operations (tens of milliseconds each) stay
out.
"""
import os
from typing import Optional

import jax
from jax.experimental.compilation_cache import compilation_cache

OFF = ("off", "")
MIN_COMPILE_SECONDS = 0.2
MIN_COMPILE_ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"


def default_dir() -> str:
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "bert_jax", "jax")


def enable(setting: str) -> Optional[str]:
  """Points JAX's persistent compilation cache at `setting`'s directory; returns it (None: off).

  Call it before the run compiles its steps: a cache JAX has already set up for this
  process is set up again here, so an earlier compilation does not keep it off.
  """
  if setting in OFF:
    jax.config.update("jax_enable_compilation_cache", False)
    compilation_cache.reset_cache()
    return None
  directory = setting
  if setting == "auto":
    directory = (jax.config.jax_compilation_cache_dir
                 or os.environ.get("JAX_COMPILATION_CACHE_DIR") or default_dir())
  changed = (directory != jax.config.jax_compilation_cache_dir
             or not jax.config.jax_enable_compilation_cache)
  jax.config.update("jax_enable_compilation_cache", True)
  jax.config.update("jax_compilation_cache_dir", directory)
  if MIN_COMPILE_ENV not in os.environ:
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
  if changed:
    compilation_cache.reset_cache()
  return directory
