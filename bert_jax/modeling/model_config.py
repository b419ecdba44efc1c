"""The frozen model config, the variants table, and Hugging Face config mapping."""
import dataclasses
import json
from typing import Any

from etils import epath

from bert_jax.members import registry as members
from bert_jax.runtime.text_files import read_json

# name: (layers, hidden, heads); intermediate size is 4 x hidden.
VARIANTS = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "medium": (8, 512, 8),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}

# Fields that define the shapes of the parameters; two configs with the same
# values here can load each other's checkpoints.
ARCH_FIELDS = ("vocab_size", "hidden_size", "num_layers", "num_heads",
               "intermediate_size", "max_position_embeddings", "type_vocab_size",
               "embedding_size", "absolute_positions", "max_relative_positions",
               "position_buckets", "norm_first", "linear_bias", "norm_bias", "glu")
# Fields that change what the same parameter shapes compute (and their foreign names).
FAMILY_FIELDS = ("model_type", "position_offset", "share_layers", "rope_theta",
                 "local_rope_theta", "local_window", "global_every")

_ATTENTION_IMPLS = ("auto", "xla", "cudnn", "splash", "einsum")
_REMAT = ("none", "full", "dots")
_ACTS = ("gelu", "gelu_new", "relu")
QKV_PROJECTIONS = ("separate", "fused")


@dataclasses.dataclass(frozen=True)
class BertConfig:
  """Architecture and compute options of a BERT encoder.

  The architecture fields (ARCH_FIELDS) fix the parameter shapes; the rest
  (dtype, attention implementation, scan, remat, dropout) only change how the
  same parameters are computed with.
  """
  vocab_size: int = 30522
  hidden_size: int = 768
  num_layers: int = 12
  num_heads: int = 12
  intermediate_size: int = 3072
  max_position_embeddings: int = 512
  # 0: no token type embeddings (DistilBERT); segment ids are then ignored.
  type_vocab_size: int = 2
  # Width of the embedding tables (ELECTRA's factorized embeddings, projected to
  # hidden_size when they differ); 0: hidden_size.
  embedding_size: int = 0
  # False: no absolute position embeddings (DeBERTa-v3: position_biased_input false).
  absolute_positions: bool = True
  # DeBERTa-v2/v3's disentangled attention (model_type 'deberta-v2' only): relative
  # positions q - k clipped to +-max_relative_positions, or with position_buckets > 0
  # mapped to 2 x position_buckets log buckets (make_log_bucket_position); one shared
  # table of relative embeddings (bert/encoder/rel_embeddings) of 2 x relative_span rows.
  # 0, 0: no relative attention (every other model_type).
  max_relative_positions: int = 0
  position_buckets: int = 0
  # ALBERT: one layer's parameters (bert/encoder/layer_0) applied num_layers times.
  share_layers: bool = False
  # Pre-LN layers (ModernBERT): a layer normalises its input before attention (all but the
  # first, whose input is the embeddings' LayerNorm) and before the feed-forward, and adds
  # without normalising after; the encoder ends in a LayerNorm (bert/encoder/final_norm).
  # False: BERT's post-LN layers.
  norm_first: bool = False
  # Biases of the encoder's dense layers, the MLM transform and the task heads' transform
  # (never of the MLM decoder or a classifier). False: ModernBERT's bias-free layers.
  linear_bias: bool = True
  # LayerNorms with a bias; False: a scale only (ModernBERT).
  norm_bias: bool = True
  # A gated feed-forward: `intermediate` maps to 2 x intermediate_size, the activation of the
  # first half times the second half (GeGLU with gelu: Shazeer 2020), then `output`.
  glu: bool = False
  # Rotary position embeddings (RoPE, Su et al. 2021) on queries and keys with this base
  # (the global layers'); 0: none. Packed rows give each example positions from 0.
  rope_theta: float = 0.0
  # Sliding-window attention: a local layer's tokens attend to those at most local_window // 2
  # columns away (and of their own example); 0: every layer attends globally.
  local_window: int = 0
  # The RoPE base of the local layers (0: rope_theta).
  local_rope_theta: float = 0.0
  # With local_window: layers 0, n, 2n, ... attend globally, the others locally.
  global_every: int = 1
  # Which member of the BERT family (bert_jax.members: one module each): picks the foreign
  # parameter names and config.json keys; the computation follows from the fields here and
  # the member's switches.
  model_type: str = "bert"
  # 0: position ids 0..len-1 (BERT). >0 (RoBERTa: pad_token_id + 1): the default
  # position ids are transformers' create_position_ids_from_input_ids: tokens other
  # than pad_token_id count up from position_offset, padding takes position_offset - 1.
  position_offset: int = 0
  pad_token_id: int = 0
  # 'gelu' is the exact erf form used by BERT; 'gelu_new' the tanh approximation.
  hidden_act: str = "gelu"
  dropout_rate: float = 0.1
  attention_dropout_rate: float = 0.1
  layer_norm_eps: float = 1e-12
  initializer_range: float = 0.02
  # Compute dtype; params are stored in param_dtype and cast at use.
  dtype: str = "float32"
  param_dtype: str = "float32"
  # 'auto': the einsum path while attention dropout is active in training (dropout on the
  # probabilities, as BERT does), else jax.nn.dot_product_attention: cuDNN's fused flash
  # attention on a GPU where it applies, Pallas splash attention on a TPU where it applies,
  # XLA elsewhere (layers.attention_kernel). 'xla' / 'cudnn' / 'splash' force the fused call,
  # which has no attention dropout: training with them and a nonzero attention_dropout_rate
  # is refused; 'einsum' always the explicit path.
  attention_impl: str = "auto"
  # 'pallas': each post-LN layer's dropout, residual add and LayerNorm as one Pallas kernel
  # with its dropout mask hashed in the kernel (bert_jax.modeling.fused_norm; the same
  # parameters); 'off': flax's Dropout and LayerNorm.
  fused_norm: str = "off"
  # A compute layout (never saved; the params stay attention/{query,key,value}): 'fused'
  # concatenates the three kernels and biases in the step and projects with one GEMM of
  # [hidden, 3 x hidden], the gradient flowing back through the concatenation; 'separate':
  # three GEMMs. Members that store one qkv kernel (ModernBERT) always run one.
  qkv_projection: str = "separate"
  scan_layers: bool = False
  remat: str = "none"
  # A compute option (never saved: exports carry no FP8 state): the encoder layers' dense
  # layers multiply through flax's FP8 ops, their scales kept in the train state
  # (bert_jax.modeling.fp8).
  fp8: bool = False
  # A property of the run's rows, not of the model (never saved): each row holds one example,
  # real tokens first (unpacked, right-padded). cuDNN's fused attention then takes key lengths
  # (its padding mode) instead of the dense [batch, 1, len, len] mask, which it would turn
  # into a bias. Set by the run (compute_policy.model_config_from); packed rows keep the mask.
  one_example_per_row: bool = False
  # A compute layout (never saved; the params keep vocab_size rows): the tied MLM decoder
  # multiplies by the word embeddings padded with zero rows to a multiple of this many, so
  # its GEMM has an aligned width (GPU tensor-core and TPU MXU tiles), and cuts the logits
  # back to vocab_size. The padded columns are never predicted and never counted; the
  # logits equal the unpadded ones. 1: no padding.
  vocab_pad_multiple: int = 1

  def __post_init__(self):
    for f in ARCH_FIELDS:
      low = 0 if f in ("type_vocab_size", "embedding_size", "absolute_positions",
                       "max_relative_positions", "position_buckets", "norm_first",
                       "linear_bias", "norm_bias", "glu") else 1
      if not isinstance(getattr(self, f), int) or getattr(self, f) < low:
        raise ValueError(f"BertConfig.{f} must be an int >= {low}, got {getattr(self, f)!r}")
    if self.fp8 and self.scan_layers:
      raise ValueError("fp8 keeps each layer's scales in a collection nn.scan does not stack; "
                       "scan_layers is not supported with it")
    if self.share_layers and self.scan_layers:
      raise ValueError("share_layers (ALBERT) computes one layer num_layers times; "
                       "scan_layers is not supported with it")
    members.get(self.model_type)  # a ValueError naming the known members
    self._check_layer_options()
    self._check_disentangled()
    if not isinstance(self.position_offset, int) or self.position_offset < 0:
      raise ValueError(f"position_offset must be an int >= 0, got {self.position_offset!r}")
    if self.hidden_size % self.num_heads:
      raise ValueError(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
    if not isinstance(self.vocab_pad_multiple, int) or self.vocab_pad_multiple < 1:
      raise ValueError(f"vocab_pad_multiple must be an int >= 1, got {self.vocab_pad_multiple!r}")
    if self.fused_norm not in ("off", "pallas"):
      raise ValueError(f"fused_norm {self.fused_norm!r} not in ('off', 'pallas')")
    if self.fused_norm == "pallas" and self.norm_first:
      raise ValueError("fused_norm 'pallas' fuses post-LN layers' dropout, residual add and "
                       "LayerNorm; norm_first (pre-LN) layers have none to fuse: use 'off'")
    if self.qkv_projection not in QKV_PROJECTIONS:
      raise ValueError(f"qkv_projection {self.qkv_projection!r} not in {QKV_PROJECTIONS}")
    if self.attention_impl not in _ATTENTION_IMPLS:
      raise ValueError(f"attention_impl {self.attention_impl!r} not in {_ATTENTION_IMPLS}")
    if self.remat not in _REMAT:
      raise ValueError(f"remat {self.remat!r} not in {_REMAT}")
    if self.hidden_act not in _ACTS:
      raise ValueError(f"hidden_act {self.hidden_act!r} not in {_ACTS}")
    for f in ("dtype", "param_dtype"):
      if getattr(self, f) not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"{f} {getattr(self, f)!r} not in float32/bfloat16/float16")

  def _check_disentangled(self):
    """The relative-attention fields are set exactly for a member with relative attention."""
    if not members.get(self.model_type).relative_attention:
      if (self.max_relative_positions or self.position_buckets
          or not (self.absolute_positions or self.rope_theta)):
        raise ValueError(f"model_type {self.model_type!r} has absolute or rotary positions only "
                         "(max_relative_positions, position_buckets 0, absolute_positions True "
                         "or rope_theta > 0)")
      return
    if self.max_relative_positions < 1:
      raise ValueError(f"model_type {self.model_type!r} needs max_relative_positions >= 1, got "
                       f"{self.max_relative_positions}")
    if self.embedding_size not in (0, self.hidden_size) or self.share_layers:
      raise ValueError(f"model_type {self.model_type!r} with embedding_size != hidden_size or "
                       "share_layers is not supported")

  def _check_layer_options(self):
    """Rotary positions, windows and pre-LN layers: values bert_jax computes."""
    if self.rope_theta < 0 or self.local_rope_theta < 0:
      raise ValueError(f"rope_theta and local_rope_theta must be >= 0, got {self.rope_theta!r}, "
                       f"{self.local_rope_theta!r}")
    if self.rope_theta and self.head_dim % 2:
      raise ValueError(f"rotary positions need an even head_dim, got {self.head_dim}")
    if not isinstance(self.local_window, int) or self.local_window < 0:
      raise ValueError(f"local_window must be an int >= 0, got {self.local_window!r}")
    if not isinstance(self.global_every, int) or self.global_every < 1:
      raise ValueError(f"global_every must be an int >= 1, got {self.global_every!r}")
    # Scanned layers share one body: the first pre-LN layer (no attention norm) and the
    # local layers differ from the rest.
    if self.scan_layers and (self.norm_first or (self.local_window and self.global_every > 1)):
      raise ValueError("scan_layers is not supported with norm_first or local_window (their "
                       "layers are not all alike)")

  def is_local(self, layer: int) -> bool:
    """Layer `layer` attends within local_window (the others globally)."""
    return bool(self.local_window) and layer % self.global_every != 0

  @property
  def relative_span(self) -> int:
    """DeBERTa's attention span: relative embeddings have 2 x relative_span rows (0: none)."""
    return self.position_buckets or self.max_relative_positions

  @property
  def embed_dim(self) -> int:
    """Width of the embedding tables (and of the MLM head's transform)."""
    return self.embedding_size or self.hidden_size

  @property
  def decoder_rows(self) -> int:
    """The MLM decoder's width: vocab_size rounded up to a multiple of vocab_pad_multiple."""
    return -(-self.vocab_size // self.vocab_pad_multiple) * self.vocab_pad_multiple

  @property
  def head_dim(self) -> int:
    return self.hidden_size // self.num_heads

  def replace(self, **kw) -> "BertConfig":
    return dataclasses.replace(self, **kw)

  def arch(self) -> dict[str, int]:
    """The fields that fix parameter shapes."""
    return {f: getattr(self, f) for f in ARCH_FIELDS}

  def to_dict(self) -> dict[str, Any]:
    """The saved fields: all but one_example_per_row (a property of a run's rows),
    vocab_pad_multiple and qkv_projection (a run's compute layout: the params are the same)."""
    d = dataclasses.asdict(self)
    del d["one_example_per_row"], d["vocab_pad_multiple"], d["qkv_projection"]
    del d["fp8"]  # a compute option, like vocab_pad_multiple
    return d

  @classmethod
  def from_dict(cls, d: dict[str, Any], source: str = "config") -> "BertConfig":
    """Builds a config from a dict; unknown keys are an error naming `source`."""
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - names)
    if unknown:
      raise ValueError(f"{source}: unknown BertConfig keys {unknown}; known: {sorted(names)}")
    return cls(**d)

  def save_json(self, path: str) -> None:
    epath.Path(path).write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")

  @classmethod
  def load_json(cls, path: str) -> "BertConfig":
    d = read_json(path, missing=f"model config not found: {path}")
    return cls.from_dict(d, source=path)


def variant(name: str, vocab_size: int, **overrides) -> BertConfig:
  """The named variant of DESIGN.md (tiny ... large) with the given vocab size.

  Args:
    name: a key of VARIANTS.
    vocab_size: the tokenizer's vocabulary size.
    **overrides: other BertConfig fields (dtype, scan_layers, ...).

  Returns:
    The BertConfig.
  """
  if name not in VARIANTS:
    raise ValueError(f"unknown model variant {name!r}; known: {list(VARIANTS)}")
  layers, hidden, heads = VARIANTS[name]
  return BertConfig(vocab_size=vocab_size, hidden_size=hidden, num_layers=layers,
                    num_heads=heads, intermediate_size=4 * hidden, **overrides)


def for_pretraining(config: BertConfig, model_type: str, pad_id: int = 0) -> BertConfig:
  """`config`'s sizes (a variant's) as the family member `model_type` builds them.

  Args:
    config: a BERT config with the variant's sizes.
    model_type: a registered member (bert_jax.members.registry).
    pad_id: the tokenizer's padding id (RoBERTa's positions start after it).

  Returns:
    The member's `build` of config (bert_jax/members/<member>.py says what it changes).
  """
  return members.get(model_type).build(config, pad_id)


def _model_type_of(d: dict[str, Any]) -> str:
  """config.json's model_type; without one (transformers' 2019 layout, a Google
  bert_config.json), the member whose classes `architectures` names, else 'bert'."""
  if "model_type" in d:
    return d["model_type"]
  best = ("bert", 0)
  for name in members.names():
    layout = members.get(name).hf
    prefix = layout.architectures[0].removesuffix("Model") if layout else ""
    for arch in d.get("architectures") or ():
      if prefix and (arch == f"{prefix}Model" or arch.startswith(f"{prefix}For")):
        best = max(best, (name, len(prefix)), key=lambda b: b[1])
  return best[0]


def from_hf_dict(d: dict[str, Any], source: str = "config.json") -> BertConfig:
  """Reads a Hugging Face config.json dict (a registered member's model_type; no
  model_type: the member its `architectures` names, else a Google bert_config.json)."""
  model_type = _model_type_of(d)
  if model_type not in members.names():
    raise ValueError(f"{source}: model_type {model_type!r} is not supported; "
                     f"bert_jax converts {list(members.names())}")
  member = members.get(model_type)
  keys = member.hf_keys
  missing = [k for k in list(keys)[:5] if k not in d]
  if missing:
    raise ValueError(f"{source}: not a {model_type} config, missing keys {missing}")
  if d.get("position_embedding_type", "absolute") != "absolute":
    raise ValueError(f"{source}: position_embedding_type {d['position_embedding_type']!r} "
                     "is not supported (only 'absolute', as BERT)")
  if d.get("sinusoidal_pos_embds", False):
    raise ValueError(f"{source}: sinusoidal_pos_embds is not supported (only learned "
                     "position embeddings)")
  if d.get("tie_word_embeddings", True) is not True:
    raise ValueError(f"{source}: tie_word_embeddings false is not supported (bert_jax ties "
                     "the MLM decoder to the word embeddings)")
  kw = {**member.hf_defaults, **{ours: d[hf] for hf, ours in keys.items() if hf in d}}
  if kw.get("hidden_act") == "gelu_python":
    kw["hidden_act"] = "gelu"
  kw.update(member.fixed, model_type=model_type)
  kw.update(member.read_hf(d, kw, source))
  return BertConfig(**kw)


def to_hf_dict(config: BertConfig) -> dict[str, Any]:
  """The Hugging Face config.json dict of `config`, without `architectures` (the exporter
  names the model class of the heads it writes).

  Raises:
    ValueError: a field that the model_type's transformers class cannot express.
  """
  member = members.get(config.model_type)
  fixed = {**member.fixed, "position_offset": (config.pad_token_id + 1
                                               if member.offset_positions else 0)}
  if not member.factorized_embeddings:
    fixed["embedding_size"] = 0
  fixed.setdefault("share_layers", False)
  bad = [f"{f}={getattr(config, f)!r} (must be {v!r})" for f, v in fixed.items()
         if getattr(config, f) != v]
  if bad:
    raise ValueError(f"model_type {config.model_type!r} cannot be exported with {', '.join(bad)}")
  d = {hf: getattr(config, ours) for hf, ours in member.hf_keys.items()}
  if member.factorized_embeddings:
    d["embedding_size"] = config.embed_dim
  d.update({k: v for k, v in member.write_hf(config).items() if k not in d})
  return d
