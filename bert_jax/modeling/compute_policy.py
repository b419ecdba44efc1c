"""A run's compute and attention policy, in one place: the model config a run computes with
(dtype, attention kernel, vocab padding, scan, remat, dropout, FP8), what its devices allow
(cuDNN needs a GPU, splash a TPU, the fused kernels apply no attention dropout), its dropout
PRNG, and the words its header uses for them. Pretraining, fine-tuning, the AOT compile and
inference take them from here."""
from typing import Any, Optional

import jax

from bert_jax.modeling import fp8 as fp8_lib
from bert_jax.modeling import layers
from bert_jax.modeling import model_config as model_config_lib


THREEFRY = "threefry2x32"


PRNG_IMPLS = (THREEFRY, "rbg", "unsafe_rbg")


def prng_impl(model_section: Any, backend: Optional[str] = None) -> str:
  """The dropout PRNG of a run: model.prng_impl, 'auto' resolved for the backend.

  'auto' is threefry on the CPU (the losses of every earlier CPU run, bit for bit) and
  'unsafe_rbg' on accelerators (XLA's RngBitGenerator: the hardware generator on a TPU,
  Philox on a GPU, instead of about 0.6G threefry draws a step at base; MaxText's choice).
  Only the state's key follows it: params are initialised with threefry either way.
  """
  name = model_section.prng_impl
  if name == "auto":
    return THREEFRY if (backend or jax.default_backend()) == "cpu" else "unsafe_rbg"
  if name not in PRNG_IMPLS:
    raise ValueError(f"bad config: model.prng_impl {name!r} not in {('auto',) + PRNG_IMPLS}")
  return name


def compute_dtype(name: str, platform: Optional[str] = None) -> str:
  """'auto' -> bfloat16 on accelerators, float32 on CPU (of `platform`, default this
  process's devices'); other names unchanged."""
  if name != "auto":
    return name
  return "float32" if (platform or jax.devices()[0].platform) == "cpu" else "bfloat16"


# model.vocab_pad_multiple=0 (auto) on accelerators. On the CPU it stays 1: the padded program
# rounds differently there in the last bits, and CPU losses stay those of every earlier run.
ACCELERATOR_VOCAB_PAD = 128


def vocab_pad_multiple(model_section: Any, platform: Optional[str] = None) -> int:
  """model.vocab_pad_multiple with 0 (auto) resolved for `platform` (default this process's
  devices'): 128 on GPU/TPU, 1 on the CPU; a section without the key (fine-tuning, whose
  models have no MLM decoder): 1."""
  n = model_section.get("vocab_pad_multiple", 1)
  if not isinstance(n, int) or n < 0:
    raise ValueError(f"bad config: model.vocab_pad_multiple must be an int >= 0 (0: auto), "
                     f"got {n!r}")
  if n:
    return n
  return 1 if (platform or jax.devices()[0].platform) == "cpu" else ACCELERATOR_VOCAB_PAD


def model_config_from(model_section: Any, base: model_config_lib.BertConfig,
                      one_example_per_row: bool = False) -> model_config_lib.BertConfig:
  """`base` (a checkpoint's or a variant's architecture) with a run's compute options.

  Args:
    model_section: a config's `model` section (bert_jax.configuration.sections.model()).
    base: the architecture.
    one_example_per_row: the run's rows are unpacked and right-padded (cuDNN's attention
      then masks by key lengths; BertConfig.one_example_per_row). False for packed rows.

  Returns:
    The BertConfig the run computes with.
  """
  m = model_section
  if m.hidden_act != AS_BUILT:  # from scratch, or a checkpoint trained with it (check_activation)
    base = base.replace(hidden_act=m.hidden_act)
  return base.replace(dtype=compute_dtype(m.dtype), attention_impl=m.attention_impl,
                      fused_norm=m.fused_norm, qkv_projection=m.qkv_projection, fp8=m.fp8,
                      scan_layers=m.scan_layers, remat=m.remat, dropout_rate=m.dropout_rate,
                      attention_dropout_rate=m.attention_dropout_rate,
                      one_example_per_row=one_example_per_row,
                      vocab_pad_multiple=vocab_pad_multiple(m))


def check(model_section: Any, backend: Optional[str] = None, trains_fp8: bool = True) -> None:
  """The one check of a run's `model` section: what it asks is in range and its devices can
  do it (dropout rates, the dropout PRNG, vocab padding, the attention kernel against the
  backend and attention dropout).

  Args:
    model_section: a config's `model` section.
    backend: the platform of the run's devices (None: JAX's default backend; a TPU topology
      compiled ahead of time on a CPU host is 'tpu').
    trains_fp8: the entry point keeps the FP8 state (pretraining; fine-tuning does not).

  Raises:
    ValueError: one line naming the key, and what to use instead.
  """
  m = model_section
  for key in ("dropout_rate", "attention_dropout_rate"):
    if not 0.0 <= m[key] < 1.0:
      raise ValueError(f"bad config: model.{key} must be in [0, 1), got {m[key]}")
  if "prng_impl" in m:
    prng_impl(m)  # raises naming the key
  vocab_pad_multiple(m, "cpu")  # likewise
  check_attention_impl(m, backend)
  check_fused_norm(m, backend)
  check_fp8(m, backend, trains_fp8)
  if m.qkv_projection not in model_config_lib.QKV_PROJECTIONS:
    raise ValueError(f"bad config: model.qkv_projection {m.qkv_projection!r} not in "
                     f"{model_config_lib.QKV_PROJECTIONS}")
  if m.qkv_projection == "fused" and m.fp8:
    raise ValueError("bad config: model.qkv_projection='fused' projects Q, K and V outside the "
                     "FP8 dense layers that model.fp8=True asks for: use 'separate' with FP8")
  if m.hidden_act not in HIDDEN_ACTS:
    raise ValueError(f"bad config: model.hidden_act {m.hidden_act!r} not in {HIDDEN_ACTS}")


AS_BUILT = "as_built"
# model.hidden_act: the architecture's own activation, or the tanh GELU that cuBLASLt's GEMM
# epilogue computes (with --xla_gpu_enable_cublaslt XLA fuses bias + tanh GELU into the GEMM;
# the exact erf GELU stays a separate elementwise pass over the [batch, len, 4 x hidden]
# activations, forward and backward).
HIDDEN_ACTS = (AS_BUILT, "gelu_new")


def check_activation(model_section: Any, trained: model_config_lib.BertConfig,
                     source: str) -> None:
  """model.hidden_act asks for the activation the weights of `source` were trained with.

  'gelu_new' is an opt-in for training from scratch: on a checkpoint trained with the exact
  GELU it changes the function every layer computes (up to about 5e-4 of each activation,
  through every layer) under weights that never learned it.

  Args:
    model_section: a config's `model` section.
    trained: the model config stored with the checkpoint (its hidden_act).
    source: the checkpoint's path, for the message.

  Raises:
    ValueError: one line naming model.hidden_act, the checkpoint's activation and the fix.
  """
  asked = model_section.hidden_act
  if asked != AS_BUILT and asked != trained.hidden_act:
    raise ValueError(f"bad config: model.hidden_act={asked!r} asks for another activation than "
                     f"{source} was trained with (hidden_act={trained.hidden_act!r}): the tanh "
                     "GELU is for pretraining from scratch; use model.hidden_act='as_built'")


def check_fused_norm(model_section: Any, backend: Optional[str] = None) -> None:
  """model.fused_norm is 'off' or 'pallas', and 'pallas' runs where its kernel lowers: Triton
  on a GPU, Pallas's interpreter on the CPU; a TPU's Mosaic compiler takes other blocks."""
  name = model_section.fused_norm
  if name not in ("off", "pallas"):
    raise ValueError(f"bad config: model.fused_norm {name!r} not in ('off', 'pallas')")
  backend = backend or jax.default_backend()
  if name == "pallas" and backend == "tpu":
    raise ValueError("bad config: model.fused_norm='pallas' runs on a GPU (Triton) or the CPU "
                     "(the Pallas interpreter); JAX runs on tpu here: use 'off'")


def check_fp8(model_section: Any, backend: Optional[str] = None, trains_fp8: bool = True) -> None:
  """model.fp8 runs where its FP8 GEMMs exist (bert_jax.modeling.fp8.unsupported: a CUDA GPU
  of compute capability 8.9 or newer, or the CPU's quantize-dequantize numerics), in an
  entry point that keeps its state, with unscanned layers: nn.scan stacks only the params
  collection, and the scanned encoder applies each layer's slice of the params alone."""
  if not model_section.fp8:
    return
  backend = backend or jax.default_backend()
  capability = None
  if backend == "gpu" and jax.default_backend() == "gpu":  # not a GPU program compiled elsewhere
    capability = getattr(jax.devices()[0], "compute_capability", "unknown")
  why = fp8_lib.unsupported(backend, capability)
  if why:
    raise ValueError(f"bad config: model.fp8=True cannot run here: {why}; set model.fp8=False")
  if not trains_fp8:
    raise ValueError("bad config: model.fp8=True is a pretraining recipe: fine-tuning keeps no "
                     "FP8 scales in its state; set model.fp8=False")
  if model_section.scan_layers:
    raise ValueError("bad config: model.fp8=True needs model.scan_layers=False (the scanned "
                     "encoder stacks and applies the params alone, not the FP8 scales)")


def check_attention_impl(model_section: Any, backend: Optional[str] = None) -> None:
  """The attention kernel can do what the config asks, on the run's devices.

  model.attention_impl='cudnn' needs a GPU (elsewhere JAX fails at the first step with
  "cuDNN is not detected"), 'splash' a TPU, and the fused kernels ('xla',
  'cudnn', 'splash') apply no attention dropout (they trained without it, silently, with a
  nonzero rate). `backend`: the platform of the run's devices (None: JAX's default backend;
  a TPU topology compiled ahead of time on a CPU host is 'tpu').

  Raises:
    ValueError: naming the keys, and what to use instead.
  """
  m = model_section
  backend = backend or jax.default_backend()
  needs = {"cudnn": ("gpu", "an NVIDIA GPU"), "splash": ("tpu", "a TPU")}
  if m.attention_impl in needs and backend != needs[m.attention_impl][0]:
    raise ValueError(f"bad config: model.attention_impl={m.attention_impl!r} needs "
                     f"{needs[m.attention_impl][1]}; JAX runs on {backend} here: use 'auto' "
                     "(or 'xla')")
  if m.attention_impl in layers.FUSED_KERNELS and m.attention_dropout_rate > 0:
    raise ValueError(f"bad config: model.attention_impl={m.attention_impl!r} applies no attention "
                     f"dropout and model.attention_dropout_rate={m.attention_dropout_rate:g} asks "
                     "for it: set model.attention_dropout_rate=0 (as MosaicBERT trains) or "
                     "model.attention_impl='auto' (the einsum path while dropout is on)")


def describe_attention(model_cfg: model_config_lib.BertConfig, training: bool = True) -> str:
  """The run header's words for the attention kernel in use and the dropout it applies."""
  c = model_cfg  # DeBERTa's relative terms (max_relative_positions > 0) are an additive bias
  dropout = training and c.attention_dropout_rate > 0
  kernel = layers.attention_kernel(c.attention_impl, dropout, c.dtype,
                                   c.max_relative_positions > 0, c.head_dim)
  words = {"einsum": "einsum (explicit softmax)", "xla": "XLA fused",
           "cudnn": "cuDNN fused flash", "splash": "Pallas splash (TPU flash)"}[kernel]
  if kernel == "cudnn":
    words += ", masked by key lengths" if c.one_example_per_row else ", masked by a dense bias"
  if kernel == "splash":
    words += (", masked by segment ids where the length is a multiple of 128, XLA fused "
              "elsewhere")
  if c.local_window >= 2:  # layers.local_attention: splash's local mask, else the blocks
    words += (f"; the sliding-window layers ({c.local_window} tokens) "
              + ("by splash with its local mask where the length is a multiple of 128, "
                 "elsewhere " if kernel == "splash" else "")
              + "by blocks of the keys near each query (XLA)")
  rate = f"attention dropout {c.attention_dropout_rate:g}" if dropout else "no attention dropout"
  return f"{words} ({rate}; model.attention_impl={c.attention_impl!r})"
