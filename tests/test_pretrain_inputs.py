"""Pretraining inputs that the run would use only after the work are checked at its start."""
import logging
import os

import pytest

from bert_jax import pretrain
from tests.fixtures.pretraining import small_config


@pytest.mark.parametrize("override, message", [
    ({"fill_mask_example": "no mask here"},
     r"bad config: fill_mask_example 'no mask here' has no \[MASK\]"),
    ({"eval_every": 2, "data.eval_every_nth_document": 0},
     r"bad config: eval_every 2 needs held-out data: data.eval_every_nth_document is 0"),
    ({"model.attention_impl": "cudnn"},  # one line, not JAX's "cuDNN is not detected" traceback
     r"bad config: model.attention_impl='cudnn' needs an NVIDIA GPU; JAX runs on cpu here"),
])
def test_inputs_used_after_the_work_are_checked_first(corpus, tmp_path, override, message):
  with pytest.raises(ValueError, match=message):
    pretrain.train(small_config(corpus, **override), str(tmp_path))
  assert not os.path.exists(tmp_path / "checkpoints") or not os.listdir(tmp_path / "checkpoints")


def test_eval_every_without_held_out_documents_fails_before_the_first_step(corpus, tmp_path):
  """Checked before the first step, not when the run reaches step eval_every."""
  config = small_config(corpus, eval_every=2, **{"data.eval_every_nth_document": 1000})
  with pytest.raises(ValueError, match="no held-out examples"):
    pretrain.train(config, str(tmp_path))
  assert not (tmp_path / "metrics.jsonl").exists() or not (tmp_path / "metrics.jsonl").read_text()


def test_the_fallback_warning_of_a_truncated_state_file_is_one_line(tmp_path, capsys, caplog):
  """The warning is the cause's first line, without TensorStore's multi-line spec dump."""
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  # pylint: disable-next=g-import-not-at-top
  from bert_jax.checkpoints import run_checkpoints as ckpt_lib
  state = {"w": jax.numpy.ones((30522, 128)), "step": jax.numpy.int32(0)}
  ckpts = ckpt_lib.TrainCheckpoints(str(tmp_path / "checkpoints"), async_save=False)
  for step in (1, 2):
    ckpts.save(step, state, {"step": step})
  ckpts.wait()
  files = [f for f in (tmp_path / "checkpoints" / "2" / "state").rglob("*") if f.is_file()]
  largest = max(files, key=lambda f: f.stat().st_size)
  largest.write_bytes(largest.read_bytes()[:100])
  one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype,
                                                         sharding=one), state)
  capsys.readouterr()
  with caplog.at_level(logging.INFO, logger="absl"):
    step, _, _ = ckpts.restore_latest(abstract)
  ckpts.close()
  assert step == 1
  lines = [l for l in capsys.readouterr().out.splitlines() if l.strip()]
  assert len(lines) == 1 and lines[0].startswith("WARNING: checkpoint step 2 unreadable (")
  assert "TensorStore" not in lines[0] and "moved to" in lines[0]
  warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
  assert not any("TensorStore" in r.getMessage() for r in warnings)


def test_one_line_cause_drops_the_tensorstore_dump():
  # pylint: disable-next=g-import-not-at-top
  from bert_jax.checkpoints import folder as checkpoint_folder
  e = ValueError("Encountered error reading index (0, 1). See full TensorStore details: "
                 "<bound method spec of TensorStore({\n  'driver': 'zarr',\n  ...})>")
  assert checkpoint_folder.one_line_cause(e) == "ValueError: Encountered error reading index (0, 1)."
