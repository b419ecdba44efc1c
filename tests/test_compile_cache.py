"""The persistent compilation cache every training program turns on (compile_cache key)."""
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]

_SCRIPT = """
import sys, time
import jax, jax.numpy as jnp
from bert_jax.runtime import compile_cache
jnp.ones(3).sum()  # something compiled before the cache is turned on
print(compile_cache.enable(sys.argv[1]))
f = jax.jit(lambda x: jnp.tanh(x @ x.T).sum())
f(jnp.ones((64, 64))).block_until_ready()
"""


def _run(setting, env):
  out = subprocess.run([sys.executable, "-c", _SCRIPT, setting], capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  return out.stdout.strip().splitlines()[-1]


def test_auto_caches_in_the_user_cache_dir_and_off_caches_nothing(tmp_path):
  env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE")}
  env |= {"XDG_CACHE_HOME": str(tmp_path / "xdg"), "PYTHONPATH": str(ROOT),
          "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
  cache = tmp_path / "xdg" / "bert_jax" / "jax"
  assert _run("off", env) == "None"
  assert not cache.exists()
  assert _run("auto", env) == str(cache)
  def executables():
    return {p.name: p.stat().st_mtime_ns for p in cache.iterdir() if "atime" not in p.name}
  entries = executables()
  assert entries  # the jitted function's executable
  _run("auto", env)  # a second process reads them: nothing is compiled and written again
  assert executables() == entries
  other = tmp_path / "mine"
  assert _run(str(other), env) == str(other) and list(other.iterdir())
  env["JAX_COMPILATION_CACHE_DIR"] = str(tmp_path / "env")  # 'auto' keeps the user's choice
  assert _run("auto", env) == str(tmp_path / "env")


_MIN_TIME_SCRIPT = """
import sys, jax
from bert_jax.runtime import compile_cache
compile_cache.enable(sys.argv[1])
print(jax.config.jax_persistent_cache_min_compile_time_secs)
"""


def test_programs_of_a_fifth_of_a_second_are_cached_unless_the_environment_says(tmp_path):
  env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
  env["PYTHONPATH"] = str(ROOT)

  def min_seconds(environ):
    out = subprocess.run([sys.executable, "-c", _MIN_TIME_SCRIPT, str(tmp_path / "c")],
                         capture_output=True, text=True, env=environ, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return float(out.stdout.strip().splitlines()[-1])
  assert min_seconds(env) == 0.2  # JAX's own default is 1 s
  assert min_seconds(dict(env, JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0.7")) == 0.7


def test_a_cache_copied_to_another_directory_still_hits(tmp_path):
  # JAX hashes the path of XLA's own caches (kept under the cache directory) into every key;
  # on a CPU they are off, so the same program has the same key wherever the cache lives.
  env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}
  env |= {"PYTHONPATH": str(ROOT), "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}

  def keys(directory):
    _run(str(directory), env)
    return {p.name for p in directory.iterdir() if "atime" not in p.name}
  first, second = keys(tmp_path / "a"), keys(tmp_path / "b")
  assert first and first == second
  env["JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES"] = "xla_gpu_per_fusion_autotune_cache_dir"
  assert keys(tmp_path / "c").isdisjoint(keys(tmp_path / "d"))  # JAX's default: the path counts
