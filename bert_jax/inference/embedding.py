"""Sentence embeddings from a loaded checkpoint: encoding, pooling, aggregation, batching
(the library of `python -m bert_jax.embed`, Encoder.embed and retrieval_eval)."""
import dataclasses
import functools
import time
from typing import Optional, Sequence

from etils import epath
import jax
import jax.numpy as jnp
import numpy as np

from bert_jax.batching import bucket_cost
from bert_jax.batching import length_buckets
from bert_jax.checkpoints import bundle as bundle_lib
from bert_jax.checkpoints import loading
from bert_jax.inference import aggregate
from bert_jax.modeling import model as model_lib
from bert_jax.modeling import pooling as pooling_lib
from bert_jax.runtime import ahead_compile
from bert_jax.runtime import console
from bert_jax.runtime import text_files
from bert_jax.runtime import workdirs

POOLINGS = ("cls", "pooler") + pooling_lib.POOL_MODES[1:]
# The longest input of a checkpoint that records none (a sentence-transformers model records
# its max_seq_length; conversion and sentence-embedding fine-tuning write it into bundle.json).
DEFAULT_MAX_LENGTH = pooling_lib.DEFAULT_MAX_LENGTH
COMBINES = aggregate.COMBINES


@dataclasses.dataclass
class InputText:
  """Texts read from a file (str per line, or (a, b) pairs) and the lines whose invalid UTF-8
  was replaced."""
  texts: list
  bad_utf8_lines: list[int]


def read_input(path: str, pairs: bool) -> InputText:
  """One text (or `a<TAB>b` pair) per line of a file, or of standard input for '-';
  ValueError for an empty input or a pair line without exactly one tab (naming it)."""
  data = text_files.read_bytes(path, "input file")
  lines = data.split(b"\n")
  if lines and lines[-1] == b"":
    lines.pop()
  if not lines:
    raise ValueError(f"{text_files.input_name(path)}: the input is empty (one text per line "
                     "expected)")
  texts, bad = [], []
  for number, raw in enumerate(lines, 1):
    if raw.endswith(b"\r"):
      raw = raw[:-1]
    try:
      line = raw.decode("utf-8")
    except UnicodeDecodeError:
      line = raw.decode("utf-8", errors="replace")
      bad.append(number)
    if number == 1 and line.startswith("\ufeff"):
      line = line[1:]  # a UTF-8 byte order mark
    if pairs:
      parts = line.split("\t")
      if len(parts) != 2:
        raise ValueError(f"{text_files.input_name(path)}:{number}: --pairs expects "
                         f"'text_a<TAB>text_b', found {len(parts) - 1} tabs")
      texts.append((parts[0], parts[1]))
    else:
      texts.append(line)
  return InputText(texts, bad)


def encode(tokenizer, texts: Sequence, max_length: int) -> tuple[list, list, int]:
  """(ids, segment_ids, number truncated) in the tokenizer's layout, each at most max_length."""
  pairs = bool(texts) and isinstance(texts[0], tuple)
  firsts = tokenizer.tokenize_to_ids([t[0] if pairs else t for t in texts])
  seconds = tokenizer.tokenize_to_ids([t[1] for t in texts]) if pairs else [None] * len(texts)
  all_ids, all_seg, truncated = [], [], 0
  for a, b in zip(firsts, seconds):
    budget = max_length - tokenizer.num_special_tokens(pair=b is not None)
    if b is None:
      truncated += len(a) > budget
      ids, seg = tokenizer.build_inputs(a[:budget])
    else:
      truncated += len(a) + len(b) > budget
      a, b = list(a), list(b)
      while len(a) + len(b) > budget:  # longest first, as BERT's _truncate_seq_pair
        (a if len(a) > len(b) else b).pop()
      ids, seg = tokenizer.build_inputs(a, b)
    all_ids.append(ids)
    all_seg.append(seg)
  return all_ids, all_seg, truncated


def parse_layers(spec: str, num_layers: int) -> tuple[int, ...]:
  """'-1,-2' -> (-1, -2), each within the num_layers + 1 hidden states."""
  try:
    layers = tuple(int(x) for x in spec.split(",") if x.strip())
  except ValueError:
    raise ValueError(f"--layers {spec!r}: expected comma-separated integers such as "
                     "-1,-2") from None
  if not layers:
    raise ValueError("--layers is empty")
  bad = [i for i in layers if not -(num_layers + 1) <= i <= num_layers]
  if bad:
    raise ValueError(f"--layers {bad} out of range: the model has {num_layers} layers, so hidden "
                     f"states 0 (embeddings) .. {num_layers} (or -1 .. -{num_layers + 1})")
  return layers


@functools.lru_cache(maxsize=16)
def make_embed_fn(config, pooling: str, layers: tuple[int, ...], combine: str, normalize: bool,
                  layer_weights: Optional[tuple[float, ...]] = None, dense: tuple = ()):
  """fn(params, ids, mask, segment_ids) -> float32 [batch, dim], jitted and compiled ahead per
  length (cached). The checkpoint's Dense layers (`dense`, params under pooling.DENSE_GROUP)
  apply after pooling and before normalising, as sentence-transformers does."""
  layers = tuple(layers)
  want_hidden = layers != (-1,)
  bert = model_lib.BertModel(config, add_pooler=pooling == "pooler")
  dense_layers = pooling_lib.SentenceDense(dense)

  @jax.jit
  def fn(params, ids, mask, seg):
    out = bert.apply({"params": params["bert"]}, ids, mask, seg,
                     output_hidden_states=want_hidden)
    if pooling == "pooler":
      x = out["pooled_output"].astype(jnp.float32)
    else:
      hidden = out["hidden_states"] if want_hidden else [out["sequence_output"]]
      pooled = [pooling_lib.pool(hidden[i].astype(jnp.float32), mask, pooling)
                for i in (layers if want_hidden else (0,))]
      x = pooled[0] if len(pooled) == 1 else aggregate.combine(
          jnp.stack(pooled), combine, layer_weights)  # from [layers, batch, hidden]
    if dense:
      x = dense_layers.apply({"params": params[pooling_lib.DENSE_GROUP]}, x)
    if normalize:
      x = pooling_lib.l2_normalize(x)
    return x
  # float32 means float32 matmuls (GPUs would otherwise use TF32 for them); in every thread
  # that traces it.
  precision = "float32" if config.dtype == "float32" else "default"
  return ahead_compile.AheadCompiled(fn, lambda: jax.default_matmul_precision(precision))


def bundle_defaults(pretrained: loading.Pretrained) -> dict:
  """How a checkpoint was trained to embed, from bundle.json's `embedding` record (pooling,
  normalize, max_seq_length, Dense layers, prompts; 'recorded' lists the keys present); any
  other checkpoint gets mean pooling, not normalised, no recorded length."""
  return recorded_at(pretrained.source)


def recorded_at(path: str) -> dict:
  """`bundle_defaults` of the bundle at `path` (a workdir: its export/), params not loaded."""
  defaults = {"pooling": "mean", "normalize": False, "max_seq_length": None, "dense": (),
              "prompts": {}, "default_prompt_name": None, "include_prompt": True,
              "recorded": ()}
  found = [epath.Path(path) / name / bundle_lib.INFO_FILE for name in ("", workdirs.EXPORT)
           if bundle_lib.is_bundle(str(epath.Path(path) / name))] if path else []
  found = [info for info in found if info.is_file()]
  if found:
    info = found[0]
    recorded = text_files.read_json(info, missing=f"{info} is missing").get("embedding", {})
    recorded = pooling_lib.embedding_record(recorded, str(info))
    defaults.update(recorded, recorded=tuple(k for k in recorded if k != "dense"))
  return defaults


@dataclasses.dataclass(frozen=True)
class Settings:
  """How texts are embedded: the values used, the checkpoint's Dense layers and prompts, the
  prompt prepended to every text ('' none), and `origin` of each choice ('from the checkpoint',
  'from --FLAG', 'the default')."""
  pooling: str
  normalize: bool
  max_length: int
  dense: tuple
  prompts: dict
  origin: dict
  prompt: str = ""

  def describe(self) -> str:
    """'pooling mean (from the checkpoint), L2-normalised (...), max_length 256 (...)', plus the
    Dense layers and prompts where there are any."""
    parts = [f"pooling {self.pooling} ({self.origin['pooling']})",
             f"{'L2-normalised' if self.normalize else 'not normalised'} "
             f"({self.origin['normalize']})",
             f"max_length {self.max_length} ({self.origin['max_length']})"]
    if self.dense:
      parts.append("Dense " + " -> ".join(f"{f} {a}" for f, _, a in self.dense)
                   + " (from the checkpoint)")
    if self.prompt or self.prompts:
      parts.append(self.describe_prompt())
    return ", ".join(parts)

  def describe_prompt(self) -> str:
    """"prompt 'query: ' (where it came from)", or 'no prompt (...)'."""
    if self.prompt:
      return f"prompt {self.prompt!r} ({self.origin['prompt']})"
    return (f"no prompt ({self.origin['prompt']}; the checkpoint's: "
            f"{', '.join(sorted(self.prompts)) or 'none'})")


def _prompt(recorded: dict, prompt_name: Optional[str], prompt: Optional[str],
            flag: str) -> tuple[str, str]:
  """(the text prepended to every text, where it came from), as sentence-transformers' encode
  chooses: `prompt` as given, else the checkpoint's prompt named `prompt_name` ('' none), else
  its default prompt."""
  def name(option: str) -> str:
    return f"from {flag}{option}" if flag else f"from the {option} argument"
  prompts = recorded["prompts"]
  if prompt is not None:
    text, origin = prompt, name("prompt")
  elif prompt_name is not None:
    if prompt_name and prompt_name not in prompts:
      raise ValueError(f"prompt name {prompt_name!r} is not one of the checkpoint's prompts "
                       f"{sorted(prompts)} ('' for none)")
    text, origin = prompts.get(prompt_name, ""), f"{prompt_name!r} {name('prompt_name')}"
  elif recorded["default_prompt_name"]:
    default = recorded["default_prompt_name"]
    text, origin = prompts.get(default, ""), f"{default!r}, the checkpoint's default"
  else:
    text, origin = "", "the checkpoint names no default"
  if text and not recorded["include_prompt"]:
    raise ValueError("the checkpoint's pooling leaves its prompt's tokens out "
                     "(include_prompt false), which bert_jax does not compute; the prompt "
                     "name '' embeds without a prompt")
  return text, origin


def settings(pretrained: loading.Pretrained, *, pooling: Optional[str] = None,
             normalize: Optional[bool] = None, max_length: Optional[int] = None,
             prompt_name: Optional[str] = None, prompt: Optional[str] = None,
             default_normalize: bool = False, default_max_length: int = DEFAULT_MAX_LENGTH,
             flag: str = "--") -> Settings:
  """Each option as given, else as the checkpoint records it, else the program's default;
  `flag` prefixes names in `origin` ('--' for the programs, '' for the Python API). The prompt
  is chosen as sentence-transformers' encode chooses it (`_prompt`)."""
  recorded = bundle_defaults(pretrained)
  longest = pretrained.config.max_position_embeddings
  fallback = {"pooling": "mean", "normalize": default_normalize,
              "max_length": min(default_max_length, longest)}
  given = {"pooling": pooling, "normalize": normalize, "max_length": max_length}
  keys = {"pooling": "pooling", "normalize": "normalize", "max_length": "max_seq_length"}
  values, origin = {}, {}
  for name, value in given.items():
    if value is not None:
      values[name], origin[name] = value, (f"from {flag}{name}" if flag
                                           else f"from the {name} argument")
    elif keys[name] in recorded["recorded"]:
      values[name], origin[name] = recorded[keys[name]], "from the checkpoint"
    else:
      values[name], origin[name] = fallback[name], "the default"
  if max_length is None:
    values["max_length"] = min(values["max_length"], longest)
  text, origin["prompt"] = _prompt(recorded, prompt_name, prompt, flag)
  return Settings(values["pooling"], bool(values["normalize"]), int(values["max_length"]),
                  recorded["dense"], dict(recorded["prompts"]), origin, text)


@dataclasses.dataclass
class EmbedStats:
  """What embed() did: counts for the report."""
  num_texts: int
  seq_len: int
  truncated: int
  bad_utf8_lines: list[int]
  seconds: float
  # The padded lengths of the batches, one compilation each.
  lengths: list[int] = dataclasses.field(default_factory=list)
  # Windows embedded (with chunk_stride; else 0).
  chunks: int = 0


def encode_chunks(tokenizer, texts: Sequence[str], max_length: int,
                  stride: int) -> tuple[list, list, np.ndarray, np.ndarray]:
  """[CLS] window [SEP] per window of each text: (ids, segment_ids, owner int64 [windows],
  tokens int64 [windows])."""
  budget = max_length - tokenizer.num_special_tokens(pair=False)
  all_ids, all_seg, owner, tokens = [], [], [], []
  for i, pieces in enumerate(tokenizer.tokenize_to_ids(list(texts))):
    for start, end in aggregate.chunk_windows(len(pieces), budget, stride):
      ids, seg = tokenizer.build_inputs(list(pieces[start:end]))
      all_ids.append(ids)
      all_seg.append(seg)
      owner.append(i)
      tokens.append(max(end - start, 1))
  return all_ids, all_seg, np.asarray(owner, np.int64), np.asarray(tokens, np.int64)


def _padded_arrays(ids: Sequence, segs: Sequence, pad_id: int,
                   max_length: int) -> tuple[dict, int]:
  """Right-padded int32 [sequences, seq_len] arrays; seq_len is the longest sequence rounded up
  to a multiple of 8, at most max_length."""
  longest = max(len(x) for x in ids)
  seq_len = min(max_length, -(-longest // 8) * 8)
  n = len(ids)
  ids_arr = np.full((n, seq_len), pad_id, np.int32)
  seg_arr = np.zeros((n, seq_len), np.int32)
  mask_arr = np.zeros((n, seq_len), np.int32)
  for i, (x, s) in enumerate(zip(ids, segs)):
    ids_arr[i, :len(x)], seg_arr[i, :len(x)], mask_arr[i, :len(x)] = x, s, 1
  return {"input_ids": ids_arr, "input_mask": mask_arr, "segment_ids": seg_arr}, seq_len


def _batches(config, lengths: np.ndarray, batch_size: int, seq_len: int,
             length_bucketing: bool) -> list:
  """The forward passes: texts sorted by length into bucket lengths (one compilation
  each), or in order at seq_len."""
  if length_bucketing:
    return length_buckets.eval_batches(
        lengths, batch_size, bucket_cost.auto_buckets(config, [(lengths, 1.0 / 3.0)], seq_len))
  return length_buckets.sequential_batches(np.arange(len(lengths)), batch_size, seq_len,
                                           pad_last=True)


def embed(pretrained: loading.Pretrained, texts: Sequence, *, pooling: Optional[str] = None,
          layers: Sequence[int] = (-1,), combine: str = "mean",
          normalize: Optional[bool] = None,
          max_length: Optional[int] = None, batch_size: int = 32, dtype: str = "float32",
          tokenizer=None, length_bucketing: bool = True, chunk_stride: int = 0,
          weights: Optional[Sequence[float]] = None, prompt_name: Optional[str] = None,
          prompt: Optional[str] = None, progress: str = "") -> tuple[np.ndarray, EmbedStats]:
  """Embeds texts (or (a, b) pairs) with a loaded checkpoint: (float32 [n, dim], EmbedStats).

  pooling, normalize and max_length None: the checkpoint's (`bundle_defaults`), else mean,
  not normalised, 128. layers index hidden states (0 = embeddings, -1 = last), merged (with
  chunks) by `combine`. length_bucketing gives the same embeddings up to float rounding.
  chunk_stride > 0 embeds a longer text in windows of max_length, else it is truncated.
  prompt_name and prompt None: the checkpoint's default prompt, if it names one, is prepended
  to every text (`settings`).
  """
  config = pretrained.config
  chosen = settings(pretrained, pooling=pooling, normalize=normalize, max_length=max_length,
                    prompt_name=prompt_name, prompt=prompt)
  pooling, normalize, max_length = chosen.pooling, chosen.normalize, chosen.max_length
  pairs = bool(texts) and isinstance(texts[0], tuple)
  if chosen.prompt:
    if pairs:
      raise ValueError(f"a prompt ({chosen.origin['prompt']}) is prepended to single texts, "
                       "not pairs; pass prompt_name '' to embed pairs without one")
    texts = [chosen.prompt + text for text in texts]
  check_options(pretrained, pooling, layers, combine, max_length, batch_size, pairs, chunk_stride)
  layer_weights = (tuple(aggregate.check_weights(weights, len(layers), "--layers"))
                   if combine == "weighted_mean" and len(layers) > 1 else None)
  if not texts:
    raise ValueError("no texts to embed")
  if tokenizer is None:
    from bert_jax.data.tokenizers import tokenizer as tokenizer_lib  # pylint: disable=g-import-not-at-top
    tokenizer = tokenizer_lib.for_checkpoint(pretrained)
  start = time.time()
  if chunk_stride:
    ids, segs, owner, chunk_tokens = encode_chunks(tokenizer, texts, max_length, chunk_stride)
    truncated = 0
  else:
    ids, segs, truncated = encode(tokenizer, texts, max_length)
  arrays, seq_len = _padded_arrays(ids, segs, tokenizer.pad_id, max_length)
  n = len(ids)
  batches = _batches(config, arrays["input_mask"].sum(axis=1), batch_size, seq_len,
                     length_bucketing)
  config = config.replace(dtype=dtype, one_example_per_row=True)  # right-padded, one text a row
  params = model_lib.match_scan_layout(pretrained.params, config)["bert"]
  if pooling != "pooler":
    params = {k: v for k, v in params.items() if k != "pooler"}
  params = {"bert": params}
  if chosen.dense:
    params[pooling_lib.DENSE_GROUP] = pretrained.params[pooling_lib.DENSE_GROUP]
  params = jax.device_put(params)
  fn = make_embed_fn(config, pooling, tuple(layers), combine, bool(normalize), layer_weights,
                     chosen.dense)
  keys = ("input_ids", "input_mask", "segment_ids")

  def queue_ahead():  # the later lengths, compiled while others run (after the first's lowering)
    for batch in length_buckets.first_of_each_length(batches)[1:]:
      fn.ahead(*ahead_compile.spec((params,) + tuple(length_buckets.cut(arrays, batch, keys)[k]
                                                     for k in keys)))
  out = []
  precision = "float32" if dtype == "float32" else "default"  # as make_embed_fn traces
  # Beats while a batch takes long, such as the first with its compile.
  with console.Progress(progress, n, "sequences" if chunk_stride else "texts",
                        enabled=bool(progress)) as shown, jax.default_matmul_precision(precision):
    for batch in batches:
      cut = length_buckets.cut(arrays, batch, keys)
      cut["input_mask"][batch.rows < 0, 0] = 1  # padding rows: one "real" token, no 0 / 0
      args = (params, cut["input_ids"], cut["input_mask"], cut["segment_ids"])
      out.append(fn.program(*args, then=queue_ahead)(*args))
      queue_ahead = None
      if progress and len(out) > 1:  # counted when done, one batch behind the dispatch
        out[-2] = np.asarray(out[-2])
        shown.update(int((batches[len(out) - 2].rows >= 0).sum()))
    emb = length_buckets.scatter_outputs([np.asarray(x) for x in out], batches, n)
    shown.update(int((batches[-1].rows >= 0).sum()))
  if chunk_stride:
    emb = aggregate.combine_chunks(emb, owner, chunk_tokens, len(texts), combine)
    if normalize:
      emb = np.asarray(pooling_lib.l2_normalize(emb))
  lengths_used = sorted({b.length for b in batches})
  return emb, EmbedStats(len(texts), seq_len, truncated, [], time.time() - start, lengths_used,
                         n if chunk_stride else 0)


def embed_ensemble(checkpoints: Sequence[loading.Pretrained], texts: Sequence, *,
                   combine: str = "mean", weights: Optional[Sequence[float]] = None,
                   normalize: Optional[bool] = None, **options) -> tuple[np.ndarray, list]:
  """The texts through each checkpoint (`embed`, its own tokenizer and defaults), merged by
  `combine`: (float32 [n, dim] (concat: dims summed), EmbedStats per checkpoint).

  weights are one per checkpoint (one checkpoint: per layer). normalize None: each checkpoint's,
  and the merged vector's when all agree. ValueError: weights that do not fit, several layers
  and checkpoints under weighted_mean, or dims that differ outside concat.
  """
  if len(checkpoints) == 1:
    emb, stats = embed(checkpoints[0], texts, combine=combine, weights=weights,
                       normalize=normalize, **options)
    return emb, [stats]
  w = aggregate.check_weights(weights, len(checkpoints), "--checkpoint") if (
      combine == "weighted_mean") else None
  if w is not None and len(options.get("layers", (-1,))) > 1:
    raise ValueError("--combine weighted_mean with several --layers and several --checkpoint: "
                     "--weights are per checkpoint; pool one layer each, or combine by mean, "
                     "max or concat")
  vectors, stats, normalized = [], [], []
  for pretrained in checkpoints:
    emb, st = embed(pretrained, texts, combine=combine, normalize=normalize, **options)
    vectors.append(emb)
    stats.append(st)
    normalized.append(bundle_defaults(pretrained)["normalize"] if normalize is None else normalize)
  dims = [v.shape[-1] for v in vectors]
  if combine != "concat" and len(set(dims)) > 1:
    raise ValueError(f"--combine {combine} needs vectors of one width, but the checkpoints give "
                     f"{dims} ({', '.join(p.source for p in checkpoints)}); use --combine concat")
  emb = aggregate.combine(np.stack(vectors) if combine != "concat" else vectors, combine, w)
  if all(normalized):
    emb = np.asarray(pooling_lib.l2_normalize(emb))
  return np.asarray(emb, np.float32), stats


def check_options(pretrained: loading.Pretrained, pooling: str, layers: Sequence[int],
                  combine: str, max_length: int, batch_size: int, pairs: bool,
                  chunk_stride: int = 0) -> None:
  """Raises ValueError, naming the option, on options the checkpoint cannot serve."""
  config = pretrained.config
  if pooling not in POOLINGS:
    raise ValueError(f"--pooling {pooling!r} not in {POOLINGS}")
  if combine not in COMBINES:
    raise ValueError(f"--combine {combine!r} not in {COMBINES}")
  if pooling == "pooler":
    heads = bundle_lib.heads_of(pretrained.params)
    if "pooler" not in heads:
      raise ValueError(f"--pooling pooler: the checkpoint has no pooler (heads: {list(heads)}); "
                       "use --pooling cls, mean or max")
    if tuple(layers) != (-1,):
      raise ValueError("--pooling pooler works on the last layer only; drop --layers")
  if tuple(layers) != (-1,) and pooling_lib.DENSE_GROUP in pretrained.params:
    raise ValueError(f"--layers {list(layers)}: the checkpoint's Dense layers after pooling "
                     "take the last layer's vector; drop --layers")
  parse_layers(",".join(str(i) for i in layers), config.num_layers)
  low = 3 if pairs else 2
  if not low <= max_length <= config.max_position_embeddings:
    raise ValueError(f"--max_length {max_length} must be in [{low}, "
                     f"{config.max_position_embeddings}] (the model's max positions)")
  if batch_size < 1:
    raise ValueError(f"--batch_size {batch_size} must be >= 1")
  if chunk_stride < 0:
    raise ValueError(f"--chunk_stride {chunk_stride} must be >= 0 (0: no chunking)")
  if chunk_stride and pairs:
    raise ValueError("--chunk_stride chunks single texts, not --pairs")
  if chunk_stride:  # a stride that would skip tokens: before any text is read ([CLS], [SEP])
    aggregate.chunk_windows(1, max_length - 2, chunk_stride)
  if chunk_stride and combine == "concat":
    raise ValueError("--combine concat cannot merge chunks (texts have different numbers of "
                     "chunks); use mean, max or weighted_mean with --chunk_stride")
