"""JAX's persistent compilation cache, on by default for every training program.

A second run with the same shapes loads its executables (and XLA's GPU autotuning) from disk.
`compile_cache`: 'auto' (JAX_COMPILATION_CACHE_DIR, else XDG_CACHE_HOME's bert_jax/jax), a
directory (local or gs://), or 'off'. MIN_COMPILE_SECONDS is low enough that a fine-tune's
small programs are cached too (JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS overrides it).
On a machine with no accelerator XLA's own caches are off: JAX keeps them under the cache
directory and hashes their path into every key, so a cache copied or moved elsewhere missed
every program, and on a CPU they hold nothing (JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES
overrides it).
"""
import os
from typing import Optional

import jax
from jax.experimental.compilation_cache import compilation_cache

from bert_jax.runtime import xla_flags

OFF = ("off", "")
MIN_COMPILE_SECONDS = 0.2
MIN_COMPILE_ENV = "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"
XLA_CACHES_ENV = "JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES"


def default_dir() -> str:
  base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
  return os.path.join(base, "bert_jax", "jax")


def enable(setting: str) -> Optional[str]:
  """Points JAX's persistent cache at `setting`'s directory and returns it (None: off); call
  before the run compiles (an already set-up cache is set up again)."""
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
  if XLA_CACHES_ENV not in os.environ and xla_flags.cpu_only_machine():
    jax.config.update("jax_persistent_cache_enable_xla_caches", "none")
  if changed:
    compilation_cache.reset_cache()
  return directory
