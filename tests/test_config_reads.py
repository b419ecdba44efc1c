"""A --config.KEY the run will not read is an error naming what reads it
(bert_jax.configuration.reads).

Every data-source key of configs/pretrain.py is set against every other source; a key read by
exactly one source, given alone, chooses that source.
"""
import pathlib
import subprocess
import sys

import pytest

from bert_jax import config_help
from bert_jax.configuration import reads as config_reads

ROOT = pathlib.Path(__file__).resolve().parents[1]
PRETRAIN = config_help.load_module(ROOT / "configs" / "pretrain.py")
SOURCES = ("builtin", "files", "tfds", "prepared")
# A non-default value for each data-source key.
SOURCE_KEYS = {"data.files": "corpus/*.txt", "data.format": "document_per_line",
               "data.block_mb": 8.0, "data.tfds_name": "wikipedia", "data.tfds_data_dir": "/d",
               "data.tfds_split": "validation", "data.tfds_text_key": "body",
               "data.tfds_docs_per_shard": 7, "data.prepared_dir": "/p"}


def _config(**overrides):
  config = PRETRAIN.get_config("tiny")
  config.update_from_flattened_dict(overrides)
  return config


def _reader(key):
  return PRETRAIN.READ_ONLY_WHEN[key][1][0]


def test_every_source_key_is_declared():
  assert set(SOURCE_KEYS) == {k for k, rule in PRETRAIN.READ_ONLY_WHEN.items()
                              if rule[0] == "data.source"}


@pytest.mark.parametrize("key", sorted(SOURCE_KEYS))
@pytest.mark.parametrize("source", SOURCES)
def test_each_source_key_against_each_source(key, source):
  config = _config(**{"data.source": source, key: SOURCE_KEYS[key]})
  explicit = ["data.source", key]
  if source == _reader(key):
    assert config_reads.resolve(config, explicit, PRETRAIN.READ_ONLY_WHEN,
                                PRETRAIN.get_config("tiny")) == []
  else:
    with pytest.raises(ValueError, match=rf"--config\.{key} is not read by this run: it is read "
                                         rf"only when data\.source='{_reader(key)}', and this "
                                         rf"run has data\.source='{source}'"):
      config_reads.resolve(config, explicit, PRETRAIN.READ_ONLY_WHEN, PRETRAIN.get_config("tiny"))


@pytest.mark.parametrize("key,source", [("data.files", "files"), ("data.tfds_name", "tfds"),
                                        ("data.prepared_dir", "prepared")])
def test_a_key_one_source_reads_alone_chooses_that_source(key, source):
  config = _config(**{key: SOURCE_KEYS[key]})
  notes = config_reads.resolve(config, [key], PRETRAIN.READ_ONLY_WHEN, PRETRAIN.get_config("tiny"))
  assert config.data.source == source
  assert notes == [f"data.source={source!r}: chosen because --config.{key} was given (the only "
                   "setting that reads it)"]


def test_secondary_keys_do_not_choose_and_conflicting_choices_fail():
  # tfds_split alone does not switch a run to TFDS: it is an error.
  with pytest.raises(ValueError, match="data.tfds_split is not read"):
    config_reads.resolve(_config(**{"data.tfds_split": "validation"}), ["data.tfds_split"],
                         PRETRAIN.READ_ONLY_WHEN, PRETRAIN.get_config("tiny"))
  # With the key that chooses, the secondary key is read.
  config = _config(**{"data.tfds_name": "w", "data.tfds_split": "validation"})
  config_reads.resolve(config, ["data.tfds_split", "data.tfds_name"], PRETRAIN.READ_ONLY_WHEN)
  assert config.data.source == "tfds"
  with pytest.raises(ValueError, match="read by different settings of data.source"):
    config_reads.resolve(_config(**{"data.files": "x", "data.prepared_dir": "/p"}),
                         ["data.files", "data.prepared_dir"], PRETRAIN.READ_ONLY_WHEN)


def test_objective_keys_and_defaults():
  with pytest.raises(ValueError, match=r"electra\.disc_weight is not read .* objective='electra'"):
    config_reads.resolve(_config(**{"electra.disc_weight": 3.0}), ["electra.disc_weight"],
                         PRETRAIN.READ_ONLY_WHEN, PRETRAIN.get_config("tiny"))
  # A key given its default value (a script passing every default) is no error.
  assert config_reads.resolve(_config(), ["data.tfds_split"], PRETRAIN.READ_ONLY_WHEN,
                              PRETRAIN.get_config("tiny")) == []
  with pytest.raises(ValueError, match="eval_batches is not read .* only when eval_every is set"):
    config_reads.resolve(_config(eval_batches=3), ["eval_batches"], PRETRAIN.READ_ONLY_WHEN)


@pytest.mark.parametrize("spec,args,message", [
    ("configs/glue.py:task=mrpc", ["--config.head_layers=2"],
     "head_layers is not read by this run: it is read only when head='layers_attention'"),
    ("configs/sentence_embeddings.py", ["--config.triplet_margin=1.0"],
     "triplet_margin is not read by this run: it is read only when loss='triplet'"),
    ("configs/squad.py:version=1.1", ["--config.null_score_diff_threshold=1.0"],
     "null_score_diff_threshold is not read by this run: it is read only when version='2.0'"),
])
def test_finetune_configs(spec, args, message):
  module = config_help.load_module(ROOT / spec.split(":")[0])
  config = module.get_config(spec.partition(":")[2] or None)
  config.update_from_flattened_dict({a[9:].split("=")[0]: type(config[a[9:].split("=")[0]])(
      a.split("=")[1]) for a in args})
  with pytest.raises(ValueError, match=message):
    config_reads.resolve(config, config_reads.explicit_keys(args), module.READ_ONLY_WHEN)


def test_cli_files_alone_is_read_and_files_with_builtin_is_one_line(tmp_path):
  base = [sys.executable, "-m", "bert_jax.pretrain", "--config", "configs/pretrain.py:tiny",
          "--workdir", str(tmp_path / "w")]
  out = subprocess.run(base + ["--config.data.source=builtin", "--config.data.files=x.txt"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert out.returncode != 0
  assert out.stderr.strip().splitlines() == [
      "bert_jax.pretrain: error: --config.data.files is not read by this run: it is read only "
      "when data.source='files', and this run has data.source='builtin'"]
  assert not (tmp_path / "w").exists()
  # Alone, it is read: the run says the source was chosen, and the missing file is named.
  out = subprocess.run(base + [f"--config.data.files={tmp_path}/missing*.txt"], cwd=ROOT,
                       capture_output=True, text=True, timeout=300)
  assert out.returncode != 0
  assert "data.source='files': chosen because --config.data.files was given" in out.stdout
  assert "missing*.txt" in out.stderr
