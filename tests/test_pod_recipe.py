"""configs/pretrain.py's large-batch recipe (`lamb_64k`): NVIDIA's LAMB phases for BERT-large."""
import math

import numpy as np
import pytest

from bert_jax.training import optimizer
from configs import pretrain as pretrain_config


@pytest.mark.parametrize("arg, batch, seq, steps, lr, warmup, predictions", [
    ("large,lamb_64k", 65_536, 128, 7_038, 6e-3, 2_001, 20),
    ("large,lamb_64k,phase2", 32_768, 512, 1_563, 4e-3, 201, 80),
])
def test_the_phases_are_nvidias(arg, batch, seq, steps, lr, warmup, predictions):
  c = pretrain_config.get_config(arg)
  assert (c.batch_size, c.seq_len, c.total_steps, c.learning_rate, c.warmup_steps) == (
      batch, seq, steps, lr, warmup)
  assert c.data.max_predictions_per_seq == predictions
  o = c.optimizer
  assert (o.name, o.b1, o.b2, o.eps, o.weight_decay, o.grad_clip_norm) == (
      "lamb", 0.9, 0.999, 1e-6, 0.01, 1.0)
  assert (o.schedule, o.poly_power) == ("polynomial", 0.5)
  assert (c.objective, c.variant) == ("mlm_nsp", "large")


def test_the_option_leaves_every_other_setting_alone():
  plain, lamb = pretrain_config.get_config("large").to_dict(), pretrain_config.get_config(
      "large,lamb_64k").to_dict()
  changed = {k for k in plain if plain[k] != lamb[k]}
  assert changed == {"batch_size", "total_steps", "learning_rate", "warmup_steps", "optimizer"}
  assert pretrain_config.get_config("large,lamb_64k=false").to_dict() == plain
  # A family member's recipe keeps its model and objective under the large-batch schedule.
  roberta = pretrain_config.get_config("large,recipe=roberta,lamb_64k")
  assert (roberta.model_type, roberta.objective, roberta.batch_size) == ("roberta", "mlm", 65_536)


def test_after_warmup_the_schedule_is_nvidias_poly_curve_scaled():
  """NVIDIA's PolyWarmUpScheduler: peak x (1 - step / total)^0.5 after the warmup. Ours decays
  from the peak over the remaining steps: the same curve divided by (1 - warmup share)^0.5."""
  c = pretrain_config.get_config("large,lamb_64k")
  schedule = optimizer.learning_rate_schedule(c.learning_rate, c.warmup_steps, c.total_steps,
                                              c.optimizer.schedule, c.optimizer.poly_power)
  assert float(schedule(c.warmup_steps)) == pytest.approx(6e-3)
  assert float(schedule(c.total_steps)) == pytest.approx(0.0, abs=1e-12)
  share = c.warmup_steps / c.total_steps
  for step in (2_500, 4_000, 6_000, 7_000):
    nvidia = 6e-3 * (1 - step / c.total_steps) ** 0.5
    assert float(schedule(step)) * math.sqrt(1 - share) == pytest.approx(nvidia, rel=1e-5)
  # During the warmup both rise linearly to the peak.
  assert np.isclose(float(schedule(1_000)), 6e-3 * 1_000 / c.warmup_steps)
