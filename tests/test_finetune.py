"""Fine-tuning end to end: pretraining steps -> checkpoint -> GLUE / SQuAD -> eval_results.json.

One tiny pretraining run (3 steps, seq 32; conftest.py's `pretrained`, built once per worker)
is the starting point; fine-tuning runs on tiny GLUE (MRPC layout) and SQuAD folders written to
temp dirs (conftest.py's `glue_dir` and `squad_dir`).
"""
import json
import math
import os
import re
import statistics

from flax import traverse_util
import jax
import numpy as np
import optax
import pytest

from bert_jax.checkpoints import bundle
from bert_jax.checkpoints import loading
from bert_jax.checkpoints import run_checkpoints as ckpt_lib
from bert_jax.data.tokenizers import tokenizer as tokenizer_lib
from bert_jax import finetune
from bert_jax.finetuning import evaluation
from bert_jax.finetuning import setup as finetune_setup
from bert_jax.modeling import model as model_lib
from bert_jax.tasks.glue import data as glue
from bert_jax.tasks.squad import metrics as squad_metrics
from bert_jax.tasks import task as task_lib
from bert_jax.training import optimizer as opt_lib
from bert_jax.training import sharding
from bert_jax.training import train_core
from tests.fixtures.finetuning import MRPC_HEADER
from tests.fixtures.finetuning import glue_config
from tests.fixtures.finetuning import mrpc_rows
from tests.fixtures.finetuning import random_bundle
from tests.fixtures.finetuning import squad_config
from tests.fixtures.repo import load_config


@pytest.fixture(scope="module")
def mrpc_run(pretrained, glue_dir, tmp_path_factory):
  """MRPC fine-tuned with 2 seeds from the pretraining workdir (its latest checkpoint)."""
  workdir = str(tmp_path_factory.mktemp("mrpc"))
  results = finetune.finetune(glue_config(glue_dir, pretrained, seeds=2), workdir)
  return workdir, results


@pytest.mark.slow
def test_glue_end_to_end_from_pretraining_workdir(mrpc_run):
  workdir, results = mrpc_run
  with open(os.path.join(workdir, "eval_results.json")) as f:
    written = json.load(f)
  assert written == results
  metrics = {"accuracy", "f1", "accuracy_and_f1"}
  assert set(written) - {"warning"} == (metrics | {m + "_std" for m in metrics}
                                        | {"majority_baseline", "constant_prediction"})
  dev_labels = [int(row[0]) for row in mrpc_rows(13, 1)]
  assert written["majority_baseline"] == max(dev_labels.count(0), dev_labels.count(1)) / 13
  # Mean and std over the 2 seeds of the per-seed results.
  with open(os.path.join(workdir, "eval_results_per_seed.json")) as f:
    per_seed = json.load(f)
  assert len(per_seed) == 2
  for m in metrics:
    values = [r[m] for r in per_seed]
    assert written[m] == pytest.approx(statistics.mean(values))
    assert written[m + "_std"] == pytest.approx(statistics.pstdev(values))
  for r in per_seed:
    # Every one of the 13 dev rows was scored (eval pads to 16, never drops to 0 or 16).
    assert abs(r["accuracy"] * 13 - round(r["accuracy"] * 13)) < 1e-6
    assert r["accuracy_and_f1"] == pytest.approx((r["accuracy"] + r["f1"]) / 2)
  # GLUE submission file: every test row, indexed as in test.tsv, labels as in the TSVs.
  with open(os.path.join(workdir, "predictions", "MRPC.tsv")) as f:
    lines = f.read().splitlines()
  assert lines[0] == "index\tprediction"
  assert [int(l.split("\t")[0]) for l in lines[1:]] == list(range(11))
  assert {l.split("\t")[1] for l in lines[1:]} <= {"0", "1"}
  with open(os.path.join(workdir, "metrics.jsonl")) as f:
    records = [json.loads(line) for line in f]
  for seed in (0, 1):
    losses = [r[f"seed{seed}_train_loss"] for r in records if f"seed{seed}_train_loss" in r]
    assert len(losses) == 4 and all(math.isfinite(l) for l in losses)  # 32 rows / batch 8
  exported = bundle.load_bundle(os.path.join(workdir, "export"))
  assert exported.heads == ("pooler", "classifier")
  assert exported.params["classifier"]["kernel"].shape == (128, 2)
  # The classes, by which `convert --to hf` names transformers' labels.
  with open(os.path.join(workdir, "export", "bundle.json")) as f:
    assert json.load(f)["labels"] == ["0", "1"]


@pytest.mark.slow
def test_eval_only_from_the_exported_bundle_reproduces_the_run(mrpc_run, glue_dir, tmp_path,
                                                               capsys):
  workdir, _ = mrpc_run
  with open(os.path.join(workdir, "eval_results_per_seed.json")) as f:
    last_seed = json.load(f)[-1]  # the export holds the last seed's params
  c = glue_config(glue_dir, os.path.join(workdir, "export"), eval_only=True,
                  predict_test=False, seeds=3)
  again = finetune.finetune(c, str(tmp_path))
  assert set(again) == set(last_seed)  # one run (no _std): seeds do not apply to eval_only
  for key, value in last_seed.items():
    assert again[key] == pytest.approx(value, abs=1e-9), key
  assert not os.path.exists(tmp_path / "export")  # nothing trained, nothing exported
  out = capsys.readouterr().out
  assert "eval_only: no training, evaluating" in out and "then training" not in out


@pytest.mark.slow
def test_squad_v1_end_to_end_from_checkpoints_dir(pretrained, squad_dir, tmp_path):
  c = squad_config(squad_dir, os.path.join(pretrained, "checkpoints"))
  results = finetune.finetune(c, str(tmp_path))
  assert set(results) == {"exact_match", "f1", "zero_shot_exact_match", "zero_shot_f1"}
  with open(tmp_path / "predictions.json") as f:
    preds = json.load(f)
  with open(os.path.join(squad_dir, "dev-v1.1.json")) as f:
    gold = json.load(f)
  assert sorted(preds) == ["q1", "q2", "q3", "q4", "q5"]
  # eval_results.json holds what the official-definition scorer says of predictions.json.
  with open(tmp_path / "eval_results.json") as f:
    written = json.load(f)
  assert {k: v for k, v in written.items() if not k.startswith("zero_shot_")} == pytest.approx(
      squad_metrics.evaluate(gold, preds))
  with open(tmp_path / "nbest_predictions.json") as f:
    nbest = json.load(f)
  assert all(0 < len(v) <= 5 for v in nbest.values())
  # The fine-tuned bundle has the QA head and no pooler (the QA model has none).
  assert bundle.load_bundle(str(tmp_path / "export")).heads == ("qa_outputs",)
  # The Python API answers from the export as the run's post-processing did.
  from bert_jax import Encoder  # pylint: disable=g-import-not-at-top
  records = [(qa["id"], qa["question"], p["context"]) for article in gold["data"]
             for p in article["paragraphs"] for qa in p["qas"]]
  answers = Encoder.load(str(tmp_path / "export")).answer(
      [r[1] for r in records], [r[2] for r in records], batch_size=4)
  assert answers == [preds[r[0]] for r in records]
  # SQuAD 2.0 keys, evaluating the exported bundle (its qa_outputs head) without training.
  c2 = squad_config(squad_dir, str(tmp_path / "export"), version="2.0",
                    eval_file="dev-v2.0.json", eval_only=True)
  results2 = finetune.finetune(c2, str(tmp_path / "v2"))
  assert {"exact", "f1", "total", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1",
          "best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"} <= set(results2)
  assert results2["total"] == 6
  with open(tmp_path / "v2" / "null_odds.json") as f:
    assert sorted(json.load(f)) == ["q1", "q2", "q3", "q4", "q5", "q7"]


@pytest.mark.slow
def test_squad_zero_shot_baseline_scores_the_untrained_head(pretrained, squad_dir, tmp_path,
                                                            capsys):
  # With a learning rate of 1e-30 training changes no prediction: the end scores are the
  # zero-shot ones.
  c = squad_config(squad_dir, pretrained, learning_rate=1e-30, num_epochs=1.0)
  results = finetune.finetune(c, str(tmp_path))
  assert results["zero_shot_f1"] == results["f1"]
  assert results["zero_shot_exact_match"] == results["exact_match"]
  out = capsys.readouterr().out
  assert "zero-shot (the init checkpoint before training): zero_shot_exact_match " in out
  assert (f"f1 {results['f1']:.4f}, exact_match {results['exact_match']:.4f} against the "
          "baselines: zero_shot_exact_match") in out


@pytest.mark.slow
def test_squad_answer_start_mismatch_is_skipped_and_counted(pretrained, squad_dir, tmp_path):
  init = loading.load_pretrained(pretrained)
  tok = tokenizer_lib.cached_tokenizer("wordpiece", init.vocab, init.lowercase)
  task = finetune_setup.build_task(squad_config(squad_dir, pretrained), tok, init.config)
  assert task.data_stats["train_skipped_answer_mismatch"] == 1
  assert task.data_stats["train_examples"] == 10  # 11 questions, q6 skipped
  assert task.data_stats["eval_examples"] == 5


def test_training_starts_task_heads_fresh_and_eval_only_keeps_them(tmp_path):
  pretrained = loading.load_pretrained(random_bundle(tmp_path / "b"))  # 3-label classifier
  mesh = sharding.make_mesh((-1, 1, 1))
  rules = sharding.logical_rules("data_parallel")
  tx = optax.adamw(1e-3)

  def start(num_labels, fresh_heads):
    model = task_lib.TaskModel("t", model_lib.BertForSequenceClassification(
        pretrained.config, num_labels=num_labels), "classifier")
    init_fn = lambda r: train_core.init_state(task_lib.init_fn(model, 8), tx, r)  # noqa: E731
    state, _, meta, how = ckpt_lib.initial_state(init_fn, tx, jax.random.PRNGKey(0), mesh, rules,
                                                 pretrained=pretrained, fresh_heads=fresh_heads)
    assert meta is None and pretrained.source in how
    return jax.device_get(state.params), how

  want = pretrained.params
  trained, how = start(3, bundle.TASK_HEADS)
  np.testing.assert_array_equal(trained["bert"]["pooler"]["kernel"], want["bert"]["pooler"]["kernel"])
  np.testing.assert_array_equal(trained["bert"]["encoder"]["layer_0"]["attention"]["query"]["kernel"],
                                want["bert"]["encoder"]["layer_0"]["attention"]["query"]["kernel"])
  assert not np.allclose(trained["classifier"]["kernel"], want["classifier"]["kernel"])  # fresh
  assert "fresh: classifier/bias, classifier/kernel" in how
  evaluated, _ = start(3, ())
  np.testing.assert_array_equal(evaluated["classifier"]["kernel"], want["classifier"]["kernel"])
  with pytest.raises(ValueError, match=r"param classifier/\w+ has shape \([^)]*3,?\), the model expects"):
    start(2, ())


def test_checkpoints_that_do_not_fit_get_clear_errors(glue_dir, squad_dir, tmp_path):
  good = random_bundle(tmp_path / "good")
  # Sequences longer than the checkpoint's position table.
  with pytest.raises(ValueError, match=r"max_seq_length 128 does not fit .*it takes at most 64 positions"):
    finetune.finetune(glue_config(glue_dir, good, max_seq_length=128), str(tmp_path / "a"))
  # A checkpoint whose params are of another size than its config says.
  config_file = tmp_path / "good" / bundle.CONFIG_FILE
  cfg = json.loads(config_file.read_text())
  config_file.write_text(json.dumps(dict(cfg, hidden_size=32, intermediate_size=64)))
  with pytest.raises(ValueError, match=r"shape mismatches.*word_embeddings"):
    finetune.finetune(glue_config(glue_dir, good), str(tmp_path / "b"))
  config_file.write_text(json.dumps(cfg))
  # Eval-only with a head of another task (3 labels for MRPC's 2), or with no head.
  with pytest.raises(ValueError, match=r"'classifier' head with 3 outputs .* needs 2"):
    finetune.finetune(glue_config(glue_dir, good, eval_only=True), str(tmp_path / "c"))
  with pytest.raises(ValueError, match=r"no 'qa_outputs' head .*'pooler', 'classifier'"):
    finetune.finetune(squad_config(squad_dir, good, eval_only=True), str(tmp_path / "d"))
  # Not a checkpoint at all.
  with pytest.raises(ValueError, match="neither a bert_jax bundle"):
    finetune.finetune(glue_config(glue_dir, str(tmp_path)), str(tmp_path / "e"))


def test_bad_task_and_bad_data_fail_before_training(glue_dir, tmp_path):
  good = random_bundle(tmp_path / "b")
  init = loading.load_pretrained(good)
  tok = tokenizer_lib.cached_tokenizer("wordpiece", init.vocab, init.lowercase)
  c = glue_config(glue_dir, good)
  with c.unlocked():
    c.task = "mrcp"
  with pytest.raises(ValueError, match=r"unknown GLUE task 'mrcp'; known tasks: \['ax', 'cola'"):
    finetune_setup.build_task(c, tok, init.config)
  with pytest.raises(ValueError, match=r"known tasks: \['ax', 'cola'"):
    load_config("glue", "task=mrcp")
  # A malformed row: the error names the file and line.
  bad_dir = tmp_path / "glue"
  (bad_dir / "MRPC").mkdir(parents=True)
  rows = mrpc_rows(6, 0)
  rows[3] = rows[3].rsplit("\t", 1)[0]  # a missing column on line 5 (header is line 1)
  (bad_dir / "MRPC" / "train.tsv").write_text("\n".join([MRPC_HEADER] + rows) + "\n")
  (bad_dir / "MRPC" / "dev.tsv").write_text("\n".join([MRPC_HEADER] + mrpc_rows(3, 1)) + "\n")
  with pytest.raises(glue.GlueFormatError, match=r"MRPC/train\.tsv:5: expected 5"):
    finetune.finetune(glue_config(str(bad_dir), good), str(tmp_path / "w"))
  # predict_ax belongs to MNLI.
  with pytest.raises(ValueError, match="predict_ax applies to task mnli only"):
    finetune_setup.build_task(glue_config(glue_dir, good, predict_ax=True), tok, init.config)
  # A negative or zero learning rate: refused (accepted, the loss would climb and the model be
  # exported).
  for lr in (-2e-5, 0.0):
    with pytest.raises(ValueError, match="learning_rate must be positive"):
      finetune.finetune(glue_config(glue_dir, good, learning_rate=lr), str(tmp_path / "lr"))
  # Values out of range (were: negative dropout scaled activations, -5 dropped 5 rows).
  for override, message in (({"model.dropout_rate": -0.5}, r"model.dropout_rate must be in"),
                            ({"model.attention_dropout_rate": 1.0}, "attention_dropout_rate"),
                            ({"max_train_examples": -5}, "max_train_examples must be >= 0")):
    c = glue_config(glue_dir, good)
    c.update_from_flattened_dict(override)
    with pytest.raises(ValueError, match=message):
      finetune.finetune(c, str(tmp_path / "range"))


def test_missing_test_split_is_skipped_and_mnli_predicts_ax(tmp_path, capsys):
  good = random_bundle(tmp_path / "b")
  init = loading.load_pretrained(good)
  tok = tokenizer_lib.cached_tokenizer("wordpiece", init.vocab, init.lowercase)
  header = "index\tpromptID\tpairID\tgenre\tsentence1\tsentence2\tgold_label"
  mnli = tmp_path / "glue" / "MNLI"
  mnli.mkdir(parents=True)
  labels = ("entailment", "neutral", "contradiction")
  for split, n in (("train", 8), ("dev_matched", 5), ("dev_mismatched", 4)):
    rows = [f"{i}\t{i}\t{i}\tfiction\tw{i} w2\tw{i + 1}\t{labels[i % 3]}" for i in range(n)]
    (mnli / f"{split}.tsv").write_text("\n".join([header] + rows) + "\n")
  (mnli / "test_matched.tsv").write_text(
      "index\tsentence1\tsentence2\n" + "".join(f"{i}\tw{i}\tw3\n" for i in range(3)))
  ax = tmp_path / "glue" / "AX.tsv"
  ax.write_text("index\tsentence1\tsentence2\n" + "".join(f"{i}\tw4\tw{i}\n" for i in range(7)))
  c = load_config("glue", "task=mnli")
  c.data_dir, c.init_checkpoint, c.max_seq_length = str(tmp_path / "glue"), good, 16
  task = finetune_setup.build_task(c, tok, init.config)
  # test_mismatched.tsv is absent: skipped (reported), not an error.
  assert [s.name for s in task.eval_sets] == ["dev_matched", "dev_mismatched", "test_matched",
                                              "ax_test"]
  assert "test_mismatched: not predicted" in capsys.readouterr().out
  logits = np.eye(3)[np.arange(7) % 3]  # [7, 3] -> contradiction, entailment, neutral, ...
  assert task.eval_sets[3].score({"logits": logits}, str(tmp_path / "out")) == {}
  lines = (tmp_path / "out" / "predictions" / "AX.tsv").read_text().splitlines()
  assert lines[1:4] == ["0\tcontradiction", "1\tentailment", "2\tneutral"] and len(lines) == 8
  # Dev metrics are keyed _matched / _mismatched.
  dev = task.eval_sets[0].score({"logits": np.eye(3)[[0, 1, 2, 0, 1]]}, str(tmp_path))
  assert set(dev) == {"accuracy_matched", "majority_baseline_matched", task_lib.WARNINGS}
  assert dev[task_lib.WARNINGS] == []  # 5 dev rows, predictions of 3 classes


@pytest.mark.slow
def test_constant_predictions_are_flagged_printed_and_recorded(mrpc_run, glue_dir, tmp_path,
                                                               capsys):
  """A classifier that always answers 1 (zero kernel, bias for 1) is at the majority baseline."""
  exported = bundle.load_bundle(os.path.join(mrpc_run[0], "export"))
  params = jax.tree.map(np.asarray, exported.params)
  params["classifier"]["kernel"] = np.zeros_like(params["classifier"]["kernel"])
  params["classifier"]["bias"] = np.array([0.0, 1.0], np.float32)
  constant = str(tmp_path / "constant")
  bundle.save_bundle(constant, params, exported.config, exported.vocab_file, exported.lowercase)
  results = finetune.finetune(glue_config(glue_dir, constant, eval_only=True,
                                          predict_test=False), str(tmp_path / "eval"))
  dev_labels = [int(row[0]) for row in mrpc_rows(13, 1)]
  assert results["accuracy"] == pytest.approx(dev_labels.count(1) / 13)
  assert results["constant_prediction"] is True
  assert "every one of the 13 predictions is class 1" in results["warning"]
  with open(tmp_path / "eval" / "eval_results.json") as f:
    assert json.load(f)["constant_prediction"] is True
  out = capsys.readouterr().out
  assert "WARNING: mrpc dev: every one of the 13 predictions is class 1" in out
  # Where the command's time went, the last line.
  assert re.search(r"\ntime: compile \d+ s \(\d+ programs(; \d+ s more compiled ahead, beside the "
                   r"work)?\), data \d+ s, train \d+ s, eval \d+ s, other \d+ s; total \d+ s\n$",
                   out), out[-500:]


def test_predict_pads_every_row_and_keeps_order():
  mesh = sharding.make_mesh((-1, 1, 1))
  ids = np.arange(13 * 4, dtype=np.int32).reshape(13, 4)
  arrays = {"input_ids": ids, "input_mask": np.ones_like(ids), "segment_ids": np.zeros_like(ids)}
  predict_step = jax.jit(lambda params, b: {"logits": b["input_ids"].sum(-1) + params})
  out = evaluation.predict(predict_step, 0, arrays, 8, mesh)
  np.testing.assert_array_equal(out["logits"], ids.sum(-1))  # 13 rows, not 8 or 16


def test_summary_is_mean_and_std_over_seeds():
  per_seed = [{"accuracy": 0.5, "f1": 0.6, "constant_prediction": False},
              {"accuracy": 0.7, "f1": 0.9, "constant_prediction": True, "warning": "w1"},
              {"accuracy": 0.6, "f1": 0.3, "constant_prediction": False}]
  summary = evaluation.mean_over_seeds(per_seed)
  assert summary["accuracy"] == pytest.approx(statistics.mean([0.5, 0.7, 0.6]))
  assert summary["f1_std"] == pytest.approx(statistics.pstdev([0.6, 0.9, 0.3]))
  assert summary["constant_prediction"] is True and summary["warning"] == "w1"
  assert "accuracy_std" not in evaluation.mean_over_seeds(per_seed[:1])
  assert evaluation.mean_over_seeds(per_seed[:1])["constant_prediction"] is False
  # A count the same for every seed stays that count (SQuAD 2.0's HasAns_total: 197, not 197.0).
  counts = evaluation.mean_over_seeds([{"HasAns_total": 197, "n": 3}, {"HasAns_total": 197,
                                                                      "n": 4}])
  assert counts["HasAns_total"] == 197 and isinstance(counts["HasAns_total"], int)
  assert "HasAns_total_std" not in counts
  assert counts["n"] == 3.5 and counts["n_std"] == 0.5  # counts that differ: mean and std


def test_layerwise_scales_agree_between_layouts():
  layer = {"kernel": np.zeros((2, 3))}
  params = {"bert": {"embeddings": {"e": np.zeros((5, 2))},
                     "encoder": {f"layer_{i}": layer for i in range(3)}},
            "classifier": {"kernel": np.zeros((2, 2))}}
  flat = opt_lib.layerwise_scales(params, 3, 0.5)
  assert flat["bert"]["embeddings"]["e"] == 0.5 ** 4
  assert [flat["bert"]["encoder"][f"layer_{i}"]["kernel"] for i in range(3)] == [0.125, 0.25, 0.5]
  assert flat["classifier"]["kernel"] == 1.0
  scanned = opt_lib.layerwise_scales(model_lib.stack_layers(params), 3, 0.5)
  np.testing.assert_allclose(np.ravel(scanned["bert"]["encoder"]["layers"]["kernel"]),
                             [0.125, 0.25, 0.5])


@pytest.mark.slow
def test_finetuning_step_is_the_shared_core_accumulation_and_scan_agree(pretrained, glue_dir,
                                                                        tmp_path):
  """2 microbatches = 1 batch, scanned layers = unrolled, and packed rows = one example per
  row, on a task objective (no dropout; the same batches: no length bucketing, no packing
  but in the packed run)."""
  def configured(name, **nested):
    c = glue_config(glue_dir, pretrained, predict_test=False, batch_size=16,  # 2 microbatches of 8
                    length_bucketing=False, packing=False)
    c.model.dropout_rate = c.model.attention_dropout_rate = 0.0
    for key, value in nested.items():
      if "__" in key:
        section, field = key.split("__")
        c[section][field] = value
      else:
        c[key] = value
    finetune.finetune(c, str(tmp_path / name))
    params = bundle.load_bundle(str(tmp_path / name / "export")).params
    return traverse_util.flatten_dict(params, sep="/")

  full = configured("full")
  start = traverse_util.flatten_dict(loading.load_pretrained(pretrained).params, sep="/")
  query = "bert/encoder/layer_0/attention/query/kernel"
  assert float(np.max(np.abs(full[query] - start[query]))) > 1e-6  # training moved the encoder
  for other in (configured("accum", optimizer__grad_accum_steps=2),
                configured("scan", model__scan_layers=True),
                configured("packed", packing=True)):
    assert sorted(other) == sorted(full)
    diff = max(float(np.max(np.abs(full[k] - other[k]))) for k in full)
    assert diff <= 1e-5, diff


@pytest.mark.slow
def test_python_api_classifies_as_the_run_predicted(mrpc_run, glue_dir):
  """`Encoder.load(export).classify` gives the labels the run wrote for the test split."""
  from bert_jax import Encoder  # pylint: disable=g-import-not-at-top
  workdir, _ = mrpc_run
  enc = Encoder.load(os.path.join(workdir, "export"))
  assert enc.task == "mrpc" and "classifier" in enc.heads
  rows = [r.split("\t") for r in mrpc_rows(11, 2, test=True)]
  got = enc.classify([(r[3], r[4]) for r in rows], max_length=32, batch_size=4)
  with open(os.path.join(workdir, "predictions", "MRPC.tsv")) as f:
    written = [line.rstrip("\n").split("\t")[1] for line in f][1:]
  assert [label for label, _ in got] == written and all(0.5 <= p <= 1 for _, p in got)
  assert enc.embed([rows[0][3], rows[1][3]], pooling="cls").shape == (2, enc.config.hidden_size)
  with pytest.raises(ValueError, match="no MLM head"):
    enc.fill_mask("the [MASK] .")
