"""Quiet start-up: third-party start-up noise is kept off the console, errors are not."""
import os
import pathlib
import subprocess
import sys

import pytest

from bert_jax.runtime import startup
from tests.fixtures import parity

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_verbosity_flag_is_recognised():
  assert startup.verbose_requested(["--config", "x", "--verbosity=0"])
  assert startup.verbose_requested(["--verbosity", "1"]) and startup.verbose_requested(["-v=1"])
  assert not startup.verbose_requested(["--config", "x", "--config.verbosity_x=1"])


def test_quiet_native_stderr_drops_output_but_replays_it_on_error(capfd, monkeypatch):
  monkeypatch.setattr(startup, "VERBOSE", False)
  with startup.quiet_native_stderr():
    os.write(2, b"probe noise\n")
  assert capfd.readouterr().err == ""
  with pytest.raises(RuntimeError, match="import failed"):
    with startup.quiet_native_stderr():
      os.write(2, b"the reason it failed\n")
      raise RuntimeError("import failed")
  assert capfd.readouterr().err == "the reason it failed\n"
  monkeypatch.setattr(startup, "VERBOSE", True)
  with startup.quiet_native_stderr():
    os.write(2, b"shown when verbose\n")
  assert capfd.readouterr().err == "shown when verbose\n"


def test_a_program_start_up_prints_nothing_of_tensorflow_or_jax():
  """TensorFlow's import and accelerator probe and a JAX computation, as a program runs them."""
  code = ("from bert_jax import cli\n"
          "from bert_jax.runtime.cpu_tensorflow import tf\n"
          "import jax.numpy as jnp\n"
          "print(int(tf.constant(2) + 1), int(jnp.ones(3).sum()))\n")
  env = {k: v for k, v in os.environ.items() if k not in ("TF_CPP_MIN_LOG_LEVEL",)}
  proc = subprocess.run([sys.executable, "-c", code, "--some-program-flag"], cwd=ROOT,
                        capture_output=True, text=True, timeout=120, check=False, env=env)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stdout == "3 3\n"
  assert proc.stderr == ""


def test_jax_is_kept_off_libtpu_on_a_machine_without_accelerators():
  """JAX imported first (as programs do), then bert_jax.cli: JAX's platforms are set in time,
  and XLA_FLAGS has the CPU defaults before the backend starts (the compile is at -O2)."""
  code = ("import os, jax\n"
          "from bert_jax import cli\n"
          "from bert_jax.runtime import xla_flags\n"
          "print(xla_flags.cpu_only_machine(), jax.config.jax_platforms)\n"
          "print(os.environ.get('XLA_FLAGS', 'none'))\n"
          "jax.numpy.ones(2).block_until_ready()\n"
          "from jax._src import xla_bridge\n"
          "print(xla_bridge.get_backend().platform)\n")
  env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "XLA_FLAGS")}
  proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                        timeout=120, check=False, env=env)
  assert proc.returncode == 0, proc.stderr[-2000:]
  first, flags, platform = proc.stdout.splitlines()
  cpu_only, platforms = first.split()
  assert platforms == ("cpu" if cpu_only == "True" else "None")
  if cpu_only == "True":
    assert flags == "--xla_backend_optimization_level=2" and platform == "cpu"
  assert proc.stderr == ""


def test_the_training_log_does_not_load_pytorch():
  """tensorboardX imports torch whenever it is installed (0.2 GB of resident memory in a JAX
  process); bert_jax.runtime.train_log hides it while tensorboardX imports. torch imports
  normally afterwards, and a program that loaded torch first keeps tensorboardX's torch support."""
  parity.require("torch")  # the check is that it is not loaded
  code = ("import sys\n"
          "from bert_jax.runtime import train_log\n"
          "train_log._summary_writer_class()  # as a run's first log does\n"
          "print('torch' in sys.modules, 'tensorboardX' in sys.modules)\n"
          "import torch, tensorboardX.writer\n"
          "print(int(torch.ones(2).sum()), tensorboardX.writer.numpy_compatible.__name__)\n")
  proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                        timeout=120, check=False)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stdout.split() == ["False", "True", "2", "ndarray"]
  code = ("import torch, tensorboardX.writer\n"
          "from bert_jax.runtime import train_log\n"
          "train_log._summary_writer_class()\n"
          "print(tensorboardX.writer.numpy_compatible.__name__)\n")
  proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                        timeout=120, check=False)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert proc.stdout.split() == ["Tensor"]


_FREED_PAGES = (
    "import ctypes, resource, jax\n"
    "from bert_jax import cli\n"
    "from bert_jax.runtime import startup, xla_flags\n"
    "libc = ctypes.CDLL(None)\n"
    "libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]\n"
    "libc.free.argtypes = [ctypes.c_void_p]\n"
    "def touch():  # a step's buffer: 64 MiB taken, written, freed\n"
    "  p = libc.malloc(64 << 20); ctypes.memset(p, 1, 64 << 20); libc.free(p)\n"
    "touch()\n"
    "before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt\n"
    "for _ in range(5):\n"
    "  touch()\n"
    "print(xla_flags.cpu_only_machine(), startup.HOST_MALLOC,\n"
    "      resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before,\n"
    "      jax.config.read('jax_cpu_enable_async_dispatch'))\n")


@pytest.mark.parametrize("setting", [None, "default"])
def test_freed_step_buffers_keep_their_pages_on_a_cpu_machine(setting):
  """On a machine with no accelerator programs run one-device computations on the calling
  thread and set glibc's malloc to keep freed memory (bert_jax.runtime.host_memory): 64 MiB
  freed and taken again five times touches no new page. With BERT_JAX_HOST_MALLOC=default,
  JAX's and glibc's defaults: each time a fresh mapping, 16,384 page faults."""
  env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "XLA_FLAGS",
                                                          "BERT_JAX_HOST_MALLOC")}
  if setting:
    env["BERT_JAX_HOST_MALLOC"] = setting
  proc = subprocess.run([sys.executable, "-c", _FREED_PAGES], cwd=ROOT, capture_output=True,
                        text=True, timeout=120, check=False, env=env)
  assert proc.returncode == 0, proc.stderr[-2000:]
  cpu_only, applied, faults, async_dispatch = proc.stdout.split()
  if sys.platform.startswith("linux") and cpu_only == "True" and setting is None:
    assert (applied, async_dispatch) == ("True", "False") and int(faults) < 1000, proc.stdout
  else:
    assert (applied, async_dispatch) == ("False", "True"), proc.stdout
    assert not sys.platform.startswith("linux") or int(faults) >= 5 * 16384, proc.stdout


def test_a_bad_host_malloc_setting_is_one_line():
  env = dict(os.environ, BERT_JAX_HOST_MALLOC="jemalloc")
  proc = subprocess.run([sys.executable, "-c", "from bert_jax import cli"], cwd=ROOT,
                        capture_output=True, text=True, timeout=120, check=False, env=env)
  assert proc.returncode == 1
  assert proc.stderr == ("BERT_JAX_HOST_MALLOC='jemalloc': the one value it takes is 'default' "
                         "(JAX's and glibc's defaults)\n")
