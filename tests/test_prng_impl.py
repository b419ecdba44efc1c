"""model.prng_impl: the dropout PRNG (issue 29). 'unsafe_rbg', the accelerators' default,
resumes exactly; threefry, the CPU's, is every earlier run's."""
import os

import pytest

from bert_jax import pretrain
from bert_jax.training import train_core
from tests.test_pretrain import _losses, corpus, small_config  # noqa: F401  (corpus: a fixture)


def test_unsafe_rbg_dropout_resumes_exactly_and_is_not_threefry(corpus, tmp_path):  # noqa: F811
  rbg = {"model.prng_impl": "unsafe_rbg", "model.dropout_rate": 0.1}
  straight = str(tmp_path / "straight")
  pretrain.train(small_config(corpus, **rbg), straight)
  resumed = str(tmp_path / "resumed")
  assert pretrain.train(small_config(corpus, **rbg), resumed, preempt_at_step=4)["step"] == 4
  pretrain.train(small_config(corpus, **rbg), resumed)
  a, b = _losses(straight), _losses(resumed)
  assert [a[s] for s in (5, 6)] == [b[s] for s in (5, 6)]
  threefry = str(tmp_path / "threefry")
  pretrain.train(small_config(corpus, **{"model.prng_impl": "threefry2x32",
                                         "model.dropout_rate": 0.1}), threefry)
  assert _losses(threefry)[1] != a[1]  # another dropout draw from the same initial params


def test_auto_is_threefry_on_the_cpu_and_rbg_on_accelerators():
  class Model(dict):
    prng_impl = "auto"
  assert train_core.prng_impl(Model(), "cpu") == "threefry2x32"
  assert train_core.prng_impl(Model(), "gpu") == train_core.prng_impl(Model(), "tpu") == "unsafe_rbg"


def test_an_unknown_prng_impl_is_a_config_error(corpus, tmp_path):  # noqa: F811
  with pytest.raises(ValueError, match=r"^bad config: model.prng_impl 'philox' not in"):
    pretrain.train(small_config(corpus, **{"model.prng_impl": "philox"}), str(tmp_path))
  assert not os.path.exists(tmp_path / "checkpoints")
