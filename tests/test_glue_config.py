"""configs/glue.py: every task, the contract overrides, documented keys."""
import pathlib

from absl import flags
from ml_collections import config_flags
import pytest

from bert_jax import config_help
from bert_jax.tasks.glue import data as glue

_PATH = pathlib.Path(__file__).resolve().parents[1] / "configs" / "glue.py"


def _module():
  return config_help.load_module(_PATH)


def test_every_glue_task_has_a_config():
  module = _module()
  for name in glue.TASKS:
    c = module.get_config(f"task={name}")
    assert c.task == name
    assert c.max_seq_length == 128 and c.batch_size == 32 and c.num_epochs == 3
    assert c.learning_rate in (2e-5, 3e-5, 5e-5)
    assert c.warmup_fraction == 0.1 and c.optimizer.weight_decay == 0.01
    assert c.layerwise_lr_decay == 1.0 and c.seeds == 1
    assert c.length_bucketing and not c.packing  # length buckets; packing is opt-in
    assert c.mesh.shape == (-1, 1, 1) and c.mesh.preset == "data_parallel"
  assert module.get_config("MRPC").task == "mrpc"
  assert module.get_config("task=sts-b").task == "stsb"
  assert module.get_config("task=ax").eval_only and module.get_config("task=mnli").predict_ax
  assert not module.get_config("task=rte").eval_only


def test_unknown_task_and_option_list_the_known_ones():
  module = _module()
  with pytest.raises(ValueError, match=r"unknown GLUE task 'mrcp'.*'cola'.*'wnli'"):
    module.get_config("task=mrcp")
  with pytest.raises(ValueError, match="unknown GLUE task ''"):
    module.get_config(None)
  with pytest.raises(ValueError, match=r"unknown config options \['lr'\]"):
    module.get_config("task=mrpc,lr=1")


def test_same_keys_as_pretrain_where_shared():
  """model / optimizer / mesh sections mirror configs/pretrain.py, so its code applies; only
  pretraining's MLM decoder key (model.vocab_pad_multiple) has nothing to act on here."""
  pretrain = config_help.load_module(_PATH.parent / "pretrain.py")
  p, g = pretrain.get_config("tiny"), _module().get_config("task=mrpc")
  pretraining_only = {"model": {"vocab_pad_multiple"}}
  for section in ("model", "optimizer", "mesh"):
    want = set(p[section].keys()) - pretraining_only.get(section, set())
    assert sorted(g[section].keys()) == sorted(want), section


def _parse_flags(argv):
  """Parses argv as the fine-tuning entry point would (absl + config_flags)."""
  values = flags.FlagValues()
  config_flags.DEFINE_config_file("config", flag_values=values, sys_argv=argv)
  values(argv)
  return values.config


def test_contract_overrides_on_the_command_line(tmp_path):
  c = _parse_flags(["finetune", f"--config={_PATH}:task=rte", f"--config.data_dir={tmp_path}",
                    "--config.init_checkpoint=/ckpt", "--config.num_epochs=1",
                    "--config.max_seq_length=64", "--config.batch_size=8",
                    "--config.learning_rate=5e-5", "--config.data_source=tfds"])
  assert (c.task, c.data_dir, c.init_checkpoint) == ("rte", str(tmp_path), "/ckpt")
  assert (c.num_epochs, c.max_seq_length, c.batch_size, c.learning_rate) == (1, 64, 8, 5e-5)
  assert c.data_source == "tfds"
  off = _parse_flags(["finetune", f"--config={_PATH}:task=rte", "--config.packing=True",
                      "--config.length_bucketing=False"])
  assert off.packing and not off.length_bucketing
  with pytest.raises(Exception, match="no_such_key"):
    _parse_flags(["finetune", f"--config={_PATH}:task=rte", "--config.no_such_key=1"])


