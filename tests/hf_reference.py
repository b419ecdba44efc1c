"""transformers Flax reference models with explicit random params, shared by the conversion tests."""
import jax
import numpy as np


def random_params(shapes, seed):
  """Random float32 params for a tree of shapes: N(0, 0.05), LayerNorm scales around 1."""
  rng = np.random.default_rng(seed)
  return jax.tree_util.tree_map_with_path(
      lambda path, x: (rng.normal(0, 0.05, x.shape)
                       + (path[-1].key == "scale")).astype(np.float32), shapes)


class Reference:
  """A transformers Flax model with explicit, perturbed params; init and forward jitted.

  Every tensor is perturbed so that biases and LayerNorm scales are not trivial.
  """

  def __init__(self, model_cls, config, seed):
    self.config = config
    self.model = model_cls(config, _do_init=False)
    shapes = jax.eval_shape(lambda r: self.model.init_weights(r, (1, 8)), jax.random.PRNGKey(0))
    self.params = random_params(shapes, seed)

  def __call__(self, ids, mask, seg=None, params=None, model=None, **kwargs):
    """The model's outputs; token_type_ids only when `seg` is given (DistilBERT has none)."""
    model = model or self.model
    if seg is not None:
      kwargs["token_type_ids"] = seg
    return jax.jit(lambda p: model(ids, attention_mask=mask, params=p, **kwargs))(
        self.params if params is None else params)
