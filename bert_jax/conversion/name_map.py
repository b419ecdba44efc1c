"""A declarative map between our parameter paths and foreign tensor names.

A `Rule` pairs our '/'-separated path with a foreign name (either may hold '{i}') and a
`Hook` of inverse transforms. `to_ours` and `from_ours` check every tensor's shape (foreign
shapes before any read), the key count, and name missing and unexpected keys. Groups:
'encoder' (required) and the optional 'pooler', 'mlm', 'nsp', 'discriminator'; a group
present must be complete.
"""
from flax import traverse_util
import dataclasses
import re
from typing import Any, Callable, Mapping, Optional, Sequence

import jax
import numpy as np

from bert_jax.checkpoints import bundle
from bert_jax.members import registry as members
from bert_jax.modeling.model_config import BertConfig

GROUPS = ("encoder", "pooler", "mlm", "nsp", "discriminator")


class ConversionError(ValueError):
  """A checkpoint does not fit the name map (names, shapes or counts)."""


@dataclasses.dataclass(frozen=True)
class Hook:
  """Inverse tensor transforms between a foreign layout and ours, in array methods only
  (.T, .reshape) so that jax.eval_shape can check shapes through them."""
  name: str
  to_ours: Callable[[Any, BertConfig], Any]
  to_theirs: Callable[[Any, BertConfig], Any]


IDENTITY = Hook("identity", lambda x, c: x, lambda x, c: x)
TRANSPOSE = Hook("transpose", lambda x, c: x.T, lambda x, c: x.T)
# [hidden, hidden] -> [hidden, heads, head_dim] (q/k/v kernels, input axis first).
SPLIT_HEADS = Hook("split_heads",
                   lambda x, c: x.reshape(x.shape[0], c.num_heads, c.head_dim),
                   lambda x, c: x.reshape(x.shape[0], x.shape[1] * x.shape[2]))
# [hidden] -> [heads, head_dim] (q/k/v biases).
SPLIT_HEADS_BIAS = Hook("split_heads_bias",
                        lambda x, c: x.reshape(c.num_heads, c.head_dim),
                        lambda x, c: x.reshape(x.shape[0] * x.shape[1]))
# [hidden, hidden] -> [heads, head_dim, hidden] (attention output kernel).
MERGE_HEADS = Hook("merge_heads",
                   lambda x, c: x.reshape(c.num_heads, c.head_dim, x.shape[-1]),
                   lambda x, c: x.reshape(x.shape[0] * x.shape[1], x.shape[2]))


def chain(*hooks: Hook) -> Hook:
  """Hooks applied left to right towards our layout (and reversed back)."""
  def to_ours(x, c):
    for h in hooks:
      x = h.to_ours(x, c)
    return x

  def to_theirs(x, c):
    for h in reversed(hooks):
      x = h.to_theirs(x, c)
    return x
  return Hook("+".join(h.name for h in hooks), to_ours, to_theirs)


@dataclasses.dataclass(frozen=True)
class Rule:
  """One tensor: our path <-> their name, the hook, and its group."""
  ours: str
  theirs: str
  hook: Hook = IDENTITY
  group: str = "encoder"


def _layer(ours: str, theirs: str, hook: Hook = IDENTITY) -> Rule:
  return Rule(f"bert/encoder/layer_{{i}}/{ours}", theirs, hook)


# Original Google BERT (TF1) variable names; Dense kernels are [in, out].
_TF1_LAYER = "bert/encoder/layer_{i}/"
TF1_RULES = (
    Rule("bert/embeddings/word_embeddings/embedding", "bert/embeddings/word_embeddings"),
    Rule("bert/embeddings/position_embeddings/embedding", "bert/embeddings/position_embeddings"),
    Rule("bert/embeddings/token_type_embeddings/embedding",
         "bert/embeddings/token_type_embeddings"),
    Rule("bert/embeddings/layer_norm/scale", "bert/embeddings/LayerNorm/gamma"),
    Rule("bert/embeddings/layer_norm/bias", "bert/embeddings/LayerNorm/beta"),
    *(r for qkv in ("query", "key", "value") for r in (
        _layer(f"attention/{qkv}/kernel", _TF1_LAYER + f"attention/self/{qkv}/kernel",
               SPLIT_HEADS),
        _layer(f"attention/{qkv}/bias", _TF1_LAYER + f"attention/self/{qkv}/bias",
               SPLIT_HEADS_BIAS))),
    _layer("attention/out/kernel", _TF1_LAYER + "attention/output/dense/kernel", MERGE_HEADS),
    _layer("attention/out/bias", _TF1_LAYER + "attention/output/dense/bias"),
    _layer("attention_norm/scale", _TF1_LAYER + "attention/output/LayerNorm/gamma"),
    _layer("attention_norm/bias", _TF1_LAYER + "attention/output/LayerNorm/beta"),
    _layer("intermediate/kernel", _TF1_LAYER + "intermediate/dense/kernel"),
    _layer("intermediate/bias", _TF1_LAYER + "intermediate/dense/bias"),
    _layer("output/kernel", _TF1_LAYER + "output/dense/kernel"),
    _layer("output/bias", _TF1_LAYER + "output/dense/bias"),
    _layer("output_norm/scale", _TF1_LAYER + "output/LayerNorm/gamma"),
    _layer("output_norm/bias", _TF1_LAYER + "output/LayerNorm/beta"),
    Rule("bert/pooler/kernel", "bert/pooler/dense/kernel", IDENTITY, "pooler"),
    Rule("bert/pooler/bias", "bert/pooler/dense/bias", IDENTITY, "pooler"),
    Rule("mlm/transform/kernel", "cls/predictions/transform/dense/kernel", IDENTITY, "mlm"),
    Rule("mlm/transform/bias", "cls/predictions/transform/dense/bias", IDENTITY, "mlm"),
    Rule("mlm/transform_norm/scale", "cls/predictions/transform/LayerNorm/gamma", IDENTITY, "mlm"),
    Rule("mlm/transform_norm/bias", "cls/predictions/transform/LayerNorm/beta", IDENTITY, "mlm"),
    Rule("mlm_output_bias", "cls/predictions/output_bias", IDENTITY, "mlm"),
    # [2, hidden] in Google's checkpoints: a transposed Dense kernel.
    Rule("nsp/kernel", "cls/seq_relationship/output_weights", TRANSPOSE, "nsp"),
    Rule("nsp/bias", "cls/seq_relationship/output_bias", IDENTITY, "nsp"),
)


# Hugging Face names in the PyTorch layout (Linear weights [out, in]); Flax-saved
# files and legacy gamma/beta names are normalised to these by conversion.hf. They
# are Google's names spelt the PyTorch way, as transformers' load_tf_weights_in_bert
# reads them: '/' -> '.', kernel -> weight (transposed), gamma/beta -> weight/bias,
# embedding tables gain '.weight'; the output heads' names differ outright.
_HF_HEAD_NAMES = {
    "cls/predictions/output_bias": "cls.predictions.bias",
    "cls/seq_relationship/output_weights": "cls.seq_relationship.weight",
    "cls/seq_relationship/output_bias": "cls.seq_relationship.bias",
}


def _hf_rule(rule: Rule) -> Rule:
  """The Hugging Face rule of a TF1 rule."""
  if rule.theirs in _HF_HEAD_NAMES:
    return dataclasses.replace(rule, theirs=_HF_HEAD_NAMES[rule.theirs])
  path, _, leaf = rule.theirs.rpartition("/")
  hook = rule.hook
  if leaf == "kernel":
    leaf, hook = "weight", TRANSPOSE if hook is IDENTITY else chain(TRANSPOSE, hook)
  elif leaf in ("gamma", "beta"):
    leaf = {"gamma": "weight", "beta": "bias"}[leaf]
  elif rule.ours.endswith("/embedding"):
    path, leaf = rule.theirs, "weight"
  name = f"{path}/{leaf}".replace("layer_{i}", "layer/{i}").replace("/", ".")
  return dataclasses.replace(rule, theirs=name, hook=hook)


HF_RULES = tuple(_hf_rule(r) for r in TF1_RULES)


def renamed(rules: Sequence[Rule], prefixes: Mapping[str, Optional[str]]) -> tuple[Rule, ...]:
  """The rules with each foreign name's longest matching prefix replaced ({old: new, or None
  to drop}); every rule must match one, so a table names every tensor's fate (else ValueError)."""
  out = []
  for r in rules:
    hits = [p for p in prefixes if r.theirs.startswith(p)]
    if not hits:
      raise ValueError(f"no prefix of the rename table matches {r.theirs!r}")
    old = max(hits, key=len)
    if prefixes[old] is not None:
      out.append(dataclasses.replace(r, theirs=prefixes[old] + r.theirs[len(old):]))
  return tuple(out)


def _projection(theirs: str) -> tuple[Rule, ...]:
  """The rules of the embedding projection (embedding_size -> hidden_size) named `theirs`."""
  return (Rule("bert/embeddings/project/kernel", theirs + "weight", TRANSPOSE),
          Rule("bert/embeddings/project/bias", theirs + "bias"))


_HOOKS = {"identity": IDENTITY, "transpose": TRANSPOSE}


def hf_rules(model_type: str) -> tuple[Rule, ...]:
  """The Hugging Face rule table of a family member: BERT's rules renamed, layer_0 for every
  layer where the member shares one (ALBERT), its embedding projection and further tensors."""
  member = members.get(model_type)
  layout = member.hf
  rules = renamed(HF_RULES, layout.renames) if layout.renames else HF_RULES
  if member.fixed.get("share_layers"):
    rules = tuple(dataclasses.replace(r, ours=r.ours.replace("layer_{i}", "layer_0"))
                  for r in rules)
  if layout.projection:
    rules += _projection(layout.projection)
  return rules + tuple(Rule(ours, theirs, _HOOKS[hook], group)
                       for ours, theirs, hook, group in layout.extra_rules)


def _config_rules(rules: Sequence[Rule], config: BertConfig,
                  ours_shapes: Mapping[str, tuple]) -> list[Rule]:
  """The rules expanded for config.num_layers, without those of params the config does not
  have (e.g. the embedding projection when embedding_size == hidden_size)."""
  return [r for r in expand(rules, config.num_layers) if r.ours in ours_shapes]


def expand(rules: Sequence[Rule], num_layers: int) -> list[Rule]:
  """Replaces '{i}' in rules by 0..num_layers-1."""
  out = []
  for r in rules:
    if "{i}" in r.ours or "{i}" in r.theirs:
      out += [dataclasses.replace(r, ours=r.ours.format(i=i), theirs=r.theirs.format(i=i))
              for i in range(num_layers)]
    else:
      out.append(r)
  return out


@dataclasses.dataclass
class TensorSource:
  """Named tensors read lazily: `shapes` up front, `load(name)` on demand."""
  shapes: dict[str, tuple[int, ...]]
  load: Callable[[str], np.ndarray]
  description: str


def _listing(names: Sequence[str], limit: int = 12) -> str:
  names = sorted(names)
  more = f" ... (+{len(names) - limit} more)" if len(names) > limit else ""
  return ", ".join(names[:limit]) + more


def _their_shape(rule: Rule, our_shape: tuple, config: BertConfig) -> tuple:
  out = jax.eval_shape(lambda x: rule.hook.to_theirs(x, config),
                       jax.ShapeDtypeStruct(our_shape, np.float32))
  return tuple(out.shape)


def _check_declared_layers(source: TensorSource, rules: Sequence[Rule], config: BertConfig
                           ) -> None:
  """Refuses absurd config values and more layers than stored before shapes are traced (a
  config.json claiming 20,000 layers would hang there)."""
  bundle.check_limits(config, source.description)
  patterns = [re.compile(re.escape(r.theirs).replace(re.escape("{i}"), r"(\d+)"))
              for r in rules if "{i}" in r.theirs]
  if not patterns or config.share_layers:
    return
  stored = {int(m.group(1)) for name in source.shapes for p in patterns
            for m in [p.fullmatch(name)] if m}
  if 0 < len(stored) < config.num_layers:  # none: the listing of names below says more
    raise ConversionError(f"{source.description}: the config declares {config.num_layers} "
                          f"layers but the tensors hold {len(stored)} encoder layers")


def to_ours(source: TensorSource, rules: Sequence[Rule], config: BertConfig, *,
            ignore: Sequence[str] = (), drop_unexpected: bool = False,
            dtype: Any = np.float32) -> tuple[dict, list[str]]:
  """Foreign tensors (names normalised) -> (our params of the groups present, dropped names).

  ignore: regexes of foreign names to skip silently (optimizer slots). ConversionError for no
  encoder, missing or unexpected names, wrong shapes or counts, before any tensor is read.
  """
  where = source.description
  _check_declared_layers(source, rules, config)
  ours_shapes = bundle.pretraining_shapes(config)
  rules = _config_rules(rules, config, ours_shapes)
  by_theirs = {r.theirs: r for r in rules}
  present = {g for g in GROUPS if any(r.theirs in source.shapes for r in rules if r.group == g)}
  if "encoder" not in present:
    raise ConversionError(f"{where}: no BERT encoder tensors found (expected names such as "
                          f"{rules[0].theirs!r}); found {_listing(source.shapes, 6)}")
  active = [r for r in rules if r.group in present]
  missing = [r.theirs for r in active if r.theirs not in source.shapes]
  ignored = [n for n in source.shapes if any(re.fullmatch(p, n) for p in ignore)]
  unexpected = [n for n in source.shapes if n not in by_theirs and n not in ignored]
  if missing or (unexpected and not drop_unexpected):
    msg = [f"{where}: tensors do not match the BERT name map "
           f"({bundle.describe_arch(config)}, groups present: {sorted(present)})"]
    if missing:
      msg.append(f"missing {len(missing)}: {_listing(missing)}")
    if unexpected and not drop_unexpected:
      msg.append(f"unexpected {len(unexpected)}: {_listing(unexpected)} "
                 "(pass --drop_unexpected to drop them)")
    raise ConversionError("; ".join(msg))
  bad = []
  for r in active:
    want = _their_shape(r, ours_shapes[r.ours], config)
    got = tuple(source.shapes[r.theirs])
    if got != want:
      bad.append(f"{r.theirs}: {got}, expected {want}")
  if bad:
    arch = bundle.describe_arch(config, ("num_layers", "hidden_size", "num_heads",
                                         "intermediate_size", "vocab_size"))
    raise ConversionError(f"{where}: {len(bad)} tensors have the wrong shape for {arch} "
                          f"(from the config): {_listing(bad, 8)}")
  flat = {}
  for r in active:
    x = np.asarray(r.hook.to_ours(np.asarray(source.load(r.theirs)), config)).astype(dtype)
    if x.shape != ours_shapes[r.ours]:
      raise ConversionError(f"{where}: {r.theirs} -> {r.ours} gave shape {x.shape}, "
                            f"expected {ours_shapes[r.ours]}")
    flat[r.ours] = np.ascontiguousarray(x)
  expected_count = sum(1 for p in ours_shapes if _group_of_path(p) in present)
  if len(flat) != expected_count:
    raise ConversionError(f"{where}: converted {len(flat)} tensors but the model has "
                          f"{expected_count} for groups {sorted(present)}")
  return traverse_util.unflatten_dict(flat, sep="/"), sorted(unexpected)


def _group_of_path(path: str) -> str:
  if path.startswith("bert/pooler/"):
    return "pooler"
  if path.startswith("mlm"):
    return "mlm"
  if path.startswith("nsp/"):
    return "nsp"
  if path.startswith("discriminator/"):
    return "discriminator"
  if path.startswith("emd/"):  # DeBERTa's enhanced mask decoder: no foreign name
    return "emd"
  return "encoder"


def from_ours(params: Mapping, rules: Sequence[Rule], config: BertConfig, *,
              dtype: Optional[Any] = np.float32,
              left_out: Optional[list] = None) -> dict[str, np.ndarray]:
  """Our params -> {their name: numpy array} (dtype None keeps the stored one); ConversionError
  for params outside the map (fine-tuning heads), an incomplete group, or a wrong shape. With
  `left_out` (a list) the params outside the map are appended to it instead."""
  flat = traverse_util.flatten_dict(dict(params), sep="/")
  ours_shapes = bundle.pretraining_shapes(config)
  rules = _config_rules(rules, config, ours_shapes)
  present = {_group_of_path(p) for p in flat}
  active = [r for r in rules if r.group in present]
  known = {r.ours for r in active}
  missing = [r.ours for r in active if r.ours not in flat]
  unexpected = [p for p in flat if p not in known]
  if left_out is not None:
    left_out.extend(unexpected)
    unexpected = []
  if missing or unexpected:
    raise ConversionError(
        "params do not match the BERT name map: "
        + (f"missing {_listing(missing)}" if missing else "")
        + ("; " if missing and unexpected else "")
        + (f"not exportable {_listing(unexpected)} (only the encoder and the pooler, MLM, NSP "
           "and discriminator heads have foreign names; --drop_unexpected exports the model "
           "without them)" if unexpected else ""))
  out = {}
  for r in active:
    x = np.asarray(flat[r.ours])
    if x.shape != ours_shapes[r.ours]:
      raise ConversionError(f"{r.ours}: shape {x.shape}, expected {ours_shapes[r.ours]} "
                            f"for {bundle.describe_arch(config)}")
    y = r.hook.to_theirs(x, config)
    out[r.theirs] = np.ascontiguousarray(y if dtype is None else y.astype(dtype))
  if len(out) != len(flat) - len(left_out or ()):
    raise ConversionError(f"exported {len(out)} tensors from {len(flat)} params")
  return out
