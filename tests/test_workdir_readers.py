"""Reading a workdir whose run is still saving checkpoints: only committed steps are read.

A pretraining run with checkpoint_every=1 saves a step into `<step>.orbax-checkpoint-tmp*`,
renames it when done, and deletes the oldest in place. Whoever reads the workdir meanwhile
(embed, fill_mask, Encoder.load, an init_checkpoint) must get a whole step every time.
"""
import re
import shutil
import subprocess
import sys

from flax import traverse_util
import numpy as np
import pytest

from bert_jax.checkpoints import folder as checkpoint_folder
from bert_jax.checkpoints import loading
from bert_jax.checkpoints import run_checkpoints as ckpt_lib
from bert_jax.checkpoints import workdir_owner
from bert_jax.modeling import model as model_lib
from tests.fixtures.repo import ROOT, child_env
from tests.fixtures.tiny_encoder import CONFIG, VOCAB, random_params

# Saves step s with params random_params(CONFIG) + s, every step, keeping one: each checkpoint is
# deleted as soon as the next one is committed, until the file `stop` appears.
_SAVER = """
import os, sys
import jax
from bert_jax.checkpoints import loading
from bert_jax.checkpoints import run_checkpoints as ckpt_lib
from bert_jax.modeling import model as model_lib
from tests.fixtures.tiny_encoder import CONFIG, VOCAB, random_params
workdir, stop = sys.argv[1], sys.argv[2]
base = random_params(CONFIG)
meta = loading.model_description(CONFIG, VOCAB, lowercase=True)
ckpts = ckpt_lib.TrainCheckpoints(os.path.join(workdir, "checkpoints"), max_to_keep=1)
step = 0
while not os.path.exists(stop):
  ckpts.save(step, {"params": model_lib.stack_layers(jax.tree.map(lambda x: x + step, base))},
             meta)
  step += 1
ckpts.close()
"""


def _step_of(pretrained) -> int:
  return int(pretrained.source.rsplit("/", 1)[1])


def _assert_whole_step(pretrained, base):
  """The params are those saved at the step the source names, all of them."""
  step = _step_of(pretrained)
  want = traverse_util.flatten_dict(base, sep="/")
  got = traverse_util.flatten_dict(pretrained.params, sep="/")
  assert got.keys() == want.keys()
  for name, value in want.items():
    np.testing.assert_array_equal(got[name], value + step, err_msg=name)


@pytest.mark.slow  # about 100 reads while another process saves (about 30 s on 2 cores)
def test_reads_of_a_workdir_that_saves_every_step_all_return_a_whole_step(tmp_path):
  workdir, stop = tmp_path / "run", tmp_path / "stop"
  saver = subprocess.Popen([sys.executable, "-c", _SAVER, str(workdir), str(stop)], cwd=ROOT,
                           env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
  base = random_params(CONFIG)
  try:
    while not checkpoint_folder.committed_steps(workdir / "checkpoints"):
      assert saver.poll() is None, saver.stderr.read().decode()[-2000:]
    read = []
    for _ in range(100):
      pretrained = loading.load_pretrained(str(workdir))
      _assert_whole_step(pretrained, base)
      read.append(_step_of(pretrained))
    assert loading.read_model_config(str(workdir)).hidden_size == CONFIG.hidden_size
  finally:
    stop.touch()
    saver.wait(timeout=120)
  assert saver.returncode == 0, saver.stderr.read().decode()[-2000:]
  assert read == sorted(read) and read[-1] > read[0]  # the run saved while it was read


def _save_steps(directory, steps):
  ckpts = ckpt_lib.TrainCheckpoints(str(directory), max_to_keep=10, async_save=False)
  for step in steps:
    ckpts.save(step, {"params": model_lib.stack_layers(random_params(CONFIG))},
               loading.model_description(CONFIG, VOCAB, lowercase=True))
  ckpts.close()


def test_a_step_without_its_commit_marker_is_not_read(tmp_path):
  """A step folder that lost its commit marker and metadata (Orbax deleting it in place, or a
  copy of the workdir in progress) is no candidate: the newest committed step is read."""
  ckpt_dir = tmp_path / "run" / "checkpoints"
  _save_steps(ckpt_dir, [1, 2])
  for name in ("commit_success.txt", "_CHECKPOINT_METADATA", "meta"):
    path = ckpt_dir / "2" / name
    shutil.rmtree(path) if path.is_dir() else path.unlink()
  (ckpt_dir / "3.orbax-checkpoint-tmp").mkdir()  # a save in progress
  assert checkpoint_folder.committed_steps(ckpt_dir) == [1]
  assert loading.load_pretrained(str(tmp_path / "run")).source == f"{ckpt_dir}/1"
  assert loading.read_model_config(str(ckpt_dir)).hidden_size == CONFIG.hidden_size


@pytest.mark.parametrize("content, why", [
    (b"\x00\xff\xfe\x00binary", r"not UTF-8 text: byte 0xff at offset 1"),
    (b'{"program": "finetune", "sta', r"not valid JSON: Unterminated string"),
])
def test_an_unreadable_run_record_is_named_in_one_line(tmp_path, content, why):
  """A binary run.json fails like a truncated one: the file, what is wrong, what to do (the
  decoder's own message names no file)."""
  (tmp_path / "run.json").write_bytes(content)
  with pytest.raises(ValueError) as e:
    workdir_owner.read_run(str(tmp_path))
  message = str(e.value)
  assert "\n" not in message
  assert re.match(rf"{re.escape(str(tmp_path / 'run.json'))} is not a run record \({why}",
                  message), message
  assert message.endswith("move it away or give a new --workdir")


def test_a_run_that_outpaces_every_read_is_named_in_one_line_after_a_few_tries(
    tmp_path, monkeypatch):
  """Retries are bounded: a run that rotates each checkpoint away while it is read (a save
  faster than the read) ends the reader in one line saying so, not in Orbax's error."""
  ckpt_dir = tmp_path / "run" / "checkpoints"
  _save_steps(ckpt_dir, [1])
  calls = []

  def outpaced(ckpts, step, expect):
    del expect
    calls.append(step)
    shutil.copytree(ckpts.directory / str(step), ckpts.directory / str(step + 1))
    shutil.rmtree(ckpts.directory / str(step))
    raise FileNotFoundError(f"Checkpoint directory does not exist: {ckpts.directory}/{step}/state")
  monkeypatch.setattr(loading, "_load_checkpoint", outpaced)
  with pytest.raises(RuntimeError) as e:
    loading.load_pretrained(str(tmp_path / "run"))
  assert calls == list(range(1, loading.READ_ATTEMPTS + 1))
  assert "\n" not in str(e.value) and e.value.__cause__ is None
  assert str(e.value).startswith(f"checkpoint {tmp_path / 'run'}: the run saving into {ckpt_dir} "
                                 "deleted each checkpoint while it was read (steps 1, 2, 3")
