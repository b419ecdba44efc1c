"""Pretraining inputs that used to fail only after the work are refused at the start (issue 37)."""
import os

import pytest

from bert_jax import pretrain
from tests.test_pretrain import corpus, small_config  # noqa: F401  (corpus: a fixture)


@pytest.mark.parametrize("override, message", [
    ({"fill_mask_example": "no mask here"},
     r"bad config: fill_mask_example 'no mask here' has no \[MASK\]"),
    ({"eval_every": 2, "data.eval_every_nth_document": 0},
     r"bad config: eval_every 2 needs held-out data: data.eval_every_nth_document is 0"),
    ({"model.attention_impl": "cudnn"},  # issue 36: JAX's "cuDNN is not detected" traceback
     r"bad config: model.attention_impl='cudnn' needs an NVIDIA GPU; JAX runs on cpu here"),
])
def test_inputs_used_after_the_work_are_checked_first(corpus, tmp_path, override, message):  # noqa: F811
  with pytest.raises(ValueError, match=message):
    pretrain.train(small_config(corpus, **override), str(tmp_path))
  assert not os.path.exists(tmp_path / "checkpoints") or not os.listdir(tmp_path / "checkpoints")


def test_eval_every_without_held_out_documents_fails_before_the_first_step(corpus, tmp_path):  # noqa: F811
  """Was: the run trained to step eval_every, then failed."""
  config = small_config(corpus, eval_every=2, **{"data.eval_every_nth_document": 1000})
  with pytest.raises(ValueError, match="no held-out examples"):
    pretrain.train(config, str(tmp_path))
  assert not (tmp_path / "metrics.jsonl").exists() or not (tmp_path / "metrics.jsonl").read_text()
