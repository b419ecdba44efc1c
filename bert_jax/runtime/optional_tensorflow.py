"""TensorFlow for the modules that need it on some paths only: imported on first use.

Pretraining from prepared data needs no TensorFlow, and GPU images often lack it (its CUDA
wheels conflict with jax[cuda]). The modules on both paths take `tf` and `tf_text` from here:
the first attribute read imports TensorFlow through cpu_tensorflow.py, or raises
MissingTensorFlowError naming what to install. Those modules use `from __future__ import
annotations`, so annotations naming `tf` are not evaluated on import.
"""
import importlib.util
import types

INSTALL = "pip install tensorflow tensorflow-text"


class MissingTensorFlowError(ImportError):
  """TensorFlow (or tensorflow-text) is needed here and not importable."""


def _import(name: str) -> types.ModuleType:
  try:
    from bert_jax.runtime import cpu_tensorflow  # pylint: disable=g-import-not-at-top
    if name == "tensorflow":
      return cpu_tensorflow.tf
    import tensorflow_text  # pylint: disable=g-import-not-at-top
    return tensorflow_text
  except ImportError as e:
    raise MissingTensorFlowError(f"{name} is not installed ({e}): {INSTALL}") from None


class _OnFirstUse:
  """A module imported when one of its attributes is first read."""

  def __init__(self, name: str):
    self._name = name

  def __getattr__(self, attr: str):
    return getattr(_import(self._name), attr)


tf = _OnFirstUse("tensorflow")
tf_text = _OnFirstUse("tensorflow_text")


def available(text: bool = False) -> bool:
  """Whether TensorFlow (and with `text` tensorflow-text) imports here (imports it when it does)."""
  try:
    _import("tensorflow")
    if text:
      _import("tensorflow_text")
  except MissingTensorFlowError:
    return False
  return True


def require(what: str) -> None:
  """Raises ValueError in one line naming `what` and what to install when TensorFlow is missing."""
  try:
    _import("tensorflow")
    _import("tensorflow_text")
  except MissingTensorFlowError as e:
    raise ValueError(f"{what} needs TensorFlow and tensorflow-text, and {e}; or prepare the "
                     f"data on a host that has them (python -m bert_jax.prepare_data) and train "
                     f"with config.data.source='prepared'") from None


def require_tfds(what: str) -> None:
  """Raises ValueError in one line naming `what` and the missing modules when
  tensorflow-datasets (or TensorFlow) is not installed."""
  missing = [m for m in ("tensorflow", "tensorflow_datasets")
             if importlib.util.find_spec(m) is None]
  if missing:
    raise ValueError(f"{what} reads a prepared TFDS dataset, which needs tensorflow-datasets and "
                     f"TensorFlow, and {' and '.join(missing)} {'are' if missing[1:] else 'is'} "
                     f"not installed here: pip install tensorflow tensorflow-datasets; or read "
                     f"the task's files instead")
