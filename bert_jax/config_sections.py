"""Config pieces shared by configs/pretrain.py, glue.py and squad.py.

`parse_arg` reads the argument of every config file (`configs/FILE.py:ARG`). The
model, optimizer and mesh sections have the same keys in every entry point,
so the code that reads them (bert_jax.model_config, bert_jax.optimizer,
bert_jax.sharding) is shared too. Each function returns a fresh ConfigDict with
BERT's defaults; a config file changes what differs after the call.
"""
import ml_collections


def parse_arg(arg: str | None, *, positional: str | None = None, example: str = "",
              **spec) -> ml_collections.FrozenConfigDict:
  """Parses the argument of `--config configs/FILE.py:ARG`, e.g. 'base,phase2'.

  ARG is comma-separated options: `name=value`; a boolean option's bare name, which
  means true (`phase2`); or one bare value for the `positional` option (`mrpc` for
  `task=mrpc`). Modelled on big_vision's `big_vision/configs/common.py` `parse_arg`.
  For example `parse_arg("base,phase2", positional="variant", variant="tiny",
  phase2=False)` gives `variant='base', phase2=True`.

  Args:
    arg: ARG; None or '' gives the defaults.
    positional: the option a bare value sets, when that value is not a flag's name.
    example: a valid argument, quoted in errors (e.g. 'configs/glue.py:task=mrpc').
    **spec: every option and its default (not named `positional` or `example`); a
      value is converted to the default's type (a boolean's: true or false, any case).

  Returns:
    The options, typed, with the defaults of those not given.

  Raises:
    ValueError: an unknown option (the message lists the known ones), an option
      given twice, or a value that does not convert.
  """
  given, unknown = {}, []
  for part in filter(None, (arg or "").split(",")):
    if "=" in part:
      name, text = part.split("=", 1)
    elif isinstance(spec.get(part), bool):
      name, text = part, "true"
    elif positional is not None and positional not in given:
      name, text = positional, part
    else:
      name, text = part, ""
    if name not in spec:
      unknown.append(name)
    elif name in given:
      raise ValueError(f"config option {name!r} given twice in {arg!r}")
    else:
      given[name] = _convert(name, text, spec[name])
  if unknown:
    example = f" (e.g. {example})" if example else ""
    raise ValueError(f"unknown config options {sorted(unknown)}; known: {sorted(spec)}{example}")
  return ml_collections.FrozenConfigDict({**spec, **given})


def _convert(name: str, text: str, default):
  """The config option `name`'s text as the type of its default."""
  if isinstance(default, bool):
    if text.lower() not in ("true", "false"):
      raise ValueError(f"config option {name!r} is true or false, not {text!r}")
    return text.lower() == "true"
  try:
    return type(default)(text)
  except ValueError:
    raise ValueError(f"config option {name!r} takes {type(default).__name__}, "
                     f"not {text!r}") from None


def model() -> ml_collections.ConfigDict:
  """Compute dtype, attention implementation, scan / remat, dropout."""
  m = ml_collections.ConfigDict()
  # Compute dtype: 'float32', 'bfloat16', or 'auto' (bfloat16 on GPU/TPU, float32 on
  # CPU). Params, optimizer state and the loss stay float32.
  m.dtype = "auto"
  # Attention implementation: 'auto', 'xla', 'cudnn' or 'einsum'.
  m.attention_impl = "auto"
  # Scan over encoder layers (faster compile for deep models).
  m.scan_layers = False
  # Rematerialisation policy: 'none', 'full' or 'dots' (save matmul outputs).
  m.remat = "none"
  # Dropout on hidden states (and a fine-tuning head's input), as in BERT.
  m.dropout_rate = 0.1
  # Dropout on attention probabilities.
  m.attention_dropout_rate = 0.1
  return m


def optimizer() -> ml_collections.ConfigDict:
  """BERT's AdamW (or LAMB); the peak learning rate and warmup live at the top level."""
  o = ml_collections.ConfigDict()
  # 'adamw' (BERT) or 'lamb' (large-batch BERT).
  o.name = "adamw"
  # Adam first-moment decay.
  o.b1 = 0.9
  # Adam second-moment decay.
  o.b2 = 0.999
  # Adam epsilon (BERT: 1e-6).
  o.eps = 1e-6
  # Decoupled weight decay; never applied to LayerNorm params and biases.
  o.weight_decay = 0.01
  # Global-norm gradient clipping (0 disables).
  o.grad_clip_norm = 1.0
  # Keep Adam moments in bfloat16 to save memory.
  o.bf16_moments = False
  # Learning rate after the linear warmup: 'linear' or 'polynomial' decay to 0, or
  # 'constant' (short runs).
  o.schedule = "linear"
  # Power of the polynomial decay.
  o.poly_power = 1.0
  # Microbatches per step (gradient accumulation); batch_size must divide by it.
  o.grad_accum_steps = 1
  return o


def mesh() -> ml_collections.ConfigDict:
  """The device mesh and the sharding preset."""
  s = ml_collections.ConfigDict()
  # Mesh shape over ('data', 'fsdp', 'tensor') for all devices of all hosts; -1 takes
  # the remaining devices. E.g. (1, -1, 1) for FSDP over everything, (2, -1, 1) for
  # 2 data-parallel groups of FSDP, (1, -1, 4) for FSDP x 4-way tensor parallelism.
  s.shape = (-1, 1, 1)
  # Multi-slice TPU: how many slices (joined over DCN) each axis spans; each slice
  # holds shape / dcn_shape over ICI. E.g. (2, 1, 1) for 2 slices in data parallel.
  s.dcn_shape = (1, 1, 1)
  # Sharding preset: 'data_parallel', 'fsdp' or 'fsdp_tensor' (bert_jax.sharding.PRESETS).
  s.preset = "data_parallel"
  return s
