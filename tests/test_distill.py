"""DistilBERT's objective: the student's init from the teacher, the loss terms, the frozen teacher."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.checkpoints import loading
from bert_jax.modeling import model as model_lib
from bert_jax.modeling import model_config
from bert_jax.objectives import distill
from bert_jax.training import train_core
from tests.objective_batches import LEN, P, VOCAB, masked_batch


@functools.lru_cache
def _teacher(layers=4):
  config = model_config.BertConfig(vocab_size=VOCAB, hidden_size=32, num_layers=layers,
                                   num_heads=2, intermediate_size=64, max_position_embeddings=LEN)
  model = model_lib.BertForPreTraining(config, with_nsp=False)
  params = jax.jit(lambda rng: model_lib.init_params(model, rng, seq_len=LEN, num_predictions=P))(
      jax.random.PRNGKey(0))
  return model, loading.Pretrained(jax.device_get(params), config, tuple(map(str, range(VOCAB))),
                                   True, "teacher")


def test_student_takes_every_other_teacher_layer():
  assert [distill.teacher_layer_of(i, 12, 6) for i in range(6)] == [0, 2, 4, 6, 8, 10]
  assert [distill.teacher_layer_of(i, 12, 4) for i in range(4)] == [0, 3, 6, 9]
  assert distill.student_layers(12, 0) == 6 and distill.student_layers(2, 0) == 1
  assert distill.student_layers(12, 4) == 4
  _, teacher = _teacher(4)
  student = distill.student_from_teacher(teacher, 2)
  assert student.config.num_layers == 2 and student.config.hidden_size == 32
  enc, t_enc = student.params["bert"]["encoder"], teacher.params["bert"]["encoder"]
  assert sorted(enc) == ["layer_0", "layer_1"]
  for mine, theirs in (("layer_0", "layer_0"), ("layer_1", "layer_2")):
    for a, b in zip(jax.tree.leaves(enc[mine]), jax.tree.leaves(t_enc[theirs])):
      np.testing.assert_array_equal(a, b)
  np.testing.assert_array_equal(student.params["mlm_output_bias"], teacher.params["mlm_output_bias"])


def test_loss_terms_vanish_for_a_copy_and_no_gradient_reaches_the_teacher():
  model, teacher = _teacher(2)
  objective = distill.objective(model, model, temperature=2.0, alpha_ce=5.0, alpha_mlm=2.0,
                                alpha_cos=1.0)
  batch = masked_batch()
  params = jax.tree.map(jnp.asarray, teacher.params)

  @jax.jit
  def sums_and_grads(student, frozen):
    def loss(p, f):
      sums = objective.sums(train_core.with_frozen(p, f), batch, None, True)
      return objective.loss(sums, objective.denominators(batch)), sums
    return loss(student, frozen)[1], jax.grad(lambda f: loss(student, f)[0])(frozen)

  # A student equal to its teacher: KL and cosine distance are 0, the MLM terms agree.
  sums, grad_frozen = sums_and_grads(params, params)
  out = distill.summarize(jax.device_get(sums), 2.0, 5.0, 2.0, 1.0)
  assert abs(out["distill_loss"]) < 1e-5 and abs(out["cos_loss"]) < 1e-5
  assert out["student_mlm_accuracy"] == out["teacher_mlm_accuracy"]
  assert out["loss"] == pytest.approx(2.0 * out["mlm_loss"], rel=1e-5)
  assert all(float(jnp.max(jnp.abs(g))) == 0.0 for g in jax.tree.leaves(grad_frozen))
  # Another student: every term is positive, the KL is T^2-scaled into distill_loss.
  other = jax.jit(lambda rng: model_lib.init_params(model, rng, seq_len=LEN, num_predictions=P))(
      jax.random.PRNGKey(1))
  out = distill.summarize(jax.device_get(sums_and_grads(other, params)[0]), 2.0, 5.0, 2.0, 1.0)
  assert out["distill_loss"] > 1e-3 and out["cos_loss"] > 1e-3
  assert out["loss"] == pytest.approx(5.0 * out["distill_loss"] + 2.0 * out["mlm_loss"]
                                      + out["cos_loss"], rel=1e-5)


def test_teacher_without_mlm_head_or_with_another_vocab_is_one_clear_error(monkeypatch):
  _, teacher = _teacher(2)
  encoder_only = loading.Pretrained({"bert": teacher.params["bert"]}, teacher.config,
                                    teacher.vocab, True, "enc")
  monkeypatch.setattr(loading, "load_pretrained", lambda path: encoder_only)
  with pytest.raises(ValueError, match=r"teacher_checkpoint T has no MLM head"):
    distill.load_teacher("T", 1)
  monkeypatch.setattr(loading, "load_pretrained", lambda path: teacher)
  other_vocab = list(teacher.vocab)
  other_vocab[7] = "seven"
  with pytest.raises(ValueError, match=r"its vocab \(64 tokens\) is not the data's tokenizer's "
                                       r"\(64 tokens; first difference at id 7\)"):
    distill.load_teacher("T", 1, other_vocab)
  with pytest.raises(ValueError, match=r"distill.student_layers 3 must be in \[1, 2\]"):
    distill.load_teacher("T", 3)
  loaded = distill.load_teacher("T", 1, teacher.vocab)
  assert sorted(loaded.params) == ["bert", "mlm", "mlm_output_bias"]


@pytest.mark.parametrize("recipe, student_layers", [("deberta", 1), ("modernbert", 1),
                                                    ("albert", 2)])
def test_the_student_of_every_member_starts_whole_from_its_teacher(recipe, student_layers):
  """The student's params are exactly those its model has, none left to a fresh init: DeBERTa's
  relative-position table and its norm and ModernBERT's final norm come from the teacher, and
  ALBERT's one shared layer (there is no layer_1 to pick) is the teacher's."""
  from bert_jax.pretraining import setup as pretrain_setup  # pylint: disable=g-import-not-at-top
  from tests.fixtures import pretraining  # pylint: disable=g-import-not-at-top
  config = pretraining.config_module().get_config(f"tiny,recipe={recipe}")
  cfg = pretrain_setup.variant_model_config(config, VOCAB, 0)

  def init(model):
    return jax.jit(lambda rng: model_lib.init_params(model, rng, seq_len=LEN, num_predictions=P))(
        jax.random.PRNGKey(0))
  emd = recipe == "deberta"  # a teacher trained with the enhanced mask decoder
  params = jax.device_get(init(model_lib.BertForPreTraining(cfg, with_nsp=False, emd=emd)))
  teacher = loading.Pretrained(params, cfg, tuple(map(str, range(VOCAB))), True, "teacher")
  student = distill.student_from_teacher(teacher, student_layers)
  model = model_lib.BertForPreTraining(student.config, with_nsp=False, emd=emd)
  want = jax.eval_shape(lambda: init(model))
  assert jax.tree.structure(student.params) == jax.tree.structure(want)
  assert [np.shape(x) for x in jax.tree.leaves(student.params)] == [
      x.shape for x in jax.tree.leaves(want)]
  outside = {k for k in params["bert"]["encoder"] if not k.startswith("layer_")}
  assert outside or recipe == "albert"
  for key in outside:
    for a, b in zip(jax.tree.leaves(student.params["bert"]["encoder"][key]),
                    jax.tree.leaves(params["bert"]["encoder"][key])):
      np.testing.assert_array_equal(a, b)
