r"""Fine-tuning entry point (GLUE, SQuAD, NER, and every task in bert_jax/tasks).

  python -m bert_jax.finetune --config configs/glue.py:task=mrpc --workdir DIR \
      --config.init_checkpoint=CKPT --config.data_dir=GLUE_DIR
  python -m bert_jax.finetune --config configs/squad.py:version=1.1 --workdir DIR \
      --config.init_checkpoint=CKPT --config.data_dir=SQUAD_DIR
  python -m bert_jax.finetune --config configs/ner.py --workdir DIR \
      --config.init_checkpoint=CKPT --config.data_dir=CONLL_DIR
  python -m bert_jax.finetune --config configs/sentence_embeddings.py --workdir DIR \
      --config.init_checkpoint=CKPT --config.train_file=F --config.eval_file=E \
      --config.loss=cosent

CKPT is any bert_jax checkpoint: a pretraining workdir (or its checkpoints/),
a params bundle, or a Hugging Face / Google checkpoint converted with
`python -m bert_jax.convert`; its model config and vocab come with it. Only
params are taken from it: the pooler is kept when present, task heads start
fresh (`--config.eval_only=true` instead evaluates the checkpoint's own head,
e.g. the export/ of an earlier fine-tuning run).

One linear program, on the training core that pretraining uses: mesh -> checkpoint
(config, vocab, params) -> task data (every split read and encoded first, so
bad data fails fast) -> per seed: optimizer -> initial state (the shared
initialisation policy) -> jit(train_step) -> epochs -> padded eval of every
example. With length_bucketing (GLUE's default) each training and eval batch is
cut to the shortest of a few fixed lengths that holds its longest row
(bert_jax.batching.length_buckets; the step compiles once per length, logged);
with packing each training batch's examples share rows (bert_jax.batching.packing).
Writes workdir/eval_results.json (dev metrics; the mean over `seeds`
with `<metric>_std` when seeds > 1; per-seed values in
eval_results_per_seed.json), prediction files (GLUE: predictions/<TASK>.tsv,
MNLI also AX.tsv; SQuAD: predictions.json, nbest_predictions.json,
null_odds.json; NER: predictions/valid.txt, test.txt; sentence embeddings:
predictions/eval_cosine.txt), metrics.jsonl,
TensorBoard logs, and the fine-tuned bundle in workdir/export (prediction files and export
are of the last seed).

Preemption: the training state is saved to workdir/finetune_checkpoints every
`checkpoint_every` steps, at the end of each seed's training (written while its evaluation
predicts, and complete before any of its results, predictions or export is written) and
on SIGTERM / SIGINT (the run then stops after the save, with exit status 128 + the
signal's number: 143 and 130); a signal during an evaluation stops it within a batch,
the end-of-training checkpoint kept; one that arrives while the results and the export
are written lets them finish. So a signal at any moment leaves either the finished export
or a checkpoint, and a kill (no save at all) never costs a seed whose results exist: the same
command resumes from the newest checkpoint (seed, epoch, batch within it, dropout key, the
finished seeds' results) to the uninterrupted run's results, bitwise on the CPU. A checkpoint
saved with other settings is refused in one line (bert_jax.finetuning.setup.RESUME_MAY_CHANGE
lists what may change).

The workdir records its run in run.json (bert_jax.checkpoints.workdir_owner): given again
once the run has finished, the same command prints the results and does nothing else;
another config is refused in one line unless `--config.start_over=True` sets the earlier
run's files aside (before_start_over/) first.
"""
from typing import Optional, Sequence

from bert_jax import cli
from bert_jax.runtime import stop_signals

# The run's functions (bert_jax.finetuning.finetune_run), imported on first use: the command
# line checks its flags and config before the training code loads.
_RUN_FUNCTIONS = ("finetune",)


def __getattr__(name):
  if name in _RUN_FUNCTIONS:
    from bert_jax.finetuning import finetune_run  # pylint: disable=g-import-not-at-top
    return getattr(finetune_run, name)
  raise AttributeError(f"module 'bert_jax.finetune' has no attribute {name!r}")


def _finetune(config, workdir: str) -> dict:
  from bert_jax.finetuning import finetune_run  # pylint: disable=g-import-not-at-top
  return finetune_run.finetune(config, workdir)


def main(argv: Optional[Sequence[str]] = None) -> None:
  """The command line (argv without the program name; None: sys.argv[1:])."""
  result = cli.run_config_program(
      _finetune, argv, "bert_jax.finetune", __doc__,
      "configs/glue.py:task=TASK, configs/squad.py:version=V, configs/ner.py or "
      "configs/sentence_embeddings.py.", "Output directory.", has="task")
  if result.get("stopped_by"):  # 128 + the signal's number, after the checkpoint line
    raise SystemExit(stop_signals.exit_status(result["stopped_by"]))


def run() -> None:
  """The program on sys.argv (what `python -m bert_jax.finetune` and launch scripts run)."""
  cli.exit_program(main)


if __name__ == "__main__":
  run()
