r"""SQuAD fine-tuning configs: `configs/squad.py:version=1.1` or `version=2.0`.

$SQUAD_DIR holds the original JSON files as the SQuAD site publishes them (train-v1.1.json,
dev-v1.1.json; train-v2.0.json, dev-v2.0.json). CKPT is any bert_jax checkpoint.

The CPU recipe: all-MiniLM-L6-v2 (converted to /tmp/minilm as the README's "Fine-tune"
section shows) on the dev file split by article: 2,000 questions of its first 18 articles for
one epoch, scored on the next 6 (1,025 questions):

  python -m bert_jax.finetune --config configs/squad.py:version=1.1 --workdir /tmp/squad_minilm \
      --config.init_checkpoint=/tmp/minilm --config.data_dir=$SQUAD_DIR \
      --config.train_file=dev-v1.1.json --config.train_articles=:18 \
      --config.eval_file=dev-v1.1.json --config.eval_articles=18:24 \
      --config.max_train_examples=2000 --config.max_seq_length=192 --config.doc_stride=64 \
      --config.batch_size=16 --config.learning_rate=2e-4 --config.num_epochs=1

Expected (seed 0, 2,645 windows, 165 steps of batch 16): before the first step the run scores
its untrained span head (exact match 0.10, F1 6.42); the loss falls from about 4.9 to 2.7;
exact match 22.6 and F1 34.9 on the 6 held-out articles. About 8 to 25 minutes on a 2-core CPU.

Google's recipe (the defaults; 2 epochs over 88,000 questions at 384 tokens: an accelerator
run, many hours on a CPU):

  python -m bert_jax.finetune --config configs/squad.py:version=1.1 --workdir /tmp/squad \
      --config.init_checkpoint=CKPT --config.data_dir=$SQUAD_DIR

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

Every key is declared here or, with its comment, in bert_jax/configuration/sections.py
(`finetune`: the keys every fine-tuning config has, and the model, optimizer and
mesh sections); `--config.a.b=v` overrides it, an unknown key is an error.
"""
import ml_collections

from bert_jax.configuration import sections as config_sections

# Versions of the original SQuAD release (train-v<version>.json, dev-v<version>.json).
_VERSIONS = ("1.1", "2.0")


# Keys read only in some settings (bert_jax.configuration.reads).
READ_ONLY_WHEN = {
    **config_sections.FINETUNE_READ_ONLY_WHEN,
    "data_dir": ("data_source", ("json",)),
    "train_file": ("data_source", ("json",)),
    "eval_file": ("data_source", ("json",)),
    "train_articles": ("data_source", ("json",)),
    "eval_articles": ("data_source", ("json",)),
    "null_score_diff_threshold": ("version", ("2.0",)),
}


def get_config(arg=None):
  """Returns the fine-tuning ConfigDict for `arg` = 'version=1.1' or 'version=2.0'."""
  options = config_sections.parse_arg(arg, positional="version", version="",
                                      example="configs/squad.py:version=1.1")
  version = options.version.lstrip("v")
  if version not in _VERSIONS:
    raise ValueError(f"unknown SQuAD version {options.version!r}; known versions: "
                     f"{list(_VERSIONS)} (e.g. configs/squad.py:version=1.1)")

  c = ml_collections.ConfigDict()
  # Fixed to 'squad'; tells the fine-tuning entry point which task family this is.
  c.task = "squad"
  # SQuAD version, '1.1' or '2.0' (2.0: unanswerable questions, null answers).
  c.version = version
  # Training JSON, absolute or relative to data_dir.
  c.train_file = f"train-v{version}.json"
  # Evaluation JSON (its answers are the gold answers), absolute or relative to data_dir.
  c.eval_file = f"dev-v{version}.json"
  # Articles of train_file to train on, a Python slice 'start:stop' ('' = all). With
  # eval_articles, one file split by article (the CPU recipe above trains and scores on dev).
  c.train_articles = ""
  # Articles of eval_file to evaluate on (scored against those articles only), as above.
  c.eval_articles = ""
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
  # Google's run_squad examples: 384-piece windows, learning rate 3e-5, 2 epochs.
  config_sections.finetune(c, data_source="json", max_seq_length=384, learning_rate=3e-5,
                           num_epochs=2.0)
  return c
