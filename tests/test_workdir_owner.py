"""A workdir has one owner, and --overwrite replaces only a bundle.

Fine-tuning with --workdir equal to the pretraining workdir it started from would replace the
pretraining export and mix both runs in metrics.jsonl; `convert --from hf --overwrite` would
delete everything in --dst (notes, another bundle). Both are refused before anything is read.
"""
import os

import numpy as np
import pytest
from flax import traverse_util

from bert_jax.checkpoints import bundle
from bert_jax.checkpoints import workdir_owner
from bert_jax import cli
from bert_jax import config_help
from bert_jax import convert
from bert_jax import finetune
from bert_jax import pretrain
from tests.fixtures.repo import ROOT
from tests.fixtures.tiny_encoder import BUNDLE_CONFIG as CONFIG


@pytest.fixture(scope="module")
def a_bundle(tmp_path_factory):
  rng = np.random.default_rng(0)
  params = traverse_util.unflatten_dict(
      {k: rng.normal(size=s).astype(np.float32)
       for k, s in bundle.pretraining_shapes(CONFIG).items()}, sep="/")
  tokens = [f"t{i}" for i in range(CONFIG.vocab_size)]
  path = tmp_path_factory.mktemp("b") / "bundle"
  bundle.save_bundle(str(path), params, CONFIG, tokens, lowercase=True)
  return str(path), params, tokens


def _pretraining_workdir(root, a_bundle, source="pretrain"):
  workdir = root / "run"
  (workdir / "checkpoints").mkdir(parents=True)
  bundle.save_bundle(str(workdir / "export"), a_bundle[1], CONFIG, a_bundle[2], True,
                     info={"source": source})
  (workdir / "metrics.jsonl").write_text('{"step": 1}\n')
  return workdir


def _snapshot(d):
  return sorted((os.path.relpath(os.path.join(r, f), d), os.path.getmtime(os.path.join(r, f)))
                for r, _, files in os.walk(d) for f in files)


def test_owner_of_each_kind_of_workdir(a_bundle, tmp_path):
  assert workdir_owner.owner(str(tmp_path / "new")) is None
  assert workdir_owner.owner(str(tmp_path)) is None
  assert workdir_owner.owner(a_bundle[0]) == "bundle"
  assert workdir_owner.owner(str(_pretraining_workdir(tmp_path, a_bundle))) == "pretrain"
  ft = tmp_path / "ft"
  ft.mkdir()
  (ft / "eval_results.json").write_text("{}")
  assert workdir_owner.owner(str(ft)) == "finetune"
  only_ckpts = tmp_path / "c"
  (only_ckpts / "checkpoints").mkdir(parents=True)  # a run interrupted before its export
  assert workdir_owner.owner(str(only_ckpts)) == "pretrain"


def test_finetuning_refuses_a_pretraining_workdir_and_touches_nothing(a_bundle, tmp_path):
  workdir = _pretraining_workdir(tmp_path, a_bundle)
  before = _snapshot(workdir)
  c = config_help.load_module(ROOT / "configs" / "glue.py").get_config("task=mrpc")
  c.init_checkpoint, c.data_dir = str(workdir), str(tmp_path)
  with pytest.raises(ValueError, match=r"--workdir .*/run holds a pretraining run; a fine-tuning "
                     r"run would .* give a new --workdir \(it can be this run's init_checkpoint\)"):
    finetune.finetune(c, str(workdir))
  assert _snapshot(workdir) == before


def test_pretraining_refuses_a_finetuning_workdir_or_a_bundle(a_bundle, tmp_path):
  workdir = _pretraining_workdir(tmp_path, a_bundle, source="finetune")
  c = config_help.load_module(ROOT / "configs" / "pretrain.py").get_config("tiny")
  before = _snapshot(workdir)
  with pytest.raises(ValueError, match=r"holds a fine-tuning run; a pretraining run would"):
    pretrain.train(c, str(workdir))
  assert _snapshot(workdir) == before
  with pytest.raises(ValueError, match=r"holds a bert_jax bundle \(a model, not a run directory\)"):
    pretrain.train(c, a_bundle[0])


def test_overwrite_replaces_only_a_bundle(a_bundle, tmp_path, capsys):
  _, params, tokens = a_bundle
  mixed = tmp_path / "mixed"
  mixed.mkdir()
  (mixed / "notes.txt").write_text("mine")
  bundle.save_bundle(str(mixed / "other"), params, CONFIG, tokens, True)
  before = _snapshot(mixed)
  with pytest.raises(FileExistsError, match=r"mixed holds \['notes.txt', 'other'\], not part of "
                     "a bundle; --overwrite replaces only a bundle"):
    bundle.save_bundle(str(mixed), params, CONFIG, tokens, True, overwrite=True)
  # The command line refuses before the source is read (it does not exist here).
  with pytest.raises(SystemExit) as e:
    cli.run_tool(lambda: convert.main(["--from", "hf", "--src", str(tmp_path / "no_such"),
                                       "--dst", str(mixed), "--overwrite"]),
                 "bert_jax.convert")
  assert e.value.code == 2
  assert "not part of a bundle; --overwrite replaces only a bundle" in capsys.readouterr().err
  assert _snapshot(mixed) == before
  # A bundle with a note beside its files is not replaced either; a plain bundle is.
  replaced = tmp_path / "b"
  bundle.save_bundle(str(replaced), params, CONFIG, tokens, True)
  bundle.save_bundle(str(replaced), params, CONFIG, tokens, False, overwrite=True)
  assert bundle.load_bundle(str(replaced), with_params=False).lowercase is False
  (replaced / "notes.txt").write_text("mine")
  with pytest.raises(FileExistsError, match=r"holds \['notes.txt'\]"):
    convert.main(["--from", "hf", "--src", str(tmp_path), "--dst", str(replaced), "--overwrite"])
  assert (replaced / "notes.txt").read_text() == "mine"
