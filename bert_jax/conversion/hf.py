"""Hugging Face BERT-family directories <-> bert_jax bundles.

Reads config.json + model.safetensors (sharded too, or Flax's flax_model.msgpack) of every
registered member's model_type, with or without the base model's prefix, in PyTorch ([out,
in]) or Flax ([in, out]) layout; pickle checkpoints (pytorch_model.bin) are never loaded.
Writes PyTorch-layout safetensors that transformers loads as config.json's architecture. The
tokenizer travels with the bundle (vocab.txt, or a BPE / SentencePiece file under tokenizer/).
"""
from flax import traverse_util
import json
import os
from typing import Any, Optional

from etils import epath
import numpy as np

from bert_jax.checkpoints import bundle
from bert_jax import conversion
from bert_jax.conversion import name_map
from bert_jax.conversion import sentence_transformers as st_modules
from bert_jax.conversion import task_heads
from bert_jax.members import registry as members
from bert_jax.modeling.model_config import BertConfig, from_hf_dict, to_hf_dict
from bert_jax.modeling import pooling
from bert_jax.runtime import atomic_files
from bert_jax.runtime.text_files import read_json
from bert_jax.runtime import write_errors

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
FLAX_MSGPACK = "flax_model.msgpack"

_ENCODER_ROOTS = ("embeddings", "embeddings_project", "encoder", "transformer", "pooler",
                  "layers", "final_norm")


_BIN_HELP = (
    "bert_jax reads safetensors only and never unpickles checkpoints. Convert it once where "
    "PyTorch is installed, e.g.\n"
    "  python -c \"import torch; from safetensors.torch import save_file; "
    "sd = torch.load('{path}', map_location='cpu', weights_only=True); "
    "save_file({{k: v.clone().contiguous() for k, v in sd.items()}}, "
    "'{dir}/model.safetensors', metadata={{'format': 'pt'}})\"\n"
    "then run this command again.")


def _weight_files(src: epath.Path) -> tuple[list[epath.Path], str]:
  """The weight files of an HF directory and their kind ('safetensors' | 'msgpack')."""
  if (src / SAFETENSORS).exists():
    return [src / SAFETENSORS], "safetensors"
  if (src / SAFETENSORS_INDEX).exists():
    index = json.loads((src / SAFETENSORS_INDEX).read_text())
    names = sorted(set(index.get("weight_map", {}).values()))
    if not names:
      raise ValueError(f"{src / SAFETENSORS_INDEX}: empty weight_map")
    missing = [n for n in names if not (src / n).exists()]
    if missing:
      raise FileNotFoundError(f"{src / SAFETENSORS_INDEX} names shards that are absent: {missing}")
    return [src / n for n in names], "safetensors"
  if (src / FLAX_MSGPACK).exists():
    return [src / FLAX_MSGPACK], "msgpack"
  for pickle_name in ("pytorch_model.bin", "pytorch_model.bin.index.json"):
    if (src / pickle_name).exists():
      raise ValueError(f"{src} has only {pickle_name}, a pickle (torch.load) checkpoint. "
                       + _BIN_HELP.format(path=src / "pytorch_model.bin", dir=src))
  if (src / "tf_model.h5").exists():
    raise ValueError(f"{src} has only tf_model.h5 (Keras weights), which bert_jax does not read; "
                     "save the model with safetensors (save_pretrained(..., safe_serialization="
                     "True)) or use --from tf1 for original Google BERT checkpoints.")
  listing = sorted(p.name for p in src.iterdir())
  raise FileNotFoundError(f"{src}: no {SAFETENSORS} (or {SAFETENSORS_INDEX}, {FLAX_MSGPACK}) "
                          f"found; directory holds {listing}")


def _raw_tensors(files: list[epath.Path], kind: str) -> tuple[dict, Any]:
  """{name: shape} and a loader over the raw names of the weight files."""
  shapes, loaders = {}, {}
  if kind == "msgpack":
    from flax import serialization  # pylint: disable=g-import-not-at-top
    state = serialization.msgpack_restore(files[0].read_bytes())
    flat = traverse_util.flatten_dict(state, sep="/")
    for path, x in flat.items():
      name = path.replace("/", ".")
      shapes[name] = tuple(np.shape(x))
      loaders[name] = lambda x=x: np.asarray(x)
  else:
    from safetensors import safe_open  # pylint: disable=g-import-not-at-top
    for f in files:
      try:
        handle = safe_open(os.fspath(f), framework="np")
      except Exception as e:  # pylint: disable=broad-except  # SafetensorError is not exported
        raise ValueError(f"{f} is not a readable safetensors file (truncated or corrupt?): "
                         f"{e}") from None
      for name in handle.keys():
        if name in shapes:
          raise ValueError(f"{f}: tensor {name!r} appears in more than one shard")
        shapes[name] = tuple(handle.get_slice(name).get_shape())
        loaders[name] = lambda h=handle, n=name: h.get_tensor(n)
  return shapes, lambda name: loaders[name]()


def normalise_names(shapes: dict[str, tuple], prefix: str = "bert") -> dict[str, tuple[str, bool]]:
  """Maps raw HF names to the PyTorch-layout names of the rule tables: {name: (raw name,
  transpose)}.

  Adds the base model's `prefix` where the file has none and renames Flax leaves and legacy
  gamma/beta; transpose marks Flax 2-D kernels. ValueError: two raw names normalise alike.
  """
  prefixed = any(n.startswith(prefix + ".") for n in shapes)
  out = {}
  for raw, shape in shapes.items():
    name, transpose = raw, False
    if not prefixed and name.split(".")[0] in _ENCODER_ROOTS:
      name = f"{prefix}.{name}"
    stem, _, leaf = name.rpartition(".")
    if leaf == "kernel":
      name, transpose = f"{stem}.weight", len(shape) == 2
    elif leaf in ("embedding", "scale", "gamma"):
      name = f"{stem}.weight"
    elif leaf == "beta":
      name = f"{stem}.bias"
    if name in out:
      raise ValueError(f"tensors {out[name][0]!r} and {raw!r} both map to {name!r}")
    out[name] = (raw, transpose)
  return out


def read_config(src: str) -> BertConfig:
  """Reads an HF config.json (any registered member's model_type) into a BertConfig."""
  path = epath.Path(src) / "config.json"
  if not epath.Path(src).is_dir():
    raise FileNotFoundError(f"Hugging Face model directory not found: {src}")
  d = read_json(path, missing=f"{src} has no config.json; it is not a Hugging Face model "
                "directory (Google TF checkpoints: use --from tf1)")
  return from_hf_dict(d, source=str(path))


def _lowercase(src: epath.Path, vocab: epath.Path, lowercase: Optional[bool],
               saved: Optional[bool] = None) -> tuple[bool, str]:
  """(casing, where it came from); `saved`: a tokenizer.json normalizer's lowercase."""
  if lowercase is not None:
    return lowercase, "given on the command line"
  if saved is not None:
    return saved, "lowercase in tokenizer.json's normalizer"
  tok_cfg = src / "tokenizer_config.json"
  if tok_cfg.exists():
    d = json.loads(tok_cfg.read_text())
    if isinstance(d.get("do_lower_case"), bool):
      return d["do_lower_case"], f"do_lower_case in {tok_cfg.name}"
  guess = bundle.guess_lowercase(str(vocab))
  return guess, "guessed from the vocab's capital letters"


def load_hf_params(src: str, *, drop_unexpected: bool = False) -> dict[str, Any]:
  """dict(params, config, dropped, heads, info) of an HF directory; every FileNotFoundError /
  ValueError / ConversionError (naming file and keys) is raised before tensors are read.
  `info` holds bundle.json's fields of a task head transformers saved (task_heads.py)."""
  root = epath.Path(src)
  config = read_config(src)
  layout = members.get(config.model_type).hf
  files, kind = _weight_files(root)
  raw_shapes, raw_load = _raw_tensors(files, kind)
  names = normalise_names(raw_shapes, layout.prefix)
  for tied_name, target in layout.tied.items():
    if tied_name in names and target not in names:  # e.g. the decoder bias stored alone
      names[target] = names.pop(tied_name)
  tied = {t: names.pop(t) for t in layout.tied if t in names}
  hf_config = read_json(root / "config.json", missing=f"{src} has no config.json")
  head_arch = task_heads.readable(hf_config, config.model_type)
  head_names = ({n: names.pop(n) for n in task_heads.head_names(head_arch, list(names))}
                if head_arch and "classifier.weight" in names else {})

  def load(name: str) -> np.ndarray:
    raw, transpose = names[name]
    x = raw_load(raw)
    return x.T if transpose else x

  def shape(name: str) -> tuple:
    raw, transpose = names[name]
    s = raw_shapes[raw]
    return tuple(reversed(s)) if transpose else tuple(s)

  where = ", ".join(os.fspath(f) for f in files)
  source = name_map.TensorSource({n: shape(n) for n in names}, load, where)
  params, dropped = name_map.to_ours(source, name_map.hf_rules(config.model_type),
                                     config, ignore=layout.ignore,
                                     drop_unexpected=drop_unexpected)
  for tied_name, target in layout.tied.items():
    if tied_name in tied and target in names:
      raw, transpose = tied[tied_name]
      x = raw_load(raw)
      if transpose:
        x = x.T
      if x.shape != shape(target) or not np.array_equal(x, load(target)):
        raise name_map.ConversionError(
            f"{where}: {tied_name} differs from {target}; bert_jax ties the MLM decoder to "
            "the word embeddings (and its bias to the head's output bias)")
  info = {}
  if head_names:
    names.update(head_names)
    groups, info = task_heads.read_head(hf_config, head_arch, {n: load(n) for n in head_names},
                                        str(root / "config.json"))
    params.update(groups)
  return dict(params=params, config=config, dropped=dropped, heads=bundle.heads_of(params),
              info=info)


def load_hf(src: str, *, drop_unexpected: bool = False,
            lowercase: Optional[bool] = None) -> dict[str, Any]:
  """Reads an HF directory (weights, config and tokenizer files) into our params.

  Returns load_hf_params' dict plus vocab_file, vocab, lowercase and lowercase_reason (a
  WordPiece tokenizer.json, BPE or SentencePiece: vocab_file None and `vocab` tokens; BPE and
  SentencePiece also `tokenizer_file`). lowercase None
  reads tokenizer_config.json or guesses from the vocab. Errors come before tensors are read.
  """
  root = epath.Path(src)
  config = read_config(src)
  other_tokenizer = members.get(config.model_type).hf.other_tokenizer
  # A member trained on BERT's WordPiece vocab (as bert_jax's recipes do by default) has a
  # vocab.txt instead of its own tokenizer's files.
  if other_tokenizer and not (root / "vocab.txt").exists():
    return _load_hf_other_tokenizer(src, config, other_tokenizer, drop_unexpected, lowercase)
  vocab, saved_whole = root / "vocab.txt", root / "tokenizer.json"
  tokens, saved_lowercase = None, None
  if vocab.exists():
    n = bundle.count_vocab(str(vocab))
  elif saved_whole.exists():  # transformers 5 saves the WordPiece pipeline whole, no vocab.txt
    from bert_jax.data.tokenizers import wordpiece_rust  # pylint: disable=g-import-not-at-top
    tokens, saved_lowercase = wordpiece_rust.read_tokenizer_json(str(saved_whole))
    vocab, n = saved_whole, len(tokens)
  else:
    raise FileNotFoundError(f"{src} has neither vocab.txt nor tokenizer.json (the WordPiece "
                            "vocab travels with the bert_jax checkpoint)")
  if n != config.vocab_size:
    raise ValueError(f"{vocab}: {n} tokens but config.json has vocab_size {config.vocab_size}")
  out = load_hf_params(src, drop_unexpected=drop_unexpected)
  low, reason = _lowercase(root, vocab, lowercase, saved_lowercase)
  return dict(out, vocab_file=None if tokens else str(vocab), vocab=tokens, lowercase=low,
              lowercase_reason=reason)


def _load_hf_other_tokenizer(src: str, config: BertConfig, other_tokenizer: str,
                             drop_unexpected: bool, lowercase: Optional[bool]) -> dict[str, Any]:
  """load_hf for model types whose tokenizer is BPE or SentencePiece (copied into the bundle)."""
  from bert_jax.data.tokenizers import tokenizer as tokenizer_lib  # pylint: disable=g-import-not-at-top
  from bert_jax.data.tokenizers import tokenizer_files  # pylint: disable=g-import-not-at-top
  kind = "bpe" if "BPE" in other_tokenizer else "sentencepiece"
  try:
    files = tokenizer_files.detect(src)
  except ValueError as e:
    raise ValueError(f"{src}: model_type {config.model_type!r} needs {other_tokenizer} "
                     f"beside its weights ({e})") from None
  if files.kind != kind and files.path.endswith("tokenizer.json"):
    # transformers 5 saves every tokenizer this way; a SentencePiece model's is not one file
    # bert_jax's SentencePiece reads.
    raise ValueError(f"{src}: model_type {config.model_type!r} needs {other_tokenizer} beside "
                     "its weights; the folder has only a tokenizer.json (as transformers 5 saves "
                     "one), which bert_jax reads for BPE models: copy the release's file in")
  if files.kind != kind:
    raise ValueError(f"{src}: model_type {config.model_type!r} needs {other_tokenizer}, found "
                     f"{files.kind} tokenizer files")
  tok = tokenizer_lib.cached_tokenizer(kind, files.path, lowercase)
  n = len(tok.inv_vocab)
  # DeBERTa-v3's released table has 128,100 rows for 128,001 tokens: the rows past the
  # tokenizer's are no token's and are dropped (the bundle's vocab is the tokenizer's).
  padded = members.get(config.model_type).vocab_table_padded and n < config.vocab_size
  if n != config.vocab_size and not padded:
    raise ValueError(f"{files.path}: {n} tokens but config.json has vocab_size "
                     f"{config.vocab_size}")
  out = load_hf_params(src, drop_unexpected=drop_unexpected)
  if padded:
    out = _drop_rows_past_the_vocab(out, n)
  reason = "given" if lowercase is not None else f"the {config.model_type} tokenizer's casing"
  return dict(out, vocab_file=None, vocab=list(tok.inv_vocab), tokenizer_file=files.path,
              lowercase=tok.lowercase, lowercase_reason=reason)


def _drop_rows_past_the_vocab(loaded: dict[str, Any], n: int) -> dict[str, Any]:
  """load_hf_params' output with the word embeddings (and MLM output bias) cut to n rows."""
  params, config = loaded["params"], loaded["config"]
  emb = params["bert"]["embeddings"]
  cut = {**params, "bert": {**params["bert"], "embeddings": {
      **emb, "word_embeddings": {"embedding": emb["word_embeddings"]["embedding"][:n]}}}}
  if "mlm_output_bias" in params:
    cut["mlm_output_bias"] = params["mlm_output_bias"][:n]
  note = (f"word_embeddings rows {n}..{config.vocab_size - 1} (past the tokenizer's {n} "
          "tokens)")
  return dict(loaded, params=cut, config=config.replace(vocab_size=n),
              dropped=loaded["dropped"] + [note])


def hf_to_bundle(src: str, dst: str, **options) -> dict[str, Any]:
  """Converts an HF directory into a bert_jax bundle (with its tokenizer); see
  `conversion.to_bundle`."""
  return conversion.to_bundle(load_hf_with_modules, "hf", src, dst, **options)


def load_hf_with_modules(src: str, **options) -> dict[str, Any]:
  """load_hf, plus a sentence-transformers folder's modules (Dense params and the embedding
  record), so that embedding it gives what sentence-transformers' encode gives; a module
  bert_jax cannot compute is refused before the weights are read."""
  model_dir = st_modules.model_dir(src)
  modules = st_modules.read_modules(src, read_config(model_dir).hidden_size)
  out = load_hf(model_dir, **options)
  if not modules:
    return out
  if modules["lowercases_text"] and not out["lowercase"]:
    raise ValueError(f"{st_modules.SETTINGS_FILE} in {src}: do_lower_case true lowercases the "
                     "text before a cased tokenizer, which bert_jax does not do (its lowercasing "
                     "tokenizer also strips accents)")
  return dict(out, params={**out["params"], **modules["params"]},
              heads=bundle.heads_of({**out["params"], **modules["params"]}),
              info={**out.get("info", {}), "embedding": modules["embedding"]})


def _architecture(model_type: str, heads: tuple[str, ...]) -> str:
  base, masked_lm, pretraining = members.get(model_type).hf.architectures
  if "discriminator" in heads:
    if "mlm" in heads:
      raise ValueError("params hold both ELECTRA's generator (mlm) and discriminator heads; "
                       "they are two models with their own encoders: export them separately")
    return members.get(model_type).hf.discriminator
  if "mlm" in heads and pretraining and ("nsp" in heads or "pooler" in heads):
    return pretraining
  return masked_lm if "mlm" in heads else base


def params_to_hf(params: dict, config: BertConfig, dst: str,
                 shown: Optional[str] = None, drop_unexpected: bool = False,
                 info: Optional[dict] = None) -> dict[str, Any]:
  """Writes params as an HF model: model.safetensors (PyTorch layout, float32) and config.json.

  `shown` is the folder a failed write names (the destination, where `dst` is its temporary
  stand-in). `info` (bundle.json's) names a fine-tuned task's labels: its head is written as
  transformers' class for it where transformers has one (task_heads.py). Returns dict(heads,
  architecture, num_tensors, dropped): `dropped` names params with no transformers counterpart
  (the EMD's table; with drop_unexpected, every other param outside the name map, such as a
  task head transformers builds otherwise, instead of a ConversionError).
  """
  from safetensors.numpy import save_file  # pylint: disable=g-import-not-at-top
  out = epath.Path(dst)
  hf_config = to_hf_dict(config)
  head = task_heads.exportable(params, config.model_type, info or {})
  if head is not None:
    params = {k: v for k, v in params.items() if k != head.group}
  # transformers has no enhanced mask decoder (its DebertaV2ForMaskedLM reads the last
  # layer): the EMD's table is not written (DeBERTa's own releases keep it as
  # deberta.embeddings.position_embeddings, which transformers skips on load).
  dropped = [f"emd/{p}" for p in traverse_util.flatten_dict(params.get("emd", {}), sep="/")]
  params = {k: v for k, v in params.items() if k != "emd"}
  left_out = [] if drop_unexpected else None
  tensors = name_map.from_ours(params, name_map.hf_rules(config.model_type), config,
                               left_out=left_out)
  if left_out:
    dropped += left_out
    flat = traverse_util.flatten_dict(params, sep="/")
    params = traverse_util.unflatten_dict(
        {k: v for k, v in flat.items() if k not in set(left_out)}, sep="/")
  heads = bundle.heads_of(params)
  arch = _architecture(config.model_type, heads)
  if head is not None:
    tensors.update(head.tensors)
    hf_config.update(head.config)
    arch, heads = head.architecture, heads + (head.group,)
  hf_config["architectures"] = [arch]
  shown = shown or dst
  out.mkdir(parents=True, exist_ok=True)
  with write_errors.writing(f"{shown}/{SAFETENSORS}"):
    save_file(tensors, os.fspath(out / SAFETENSORS), metadata={"format": "pt"})
  # safetensors makes its file private (0600); the folder's other files, and what a user
  # sharing the model expects, follow the umask.
  atomic_files.with_default_mode(out / SAFETENSORS)
  with write_errors.writing(f"{shown}/config.json"):
    (out / "config.json").write_text(json.dumps(hf_config, indent=2, sort_keys=True) + "\n")
  return dict(heads=heads, architecture=arch, num_tensors=len(tensors), dropped=dropped)


# The files an export writes (the tokenizer's: WordPiece's vocab.txt, or the bundle's BPE or
# SentencePiece files). --overwrite replaces a folder that holds these only.
_EXPORT_FILES = (SAFETENSORS, "config.json", "tokenizer_config.json", "vocab.txt", "vocab.json",
                 "merges.txt")


def check_replaceable_export(path: str) -> None:
  """Refuses (FileExistsError, nothing touched) a folder holding anything an export does not
  write: it would be lost, and an old tokenizer.json would be read with the new weights."""
  entries = list(epath.Path(path).iterdir())
  # A tokenizer.json is an export's own when it is the folder's only tokenizer (ModernBERT's
  # exports write theirs whole); beside vocab.txt, vocab.json or a .model it is not.
  own_tokenizer_json = not any(e.name in ("vocab.txt", "vocab.json") or e.name.endswith(".model")
                               for e in entries)
  others = sorted(e.name for e in entries
                  if not (e.is_file() and (e.name in _EXPORT_FILES or e.name.endswith(".model")
                                           or (e.name == "tokenizer.json" and own_tokenizer_json))
                          or st_modules.written_names(e.name)))
  if others:
    shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
    raise FileExistsError(f"{path} holds {shown}, which an export does not write; --overwrite "
                          "replaces only an earlier export: move those away or choose another "
                          "--dst")


def _tokenizer_config(b) -> dict[str, Any]:
  """tokenizer_config.json for the tokenizer a bundle has, whatever its member: the class that
  reads its files (a ModernBERT, DeBERTa or RoBERTa trained on BERT's WordPiece vocab is read
  by BertTokenizer; a tokenizer.json alone by PreTrainedTokenizerFast), its special tokens by
  name, and the inputs the model takes (ModernBERT, DistilBERT and RoBERTa: no token_type_ids)."""
  from bert_jax.data.tokenizers import tokenizer as tokenizer_lib  # pylint: disable=g-import-not-at-top
  member = members.get(b.config.model_type).hf
  own_files = bool(member.other_tokenizer)  # the member's own tokenizer is not WordPiece
  if not b.tokenizer_file:
    cls = "BertTokenizer" if own_files else member.tokenizer_class
  elif b.tokenizer_file.endswith("tokenizer.json"):
    cls = "PreTrainedTokenizerFast"
  elif b.tokenizer_file.endswith(".model"):
    cls = member.tokenizer_class if "SentencePiece" in (member.other_tokenizer or "") else (
        "AlbertTokenizer")
  else:  # vocab.json + merges.txt
    cls = "RobertaTokenizer"
  t = tokenizer_lib.for_checkpoint(b)
  tok = {"do_lower_case": b.lowercase, "tokenizer_class": cls,
         "model_max_length": b.config.max_position_embeddings}
  for role in ("cls", "sep", "pad", "mask", "unk"):
    tok[f"{role}_token"] = t.inv_vocab[getattr(t, f"{role}_id")]
  if cls == "RobertaTokenizer" or b.tokenizer_file and b.tokenizer_file.endswith("tokenizer.json"):
    tok["bos_token"], tok["eos_token"] = tok["cls_token"], tok["sep_token"]
  # Models whose forward takes no token_type_ids, or one segment only (RoBERTa's table).
  if b.config.model_type in ("modernbert", "distilbert") or b.config.type_vocab_size == 1:
    tok["model_input_names"] = ["input_ids", "attention_mask"]
  return tok


def bundle_to_hf(src: str, dst: str, *, overwrite: bool = False,
                 drop_unexpected: bool = False) -> dict[str, Any]:
  """Exports a checkpoint (anything loading.load_pretrained reads) as an HF directory; with
  drop_unexpected, without the params transformers has no name for (a task's head).

  Writes model.safetensors ('pt', float32), config.json, the tokenizer files and
  tokenizer_config.json; the folder replaces `dst` in one step (atomic_files), never a mix of
  two models. FileExistsError: `dst` is not empty and not overwrite, or holds other files.
  """
  # Orbax and JAX load on use.
  from bert_jax.checkpoints import loading  # pylint: disable=g-import-not-at-top
  out = epath.Path(dst)
  if out.exists() and any(out.iterdir()):
    if not overwrite:
      raise FileExistsError(f"{dst} exists and is not empty; pass --overwrite to replace it")
    check_replaceable_export(dst)  # before the checkpoint is read
  b = loading.load_pretrained(src)
  tok = _tokenizer_config(b)
  # A bundle that records how it embeds (bundle.json's `embedding`) is also written as a
  # sentence-transformers folder: its Dense layers go to their modules, not to transformers.
  info_file = epath.Path(b.source) / bundle.INFO_FILE
  info = read_json(info_file, missing=str(info_file)) if info_file.is_file() else {}
  record = (None if info.get("embedding") is None else
            pooling.embedding_record(info["embedding"], str(info_file)))
  params = {k: v for k, v in b.params.items() if k != pooling.DENSE_GROUP}
  with atomic_files.replacing(out) as tmp:
    written = params_to_hf(params, b.config, str(tmp), shown=dst,
                           drop_unexpected=drop_unexpected, info=info)
    if record is not None:
      written["modules"] = st_modules.write_modules(
          tmp, record, b.params.get(pooling.DENSE_GROUP, {}), b.config.hidden_size,
          min(record.get("max_seq_length") or pooling.DEFAULT_MAX_LENGTH,
              b.config.max_position_embeddings), shown=dst)
    if b.tokenizer_file:  # BPE or SentencePiece files, as transformers reads them
      files = {f.name: f.read_bytes() for f in epath.Path(b.tokenizer_file).parent.iterdir()}
    else:
      files = {"vocab.txt": "".join(t + "\n" for t in b.vocab).encode("utf-8")}
    files["tokenizer_config.json"] = (json.dumps(tok, indent=2) + "\n").encode("utf-8")
    for name, data in files.items():
      with write_errors.writing(f"{dst}/{name}"):
        (tmp / name).write_bytes(data)
  return dict(written, config=b.config)
