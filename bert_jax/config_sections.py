"""Config sections shared by configs/pretrain.py, glue.py and squad.py.

The model, optimizer and mesh sections have the same keys in every entry point,
so the code that reads them (bert_jax.model_config, bert_jax.optimizer,
bert_jax.sharding) is shared too. Each function returns a fresh ConfigDict with
BERT's defaults; a config file changes what differs after the call.
"""
import ml_collections


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
