"""Config pieces shared by configs/pretrain.py, glue.py and squad.py.

`parse_arg` reads the argument of every config file (`configs/FILE.py:ARG`). The
model, optimizer and mesh sections have the same keys in every entry point, so
the code that reads them (bert_jax.modeling.model_config, bert_jax.training.optimizer,
bert_jax.training.sharding) is shared too. `finetune` adds the top-level keys that every
fine-tuning config has (read by bert_jax.finetune) and those sections. Sections
hold BERT's defaults; a config file changes what differs after the call.
"""
import math

import ml_collections

from bert_jax.configuration import reads as config_reads


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
  """Compute dtype, attention implementation, dropout, scan / remat."""
  m = ml_collections.ConfigDict()
  # Compute dtype: 'float32', 'bfloat16', or 'auto' (bfloat16 on GPU/TPU, float32 on
  # CPU). Params, optimizer state and the loss stay float32.
  m.dtype = "auto"
  # Attention implementation: 'auto', 'xla', 'cudnn', 'splash' (TPU) or 'einsum'
  # (bert_jax.modeling.layers.attention_kernel;
  # 'xla', 'cudnn' and 'splash' apply no attention dropout: they need attention_dropout_rate 0).
  m.attention_impl = "auto"
  # 'off' or 'pallas': each post-LN layer's dropout, residual add and LayerNorm as one Pallas
  # kernel, its mask hashed in the kernel from the dropout key (bert_jax.modeling.fused_norm;
  # Triton on a GPU, the Pallas interpreter on the CPU, refused on a TPU).
  m.fused_norm = "off"
  # FP8 matmuls in the encoder layers' dense layers (Q/K/V, attention output, feed-forward;
  # not the embeddings or heads) through flax's Fp8DirectDotGeneralOp: e4m3 inputs and
  # kernels, e5m2 output gradients, scales from an amax history kept in the train state
  # (bert_jax.modeling.fp8). cuBLASLt FP8 GEMMs on GPUs of compute capability 8.9 or newer; the
  # CPU runs its quantize-dequantize numerics (tests, smoke runs); refused on other GPUs, a
  # TPU, fine-tuning and scan_layers. Pretraining objectives mlm_nsp, mlm_sop and mlm.
  m.fp8 = False
  # 'separate' or 'fused': the attention's query, key and value projections as one GEMM of
  # [hidden, 3 x hidden], the three kernels and biases concatenated in the step (checkpoints,
  # conversions and exports keep query, key and value; bert_jax.modeling.fused_qkv).
  m.qkv_projection = "separate"
  # The feed-forward's activation: 'as_built' (the checkpoint's; from scratch the member's, BERT's
  # exact erf GELU) or 'gelu_new' (the tanh GELU, the one XLA's cuBLASLt epilogue fuses with the
  # bias into the GEMM under --xla_gpu_enable_cublaslt). 'gelu_new' changes the function the
  # weights learn, so it is refused on a checkpoint trained with another activation.
  m.hidden_act = "as_built"
  # The PRNG of dropout (and of ELECTRA's sampling): 'auto' (threefry on CPU, 'unsafe_rbg' on
  # GPU/TPU), 'threefry2x32', 'rbg' or 'unsafe_rbg' (bert_jax.modeling.compute_policy.prng_impl).
  # With 'rbg'/'unsafe_rbg' dropout draws 16 bits per element (a rate within 0.1% of a multiple
  # of 1/65536, 0.1 -> 6554/65536; bert_jax.modeling.layers.keep_mask).
  m.prng_impl = "auto"
  # Dropout on hidden states (and a fine-tuning head's input), as in BERT.
  m.dropout_rate = 0.1
  # Dropout on attention probabilities.
  m.attention_dropout_rate = 0.1
  # Scan over encoder layers (faster compile for deep models).
  m.scan_layers = False
  # Rematerialisation policy: 'none', 'full' or 'dots' (save matmul outputs).
  m.remat = "none"
  return m


def compile_cache(c: ml_collections.ConfigDict) -> None:
  """Adds the key every training program reads first: where compiled steps are kept."""
  # JAX's persistent compilation cache (and XLA's GPU autotuning results): 'auto'
  # (JAX_COMPILATION_CACHE_DIR if set, else ~/.cache/bert_jax/jax), a directory, or 'off'.
  # A second run with the same shapes loads its compiled steps (bert_jax/runtime/compile_cache.py).
  c.compile_cache = "auto"


def check_minimums(config: ml_collections.ConfigDict, minimums: dict) -> None:
  """Refuses a number that is not finite (NaN, inf) and a key below its minimum, naming it
  (a ValueError); keys the config lacks are skipped, so one table serves every config."""
  def leaves(d, prefix=""):
    for k, v in d.items():
      if isinstance(v, dict):
        yield from leaves(v, f"{prefix}{k}.")
      else:
        yield prefix + k, v
  for key, value in leaves(config.to_dict()):
    if isinstance(value, float) and not math.isfinite(value):
      raise ValueError(f"bad config: {key} must be a finite number, got {value}")
  for key, low in minimums.items():
    section, _, leaf = key.rpartition(".")
    holder = config.get(section) if section else config
    if holder is not None and leaf in holder and holder[leaf] < low:
      raise ValueError(f"bad config: {key} must be >= {low}, got {holder[leaf]}")


# Lower bounds of keys the other checks leave open (pretraining and every fine-tuning config).
MINIMUMS = {"eval_every": 0, "eval_batches": 1, "profile_start_step": 0, "profile_num_steps": 1,
            "data.tfds_docs_per_shard": 1, "doc_stride": 1, "max_query_length": 1,
            "n_best_size": 1, "max_answer_length": 1, "triplet_margin": 0.0, "scale": 1e-6}


def optimizer() -> ml_collections.ConfigDict:
  """BERT's AdamW (or LAMB); the peak learning rate and warmup live at the top level."""
  o = ml_collections.ConfigDict()
  # 'adamw' (BERT), 'lamb' (large-batch BERT) or 'stable_adamw' (ModernBERT: AdamW with
  # per-tensor update clipping).
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
  # Learning rate after the linear warmup: 'linear' or 'polynomial' decay to 0,
  # 'constant' (short runs), or 'trapezoidal' (constant, then 1 - sqrt decay to 0 over the
  # last tenth of the steps).
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
  # Sharding preset: 'data_parallel', 'fsdp' or 'fsdp_tensor' (bert_jax.training.sharding.PRESETS).
  s.preset = "data_parallel"
  return s


def finetune(c: ml_collections.ConfigDict, *, data_source: str, max_seq_length: int,
             learning_rate: float, num_epochs: float, eval_only: bool = False,
             length_bucketing: bool = False, packing: bool = False) -> None:
  """Adds the keys of every fine-tuning config, and its model, optimizer and mesh, to `c`.

  Args:
    c: the config of configs/glue.py or squad.py, holding the task's own keys.
    data_source: the default of `c.data_source`, the task's own file format.
    max_seq_length, learning_rate, num_epochs, eval_only, length_bucketing, packing: the
      task's defaults.
  """
  # Where the data comes from: the task's files under data_dir ('tsv' for GLUE, 'json'
  # for SQuAD, 'conll' for NER), 'tfds' (GLUE and SQuAD) or 'builtin' (sentence embeddings:
  # the scored pairs shipped with bert_jax, nothing to download).
  c.data_source = data_source
  # Folder of the task's files: GLUE's <TASK>/{train,dev,test}.tsv (CoLA/, MRPC/, SST-2/,
  # ...), SQuAD's JSON files, or NER's CoNLL train.txt, valid.txt, test.txt.
  c.data_dir = ""
  # TFDS data_dir where glue/<task> or squad/v<version> is prepared, when
  # data_source='tfds' (never downloaded).
  c.tfds_data_dir = ""
  # Checkpoint to fine-tune: a pretraining workdir, a params bundle, or a converted
  # Hugging Face / Google TF checkpoint; its model config and vocab are used.
  c.init_checkpoint = ""
  # Word pieces per example, [CLS] and [SEP]s included (GLUE pairs are truncated longest
  # first; a SQuAD window is [CLS] question [SEP] context window [SEP]).
  c.max_seq_length = max_seq_length
  # Cut each training and eval batch to the shortest of a few fixed lengths (multiples of 8
  # up to max_seq_length) that holds its longest row; False: every row max_seq_length long.
  c.length_bucketing = length_bucketing
  # With length_bucketing, which lengths: 'auto' (a length is kept only where the padding
  # it saves outweighs its compilations, judged from the data's lengths and the run's size:
  # bert_jax.batching.length_buckets.choose_buckets), 'all' (every fixed length), or ascending
  # lengths ending at max_seq_length, e.g. '16,32,64'. Train and eval share them.
  c.length_buckets = "auto"
  # Training only: pack each batch's examples several to a row of max_seq_length (block-
  # diagonal attention, restarting positions; the same examples per step and the same
  # loss as unpacked); sequence-level tasks, grad_accum_steps 1. Eval is never packed.
  # Off by default: GLUE's length buckets scored higher in the same time (configs/glue.py).
  c.packing = packing
  # Use only the first N training examples (SQuAD: questions; 0: all); for smoke runs.
  c.max_train_examples = 0
  # Training batch size (SQuAD: in windows), global over all hosts and devices.
  c.batch_size = 32
  # Eval / predict batch size; the last batch is padded with weight-0 rows, never dropped.
  c.eval_batch_size = 64
  # Peak learning rate.
  c.learning_rate = learning_rate
  # Layer-wise learning-rate decay: heads and pooler get lr, encoder layer i (0-based
  # from the bottom, of L) lr * decay**(L - i), embeddings lr * decay**(L + 1); 1.0: off.
  c.layerwise_lr_decay = 1.0
  # Linear warmup over this fraction of the training steps, then linear decay to 0.
  c.warmup_fraction = 0.1
  # Passes over the training set.
  c.num_epochs = num_epochs
  # Independent fine-tuning runs (seeds seed, seed+1, ...); eval_results.json holds the
  # mean and <metric>_std, eval_results_per_seed.json each run (one run with eval_only).
  c.seeds = 1
  # Random seed of the first run (head init, dropout, data order).
  c.seed = 0
  # Only evaluate / predict with init_checkpoint (heads included), no training.
  c.eval_only = eval_only
  # Console / TensorBoard / metrics.jsonl every N training steps.
  c.log_every = 20
  # The training state (params, optimizer moments, dropout key, the position in the epoch
  # and the finished seeds' results) is saved to workdir/finetune_checkpoints every N steps
  # (0: never), and always at the end of each seed's training (before its evaluation) and
  # on SIGTERM or SIGINT (preemption, Ctrl-C); the same command resumes it to the results of
  # an uninterrupted run.
  c.checkpoint_every = 1000
  # How many of the newest fine-tuning checkpoints are kept.
  c.keep_checkpoints = 2
  # Comma-separated config keys a resumed run may change besides those that change no step
  # (bert_jax.finetuning.setup.RESUME_MAY_CHANGE).
  c.resume_allow_changes = ""
  # Train anew in a workdir that holds a run: its files (results, predictions, export,
  # checkpoints, logs) are moved to before_start_over/ first, kept; the same command given
  # again after a stop resumes the run it began. Without it a finished run of another config
  # is refused, and given again the same config prints its results.
  c.start_over = False
  compile_cache(c)
  c.model = model()
  c.optimizer = optimizer()
  c.mesh = mesh()


# Keys of every fine-tuning config read only in some settings (bert_jax.configuration.reads); each
# configs/<task>.py adds its own to READ_ONLY_WHEN.
FINETUNE_READ_ONLY_WHEN = {
    "tfds_data_dir": ("data_source", ("tfds",)),
    "length_buckets": ("length_bucketing", (True,), config_reads.CHOOSE),
    "optimizer.poly_power": ("optimizer.schedule", ("polynomial",)),
    "checkpoint_every": ("eval_only", (False,)),  # eval_only trains nothing to save
    "keep_checkpoints": ("eval_only", (False,)),
    "resume_allow_changes": ("eval_only", (False,)),
}
