r"""Named-entity recognition on CoNLL-format files: `configs/ner.py`.

$CONLL_DIR holds train.txt, valid.txt and optionally test.txt (the CoNLL-2003 shared task's
English files in their original layout: word first, tag last, `-DOCSTART-` and blank lines;
IOB1 or IOB2 tags). CKPT is any bert_jax checkpoint.

The CPU recipe: all-MiniLM-L6-v2 (converted to /tmp/minilm as the README's "Fine-tune"
section shows), the first 2,000 training sentences for two epochs:

  python -m bert_jax.finetune --config configs/ner.py --workdir /tmp/ner_minilm \
      --config.init_checkpoint=/tmp/minilm --config.data_dir=$CONLL_DIR \
      --config.max_train_examples=2000 --config.max_seq_length=64 \
      --config.learning_rate=1e-4 --config.num_epochs=2

Expected (seed 0, 124 steps of batch 32): the loss falls from about 2.2 (ln 9: nine tags) to
about 0.2; valid entity F1 (conlleval) 0.690 (PER 0.876, LOC 0.757, MISC 0.466, ORG 0.409) and
word accuracy 0.949, against a model that tags every word `O` (F1 0, accuracy 0.833). About 3
to 11 minutes on a 2-core CPU. The whole training set (14,041 sentences) for 3 epochs scores
higher and takes about ten times as long.

BERT's recipe:

  python -m bert_jax.finetune --config configs/ner.py --workdir /tmp/ner \
      --config.init_checkpoint=CKPT --config.data_dir=$CONLL_DIR

Files are IOB1 or IOB2, each detected and its predictions written in its own
scheme; the labels are O, B-X and I-X of every entity type X of the training
file, learned in `label_scheme`; the first word piece of each word carries
its label; sentences longer than max_seq_length are split into windows at word
boundaries (every word predicted once). Writes workdir/eval_results.json with
conlleval's entity-level f1, precision, recall (fractions), word accuracy and
f1_<TYPE> on valid (test_* too when test.txt has tags), and
predictions/{valid,test}.txt (`word gold predicted`, conlleval's input).

`--config.max_train_examples=N` trains on the first N sentences.
Hyperparameters: batch 32, learning rate 5e-5, 3 epochs, AdamW with 10% warmup
and linear decay, 128 pieces. Expected: BERT-Base ~95 valid F1 on CoNLL-2003
(BERT paper, dev 96.4 with document context); all-MiniLM-L6-v2 (6 layers,
uncased) lower. Runtime: a 6-layer, hidden 384 model takes tens of minutes per
CoNLL-2003 epoch on a few CPU cores.

Every key is declared here or, with its comment, in bert_jax/configuration/sections.py
(`finetune`); `--config.a.b=v` overrides it, an unknown key is an error.
"""
import ml_collections

from bert_jax.configuration import sections as config_sections


# Keys read only in some settings (bert_jax.configuration.reads).
READ_ONLY_WHEN = dict(config_sections.FINETUNE_READ_ONLY_WHEN)


def get_config(arg=None):
  """Returns the NER fine-tuning ConfigDict (`arg` takes no options)."""
  config_sections.parse_arg(arg, example="configs/ner.py")
  c = ml_collections.ConfigDict()
  # Fixed to 'ner'; tells the fine-tuning entry point which task family this is.
  c.task = "ner"
  # Training file (its tags are the labels), absolute or relative to data_dir.
  c.train_file = "train.txt"
  # Scored file (eval_results f1, precision, recall, accuracy), absolute or relative to data_dir.
  c.valid_file = "valid.txt"
  # Optional file predicted (and scored as test_* when it has tags); skipped when absent; '': none.
  c.test_file = "test.txt"
  # Tagging scheme of the training targets, whatever the files' schemes (each file's
  # predictions are written in its own): 'IOB1' (an entity's words are I-X, B-X only right
  # after an entity of its type: fewer boundaries to learn) or 'IOB2' (B-X starts each).
  c.label_scheme = "IOB1"
  # BERT's fine-tuning recipe with the NER learning rate of transformers' examples.
  config_sections.finetune(c, data_source="conll", max_seq_length=128, learning_rate=5e-5,
                           num_epochs=3.0)
  return c
