"""What a family-member module declares (its `MEMBER`): one model_type of the BERT family.

A member is BERT's network with its own config.json keys, parameter names, tokenizer and a
few architectural switches. bert_jax.members.registry finds a Member by model_type; the
generic code (bert_jax.modeling's model_config, model and bundle, bert_jax.conversion,
the objectives) reads these fields and names no member. This module imports nothing of
bert_jax, so that the model config itself can look members up.
"""
import dataclasses
from typing import Any, Callable, Mapping, Optional


def _no_fields(d: dict, kw: dict, source: str) -> dict:
  del d, kw, source
  return {}


def _as_built(config) -> None:
  del config


def absolute_position_keys(config) -> dict:
  """The config.json keys of a BERT-like member (what transformers' BertConfig writes)."""
  return {"model_type": config.model_type, "position_embedding_type": "absolute",
          "pad_token_id": config.pad_token_id}


@dataclasses.dataclass(frozen=True)
class HfLayout:
  """How transformers stores the member (PyTorch-layout names), for bert_jax.conversion.hf.

  Attributes:
    prefix: the base model's name in head models ('bert' in bert.encoder...).
    tied: {tensor: the tensor it is tied to}; checked equal, then dropped.
    architectures: (base model, with the MLM head, with MLM and NSP or None).
    tokenizer_class: for the exported tokenizer_config.json.
    other_tokenizer: its tokenizer when it is not a WordPiece vocab.txt (a bundle copies
      those files into its tokenizer/), or None.
    discriminator: the architecture with ELECTRA's discriminator head, or None.
    renames: {prefix of BERT's Hugging Face tensor names: this member's prefix, or None
      where the member has no such tensor} (bert_jax.conversion.name_map.renamed); empty:
      BERT's names.
    projection: the name of the embedding projection (embedding_size -> hidden_size), or
      None.
    extra_rules: further tensors, (our path, their name, hook 'identity' or 'transpose',
      group).
  """
  prefix: str
  tied: Mapping[str, str]
  architectures: tuple[str, str, Optional[str]]
  tokenizer_class: str
  other_tokenizer: Optional[str] = None
  discriminator: Optional[str] = None
  renames: Mapping[str, Optional[str]] = dataclasses.field(default_factory=dict)
  projection: Optional[str] = None
  extra_rules: tuple[tuple[str, str, str, str], ...] = ()

  @property
  def ignore(self) -> tuple[str, ...]:
    """Regular expressions of buffers some checkpoints store (not params)."""
    return (rf"{self.prefix}\.embeddings\.position_ids", rf"{self.prefix}\.embeddings\.token_type_ids")


@dataclasses.dataclass(frozen=True)
class Member:
  """A family member module's declaration.

  Attributes:
    model_type: its Hugging Face model_type (BertConfig.model_type).
    hf_keys: {config.json key: BertConfig field}; the first five are required.
    build: (a BertConfig with a variant's sizes, the tokenizer's pad id) -> the config of
      this member with those sizes (what pretraining builds).
    hf: its transformers layout (names, heads, tokenizer).
    fixed: BertConfig fields the member fixes (transformers hard-codes them).
    hf_defaults: transformers' defaults where config.json may omit a key and ours differ.
    read_hf: (config.json dict, the fields read so far, source) -> further fields; raises
      ValueError naming what bert_jax does not compute.
    write_hf: config -> config.json keys beyond hf_keys.
    factorized_embeddings: config.json has embedding_size (ELECTRA, ALBERT).
    offset_positions: positions count from pad_token_id + 1 (RoBERTa).
    relative_attention: DeBERTa's disentangled attention (max_relative_positions >= 1);
      the other members have absolute positions only.
    padding_attends: padding keys are attended to with a large negative bias, as BERT's
      extended mask does (False: they are left out, DeBERTa).
    zero_padding_embeddings: padding positions' embeddings are zeroed after the LayerNorm.
    emd: DeBERTa's enhanced mask decoder may be trained.
    vocab_table_padded: the released embedding table may have rows past the tokenizer's
      vocab (dropped on conversion).
    has_pooler: a pooler for sentence(-pair) objectives (not DistilBERT).
    pooler_activation: the pooler's activation after its dense layer: 'tanh' (BERT) or
      'gelu' (exact; DeBERTa-v2's ContextPooler).
    fused_qkv: the attention's query, key and value projections are one kernel
      (`attention/qkv`, hidden -> 3 x hidden), as the member stores them.
    head_transform: the sequence and token classification heads read a transform (dense,
      activation, LayerNorm: `head`) of the pooled vector or of each token before their
      classifier, instead of BERT's pooler (ModernBERT's prediction head).
    recipe_name: the name `configs/pretrain.py:VARIANT,recipe=NAME` gives this member's
      pretraining recipe, or None where it has none.
    pretrain_recipe: how the member is trained, applied in place to the pretraining
      ConfigDict of a variant: objective, data and, for the member's published sizes,
      optimizer. From tiny to medium only the objective, data and scale-free optimizer
      settings apply (batch, steps and rate stay the variant's, sized for short runs on small
      machines); base and large also take the paper's batch, steps and rate. The default
      trains the config as built (BERT's MLM + NSP on sentence pairs).
    pretrain_phase2: the second phase of the member's pretraining (`...,phase2`), applied
      in place after pretrain_recipe, or None for BERT's (seq 512 for a ninth of the steps);
      it starts from phase 1's checkpoint (init_checkpoint).
  """
  model_type: str
  hf_keys: Mapping[str, str]
  build: Callable[[Any, int], Any]
  hf: HfLayout
  fixed: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  hf_defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  read_hf: Callable[[dict, dict, str], dict] = _no_fields
  write_hf: Callable[[Any], dict] = absolute_position_keys
  factorized_embeddings: bool = False
  offset_positions: bool = False
  relative_attention: bool = False
  padding_attends: bool = True
  zero_padding_embeddings: bool = False
  emd: bool = False
  vocab_table_padded: bool = False
  has_pooler: bool = True
  pooler_activation: str = "tanh"
  fused_qkv: bool = False
  head_transform: bool = False
  recipe_name: Optional[str] = None
  pretrain_recipe: Callable[[Any], None] = _as_built
  pretrain_phase2: Optional[Callable[[Any], None]] = None

  @property
  def has_discriminator(self) -> bool:
    """ELECTRA's discriminator head exists for this member."""
    return self.hf.discriminator is not None


# Hugging Face config.json key <-> our field of BERT (and of the members that keep its keys).
BERT_KEYS = {
    "vocab_size": "vocab_size",
    "hidden_size": "hidden_size",
    "num_hidden_layers": "num_layers",
    "num_attention_heads": "num_heads",
    "intermediate_size": "intermediate_size",
    "max_position_embeddings": "max_position_embeddings",
    "type_vocab_size": "type_vocab_size",
    "hidden_act": "hidden_act",
    "hidden_dropout_prob": "dropout_rate",
    "attention_probs_dropout_prob": "attention_dropout_rate",
    "layer_norm_eps": "layer_norm_eps",
    "initializer_range": "initializer_range",
}
