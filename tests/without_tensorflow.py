"""Runs a module as on a host without TensorFlow: `python tests/without_tensorflow.py MODULE ARGS`.

tensorflow, tensorflow_text and tensorflow_datasets are hidden from every import
finder, as if they were not installed: `import tensorflow` raises
ModuleNotFoundError and `importlib.util.find_spec('tensorflow')` is None (what
etils.epath and bert_jax.runtime.optional_tensorflow look at). At exit the process prints
`TENSORFLOW MODULES: [...]`, the hidden modules that something imported anyway
(always [] unless the hiding failed).
"""
import atexit
import runpy
import sys

HIDDEN = ("tensorflow", "tensorflow_text", "tensorflow_datasets")


class _Hide:
  """A meta path finder that finds nothing under HIDDEN and defers to `inner` otherwise."""

  def __init__(self, inner):
    self._inner = inner

  def find_spec(self, fullname, path=None, target=None):
    if fullname.split(".")[0] in HIDDEN:
      return None
    return self._inner.find_spec(fullname, path, target)

  def __getattr__(self, name):
    return getattr(self._inner, name)


def hide() -> None:
  assert not [m for m in sys.modules if m.split(".")[0] in HIDDEN], "imported already"
  sys.meta_path[:] = [_Hide(f) for f in sys.meta_path]


def _report() -> None:
  print("TENSORFLOW MODULES:", sorted(m for m in sys.modules if m.split(".")[0] in HIDDEN),
        file=sys.stderr, flush=True)


if __name__ == "__main__":
  hide()
  atexit.register(_report)
  module, sys.argv = sys.argv[1], sys.argv[1:]
  runpy.run_module(module, run_name="__main__", alter_sys=True)
