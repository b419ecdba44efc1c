"""TensorFlow for input pipelines and file reads, kept off accelerators.

Left alone, TensorFlow claims GPU memory (or a TPU) at its first op; every bert_jax module
takes TensorFlow from here, which hides accelerators from it on the first import.
"""
from bert_jax.runtime import startup  # before TensorFlow: quiet start-up  # pylint: disable=g-bad-import-order
import tensorflow as tf

_HIDDEN = False


def hide_accelerators() -> None:
  """Makes GPUs and TPUs invisible to TensorFlow (idempotent); once TensorFlow's devices are
  initialised it keeps them and raises RuntimeError, left as it is."""
  global _HIDDEN
  if _HIDDEN:
    return
  for kind in ("GPU", "TPU"):
    try:
      with startup.quiet_native_stderr():
        tf.config.set_visible_devices([], kind)
    except RuntimeError:  # Devices already initialised: TensorFlow keeps what it has.
      pass
  _HIDDEN = True


def import_tfds():
  """Imports and returns tensorflow_datasets, with TensorFlow kept off accelerators."""
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  return tfds


def not_prepared(name: str, data_dir: str, key: str) -> str:
  """The line for a TFDS dataset that `data_dir` (config key `key`) does not hold prepared:
  what to run where the network is reachable (tfds' own advice, download=True, would fetch
  at run time, which bert_jax never does)."""
  return (f"TFDS {name} is not prepared in {key}={data_dir or '(the TFDS default)'!r}; nothing "
          "is downloaded at run time: prepare it once where the network is reachable "
          f"(tfds.builder({name!r}, data_dir=DIR).download_and_prepare()) and give {key}=DIR")


hide_accelerators()
