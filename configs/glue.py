r"""GLUE fine-tuning configs: `configs/glue.py:task=TASK`.

TASK is one of cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli, ax. $GLUE_DIR holds the GLUE
TSV files as GLUE's download script writes them (`python download_glue_data.py --data_dir
$GLUE_DIR --tasks all`, github.com/nyu-mll/GLUE-baselines): STS-B/train.tsv, MRPC/dev.tsv, ...
CKPT is any bert_jax checkpoint: a converted Hugging Face or Google checkpoint, a pretraining
workdir or its export/.

The CPU recipe: STS-B from all-MiniLM-L6-v2 (converted to /tmp/minilm as the README's
"Fine-tune" section shows), the whole training set for one epoch:

  python -m bert_jax.finetune --config configs/glue.py:task=stsb --workdir /tmp/stsb_minilm \
      --config.init_checkpoint=/tmp/minilm --config.data_dir=$GLUE_DIR \
      --config.max_seq_length=64 --config.batch_size=16 --config.learning_rate=5e-5 \
      --config.num_epochs=1 --config.predict_test=False

Expected (seed 0; 5,749 pairs, 359 steps of batch 16): the loss falls from about 9 to under 1;
dev Pearson / Spearman 0.810 / 0.826 (seeds 0, 1, 2: 0.812 +- 0.004 / 0.826 +- 0.003), against
the untrained head's scores printed before the first step (about -0.04). About 2 to 7 minutes on
a 2-core CPU. MRPC with the same settings and `--config.learning_rate=1e-4` (3,668 pairs, one
epoch): dev accuracy 0.745, F1 0.834, against the majority class's 0.684; about 30 minutes on
a busy 2-core CPU.

BERT's recipe on any task (an accelerator run for the large tasks):

  python -m bert_jax.finetune --config configs/glue.py:task=mrpc --workdir /tmp/mrpc \
      --config.init_checkpoint=CKPT --config.data_dir=$GLUE_DIR

or from a prepared TFDS glue/mrpc:

  python -m bert_jax.finetune --config configs/glue.py:task=mrpc --workdir /tmp/mrpc \
      --config.init_checkpoint=CKPT --config.data_source=tfds --config.tfds_data_dir=DIR

Writes workdir/eval_results.json (dev metrics; MNLI keys end in _matched /
_mismatched) and the GLUE submission file of the test split (MRPC.tsv, ...).
AX has no training data: it is predicted by an MNLI model (task=mnli writes
AX.tsv too when the AX file is present; task=ax evaluates an already fine-tuned
MNLI checkpoint).

Hyperparameters are BERT's fine-tuning recipe: batch 32, 3 epochs, AdamW
(weight decay 0.01, eps 1e-6), 10% linear warmup then linear decay, sequences of
128, learning rate 2e-5 for every task (the value of Google's run_classifier
examples; the BERT paper picks per task from {5e-5, 4e-5, 3e-5, 2e-5} on dev, so
sweep `--config.learning_rate` for best results). Expected (BERT-Base, from the
paper and Google's README; small tasks vary by a few points across seeds, hence
`--config.seeds`): MRPC dev accuracy ~84-87 / F1 ~88-90, RTE ~66-70, CoLA MCC
~52-58, STS-B Pearson ~87-89. Runtime with a 6-layer, hidden 384 model on 2 CPU
cores: minutes to tens of minutes per epoch for the small tasks (STS-B, MRPC, RTE,
CoLA), many hours for QQP, MNLI and QNLI (an accelerator's job).

Training and eval batches are cut to length buckets (`length_bucketing`: batches of
similar lengths, each cut to the shortest of a few lengths that holds it, chosen by
`length_buckets`, 'auto': from the data and the cost of compiling each length;
`--config.length_bucketing=False` pads every row to max_seq_length).
`--config.packing=True` packs each training batch's examples several to a row
(block-diagonal attention, per-example [CLS] and loss: the same loss and gradients
as one example per row, bert_jax.batching.packing; grad_accum_steps 1). It is off by
default because it changes results: its batches are drawn unsorted, and on the
STS-B recipe above (3 seeds) that scored 0.016 Pearson below length buckets, and
saved wall time on no task measured (benchmarks/README.md).

Every key is declared here or, with its comment, in bert_jax/configuration/sections.py
(`finetune`: the keys every fine-tuning config has, and the model, optimizer and
mesh sections); `--config.a.b=v` overrides it, an unknown key is an error.
"""
import ml_collections

from bert_jax.configuration import sections as config_sections

# Tasks and their peak learning rates (see the module docstring).
_LEARNING_RATES = {
    "cola": 2e-5, "sst2": 2e-5, "mrpc": 2e-5, "stsb": 2e-5, "qqp": 2e-5,
    "mnli": 2e-5, "qnli": 2e-5, "rte": 2e-5, "wnli": 2e-5, "ax": 2e-5,
}


# Keys read only in some settings (bert_jax.configuration.reads).
READ_ONLY_WHEN = {
    **config_sections.FINETUNE_READ_ONLY_WHEN,
    "data_dir": ("data_source", ("tsv",)),
    "head_layers": ("head", ("layers_attention",)),
}


def get_config(arg=None):
  """Returns the fine-tuning ConfigDict for `arg` = 'task=TASK' (or just 'TASK')."""
  options = config_sections.parse_arg(arg, positional="task", task="",
                                      example="configs/glue.py:task=mrpc")
  task = options.task.lower().replace("-", "").replace("_", "")
  if task not in _LEARNING_RATES:
    raise ValueError(f"unknown GLUE task {options.task!r}; known tasks: "
                     f"{sorted(_LEARNING_RATES)} (e.g. configs/glue.py:task=mrpc)")

  c = ml_collections.ConfigDict()
  # GLUE task name (bert_jax.tasks.glue.data.TASKS).
  c.task = task
  # Write the GLUE submission file(s) of the test split(s) when present.
  c.predict_test = True
  # MNLI only: also predict the AX diagnostic set (AX.tsv) when its file is present.
  c.predict_ax = task == "mnli"
  # The vector the classifier reads: 'cls' (BERT's pooled [CLS]), 'mean' (masked mean of
  # the last layer) or 'layers_attention' (the [CLS] vectors of the last head_layers
  # layers, weighted by a softmax over layers against a learned query; bert_jax.modeling.model).
  c.head = "cls"
  # Layers whose [CLS] vectors head='layers_attention' combines (1..num_layers).
  c.head_layers = 4
  # AX has no training data: it only evaluates an MNLI checkpoint.
  config_sections.finetune(c, data_source="tsv", max_seq_length=128,
                           learning_rate=_LEARNING_RATES[task], num_epochs=3.0,
                           eval_only=task == "ax", length_bucketing=True)
  return c
