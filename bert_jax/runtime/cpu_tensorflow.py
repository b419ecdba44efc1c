"""TensorFlow for input pipelines and file reads, kept off accelerators.

  from bert_jax.runtime.cpu_tensorflow import tf
  tfds = cpu_tensorflow.import_tfds()

TensorFlow only reads, tokenizes and batches data here; the accelerators belong
to JAX. Left alone, TensorFlow would claim GPU memory (or a TPU) the first time
it runs an op, so every bert_jax module takes TensorFlow from this module, which
hides GPUs and TPUs from it once, on the first import, before any op runs.
Importing TensorFlow and looking for its accelerators print start-up noise
(CUDA stub probes, libtpu's lines when libtpu is installed on a machine
without TPUs): bert_jax.runtime.startup, imported first, keeps it off the console unless
--verbosity is given.
"""
from bert_jax.runtime import startup  # before TensorFlow: quiet start-up  # pylint: disable=g-bad-import-order
import tensorflow as tf

_HIDDEN = False


def hide_accelerators() -> None:
  """Makes GPUs and TPUs invisible to TensorFlow (idempotent).

  When TensorFlow's devices are already initialised (something ran an op
  before this module was imported), TensorFlow keeps the devices it has and
  raises RuntimeError; that is left as it is.
  """
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


hide_accelerators()
