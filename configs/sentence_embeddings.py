r"""Sentence-embedding training (Sentence-BERT): `configs/sentence_embeddings.py`.

A siamese encoder (one set of weights for every sentence; mean or [CLS]
pooling) trained with CoSENT, cosine-similarity MSE, in-batch-negative ranking
(mnrl) or triplet loss, as sentence-transformers defines them; scored by the
Spearman correlation between the cosine of each eval pair and its gold score.

The built-in sample needs no download: scored sentence pairs made from the built-in
pretraining corpus, shipped in the package (600 training pairs, 200 eval pairs; how they are
made: bert_jax/assets/README.md). From the quick start's tiny model (/tmp/bert_tiny, from
`python -m bert_jax.pretrain --config configs/pretrain.py:tiny --workdir /tmp/bert_tiny`):

  python -m bert_jax.finetune --config configs/sentence_embeddings.py --workdir /tmp/pairs_tiny \
      --config.init_checkpoint=/tmp/bert_tiny/export --config.data_source=builtin \
      --config.learning_rate=1e-3 --config.num_epochs=3

Expected (seed 0; 111 steps of batch 16): eval Spearman / Pearson 0.899 / 0.873 after
training, against 0.840 / 0.690 before (the run prints them as zero_shot_spearman /
zero_shot_pearson); under a minute on a 2-core CPU. A tiny model after 300 steps of
pretraining needs the higher learning rate.

$STSB_DIR holds the STS Benchmark release files (sts-train.tsv, sts-dev.tsv, sts-test.tsv;
GLUE's download keeps them in STS-B/original/). CoSENT on the training pairs, from
all-MiniLM-L6-v2 (converted to /tmp/minilm as the README's "Fine-tune" section shows):

  python -m bert_jax.finetune --config configs/sentence_embeddings.py --workdir /tmp/sts_cosent \
      --config.init_checkpoint=/tmp/minilm --config.loss=cosent \
      --config.train_file=$STSB_DIR/sts-train.tsv --config.eval_file=$STSB_DIR/sts-test.tsv

Files: `sentence1<TAB>sentence2<TAB>score` (or the STS Benchmark release
layout) for cosent / cosine and for eval_file; `anchor<TAB>positive` or
`anchor<TAB>positive<TAB>negative` for mnrl (negatives: the batch's other
positives and every negative) and triplet (needs the negative). Training
scores are divided by score_max into [0, 1] (sentence-transformers' STS-B
example divides by 5).

Pooling and normalisation are what the init checkpoint records (a converted
sentence-transformers model such as all-MiniLM-L6-v2: mean, normalised; its Dense
layers, if any, are trained with the encoder), else mean and normalised, unless
--config.pooling / --config.normalize say otherwise; the header's data line says
which and where each came from. Writes eval_results.json (`spearman`, `pearson`
on eval_file), predictions/eval_cosine.txt and the fine-tuned bundle in export/,
whose bundle.json records `embedding: {pooling, normalize, ...}`; `python -m
bert_jax.embed --checkpoint WORKDIR/export` embeds with them by default, and
`python -m bert_jax.convert --to hf` writes it as a sentence-transformers folder.
Hyperparameters are sentence-transformers' STS-B example: batch 16, 1 epoch
(the example runs 4), learning rate 2e-5, 10% warmup, AdamW with weight decay
0.01. Expected (the command above, seed 0): all-MiniLM-L6-v2's STS-B test
Spearman 0.8203 before (the run prints it as zero_shot_spearman), 0.8393 after one
epoch (359 steps of batch 16); about 5 to 17 minutes on a 2-core CPU.

Every key is declared here or, with its comment, in bert_jax/configuration/sections.py
(`finetune`); `--config.a.b=v` overrides it, an unknown key is an error.
"""
import ml_collections
from ml_collections import config_dict

from bert_jax.configuration import sections as config_sections


# Keys read only in some settings (bert_jax.configuration.reads).
READ_ONLY_WHEN = {
    **config_sections.FINETUNE_READ_ONLY_WHEN,
    "score_max": ("loss", ("cosent", "cosine")),
    "train_file": ("data_source", ("tsv",)),
    "eval_file": ("data_source", ("tsv",)),
    "data_dir": ("data_source", ("tsv",)),
    "scale": ("loss", ("cosent", "mnrl")),
    "triplet_margin": ("loss", ("triplet",)),
}


def get_config(arg=None):
  """Returns the sentence-embedding training ConfigDict (`arg` takes no options)."""
  config_sections.parse_arg(arg, example="configs/sentence_embeddings.py")
  c = ml_collections.ConfigDict()
  # Fixed to 'sentence_embeddings'; tells the fine-tuning entry point which task family this is.
  c.task = "sentence_embeddings"
  # Training file (see the module docstring), absolute or relative to data_dir.
  c.train_file = ""
  # STS-style pairs with gold scores, scored by the Spearman correlation of their cosine.
  c.eval_file = ""
  # 'cosent', 'cosine' (scored pairs), 'mnrl' (in-batch negatives) or 'triplet'.
  c.loss = "cosent"
  # How token vectors become the sentence vector: 'mean' (real tokens) or 'cls'; '': what the
  # init checkpoint records (a converted sentence-transformers model, an earlier export), else
  # 'mean'.
  c.pooling = ""
  # L2-normalise the sentence vector (the model's output: triplet distances see it; cosine
  # losses do not change); None: what the init checkpoint records, else True. Recorded in the
  # bundle for bert_jax.embed.
  c.normalize = config_dict.placeholder(bool)
  # Training scores are divided by this into [0, 1] (5 for STS; 1 when already in [0, 1]).
  c.score_max = 5.0
  # Inverse temperature of cosent and mnrl (sentence-transformers: 20).
  c.scale = 20.0
  # Margin of the triplet loss, euclidean distance (sentence-transformers: 5).
  c.triplet_margin = 5.0
  # sentence-transformers' STS-B recipe (1 epoch; its example runs 4).
  config_sections.finetune(c, data_source="tsv", max_seq_length=128, learning_rate=2e-5,
                           num_epochs=1.0, length_bucketing=True)
  # Pairs (or tuples) per step, sentence-transformers' 16 (CoSENT and mnrl compare them).
  c.batch_size = 16
  return c
