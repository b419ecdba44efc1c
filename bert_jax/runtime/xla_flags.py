"""The XLA flags bert_jax sets by default, before JAX starts its backend.

NVIDIA GPUs: --xla_gpu_enable_triton_gemm=false, every GEMM on cuBLAS (faster steps, quicker
compiles without Triton GEMM autotuning; NVIDIA's JAX-Toolbox images set it too).
No accelerator: --xla_backend_optimization_level=2, since -O3 on XLA:CPU's generated loops
cost compile time and gave nothing back (bit-identical results). Figures: benchmarks/README.md
("XLA flag defaults"). A flag XLA_FLAGS already names is left as given. XLA reads XLA_FLAGS
once, when the backend starts, so bert_jax.cli applies this first.
"""
import functools
import os
from typing import MutableMapping

GPU_DEFAULTS = {"xla_gpu_enable_triton_gemm": "false"}
CPU_DEFAULTS = {"xla_backend_optimization_level": "2"}


def _named(flags: str) -> set[str]:
  """The flag names in an XLA_FLAGS string ('--a=1 --b' -> {'a', 'b'})."""
  return {word.lstrip("-").split("=", 1)[0] for word in flags.split() if word.startswith("--")}


def add_defaults(environ: MutableMapping[str, str], defaults: dict[str, str]) -> list[str]:
  """Appends each of `defaults` that environ['XLA_FLAGS'] does not name; returns those added."""
  flags = environ.get("XLA_FLAGS", "")
  named = _named(flags)
  added = [f"--{k}={v}" for k, v in defaults.items() if k not in named]
  if added:
    environ["XLA_FLAGS"] = " ".join([flags.strip()] + added).strip()
  return added


def apply(environ: MutableMapping[str, str] = os.environ) -> list[str]:
  """Adds GPU_DEFAULTS to XLA_FLAGS on an NVIDIA GPU machine, CPU_DEFAULTS on a machine with
  no accelerator; the flags added."""
  if _has_nvidia_gpu():
    return add_defaults(environ, GPU_DEFAULTS)
  if cpu_only_machine():
    return add_defaults(environ, CPU_DEFAULTS)
  return []


def _has_nvidia_gpu() -> bool:
  try:
    from jax._src import hardware_utils  # pylint: disable=g-import-not-at-top
    return hardware_utils.has_visible_nvidia_gpu()
  except Exception:  # pylint: disable=broad-except  # a private module: if it moved, add nothing
    return False


@functools.cache  # about 150 ms of PCI probes, asked by every part of start-up
def cpu_only_machine() -> bool:
  """True when the machine has no TPU chip and no NVIDIA or AMD GPU; False when unknown."""
  try:
    from jax._src import hardware_utils  # pylint: disable=g-import-not-at-top
    chips, _ = hardware_utils.num_available_tpu_chips_and_device_id()
    return (chips == 0 and not hardware_utils.has_visible_nvidia_gpu()
            and not hardware_utils.num_available_amd_gpus(stop_at=1))
  except Exception:  # pylint: disable=broad-except  # a private module: if it moved, do nothing
    return False


def describe(environ: MutableMapping[str, str] = os.environ) -> str:
  """The run header's words: XLA_FLAGS as the backend read it, or 'none'."""
  return environ.get("XLA_FLAGS", "").strip() or "none"
