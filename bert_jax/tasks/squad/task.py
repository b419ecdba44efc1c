"""SQuAD v1.1 / v2.0 as a fine-tuning task: span extraction, scored officially; writes
predictions.json, nbest_predictions.json and null_odds.json (v2.0)."""
import os

from etils import epath
import optax

from bert_jax.modeling import model as model_lib
from bert_jax.modeling.model_config import BertConfig
from bert_jax.tasks.squad import data as squad_data
from bert_jax.tasks.squad import metrics as squad_metrics
from bert_jax.tasks.squad import offsets as squad_offsets
from bert_jax.tasks.squad import predictions as squad_predictions
from bert_jax.tasks import task as task_lib


# The config keys this task reads; fine-tuning hands it their values alone.
OPTIONS = ("task", "version", "data_source", "data_dir", "tfds_data_dir", "train_file",
           "eval_file", "train_articles", "eval_articles", "max_seq_length", "doc_stride",
           "max_query_length", "n_best_size", "max_answer_length", "null_score_diff_threshold",
           "max_train_examples", "eval_only", "length_bucketing", "packing")


def check_config(options) -> None:
  task_lib.refuse_shaped_batches(options, "SQuAD windows fill max_seq_length")
  # A recipe's `--config.data_dir=$SQUAD_DIR` with the variable unset leaves data_dir empty:
  # said here, as GLUE and NER say it, before the checkpoint loads.
  if options.data_source == "json" and not options.data_dir:
    names = ([] if options.eval_only else [options.train_file]) + [options.eval_file]
    relative = [n for n in names if "://" not in n and not os.path.isabs(n)]
    if relative:
      raise ValueError(f"bad config: data_dir is required with data_source='json' (the folder "
                       f"holding {', '.join(dict.fromkeys(relative))})")


def model(options, model_cfg: BertConfig) -> task_lib.TaskModel:
  """BertForQuestionAnswering (start and end logits over the sequence); the export records
  the windowing and post-processing options (bert_jax.Encoder.answer uses them)."""
  recorded = ("version", "max_seq_length", "doc_stride", "max_query_length", "n_best_size",
              "max_answer_length", "null_score_diff_threshold")
  return task_lib.TaskModel(f"squad{options.version}",
                            model_lib.BertForQuestionAnswering(model_cfg), "qa_outputs",
                            export_info={k: options[k] for k in recorded})


def _squad_path(options, name: str) -> str:
  if "://" in name or os.path.isabs(name) or not options.data_dir:
    return name
  return str(epath.Path(options.data_dir) / name)


def build(options, tokenizer, model_cfg: BertConfig) -> task_lib.Task:
  """SQuAD v1.1 / v2.0 from the original JSON files (or TFDS)."""
  # WordPiece: Google's run_squad features; BPE / SentencePiece: character offsets (run_qa.py).
  convert = squad_offsets.converter(tokenizer)
  v2 = options.version == "2.0"
  articles = {key: squad_data.article_slice(options[key], key)
              for key in ("train_articles", "eval_articles")}

  def read(name, split, is_training):
    if options.data_source == "tfds":
      return squad_data.read_squad_tfds(options.version, split, options.tfds_data_dir, is_training)
    path = _squad_path(options, name)
    examples, skipped = squad_data.read_squad_json(
        path, is_training, articles["train_articles" if is_training else "eval_articles"])
    unanswerable = sum(ex.is_impossible for ex in examples)
    if unanswerable and not v2:  # v1.1 would train them toward [CLS] and never predict them
      raise ValueError(f"{path}: {unanswerable} questions are marked is_impossible (SQuAD v2.0 "
                       f"data) but the config is SQuAD {options.version}, which neither trains "
                       "nor scores unanswerable questions; use configs/squad.py:version=2.0")
    return examples, skipped

  train_arrays, stats = {}, {}
  if not options.eval_only:
    examples, skipped = read(options.train_file, "train", True)
    stats["train_skipped_answer_mismatch"] = len(skipped)
    if skipped:
      print(f"SQuAD train ({options.train_file}): skipped {len(skipped)} question(s) whose answer "
            f"text is not at its answer_start in the context, e.g. {skipped[:3]}", flush=True)
    if options.max_train_examples:
      examples = examples[:options.max_train_examples]
    if not examples:
      raise ValueError("SQuAD: no training examples")
    train_arrays, _ = convert(
        tokenizer, examples, options.max_seq_length, options.doc_stride,
        options.max_query_length, is_training=True)
    stats["train_examples"] = len(examples)
    stats["train_windows"] = len(train_arrays["input_ids"])

  def loss(outputs, batch):
    start, end = outputs
    return 0.5 * (optax.softmax_cross_entropy_with_integer_labels(start, batch["start_positions"])
                  + optax.softmax_cross_entropy_with_integer_labels(end, batch["end_positions"]))

  eval_examples, _ = read(options.eval_file, "validation", False)
  eval_arrays, eval_features = convert(
      tokenizer, eval_examples, options.max_seq_length, options.doc_stride,
      options.max_query_length, is_training=False)
  stats["eval_examples"] = len(eval_examples)
  stats["eval_windows"] = len(eval_arrays["input_ids"])
  if options.data_source == "tfds":
    gold = squad_data.to_eval_json(eval_examples, options.version)
  else:
    gold = squad_data.load_json(_squad_path(options, options.eval_file), articles["eval_articles"])

  def score(outputs, workdir):
    start, end = outputs["logits"]
    preds, nbest, null_odds = squad_predictions.postprocess_predictions(
        eval_examples, eval_features, start, end, tokenizer=tokenizer,
        n_best_size=options.n_best_size, max_answer_length=options.max_answer_length,
        version_2_with_negative=v2, null_score_diff_threshold=options.null_score_diff_threshold)
    if workdir is not None:
      squad_predictions.write_prediction_files(workdir, preds, nbest, null_odds if v2 else None)
    return squad_metrics.evaluate(gold, preds, null_odds if v2 else None)

  primary = "f1"
  return task_lib.Task(model(options, model_cfg), train_arrays,
                       ("start_positions", "end_positions"), loss,
                       [task_lib.EvalSet("dev", eval_arrays, score)], primary, data_stats=stats,
                       zero_shot=True)  # the untrained span head's scores: the baseline
