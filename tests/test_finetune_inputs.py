"""Fine-tuning inputs checked before the work, and results that stay valid JSON."""
import json
import math

import pytest

from bert_jax import finetune
from tests.fixtures.finetuning import random_bundle
from tests.fixtures.repo import load_config


def _stsb_dir(root, dev_scores):
  d = root / "STS-B"
  d.mkdir(parents=True)
  header = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"

  def rows(scores):
    return [f"{i}\tg\tf\ty\t{i}\ts\ts\tw{i % 7} w{i % 5}\tw{i % 3} w1\t{s}"
            for i, s in enumerate(scores)]
  (d / "train.tsv").write_text("\n".join([header] + rows([i % 6 for i in range(16)])) + "\n")
  (d / "dev.tsv").write_text("\n".join([header] + rows(dev_scores)) + "\n")
  return str(root)


def _stsb_config(data_dir, init, **overrides):
  c = load_config("glue", "task=stsb")
  c.data_dir, c.init_checkpoint = data_dir, init
  c.max_seq_length, c.batch_size, c.eval_batch_size = 16, 8, 8
  c.num_epochs, c.log_every, c.predict_test = 1.0, 1, False
  for k, v in overrides.items():
    c[k] = v
  return c


def test_log_every_zero_is_a_config_error(tmp_path):
  """One line before the work, not a ZeroDivisionError at the first step."""
  init = random_bundle(tmp_path / "b")
  data = _stsb_dir(tmp_path / "glue", [1.0, 2.0])
  with pytest.raises(ValueError, match="bad config: log_every must be >= 1.*got 0"):
    finetune.finetune(_stsb_config(data, init, log_every=0), str(tmp_path / "w"))
  c = _stsb_config(data, init)
  c.model.attention_impl = "cudnn"  # one line, not JAX's "cuDNN is not detected" traceback
  with pytest.raises(ValueError, match="attention_impl='cudnn' needs an NVIDIA GPU; JAX runs on cpu"):
    finetune.finetune(c, str(tmp_path / "w"))


@pytest.mark.slow
def test_undefined_metric_is_written_as_null_with_a_warning(tmp_path, capsys):
  """An all-equal STS-B dev file: Pearson is undefined, written as null (a bare NaN is not JSON)."""
  init = random_bundle(tmp_path / "b")
  data = _stsb_dir(tmp_path / "glue", [2.5] * 8)
  workdir = tmp_path / "w"
  results = finetune.finetune(_stsb_config(data, init), str(workdir))
  assert math.isnan(results["pearson"])
  written = json.loads((workdir / "eval_results.json").read_text())  # valid JSON
  assert written["pearson"] is None and written["spearman"] is None
  assert written["zero_shot_pearson"] is None  # STS-B's baseline: the untrained head, before training
  out = capsys.readouterr().out
  assert ("WARNING: pearson, spearman, pearson_and_spearman, zero_shot_pearson, zero_shot_spearman, "
          "zero_shot_pearson_and_spearman undefined (NaN") in out


@pytest.mark.parametrize("config, arg", [("glue", "task=stsb"), ("squad", "version=1.1"),
                                         ("ner", None)])
def test_an_unset_data_dir_is_said_before_the_checkpoint_loads(tmp_path, config, arg):
  """A recipe's `--config.data_dir=$X` with X unset: one line naming data_dir, and the
  checkpoint (absent here) is never read."""
  c = load_config(config, arg)
  c.init_checkpoint, c.data_dir = str(tmp_path / "no_checkpoint"), ""
  with pytest.raises(ValueError, match="bad config: data_dir is required"):
    finetune.finetune(c, str(tmp_path / "w"))


def test_sentence_embeddings_name_the_first_missing_file_before_the_checkpoint_loads(tmp_path):
  """`$STSB_DIR/sts-train.tsv` with STSB_DIR unset: the training file is named, before the
  checkpoint (absent here) is read; evaluating only, the eval file."""
  c = load_config("sentence_embeddings", None)
  c.init_checkpoint = str(tmp_path / "no_checkpoint")
  c.train_file, c.eval_file = "/sts-train.tsv", "/sts-test.tsv"
  with pytest.raises(ValueError, match="bad config: train_file /sts-train.tsv does not exist"):
    finetune.finetune(c, str(tmp_path / "w"))
  c.eval_only = True
  with pytest.raises(ValueError, match="bad config: eval_file /sts-test.tsv does not exist"):
    finetune.finetune(c, str(tmp_path / "w2"))
