"""bert_jax: BERT-family encoders in JAX/Flax, pretraining and fine-tuning.

`from bert_jax import Encoder` is the Python API (bert_jax.api); it is imported on
first use, so that `import bert_jax` stays light for the command-line programs.
"""

__version__ = "0.1.0"


def __getattr__(name):
  if name == "Encoder":
    from bert_jax.api import Encoder  # pylint: disable=g-import-not-at-top
    return Encoder
  raise AttributeError(f"module 'bert_jax' has no attribute {name!r}")
