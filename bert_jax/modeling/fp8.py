"""FP8 matmuls in the encoder's dense layers (model.fp8), and the state they keep.

With BertConfig.fp8 each encoder layer's dense layers (query, key, value or the fused qkv,
the attention output, the feed-forward's intermediate and output) multiply through flax's
`fp8_ops.Fp8DirectDotGeneralOp`: the input and the kernel are quantized to float8_e4m3fn and
the gradient of the output to float8_e5m2, each with a per-tensor scale from the largest
|value| of its last `amax_history_length` steps (delayed scaling, Transformer Engine's
recipe). XLA:GPU rewrites that quantize, dot, dequantize pattern into cuBLASLt FP8 GEMMs on
compute capability 8.9 and newer (Ada, Hopper, Blackwell). Elsewhere the same program runs
the quantize-dequantize numerics in the compute dtype: on the CPU that is what the tests
check, and a CPU run (a smoke test of the recipe) is allowed. The embeddings and the heads
stay in the compute dtype: the embeddings are gathers, not GEMMs, and the heads are a few
percent of the FLOPs whose outputs (logits) FP8 would round the most.

The scales and amax histories are flax's `_overwrite_with_gradient` collection
(fp8_ops.OVERWRITE_WITH_GRADIENT, `FP8_STATE` here). A run keeps that collection in the
train state's params, under that key beside the model's own groups, so it is checkpointed,
restored (a resume is bitwise exact) and placed on the mesh (replicated: no logical axis
names) like the params. Its "gradient" is its next value: the forward pass computes it and
the custom VJPs hand it back, so the optimizer never sees it (no update, no weight decay)
and train_core overwrites it with that gradient. A layer applied twice in one step (an
ALBERT layer, DeBERTa's projections of the relative embeddings, the last layer rerun by the
enhanced mask decoder) would add the two next values; entering the loss as flax's
fp8_meta dtype (`max_accumulated`) they are combined by max, as flax designed that dtype
for, and microbatches are combined the same way (`add_grads`).

Exports and the params fine-tuning loads carry no FP8 state (`split`): inference and
fine-tuning compute in the model's compute dtype, and the trained float32 weights do not
depend on the scales.
"""
from typing import Any, Optional

import jax
import jax.numpy as jnp
from flax.linen import fp8_ops

FP8_STATE = fp8_ops.OVERWRITE_WITH_GRADIENT

# The FP8 GEMMs XLA:GPU emits need float8 tensor cores: compute capability 8.9 (Ada) or newer.
MIN_COMPUTE_CAPABILITY = (8, 9)


def split(params: Any) -> tuple[Any, Optional[Any]]:
  """(the trained params, the FP8 state or None) of a train state's params."""
  if not isinstance(params, dict) or FP8_STATE not in params:
    return params, None
  return {k: v for k, v in params.items() if k != FP8_STATE}, params[FP8_STATE]


def join(trained: Any, fp8_state: Optional[Any]) -> Any:
  """The inverse of `split`: the train state's params."""
  return trained if fp8_state is None else {**trained, FP8_STATE: fp8_state}


def state_params(variables: dict) -> dict:
  """A train state's params from model.init's variables: 'params', and the FP8 state under
  FP8_STATE when the model has one."""
  return join(variables["params"], variables.get(FP8_STATE))


def variables(params: Any) -> dict:
  """model.apply's variables from a train state's params."""
  trained, fp8_state = split(params)
  return {"params": trained} if fp8_state is None else {"params": trained, FP8_STATE: fp8_state}


def max_accumulated(params: Any) -> Any:
  """`params` with the FP8 state as flax's fp8_meta dtype (fp8_ops.fm32), for the loss a
  gradient is taken of: the next values of a layer applied several times in one pass then
  combine by max (the largest amax), where float32 gradients would add up. The gradient
  comes back float32. Under jit only: JAX has no eager arrays of that dtype."""
  trained, fp8_state = split(params)
  if fp8_state is None:
    return params
  return join(trained, jax.tree.map(
      lambda x: jax.lax.convert_element_type(x, fp8_ops.fm32), fp8_state))


def add_grads(a: Any, b: Any) -> Any:
  """Two microbatches' gradients: the params' added, the FP8 state's next values by max (the
  amax of the whole batch, as one pass over it would record)."""
  (ta, fa), (tb, fb) = split(a), split(b)
  return join(jax.tree.map(jnp.add, ta, tb),
              None if fa is None else jax.tree.map(jnp.maximum, fa, fb))


def unsupported(backend: str, compute_capability: Optional[str]) -> Optional[str]:
  """Why FP8 cannot run on `backend` (None: it can).

  Args:
    backend: 'cpu', 'gpu' or 'tpu'.
    compute_capability: a CUDA device's, e.g. '9.0' (None: not an NVIDIA GPU, or not known
      here, as when a GPU program is compiled ahead of time on a host without one).
  """
  if backend == "cpu":
    return None  # quantize-dequantize numerics in the compute dtype: tests and smoke runs
  if backend == "tpu":
    return ("JAX runs on tpu here, where XLA does not rewrite flax's FP8 dot pattern into "
            "FP8 matmuls (it would only quantize and dequantize)")
  if backend != "gpu":
    return f"JAX runs on {backend} here"
  if compute_capability is None:
    return None
  parts = compute_capability.split(".")
  numeric = len(parts) >= 2 and all(p.isdigit() for p in parts[:2])
  if not numeric or (int(parts[0]), int(parts[1])) < MIN_COMPUTE_CAPABILITY:
    return (f"it needs an NVIDIA GPU of compute capability 8.9 or newer (Ada, Hopper); this "
            f"one is {compute_capability}")
  return None
