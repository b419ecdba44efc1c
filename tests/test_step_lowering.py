"""What the accelerator's train step is made of, read from its lowering on the CPU:
no bfloat16 scatter-add (XLA:GPU runs one under contention as compare-and-swap loops, and it
rounds each added gradient) and no conditional (XLA:GPU reads a conditional's predicate on the
host, a synchronisation every step)."""
import re

import flax.linen as nn
import jax
import jax.numpy as jnp
import pytest

from bert_jax.modeling import model as model_lib
from bert_jax.modeling import model_config
from bert_jax.objectives import mlm_nsp
from bert_jax.training import optimizer
from bert_jax.training import train_core
from tests.fixtures.optimizer import opt_config


def _lowered_step(variant="base", batch=8, seq=128, predictions=20, dtype="bfloat16",
                  guard="select"):
  cfg = model_config.variant(variant, 30522, dtype=dtype)
  model = model_lib.BertForPreTraining(cfg, with_nsp=True)
  tx, sched = optimizer.make_optimizer(opt_config("adamw"), 1e-4, 10, 100)
  state = jax.eval_shape(lambda r: nn.unbox(train_core.init_state(
      mlm_nsp.init_fn(model, seq, predictions), tx, r)), jax.random.PRNGKey(0))
  i32 = lambda *shape: jax.ShapeDtypeStruct(shape, jnp.int32)  # noqa: E731
  batch = dict(input_ids=i32(batch, seq), input_mask=i32(batch, seq), segment_ids=i32(batch, seq),
               masked_lm_positions=i32(batch, predictions), masked_lm_ids=i32(batch, predictions),
               masked_lm_weights=jax.ShapeDtypeStruct((batch, predictions), jnp.float32),
               next_sentence_labels=i32(batch))
  step = train_core.make_train_step(mlm_nsp.objective(model), tx, sched, finite_guard=guard)
  return jax.jit(step).lower(state, batch)


def _scatter_types(text: str) -> list[str]:
  """The result type of every scatter in StableHLO text."""
  types = []
  for m in re.finditer(r'"?stablehlo\.scatter"?', text):
    sig = re.search(r"->\s*(tensor<[^>]*>)", text[m.end():])
    types.append(sig.group(1))
  return types


def test_the_bf16_base_train_step_has_no_bf16_scatter_add_and_no_conditional():
  text = _lowered_step().as_text()
  scatters = _scatter_types(text)
  assert scatters, "expected the embedding gradients' scatter-adds"
  assert not [t for t in scatters if "bf16" in t], scatters
  assert not re.search(r"stablehlo\.(case|if)\b", text)


def test_the_checks_see_a_bf16_scatter_and_a_conditional_where_there_is_one():
  """The two checks above can fail: the cond guard and a bf16 table's gather show up."""
  def f(table, ids, ok):
    y = jnp.take(table.astype(jnp.bfloat16), ids, axis=0).sum()
    return jax.lax.cond(ok, lambda: y, lambda: 0.0 * y)
  text = jax.jit(jax.grad(f)).lower(jnp.ones((10, 4)), jnp.zeros((3,), jnp.int32),
                                    True).as_text()
  assert any("bf16" in t for t in _scatter_types(text))
  assert re.search(r"stablehlo\.(case|if)\b", text)


@pytest.mark.slow
@pytest.mark.parametrize("guard, norms", [("select", 1), ("cond", 2)])
def test_the_gpu_step_computes_the_gradient_norm_once(guard, norms):
  """The step's norm and the clipping's are one computation once XLA has merged them; with
  the CPU's conditional the clipping's copy sits inside the branch and runs again."""
  hlo = _lowered_step("tiny", batch=4, seq=32, predictions=5, dtype="float32",
                      guard=guard).compile().as_text()
  assert len(re.findall(r"= f32\[\] sqrt\(", hlo)) == norms
