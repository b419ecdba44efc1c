"""Adding an objective, a task, a family member or an input source is one module (and its
config), with no edit to the package.

Each test writes a module of its own into a folder
outside the package, imports it (it registers itself with the registry), and
trains with it end to end through the real entry points.
"""
import importlib.util
import json
import os
import pathlib
import re
import sys
import textwrap

from flax import traverse_util
import numpy as np
import pytest

from bert_jax.checkpoints import loading
from bert_jax import config_help
from bert_jax.conversion import hf as hf_conversion
from bert_jax.data.sources import registry as source_registry
from bert_jax import finetune
from bert_jax.members import registry as member_registry
from bert_jax.objectives import registry as objective_registry
from bert_jax import pretrain
from bert_jax.tasks import registry as task_registry
from tests.fixtures import finetuning
from tests.fixtures import pretraining

ROOT = pathlib.Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow  # each test trains end to end through the real entry points

# A new objective: MLM with label smoothing, its own loss and its own logged metric.
TOY_OBJECTIVE = '''
"""Toy objective 'smoothed_mlm': masked LM with label smoothing 0.1."""
import functools

import jax
import re
import jax.numpy as jnp

from bert_jax.modeling import flops as flops_lib
from bert_jax.modeling import model as model_lib
from bert_jax.objectives import base
from bert_jax.objectives import mlm_nsp
from bert_jax.objectives import registry
from bert_jax.training import train_core

SMOOTHING = 0.1


def objective(model):
  def sums(params, batch, rng, deterministic):
    out = model.apply({"params": params}, batch["input_ids"], batch["input_mask"],
                      batch["segment_ids"], batch["masked_lm_positions"],
                      deterministic=deterministic,
                      rngs=None if deterministic else {"dropout": rng})
    w = batch["masked_lm_weights"].astype(jnp.float32)
    logp = jax.nn.log_softmax(out["mlm_logits"].astype(jnp.float32), axis=-1)
    xent, correct = mlm_nsp.mlm_xent_and_correct(out["mlm_logits"], batch["masked_lm_ids"])
    smoothed = (1 - SMOOTHING) * xent - SMOOTHING * jnp.mean(logp, axis=-1)
    return {"smoothed_xent": jnp.sum(smoothed * w), "mlm_xent": jnp.sum(xent * w),
            "mlm_correct": jnp.sum(correct * w), "mlm_weight": jnp.sum(w),
            "real_tokens": jnp.sum(batch["input_mask"] > 0).astype(jnp.float32)}

  def denominators(batch):
    return {"mlm": jnp.sum(batch["masked_lm_weights"].astype(jnp.float32)) + 1e-5}

  return train_core.Objective(sums=sums, denominators=denominators,
                              loss=lambda s, d: s["smoothed_xent"] / d["mlm"])


def summarize(sums):
  out = train_core.step_means(sums)
  w = max(sums["mlm_weight"], 1e-5)
  out["mlm_loss"] = sums["mlm_xent"] / w
  out["mlm_accuracy"] = sums["mlm_correct"] / w
  out["smoothed_mlm_loss"] = sums["smoothed_xent"] / w
  return out


def build(options, inputs):
  model = model_lib.BertForPreTraining(inputs.model_config, with_nsp=False)
  init = mlm_nsp.init_fn(model, options.seq_len, options.data.max_predictions_per_seq)
  return base.Pretraining(
      inputs.model_config, objective(model), inputs.tx, inputs.schedule,
      functools.partial(train_core.init_state, init, inputs.tx, prng_impl=inputs.prng_impl),
      summarize, lambda params: params,
      functools.partial(flops_lib.train_flops_per_token, inputs.model_config),
      prng_impl=inputs.prng_impl)


SPEC = base.Spec(data_modes={"smoothed_mlm": ("full_sentences",)}, options=("seq_len", "data"),
                 build=build,
                 console_metrics=("smoothed_mlm_loss", "mlm_accuracy"))
registry.register(SPEC)
'''

# A new task: is a sentence longer than 6 words? One text per line, `label<TAB>sentence`.
TOY_TASK = '''
"""Toy task 'long_sentence': binary classification of single sentences."""
import os
import sys

import jax.numpy as jnp
import numpy as np
import optax

from bert_jax.modeling import model as model_lib
from bert_jax.tasks.glue import metrics as metrics_lib
from bert_jax.tasks import registry
from bert_jax.tasks import task as task_lib

OPTIONS = ("data_dir", "max_seq_length")


def model(options, model_cfg):
  return task_lib.TaskModel("long_sentence",
                            model_lib.BertForSequenceClassification(model_cfg, num_labels=2),
                            "classifier")


def _encode(tokenizer, path, max_len):
  ids, mask, labels = [], [], []
  rows = [line.rstrip("\\n").split("\\t") for line in open(path, encoding="utf-8")]
  for (label, _), text_ids in zip(rows, tokenizer.tokenize_to_ids([t for _, t in rows])):
    pieces = tokenizer.build_inputs(text_ids[:max_len - 2])[0]
    ids.append(pieces + [tokenizer.pad_id] * (max_len - len(pieces)))
    mask.append([1] * len(pieces) + [0] * (max_len - len(pieces)))
    labels.append(int(label))
  return {"input_ids": np.array(ids, np.int32), "input_mask": np.array(mask, np.int32),
          "segment_ids": np.zeros((len(ids), max_len), np.int32),
          "label_ids": np.array(labels, np.int32)}


def build(options, tokenizer, model_cfg):
  train = _encode(tokenizer, os.path.join(options.data_dir, "train.tsv"), options.max_seq_length)
  dev = _encode(tokenizer, os.path.join(options.data_dir, "dev.tsv"), options.max_seq_length)

  def loss(logits, batch):
    return optax.softmax_cross_entropy_with_integer_labels(logits, batch["label_ids"])

  def score(outputs, workdir):
    accuracy = float(np.mean(np.argmax(outputs["logits"], -1) == dev["label_ids"]))
    return {"accuracy": accuracy,
            "majority_baseline": metrics_lib.majority_rate(dev["label_ids"])}

  return task_lib.Task(model(options, model_cfg), train, ("label_ids",), loss,
                       [task_lib.EvalSet("dev", dev, score)], "accuracy")


registry.register("long_sentence", sys.modules[__name__])
'''

# Its config: the keys every fine-tuning config shares, and the task's name.
TOY_TASK_CONFIG = '''
import ml_collections

from bert_jax.configuration import sections as config_sections

import toy_long_sentence_task  # registers the task


def get_config(arg=None):
  config_sections.parse_arg(arg, example="toy_task_config.py")
  c = ml_collections.ConfigDict()
  # The task: served by toy_long_sentence_task.
  c.task = "long_sentence"
  config_sections.finetune(c, data_source="tsv", max_seq_length=16, learning_rate=1e-3,
                           num_epochs=2.0, length_bucketing=False)
  # Examples per step.
  c.batch_size = 8
  return c
'''


# A new family member: BERT's network with ReLU, stored by "transformers" under `toy.`
# with its own config.json key for the layer count, and its pretraining recipe.
TOY_MEMBER = '''
"""Toy member 'toy-relu-bert': BERT with ReLU, its tensors under `toy.`."""
from bert_jax.members import base
from bert_jax.members import registry


def pretrain_recipe(c):
  # MLM alone on contiguous text.
  c.model_type = "toy-relu-bert"
  c.objective = "mlm"
  c.data.mode = "full_sentences"


MEMBER = base.Member(
    model_type="toy-relu-bert",
    hf_keys={**{k: v for k, v in base.BERT_KEYS.items() if k != "num_hidden_layers"},
             "n_layer": "num_layers"},
    build=lambda config, pad_id: config.replace(model_type="toy-relu-bert", hidden_act="relu"),
    hf=base.HfLayout("toy", {"cls.predictions.decoder.weight": "toy.embeddings.word_embeddings.weight",
                             "cls.predictions.decoder.bias": "cls.predictions.bias"},
                     ("ToyModel", "ToyForMaskedLM", "ToyForPreTraining"), "BertTokenizer",
                     renames={"bert.": "toy.", "cls.": "cls."}),
    fixed={"hidden_act": "relu"},
    recipe_name="toy-relu",
    pretrain_recipe=pretrain_recipe)
registry.register(MEMBER)
'''


# A new input source: JSON lines, one document per line under "text", sentences split at
# sentence ends; its files are config.data.files (one shard per file).
TOY_SOURCE = '''
"""Toy source 'jsonl': documents from JSON-lines files."""
import glob
import json
import os

from bert_jax.data.sources import raw_docs
from bert_jax.data.sources import registry as source_registry
from bert_jax.data.sources import shard_spec
from bert_jax.data.sources import source_base
from bert_jax.runtime.optional_tensorflow import tf

READS = []  # the shards read, for the test


def list_shards(data_config):
  paths = sorted(glob.glob(data_config.files))
  if not paths:
    raise FileNotFoundError(f"config.data.files={data_config.files!r} matches no JSON-lines file")
  return [shard_spec.ShardSpec(i, p, "jsonl", os.path.getsize(p)) for i, p in enumerate(paths)]


def read(shard, data_config):
  READS.append(shard.name)
  with open(shard.name, encoding="utf-8") as f:
    docs = [json.loads(line)["text"] for line in f if line.strip()]
  return raw_docs.RawDocs(*raw_docs.split_sentences(tf.constant(docs, tf.string)))


SOURCE = source_base.Source(
    name="jsonl", shard_kind="jsonl", list_shards=list_shards,
    describe=lambda d: f"JSON lines {d.files}", read=read, sized_shards=True)
source_registry.register(SOURCE)
'''


def _import_from(directory: pathlib.Path, name: str, source: str):
  path = directory / f"{name}.py"
  path.write_text(textwrap.dedent(source), encoding="utf-8")
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  sys.modules[name] = module
  spec.loader.exec_module(module)
  return module


def _corpus(directory: pathlib.Path) -> pathlib.Path:
  """30 documents of 5 sentences of 8 words."""
  corpus = directory / "corpus.txt"
  rng = np.random.default_rng(0)
  words = " ".join(pretraining.WORDS).split()
  corpus.write_text("\n\n".join(
      "\n".join(" ".join(rng.choice(words, 8)) + " ." for _ in range(5)) for _ in range(30)),
      encoding="utf-8")
  return corpus


def test_a_new_objective_is_one_module(tmp_path, monkeypatch, capsys):
  monkeypatch.setattr(objective_registry, "SPECS", dict(objective_registry.SPECS))
  _import_from(tmp_path, "toy_smoothed_mlm", TOY_OBJECTIVE)
  corpus = _corpus(tmp_path)
  config = pretraining.small_config(str(corpus), objective="smoothed_mlm",
                                    total_steps=3, checkpoint_every=3)
  config.data.mode = "full_sentences"
  workdir = tmp_path / "run"
  pretrain.train_and_export(config, str(workdir))
  records = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
  logged = [r for r in records if "smoothed_mlm_loss" in r]
  assert len(logged) == 3 and all(np.isfinite(r["loss"]) for r in logged)
  # The loss trained is the smoothed one, not plain MLM's.
  assert all(abs(r["loss"] - r["smoothed_mlm_loss"]) < 1e-4 for r in logged)
  assert all(abs(r["loss"] - r["mlm_loss"]) > 1e-3 for r in logged)
  assert (workdir / "export" / "bundle.json").is_file()
  # The console's progress line shows the metrics the objective declares, in its order.
  progress = [x for x in capsys.readouterr().out.splitlines() if x.startswith("step 3/3 |")]
  assert re.match(r"step 3/3 \| loss [\d.]+ \| smoothed_mlm_loss [\d.]+ \| mlm_accuracy [\d.]+ "
                  r"\| learning_rate", progress[0]), progress
  # A name no module serves is still one line naming the registered ones.
  with pytest.raises(ValueError, match=r"objective 'smoothed' not in \[.*'smoothed_mlm'\]"):
    pretrain.train(pretraining.small_config(str(corpus), objective="smoothed"),
                   str(tmp_path / "bad"))


def test_a_new_task_is_one_module_and_its_config(tmp_path, monkeypatch):
  monkeypatch.setattr(task_registry, "FAMILIES", dict(task_registry.FAMILIES))
  monkeypatch.syspath_prepend(str(tmp_path))
  monkeypatch.delitem(sys.modules, "toy_long_sentence_task", raising=False)
  (tmp_path / "toy_long_sentence_task.py").write_text(textwrap.dedent(TOY_TASK), "utf-8")
  (tmp_path / "toy_task_config.py").write_text(textwrap.dedent(TOY_TASK_CONFIG), "utf-8")
  data = tmp_path / "data"
  data.mkdir()
  rng = np.random.default_rng(0)
  words = " ".join(finetuning.SENTENCES).split()
  for name, n in (("train.tsv", 48), ("dev.tsv", 16)):
    rows = []
    for _ in range(n):
      k = int(rng.integers(2, 12))
      rows.append(f"{int(k > 6)}\t{' '.join(rng.choice(words, k))}")
    (data / name).write_text("\n".join(rows) + "\n", encoding="utf-8")
  init = finetuning.random_bundle(tmp_path / "init")
  workdir = tmp_path / "run"
  # The command line, as a user runs it: the config file imports the task module.
  finetune.main(["--config", str(tmp_path / "toy_task_config.py"), "--workdir", str(workdir),
                 f"--config.init_checkpoint={init}", f"--config.data_dir={data}"])
  results = json.loads((workdir / "eval_results.json").read_text())
  assert set(results) >= {"accuracy", "majority_baseline"}
  assert 0.0 <= results["accuracy"] <= 1.0
  info = json.loads((workdir / "export" / "bundle.json").read_text())
  assert info["task"] == "long_sentence"
  assert os.path.isdir(workdir / "finetune_checkpoints")


def test_a_new_member_is_one_module(tmp_path, monkeypatch):
  monkeypatch.setattr(member_registry, "MEMBERS", dict(member_registry.MEMBERS))
  _import_from(tmp_path, "toy_relu_bert", TOY_MEMBER)
  corpus = _corpus(tmp_path)
  # Pretraining builds the member from the variant's sizes.
  config = pretraining.small_config(str(corpus), model_type="toy-relu-bert", total_steps=3,
                                    checkpoint_every=3)
  workdir = tmp_path / "run"
  pretrain.train_and_export(config, str(workdir))
  trained = loading.load_pretrained(str(workdir / "export"))
  assert trained.config.model_type == "toy-relu-bert" and trained.config.hidden_act == "relu"
  # Conversion: its own config.json key and tensor names, and back to the same params.
  hf_dir = tmp_path / "hf"
  hf_conversion.bundle_to_hf(str(workdir / "export"), str(hf_dir))
  hf_config = json.loads((hf_dir / "config.json").read_text())
  assert hf_config["model_type"] == "toy-relu-bert"
  assert hf_config["n_layer"] == trained.config.num_layers and "num_hidden_layers" not in hf_config
  from safetensors.numpy import load_file  # pylint: disable=g-import-not-at-top
  names = set(load_file(str(hf_dir / "model.safetensors")))
  assert "toy.encoder.layer.0.attention.self.query.weight" in names
  assert not any(n.startswith("bert.") for n in names)
  back = hf_conversion.load_hf(str(hf_dir))
  assert back["config"] == trained.config
  ours, theirs = (traverse_util.flatten_dict(p, sep="/") for p in (trained.params, back["params"]))
  assert set(ours) == set(theirs)
  assert all(np.array_equal(np.asarray(ours[k]), np.asarray(theirs[k])) for k in ours)
  # Its recipe is one more value of configs/pretrain.py's recipe option.
  pretrain_config = config_help.load_module(ROOT / "configs" / "pretrain.py")
  recipe = pretrain_config.get_config("tiny,recipe=toy-relu")
  assert (recipe.model_type, recipe.objective, recipe.data.mode) == (
      "toy-relu-bert", "mlm", "full_sentences")



def test_a_new_source_is_one_module(tmp_path, monkeypatch, capsys):
  monkeypatch.setattr(source_registry, "SOURCES", dict(source_registry.SOURCES))
  toy = _import_from(tmp_path, "toy_jsonl_source", TOY_SOURCE)
  rng = np.random.default_rng(0)
  words = " ".join(pretraining.WORDS).split()
  docs = [" ".join(" ".join(rng.choice(words, 8)).capitalize() + "." for _ in range(5))
          for _ in range(30)]
  corpus = tmp_path / "corpus.jsonl"
  corpus.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")
  config = pretraining.small_config(str(corpus), total_steps=3, checkpoint_every=3)
  config.data.source = "jsonl"
  workdir = tmp_path / "run"
  pretrain.train_and_export(config, str(workdir))
  assert "JSON lines " + str(corpus) in capsys.readouterr().out  # the header's data line
  assert toy.READS and set(toy.READS) == {str(corpus)}
  records = [json.loads(x) for x in (workdir / "metrics.jsonl").read_text().splitlines()]
  assert len([r for r in records if "loss" in r]) == 3
  assert (workdir / "export" / "bundle.json").is_file()
  # A source no module serves is one line naming the registered ones.
  config.data.source = "parquet"
  with pytest.raises(ValueError, match=r"config.data.source='parquet'; expected one of \[.*'jsonl'\]"):
    pretrain.train(config, str(tmp_path / "bad"))
