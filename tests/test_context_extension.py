"""ModernBERT's second phase, the context extension (configs/pretrain.py:VARIANT,recipe=modernbert,
phase2): its settings, the checks it shares with BERT's phase 2, and a tiny run from a phase-1
checkpoint."""
import jax
import numpy as np
import pytest

from bert_jax.checkpoints import loading
from bert_jax.data.sources import registry as source_registry
from bert_jax.pretraining import setup as pretrain_setup
from bert_jax.training import sharding
from tests.fixtures import pretraining


def _config(arg):
  return pretraining.config_module().get_config(arg)


def test_phase2_extends_base_and_large_to_8192_tokens_at_the_papers_rates():
  phase1 = _config("base,recipe=modernbert")
  base, large = _config("base,recipe=modernbert,phase2"), _config("large,recipe=modernbert,phase2")
  for c in (base, large):
    assert (c.seq_len, c.data.max_predictions_per_seq) == (8192, 2458)  # 30 % of 8,192
    assert (c.model_type, c.objective, c.data.packing, c.data.mask_prob) == (
        "modernbert", "mlm", True, 0.3)
    assert (c.optimizer.name, c.optimizer.schedule) == ("stable_adamw", "trapezoidal")
    assert c.batch_size == phase1.batch_size and c.init_checkpoint == ""
  assert (base.learning_rate, large.learning_rate) == (3e-4, 5e-5)
  # 300B tokens after 1.7T: phase 1's tokens x 3 / 17, at 8 x phase 1's length.
  assert base.total_steps == round(phase1.total_steps / 8 * 3 / 17) == 22_059
  assert base.warmup_steps == phase1.warmup_steps // 10
  # The model: the released positions, the global layers' RoPE base 160,000, the local 10,000.
  cfg = pretrain_setup.variant_model_config(base, 50368, 50283)
  assert (cfg.max_position_embeddings, cfg.rope_theta, cfg.local_rope_theta,
          cfg.local_window) == (8192, 160_000.0, 10_000.0, 128)
  # BERT's phase 2 is unchanged by the member's.
  bert = _config("base,phase2")
  assert (bert.seq_len, bert.data.max_predictions_per_seq, bert.total_steps) == (512, 80, 111_111)


@pytest.mark.parametrize("arg", ["base,phase2", "base,recipe=modernbert,phase2"])
def test_phase2_is_checked_as_bert_phase2_is(arg, tmp_path):
  """Both phase 2s pass check_config without init_checkpoint (aot_compile compiles them), and
  both refuse one that does not exist."""
  config = _config(arg)
  mesh = sharding.make_mesh((1, 1, 1), jax.devices()[:1])
  source = source_registry.get(config.data.source)
  pretrain_setup.check_config(config, mesh, source)
  config.init_checkpoint = str(tmp_path / "missing")
  with pytest.raises(ValueError, match="^bad config: init_checkpoint .*missing does not exist"):
    pretrain_setup.check_config(config, mesh, source)


@pytest.mark.parametrize("arg", ["tiny,phase2", "tiny,recipe=modernbert,phase2"])
def test_a_phase2_run_without_init_checkpoint_is_refused_before_any_work(arg, tmp_path):
  """A second phase from random weights is almost always a forgotten init_checkpoint: the run
  refuses it in one line, before the data is read or anything written, naming the way to do
  it on purpose."""
  from bert_jax.pretraining import run as pretrain_run  # pylint: disable=g-import-not-at-top
  config = _config(arg)
  phase1 = _config(arg.replace(",phase2", ""))
  assert config.needs_init_checkpoint and not phase1.needs_init_checkpoint
  with pytest.raises(ValueError, match=r"^bad config: this run continues another run's weights "
                     r".*--config.init_checkpoint=PHASE1_WORKDIR/checkpoints, or "
                     r"--config.needs_init_checkpoint=False to train from random weights$"):
    pretrain_run.train(config, str(tmp_path / "p2"))
  assert not (tmp_path / "p2").exists() or not any((tmp_path / "p2").iterdir())


def test_smaller_variants_extend_to_their_512_positions():
  c = _config("tiny,recipe=modernbert,phase2")
  phase1 = _config("tiny,recipe=modernbert")
  assert (c.seq_len, c.data.max_predictions_per_seq) == (512, 154)
  assert c.learning_rate == pytest.approx(phase1.learning_rate * 3 / 8)
  assert c.total_steps == round(phase1.total_steps * phase1.seq_len / 512 * 3 / 17)
  mesh = sharding.make_mesh((1, 1, 1), jax.devices()[:1])
  pretrain_setup.check_config(c, mesh, source_registry.get(c.data.source))


@pytest.mark.slow
def test_tiny_phase2_starts_from_the_phase1_checkpoint(corpus, tmp_path):
  """Phase 1 (seed 1) for 4 steps, then phase 2 (seed 0, longer rows) from its checkpoint for
  2: phase 2's params are phase 1's moved by two small steps, not seed 0's initialisation."""
  from bert_jax import pretrain  # pylint: disable=g-import-not-at-top

  def shrink(c, seq_len, steps):
    c.seq_len, c.batch_size, c.total_steps, c.warmup_steps = seq_len, 8, steps, 1
    c.log_every, c.checkpoint_every, c.fill_mask_example = 1, steps, ""
    c.data.source, c.data.files = "files", corpus
    c.data.max_predictions_per_seq = -(-seq_len * 3 // 10)

  phase1 = _config("tiny,recipe=modernbert")
  shrink(phase1, 32, 4)
  phase1.seed = 1
  pretrain.train_and_export(phase1, str(tmp_path / "p1"))
  phase2 = _config("tiny,recipe=modernbert,phase2")
  shrink(phase2, 64, 2)
  phase2.init_checkpoint = str(tmp_path / "p1" / "checkpoints")
  pretrain.train_and_export(phase2, str(tmp_path / "p2"))
  assert sorted(pretraining.logged_losses(str(tmp_path / "p2"))) == [1, 2]
  p1, p2 = (loading.load_pretrained(str(tmp_path / d / "export")) for d in ("p1", "p2"))
  assert p2.config.model_type == "modernbert" and p2.config.rope_theta == 160_000.0
  a, b = (np.asarray(p.params["bert"]["embeddings"]["word_embeddings"]["embedding"])
          for p in (p1, p2))
  # Another initialisation differs by about the entries' size (std 0.02 each): 1.1 x std.
  assert 0 < np.abs(a - b).mean() < 0.2 * a.std()
