r"""SQuAD fine-tuning configs: `configs/squad.py:version=1.1` or `version=2.0`.

From the original JSON files (data_dir/train-v1.1.json, data_dir/dev-v1.1.json):

  python -m bert_jax.finetune --config configs/squad.py:version=1.1 --workdir /tmp/squad \
      --config.init_checkpoint=CKPT --config.data_dir=DIR

or from a prepared TFDS squad/v1.1 (`--config.data_source=tfds
--config.tfds_data_dir=DIR`). Other files: `--config.train_file=PATH
--config.eval_file=PATH` (absolute, or relative to data_dir).

Writes workdir/predictions.json, nbest_predictions.json, null_odds.json (v2.0)
and eval_results.json with the official scores (v1.1: exact_match, f1; v2.0:
exact, f1, HasAns_*, NoAns_*, best_exact, best_f1 and their thresholds, which
are the null_score_diff_threshold to use); the same numbers as
`python -m bert_jax.squad_eval DEV_FILE workdir/predictions.json
[--na_prob_file workdir/null_odds.json]`.

Hyperparameters follow Google's run_squad examples: sequences of 384 word
pieces, windows every 128, questions cut to 64, 20-best spans of at most 30
pieces, learning rate 3e-5, 2 epochs, AdamW with 10% warmup; batch 32. Expected
with BERT-Base (Google's README): v1.1 dev F1 ~88.5, EM ~81; v2.0 needs a tuned
null_score_diff_threshold (reported as best_f1_thresh). Runtime: several hours
for v1.1 on one accelerator with BERT-Base; a few-hundred-question smoke run on
CPU with a 6-layer model takes minutes.

Every key is declared here (the model, optimizer and mesh sections, shared by all
entry points, in bert_jax/config_sections.py); `--config.a.b=v` overrides it, an
unknown key is an error.
"""
import ml_collections

from bert_jax import config_sections

# version: (train file, dev file) of the original SQuAD release.
_FILES = {
    "1.1": ("train-v1.1.json", "dev-v1.1.json"),
    "2.0": ("train-v2.0.json", "dev-v2.0.json"),
}


def get_config(arg=None):
  """Returns the fine-tuning ConfigDict for `arg` = 'version=1.1' or 'version=2.0'."""
  options = config_sections.parse_arg(arg, positional="version", version="",
                                      example="configs/squad.py:version=1.1")
  version = options.version.lstrip("v")
  if version not in _FILES:
    raise ValueError(f"unknown SQuAD version {options.version!r}; known versions: "
                     f"{sorted(_FILES)} (e.g. configs/squad.py:version=1.1)")
  train_file, eval_file = _FILES[version]

  c = ml_collections.ConfigDict()
  # Fixed to 'squad'; tells the fine-tuning entry point which task family this is.
  c.task = "squad"
  # SQuAD version, '1.1' or '2.0' (2.0: unanswerable questions, null answers).
  c.version = version
  # Where the data comes from: 'json' (the original files) or 'tfds'.
  c.data_source = "json"
  # Folder of the SQuAD JSON files.
  c.data_dir = ""
  # Training JSON, absolute or relative to data_dir.
  c.train_file = train_file
  # Evaluation JSON (its answers are the gold answers), absolute or relative to data_dir.
  c.eval_file = eval_file
  # TFDS data_dir where squad/v<version> is prepared, when data_source='tfds'.
  c.tfds_data_dir = ""
  # Checkpoint to fine-tune: a pretraining workdir, a params bundle, or a converted
  # Hugging Face / Google TF checkpoint; its model config and vocab are used.
  c.init_checkpoint = ""
  # Word pieces per window: [CLS] question [SEP] context window [SEP].
  c.max_seq_length = 384
  # Step between context windows, in word pieces.
  c.doc_stride = 128
  # Question word pieces kept.
  c.max_query_length = 64
  # Start and end candidates per window, and n-best answers kept per question.
  c.n_best_size = 20
  # Longest answer, in word pieces.
  c.max_answer_length = 30
  # v2.0: predict no answer when null score - best span score exceeds this.
  c.null_score_diff_threshold = 0.0
  # Use only the first N training questions (0: all); for smoke runs.
  c.max_train_examples = 0
  # Training batch size in windows (global, over all hosts and devices).
  c.batch_size = 32
  # Eval / predict batch size; the last batch is padded with weight-0 rows, never dropped.
  c.eval_batch_size = 64
  # Peak learning rate (Google's run_squad examples: 3e-5).
  c.learning_rate = 3e-5
  # Passes over the training set.
  c.num_epochs = 2.0
  # Linear warmup over this fraction of the training steps, then linear decay to 0.
  c.warmup_fraction = 0.1
  # Layer-wise learning-rate decay: heads and pooler get lr, encoder layer i (0-based
  # from the bottom, of L) lr * decay**(L - i), embeddings lr * decay**(L + 1); 1.0: off.
  c.layerwise_lr_decay = 1.0
  # Independent fine-tuning runs (seeds seed, seed+1, ...); eval_results.json holds the
  # mean and <metric>_std, eval_results_per_seed.json each run (one run with eval_only).
  c.seeds = 1
  # Random seed of the first run (head init, dropout, data order).
  c.seed = 0
  # Only evaluate / predict with init_checkpoint (heads included), no training.
  c.eval_only = False
  # Console / TensorBoard / metrics.jsonl every N training steps.
  c.log_every = 20

  c.model = config_sections.model()

  c.optimizer = config_sections.optimizer()

  c.mesh = config_sections.mesh()
  return c
