"""The built-in sample: scored sentence pairs shipped in the package, so that a fine-tune
needs no download (`--config.data_source=builtin` of configs/sentence_embeddings.py)."""
import collections
import math
import pathlib
import re

from absl import flags
import numpy as np
import pytest

from bert_jax.checkpoints import bundle
from bert_jax import cli
from bert_jax.data.tokenizers import tokenizer as tokenizer_lib
from bert_jax import finetune
from bert_jax.finetuning import setup as finetune_setup
from bert_jax.modeling.model_config import BertConfig
from bert_jax.tasks.sentence_embeddings import pairs as sentence_pairs
from bert_jax.tasks.sentence_embeddings import task as sentence_embedding_task
from bert_jax.training import sharding
from tests.fixtures.repo import load_config
from tests.fixtures.tiny_encoder import random_params

ROOT = pathlib.Path(__file__).resolve().parents[1]
CONFIG_FILE = ROOT / "configs" / "sentence_embeddings.py"
# The rows the config's docstring, the README and bert_jax/assets/README.md give.
ROWS = {"train_file": 600, "eval_file": 200}


def _sample_config(**overrides):
  c = load_config("sentence_embeddings", None)
  c.data_source = "builtin"
  for k, v in overrides.items():
    c[k] = v
  return c


def test_the_sample_has_the_documented_rows_and_scores():
  rows = {k: sentence_pairs.read_scored_pairs(sentence_embedding_task.data_file(_sample_config(), k))
          for k in ROWS}
  for key, count in ROWS.items():
    assert len(rows[key].texts) == count, key
    scores = rows[key].scores
    assert scores.min() == 0.0 and scores.max() == 5.0  # the scale score_max 5 divides
    assert all(a.strip() and b.strip() for a, b in rows[key].texts)
  # Eval pairs come from other modules than training pairs: no first sentence is shared.
  assert not ({a for a, _ in rows["train_file"].texts} & {a for a, _ in rows["eval_file"].texts})
  notes = " ".join((ROOT / "bert_jax" / "assets" / "README.md").read_text(encoding="utf-8").split())
  assert "600" in notes and "200" in notes and "Python Software Foundation" in notes


def test_the_package_data_globs_ship_the_sample():
  """setup.py's package_data patterns, expanded as setuptools does (`**` recursive), match
  the sample's files."""
  patterns = re.search(r'"bert_jax": \[([^\]]*)\]', (ROOT / "setup.py").read_text()).group(1)
  shipped = set()
  for pattern in re.findall(r'"([^"]+)"', patterns):
    shipped |= {p for p in (ROOT / "bert_jax").glob(pattern) if p.is_file()}
  for name in sentence_embedding_task.BUILTIN_FILES.values():
    assert pathlib.Path(sentence_embedding_task.BUILTIN_DIR, name) in shipped


def _docstring_sample_command() -> list[str]:
  doc = re.sub(r"\\\n\s*", " ", CONFIG_FILE.read_text(encoding="utf-8").split('"""')[1])
  lines = [l.split() for l in doc.splitlines() if "--config.data_source=builtin" in l]
  assert len(lines) == 1
  return lines[0]


def test_the_documented_command_parses_and_passes_the_checks():
  argv = _docstring_sample_command()
  args = argv[argv.index("--config") + 1:]
  assert args[0] == "configs/sentence_embeddings.py"
  overrides = [a for a in args if a.startswith("--config.")]
  values = flags.FlagValues()
  holder = cli.define_config(values, "config", ["--config", str(CONFIG_FILE)] + overrides)
  values(["prog", "--config", str(CONFIG_FILE)] + overrides)
  config = holder.value
  assert config.data_source == "builtin" and config.loss == "cosent"
  spec = ["--config", str(CONFIG_FILE)]
  cli.check_config_reads(config, spec + overrides, "bert_jax.finetune")
  finetune_setup.check_config(config, sharding.mesh_from_config(config.mesh))
  # A file named beside the built-in sample would not be read: refused, naming the key.
  config.train_file = "x.tsv"
  with pytest.raises(SystemExit, match="train_file"):
    cli.check_config_reads(config, spec + overrides + ["--config.train_file=x.tsv"],
                           "bert_jax.finetune")
  with pytest.raises(ValueError, match="the built-in sample is scored pairs"):
    finetune_setup.check_config(_sample_config(loss="mnrl", init_checkpoint="CKPT"),
                                sharding.mesh_from_config(config.mesh))


def _bundle_of_the_sample_words(path) -> str:
  """A random 1-layer bundle whose vocab is the sample's commonest words (few [UNK]s)."""
  rows = sentence_pairs.read_scored_pairs(
      sentence_embedding_task.data_file(_sample_config(), "train_file"))
  words = collections.Counter(w for pair in rows.texts for t in pair
                              for w in re.findall(r"[a-z]+", t.lower()))
  tokens = list(tokenizer_lib.SPECIAL_TOKENS) + [w for w, _ in words.most_common(200)]
  vocab = path.parent / f"{path.name}_vocab.txt"
  vocab.write_text("\n".join(tokens) + "\n", encoding="utf-8")
  cfg = BertConfig(vocab_size=len(tokens), hidden_size=16, num_layers=1, num_heads=2,
                   intermediate_size=32, max_position_embeddings=64)
  bundle.save_bundle(str(path), random_params(cfg), cfg, str(vocab), True)
  return str(path)


@pytest.mark.slow  # about 11 s on 2 cores, compilation included
def test_a_few_steps_on_the_sample(tmp_path):
  """Two steps of the sample's training pairs, scored on all its eval pairs, zero-shot first."""
  c = _sample_config(init_checkpoint=_bundle_of_the_sample_words(tmp_path / "init"),
                     max_train_examples=32, batch_size=16, eval_batch_size=64,
                     max_seq_length=32, length_bucketing=False, learning_rate=1e-3,
                     num_epochs=1.0, log_every=1)
  results = finetune.finetune(c, str(tmp_path / "w"))
  for key in ("spearman", "pearson", "zero_shot_spearman", "zero_shot_pearson"):
    assert math.isfinite(results[key]), key
  assert np.loadtxt(tmp_path / "w" / "predictions" / "eval_cosine.txt").shape == (200,)
