"""Sequence heads of fine-tuning (configs/glue.py `head`): cls, mean, layers_attention."""
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bert_jax.modeling import model as model_lib
from bert_jax.modeling.model_config import BertConfig
from bert_jax.tasks.glue import task as glue_task

CONFIG = BertConfig(vocab_size=64, hidden_size=32, num_layers=3, num_heads=2,
                    intermediate_size=64, max_position_embeddings=32, attention_impl="xla")


def _inputs():
  rng = np.random.default_rng(0)
  ids = rng.integers(5, 64, (3, 12)).astype(np.int32)
  mask = np.ones_like(ids)
  mask[1, 7:] = 0
  mask[2, 4:] = 0
  return ids, mask, np.zeros_like(ids)


class _BeforeHeads(nn.Module):
  """BertForSequenceClassification as it was before `head` existed (the reference for cls)."""
  config: BertConfig
  num_labels: int

  @nn.compact
  def __call__(self, input_ids, input_mask, segment_ids, deterministic=True):
    c = self.config
    out = model_lib.BertModel(c, name="bert")(
        input_ids, input_mask, segment_ids, None, deterministic,
        output_positions=jnp.zeros((input_ids.shape[0], 1), jnp.int32))
    return model_lib._dropout_dense(c, out["pooled_output"], self.num_labels, "classifier",
                                    deterministic)


@pytest.fixture(scope="module")
def models():
  """head -> (model, params), initialised with the same rng."""
  out = {}
  for head in model_lib.SEQUENCE_HEADS:
    model = model_lib.BertForSequenceClassification(CONFIG, num_labels=3, head=head,
                                                    head_layers=2)
    out[head] = model, jax.jit(lambda r, m=model: model_lib.init_params(m, r))(
        jax.random.PRNGKey(0))
  return out


def test_cls_is_the_head_before_heads_existed(models):
  model, params = models["cls"]
  assert model_lib.BertForSequenceClassification(CONFIG, num_labels=3).head == "cls"
  before = _BeforeHeads(CONFIG, num_labels=3)
  before_params = jax.jit(lambda r: model_lib.init_params(before, r))(jax.random.PRNGKey(0))
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(before_params)):
    np.testing.assert_array_equal(a, b)
  assert jax.tree.structure(params) == jax.tree.structure(before_params)
  ids, mask, seg = _inputs()
  np.testing.assert_array_equal(jax.jit(model.apply)({"params": params}, ids, mask, seg),
                                jax.jit(before.apply)({"params": params}, ids, mask, seg))


def test_params_of_each_head(models):
  assert "pooler" in models["cls"][1]["bert"] and "aggregation" not in models["cls"][1]
  assert "pooler" not in models["mean"][1]["bert"] and "aggregation" not in models["mean"][1]
  params = models["layers_attention"][1]
  assert "pooler" not in params["bert"]
  assert params["aggregation"]["query"].shape == (CONFIG.hidden_size,)
  ids, mask, seg = _inputs()
  for head, (model, params) in models.items():
    assert model.apply({"params": params}, ids, mask, seg).shape == (3, 3), head


def test_mean_and_layers_attention_read_what_they_say(models):
  ids, mask, seg = _inputs()
  encoder = model_lib.BertModel(CONFIG, add_pooler=False)

  def head_input(head):  # the logits, the classifier's kernel, the params
    model, params = models[head]
    logits = np.asarray(model.apply({"params": params}, ids, mask, seg))
    return logits, np.asarray(params["classifier"]["kernel"]), params

  # mean: the classifier sees the average of the last layer over real tokens only.
  logits, kernel, params = head_input("mean")
  seq = encoder.apply({"params": params["bert"]}, ids, mask, seg)["sequence_output"]
  want = np.stack([np.asarray(seq)[i, :mask[i].sum()].mean(0) for i in range(3)])
  np.testing.assert_allclose(logits, want @ kernel + params["classifier"]["bias"], atol=1e-5)
  # layers_attention with the query at its initial zero: the mean of the last 2 [CLS].
  logits, kernel, params = head_input("layers_attention")
  hidden = encoder.apply({"params": params["bert"]}, ids, mask, seg,
                         output_hidden_states=True)["hidden_states"]
  want = (np.asarray(hidden[-1])[:, 0] + np.asarray(hidden[-2])[:, 0]) / 2
  np.testing.assert_allclose(logits, want @ kernel + params["classifier"]["bias"], atol=1e-5)


def test_layers_attention_query_learns(models):
  """The query gets a gradient through the model, equal to the loss's slope, and a
  nonzero query weighs the layers per example."""
  model, params = models["layers_attention"]
  ids, mask, seg = _inputs()
  labels = jnp.array([0, 1, 2])

  def loss(p):
    logits = model.apply({"params": p}, ids, mask, seg)
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), labels[:, None], 1))
  query_grad = np.asarray(jax.jit(jax.grad(loss))(params)["aggregation"]["query"])
  # Small at init (layers of a std-0.02 random encoder barely differ) but there.
  assert np.all(np.isfinite(query_grad)) and np.abs(query_grad).max() > 0

  # On vectors whose layers differ: the gradient is the slope along it (finite difference).
  attention = model_lib.LayerAttention(CONFIG)
  vectors = jax.random.normal(jax.random.PRNGKey(1), (4, 3, CONFIG.hidden_size))
  target = jax.random.normal(jax.random.PRNGKey(2), (4, CONFIG.hidden_size))
  mix_loss = lambda q: jnp.sum(  # noqa: E731
      jnp.square(attention.apply({"params": {"query": q}}, vectors) - target))
  query = jnp.zeros(CONFIG.hidden_size)
  grad = np.asarray(jax.grad(mix_loss)(query))
  assert np.linalg.norm(grad) > 1e-2
  step = 1e-2 * grad / np.linalg.norm(grad)
  slope = (float(mix_loss(query + step)) - float(mix_loss(query - step))) / (2e-2)
  np.testing.assert_allclose(slope, np.linalg.norm(grad), rtol=0.02)
  # A query along one example's third layer vector moves that example's output towards it.
  out = np.asarray(attention.apply({"params": {"query": 10 * vectors[0, 2]}}, vectors))
  mean = np.asarray(vectors.mean(1))
  assert np.abs(out[0] - vectors[0, 2]).max() < np.abs(mean[0] - vectors[0, 2]).max()


def test_bad_head_config_is_one_clear_error():
  with pytest.raises(ValueError, match="head 'max' is not one of"):
    glue_task.sequence_model(CONFIG, 2, "max")
  with pytest.raises(ValueError, match=r"head_layers must be in 1..3 .*got 4"):
    glue_task.sequence_model(CONFIG, 2, "layers_attention", 4)
  assert glue_task.sequence_model(CONFIG, 2, "mean", 4).head == "mean"  # head_layers unused


def test_encoder_classifies_with_the_head_the_export_records(tmp_path):
  """A layers_attention export: Encoder.classify builds that head (bundle.json's head)."""
  from bert_jax.checkpoints import bundle  # pylint: disable=g-import-not-at-top
  from bert_jax import Encoder  # pylint: disable=g-import-not-at-top
  from tests.fixtures.tiny_encoder import CONFIG as SMALL  # pylint: disable=g-import-not-at-top
  from tests.fixtures.tiny_encoder import VOCAB, random_params, token_ids  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(3)
  params = {**random_params(SMALL, heads=()),
            "aggregation": {"query": rng.normal(0, 1, (SMALL.hidden_size,)).astype(np.float32)},
            "classifier": {"kernel": rng.normal(0, 1, (SMALL.hidden_size, 2)).astype(np.float32),
                           "bias": np.zeros(2, np.float32)}}
  path = str(tmp_path / "export")
  bundle.save_bundle(path, params, SMALL, VOCAB, lowercase=True,
                     info={"task": "mrpc", "head": "layers_attention", "head_layers": 2})
  pairs = [("the cat sat", "a dog ran far"), ("hello world", "the big red mat .")]
  got = Encoder.load(path).classify(pairs, max_length=16)
  apply = jax.jit(glue_task.sequence_model(SMALL, 2, "layers_attention", 2).apply)
  for (a, b), (label, prob) in zip(pairs, got):  # each pair alone, padding masked out
    ids, mask, seg = np.zeros((3, 1, 16), np.int32)
    pieces = token_ids(a) + token_ids(b)[1:]
    ids[0, :len(pieces)], mask[0, :len(pieces)] = pieces, 1
    seg[0, len(a.split()) + 2:len(pieces)] = 1
    logits = np.asarray(apply({"params": params}, ids, mask, seg))[0]
    probs = np.exp(logits - logits.max()) / np.exp(logits - logits.max()).sum()
    assert label == str(int(np.argmax(probs))) and prob == pytest.approx(probs.max(), abs=1e-5)


def test_encoder_without_a_recorded_task_says_what_is_missing(tmp_path):
  """A classifier without the task that names its labels (a run's checkpoint, not its export):
  the message says that, not that the classifier is missing."""
  from bert_jax.checkpoints import bundle  # pylint: disable=g-import-not-at-top
  from bert_jax import Encoder  # pylint: disable=g-import-not-at-top
  from tests.fixtures.tiny_encoder import CONFIG as SMALL  # pylint: disable=g-import-not-at-top
  from tests.fixtures.tiny_encoder import VOCAB, random_params  # pylint: disable=g-import-not-at-top
  params = {**random_params(SMALL),
            "classifier": {"kernel": np.zeros((SMALL.hidden_size, 2), np.float32),
                           "bias": np.zeros(2, np.float32)}}
  bundle.save_bundle(str(tmp_path / "untasked"), params, SMALL, VOCAB, lowercase=True)
  with pytest.raises(ValueError, match=r"has a classifier but no GLUE task recorded"):
    Encoder.load(str(tmp_path / "untasked")).classify(["the cat sat"])
  bundle.save_bundle(str(tmp_path / "plain"), random_params(SMALL), SMALL, VOCAB, lowercase=True)
  with pytest.raises(ValueError, match=r"has no classifier of a GLUE task \(heads: \['pooler'\]\)"):
    Encoder.load(str(tmp_path / "plain")).classify(["the cat sat"])


def test_encoder_methods_refuse_arguments_that_would_give_wrong_or_no_results(tmp_path):
  """One string where a list is due (read as one text per character), an empty list, a batch
  size under 1, a max_length beyond the position table (NaN probabilities), a top_k beyond
  the vocabulary, an empty context: each a ValueError naming the method, before any compute."""
  from bert_jax.checkpoints import bundle  # pylint: disable=g-import-not-at-top
  from bert_jax import Encoder  # pylint: disable=g-import-not-at-top
  from tests.fixtures.tiny_encoder import CONFIG as SMALL  # pylint: disable=g-import-not-at-top
  from tests.fixtures.tiny_encoder import VOCAB, random_params  # pylint: disable=g-import-not-at-top
  params = {**random_params(SMALL, heads=("pooler", "mlm")),
            "classifier": {"kernel": np.zeros((SMALL.hidden_size, 2), np.float32),
                           "bias": np.zeros(2, np.float32)}}
  bundle.save_bundle(str(tmp_path / "b"), params, SMALL, VOCAB, lowercase=True,
                     info={"task": "mrpc", "head": "cls"})
  enc = Encoder.load(str(tmp_path / "b"))
  cases = [
      (lambda: enc.classify("the cat sat"), r"classify: texts is one string; give a list"),
      (lambda: enc.embed("the cat sat"), r"embed: texts is one string"),
      (lambda: enc.classify([]), r"classify: no texts"),
      (lambda: enc.classify([["the cat", "sat"]]), r"classify: text 0 is a list; give each "
                                                   r"text as a string, or a pair as a tuple"),
      (lambda: enc.embed(["the cat", ["a", "b"]]), r"embed: text 1 is a list"),
      (lambda: enc.fill_mask([]), r"fill_mask: no texts"),
      (lambda: enc.classify(["the cat"], batch_size=0), r"classify: batch_size 0 must be >= 1"),
      (lambda: enc.classify(["the cat"], max_length=1000),
       rf"classify: max_length 1000 must be in \[2, {SMALL.max_position_embeddings}\]"),
      (lambda: enc.fill_mask("the [MASK] sat", top_k=10**6),
       rf"fill_mask: top_k 1000000 must be in \[1, {len(VOCAB)}\]"),
  ]
  for call, message in cases:
    with pytest.raises(ValueError, match=message):
      call()
  assert len(enc.classify(["the cat sat"], max_length=16)) == 1  # within the limits: answered
