r"""Pretraining entry point.

  python -m bert_jax.pretrain --config configs/pretrain.py:tiny --workdir /tmp/bert_tiny \
      [--config.total_steps=300 --config.data.files='corpus/*.txt' ...]

One linear program: config -> mesh -> data -> abstract state -> shardings ->
restore, init from a checkpoint, or init from scratch -> jit(train_step) -> loop
(log, NaN guard, checkpoint, eval). It resumes automatically when the workdir
holds a checkpoint.
"""
from typing import Optional, Sequence

from bert_jax import cli

# The run's functions (bert_jax.pretraining.run), imported on first use: the command
# line checks its flags and config before the training code loads.
_RUN_FUNCTIONS = ("train", "train_and_export", "export_and_demo", "evaluate", "_decoder_padding")


def __getattr__(name):
  if name in _RUN_FUNCTIONS:
    from bert_jax.pretraining import run as pretrain_run  # pylint: disable=g-import-not-at-top
    return getattr(pretrain_run, name)
  raise AttributeError(f"module 'bert_jax.pretrain' has no attribute {name!r}")


def _train_and_export(config, workdir: str) -> None:
  from bert_jax.pretraining import run as pretrain_run  # pylint: disable=g-import-not-at-top
  pretrain_run.train_and_export(config, workdir)


def main(argv: Optional[Sequence[str]] = None) -> None:
  """The command line (argv without the program name; None: sys.argv[1:])."""
  cli.run_config_program(
      _train_and_export, argv, "bert_jax.pretrain", __doc__, "configs/pretrain.py:VARIANT",
      "Run directory (checkpoints, logs).", has="objective")


def run() -> None:
  """The program on sys.argv (what `python -m bert_jax.pretrain` and launch scripts run)."""
  cli.exit_program(main)


if __name__ == "__main__":
  run()
