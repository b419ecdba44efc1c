"""configs/squad.py: both versions, the contract overrides, documented keys."""
import pathlib

from absl import flags
from ml_collections import config_flags
import pytest

from bert_jax import config_help

_PATH = pathlib.Path(__file__).resolve().parents[1] / "configs" / "squad.py"


def _module(path=_PATH):
  return config_help.load_module(path)


def test_versions_and_run_squad_defaults():
  module = _module()
  for arg, version in (("version=1.1", "1.1"), ("version=2.0", "2.0"), ("v2.0", "2.0"),
                       ("1.1", "1.1")):
    c = module.get_config(arg)
    assert c.version == version and c.task == "squad"
    assert c.eval_file == f"dev-v{version}.json" and c.train_file == f"train-v{version}.json"
    assert (c.max_seq_length, c.doc_stride, c.max_query_length) == (384, 128, 64)
    assert (c.n_best_size, c.max_answer_length, c.null_score_diff_threshold) == (20, 30, 0.0)
    assert (c.batch_size, c.num_epochs, c.warmup_fraction) == (32, 2, 0.1)
    assert c.learning_rate in (2e-5, 3e-5, 5e-5)
    assert c.optimizer.weight_decay == 0.01 and not c.eval_only


def test_unknown_version_lists_the_known_ones():
  module = _module()
  with pytest.raises(ValueError, match=r"unknown SQuAD version '3.0'.*\['1.1', '2.0'\]"):
    module.get_config("version=3.0")
  with pytest.raises(ValueError, match=r"unknown config options \['task'\]"):
    module.get_config("version=1.1,task=x")


def test_same_sections_as_the_glue_config():
  squad_config = _module().get_config("version=1.1")
  glue_config = _module(_PATH.parent / "glue.py").get_config("task=mrpc")
  for section in ("model", "optimizer", "mesh"):
    assert squad_config[section].to_dict() == glue_config[section].to_dict(), section
  shared = set(config_help.flatten(glue_config)) & set(config_help.flatten(squad_config))
  for key in ("data_dir", "init_checkpoint", "num_epochs", "max_seq_length", "batch_size",
              "learning_rate", "seeds", "seed", "eval_only", "log_every", "eval_batch_size",
              "layerwise_lr_decay", "warmup_fraction", "tfds_data_dir", "data_source"):
    assert key in shared, key


def test_contract_overrides_on_the_command_line(tmp_path):
  argv = ["finetune", f"--config={_PATH}:version=2.0", f"--config.data_dir={tmp_path}",
          "--config.init_checkpoint=/ckpt", "--config.num_epochs=1",
          "--config.max_seq_length=256", "--config.batch_size=8",
          "--config.learning_rate=5e-5", "--config.null_score_diff_threshold=-1.5"]
  values = flags.FlagValues()
  config_flags.DEFINE_config_file("config", flag_values=values, sys_argv=argv)
  values(argv)
  c = values.config
  assert (c.version, c.data_dir, c.init_checkpoint) == ("2.0", str(tmp_path), "/ckpt")
  assert (c.num_epochs, c.max_seq_length, c.batch_size, c.learning_rate) == (1, 256, 8, 5e-5)
  assert c.null_score_diff_threshold == -1.5


