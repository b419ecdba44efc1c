"""The attention's query, key and value projections as one GEMM over separate params
(model.qkv_projection='fused').

Checkpoints, conversions and exports keep BERT's layout, attention/{query,key,value}/{kernel,
bias}; the step stacks the three kernels into one [hidden, 3, heads, head_dim] operand and
projects once. Three [hidden, hidden] GEMMs become one three times as wide: one launch and one
read of the activations instead of three, and a shape the GPU's GEMM tiles fill better. The
stack is a copy of the kernels each step (3 x hidden^2 values a layer, small beside the GEMM),
and its transpose hands each kernel its slice of the gradient, so training sees the same
gradients as with three projections.
"""
from typing import Optional, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from bert_jax.modeling import layers

Params = tuple[jax.Array, Optional[jax.Array]]


class ProjectionParams(nn.Module):
  """The kernel and bias of a layers.DenseGeneral of the same name, declared as it declares
  them (names, shapes, logical axes, initialisers, in that order: the same init), not applied.

  Attributes:
    features: output feature shape, e.g. (heads, head_dim).
    kernel_axes: logical names of the kernel, input axis then output axes.
  """
  features: Sequence[int]
  kernel_axes: Sequence[str]
  use_bias: bool = True
  param_dtype: layers.Dtype = jnp.float32
  kernel_init: layers.Initializer = layers.kernel_init(0.02)

  @nn.compact
  def __call__(self, in_features: int) -> Params:
    """(kernel [in_features, *features], bias [*features] or None)."""
    features = tuple(self.features)
    kernel = self.param(
        "kernel", nn.with_logical_partitioning(self.kernel_init, tuple(self.kernel_axes)),
        (in_features,) + features, self.param_dtype)
    bias = None
    if self.use_bias:
      bias_axes = tuple(self.kernel_axes[-len(features):])
      bias = self.param("bias", nn.with_logical_partitioning(nn.initializers.zeros, bias_axes),
                        features, self.param_dtype)
    return kernel, bias


def project(x: jax.Array, params: Sequence[Params], dtype: layers.Dtype) -> list[jax.Array]:
  """x [..., in] through every projection of `params` with one GEMM.

  Args:
    x: [..., in_features].
    params: (kernel [in, *features], bias [*features] or None) of each projection, all of
      the same shapes (ProjectionParams').
    dtype: the compute dtype; kernels and biases are cast before they are stacked.

  Returns:
    Each projection's [..., *features], as layers.DenseGeneral computes it (x @ kernel + bias
    in `dtype`).
  """
  kernels = jnp.stack([k.astype(dtype) for k, _ in params], axis=1)  # [in, n, *features]
  # The kernel keeps its feature axes (no reshape to 2-D): a heads axis sharded over the
  # tensor axis stays sharded, where a flattened [in, n x heads x head_dim] would not be
  # (its heads are not one block of the flat axis). XLA folds them into one GEMM.
  y = jax.lax.dot_general(x.astype(dtype), kernels, (((x.ndim - 1,), (0,)), ((), ())))
  if params[0][1] is not None:
    y = y + jnp.stack([b.astype(dtype) for _, b in params])  # [..., n, *features]
  axis = y.ndim - (kernels.ndim - 2) - 1  # the projections' axis, before the features
  return [jax.lax.index_in_dim(y, i, axis, keepdims=False) for i in range(len(params))]
