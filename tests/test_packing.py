"""Packed fine-tuning: the same examples packed several to a row give the unpacked loss."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from bert_jax.batching import packing
from bert_jax.modeling import model as model_lib
from bert_jax.modeling.model_config import BertConfig
from bert_jax.tasks import task as task_lib

CLS, SEP = 2, 3


def _batch(lengths, seq_len, pad_id, seed=0):
  """One example per row: [CLS] a [SEP] b [SEP] with segment ids, labels and weights."""
  rng = np.random.default_rng(seed)
  n = len(lengths)
  ids = np.full((n, seq_len), pad_id, np.int32)
  mask = np.zeros((n, seq_len), np.int32)
  seg = np.zeros((n, seq_len), np.int32)
  for i, length in enumerate(lengths):
    ids[i, :length] = rng.integers(5, 60, length)
    ids[i, 0], ids[i, length - 1] = CLS, SEP
    mask[i, :length] = 1
    seg[i, length // 2:length] = 1
  return {"input_ids": ids, "input_mask": mask, "segment_ids": seg,
          "label_ids": rng.integers(0, 3, n).astype(np.int32), "weights": np.ones(n, np.float32)}


def test_pack_batch_layout():
  batch = _batch([5, 3, 7, 2, 6, 4, 8, 3], 8, pad_id=0)
  packed = packing.pack_batch(batch, seq_len=12, step=2, pad_id=0)
  # First-fit decreasing: 8 -> row 0, 7 -> 1, 6 -> 2, 5 -> 1, 4 -> 0, 3 and 3 -> 2, 2 -> 3;
  # each row lists its examples in index order: (4, 8) (5, 7) (3, 6, 3) (2) -> 4 rows.
  assert packed["input_ids"].shape == (4, 12)
  np.testing.assert_array_equal(packed["input_mask"][0], [1] * 4 + [2] * 8)
  np.testing.assert_array_equal(packed["position_ids"][1], list(range(5)) + list(range(7)))
  np.testing.assert_array_equal(packed["input_mask"][3], [1] * 2 + [0] * 10)
  flat = packed["input_ids"].reshape(-1)
  assert (flat[packed["cls_index"]] == CLS).all() and len(packed["cls_index"]) == 8
  np.testing.assert_array_equal(packed["label_ids"], batch["label_ids"])  # per example: as is
  for key in ("input_ids", "segment_ids"):  # each example's tokens, in order, at its start
    flat = packed[key].reshape(-1)
    for i, length in enumerate([5, 3, 7, 2, 6, 4, 8, 3]):
      start = packed["cls_index"][i]
      np.testing.assert_array_equal(flat[start:start + length], batch[key][i, :length])
  assert packing.row_step(32, 1) == 4 and packing.row_step(32, 8) == 8
  assert packing.row_step(8, 8) == 8


def test_first_fit_decreasing_fills_rows_that_greedy_order_leaves_part_empty():
  lengths = np.array([6, 7, 5, 4, 3, 3, 2, 10])  # 40 tokens; in order they need 5 rows of 10
  order, splits = packing.first_fit_decreasing(lengths, 10)
  assert len(splits) - 1 == 4  # 10 | 7 3 | 6 4 | 5 3 2
  assert sorted(order.tolist()) == list(range(8))
  for r in range(4):
    assert lengths[order[splits[r]:splits[r + 1]]].sum() <= 10
  assert len(packing.first_fit_decreasing(np.array([], np.int64), 10)[1]) == 1


# Each family and each head once: bert with cls, roberta (offset positions) with layers_attention,
# deberta (relative positions count columns, the same within a packed example) with mean.
@pytest.mark.slow
@pytest.mark.parametrize("family,head", [("bert", "cls"), ("roberta", "layers_attention"),
                                         ("deberta", "mean")])
def test_packed_and_unpacked_give_the_same_loss_and_gradients(family, head):
  """Sequence classification, every family and head: loss, per-example logits and gradients
  equal to float error."""
  kw = {"bert": {}, "roberta": dict(position_offset=2, pad_token_id=1),
        "deberta": dict(model_type="deberta-v2", absolute_positions=False, type_vocab_size=0,
                        max_relative_positions=40, position_buckets=8)}[family]
  cfg = BertConfig(vocab_size=64, hidden_size=32, num_layers=2, num_heads=2,
                   intermediate_size=64, max_position_embeddings=40, **kw)
  model = model_lib.BertForSequenceClassification(cfg, num_labels=3, head=head, head_layers=2)
  params = jax.jit(lambda r: model_lib.init_params(model, r))(jax.random.PRNGKey(0))
  task = task_lib.Task(
      task_lib.TaskModel("t", model, "classifier"), {}, ("label_ids",),
      lambda logits, b: optax.softmax_cross_entropy_with_integer_labels(logits, b["label_ids"]),
      [], "")
  objective = task_lib.objective(task)
  pad_id = cfg.pad_token_id
  batch = _batch([9, 4, 16, 5, 3, 12, 7, 16], 16, pad_id)
  packed = packing.pack_batch(batch, seq_len=32, step=2, pad_id=pad_id,
                              position_offset=cfg.position_offset)
  assert packed["input_ids"].shape[0] < 8  # really packed

  @jax.jit
  def loss_and_grads(params, b):
    def loss_fn(p):
      sums = objective.sums(p, b, None, True)
      return objective.loss(sums, objective.denominators(b))
    return jax.value_and_grad(loss_fn)(params)

  loss_a, grads_a = loss_and_grads(params, batch)
  loss_b, grads_b = loss_and_grads(params, packed)
  np.testing.assert_allclose(float(loss_b), float(loss_a), rtol=1e-5)
  for a, b in zip(jax.tree.leaves(grads_a), jax.tree.leaves(grads_b)):
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=2e-5, rtol=1e-4)
  logits = lambda b, **kw: model.apply(  # noqa: E731
      {"params": params}, b["input_ids"], b["input_mask"], b["segment_ids"], **kw)
  np.testing.assert_allclose(
      logits(packed, position_ids=jnp.asarray(packed["position_ids"]),
             cls_index=jnp.asarray(packed["cls_index"])), logits(batch), atol=1e-5)
