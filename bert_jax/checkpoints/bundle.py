"""Self-describing params checkpoints ("bundles"): one path is enough to use a model.

A bundle is a directory:

  BUNDLE/params/             Orbax PyTree checkpoint of the params, canonical
                             unscanned layout (`bert/encoder/layer_i`)
  BUNDLE/model_config.json   the BertConfig (architecture and compute options)
  BUNDLE/vocab.txt           the tokenizer's tokens in id order, one per line (for
                             WordPiece, the whole tokenizer)
  BUNDLE/tokenizer/          any other tokenizer's files: vocab.json + merges.txt
                             (byte-level BPE) or its SentencePiece .model
  BUNDLE/bundle.json         {format_version, lowercase, heads, ...}

Pretraining export, conversion, fine-tuning, embed and fill_mask all read and
write this one format. Params come back as numpy arrays on the host; the
caller shards them (and stacks them with `model.match_scan_layout` for scan_layers).
"""
import dataclasses
import json
import logging
import os
import re
import time
from typing import Any, Optional, Sequence, Union

from etils import epath
from flax import traverse_util
import jax
import numpy as np
import orbax.checkpoint as ocp

from bert_jax.members import registry as members
from bert_jax.modeling import model as model_lib
from bert_jax.modeling.model_config import ARCH_FIELDS, FAMILY_FIELDS, BertConfig
from bert_jax.modeling import pooling
from bert_jax.runtime import atomic_files
from bert_jax.runtime.text_files import read_json

FORMAT_VERSION = 1
PARAMS_DIR = "params"
CONFIG_FILE = "model_config.json"
VOCAB_FILE = "vocab.txt"
TOKENIZER_DIR = "tokenizer"
INFO_FILE = "bundle.json"

# Top-level param groups a bundle may hold besides the encoder.
# ('head': the transform before a member's classifiers, ModernBERT's prediction head.)
TASK_HEADS = ("classifier", "qa_outputs", "token_classifier", "aggregation", "head")
_FIELD_ABBREV = {"num_layers": "L", "hidden_size": "H", "num_heads": "A",
                 "intermediate_size": "I", "vocab_size": "V",
                 "max_position_embeddings": "P", "type_vocab_size": "T",
                 "embedding_size": "E"}


@dataclasses.dataclass(frozen=True)
class Bundle:
  """A loaded bundle.

  Attributes:
    params: nested dict of numpy arrays, canonical (unscanned) layout.
    config: the saved BertConfig.
    vocab_file: path of the bundle's vocab.txt.
    lowercase: whether the tokenizer lowercases (uncased model).
    info: the contents of bundle.json.
    tokenizer_file: the BPE vocab.json or SentencePiece .model in BUNDLE/tokenizer/;
      None: WordPiece (vocab.txt is the tokenizer).
  """
  params: dict
  config: BertConfig
  vocab_file: str
  lowercase: bool
  info: dict
  tokenizer_file: Optional[str] = None

  @property
  def heads(self) -> tuple[str, ...]:
    """Heads present (from bundle.json when the params were not read)."""
    return heads_of(self.params) if self.params else tuple(self.info["heads"])


def heads_of(params: dict) -> tuple[str, ...]:
  """Names of the heads present in a params tree.

  Args:
    params: a params tree of any model in bert_jax.modeling.model.

  Returns:
    A subset of ('pooler', 'mlm', 'emd', 'nsp', 'discriminator', 'classifier', 'qa_outputs',
    'token_classifier'), in that order ('emd': DeBERTa's enhanced mask decoder's table).
  """
  heads = []
  if "pooler" in params.get("bert", {}):
    heads.append("pooler")
  heads += [h for h in ("mlm", "emd", "nsp", "discriminator") if h in params]
  heads += [h for h in TASK_HEADS if h in params]
  # A sentence-transformers model's Dense layers after pooling (kept by fine-tuning).
  heads += [h for h in (pooling.DENSE_GROUP,) if h in params]
  return tuple(heads)


def describe_arch(config: BertConfig, fields: Sequence[str] = ("num_layers", "hidden_size")) -> str:
  """A short architecture string such as 'L12 H768'."""
  return " ".join(f"{_FIELD_ABBREV[f]}{getattr(config, f)}" for f in fields)


def check_arch(found: BertConfig, expected: BertConfig, source: str) -> None:
  """Raises ValueError naming the differing fields when shapes cannot match.

  Args:
    found: the config stored with a checkpoint.
    expected: the config the caller wants to use.
    source: the checkpoint path, for the message.
  """
  family = [f"{f}: checkpoint {getattr(found, f)!r} vs config {getattr(expected, f)!r}"
            for f in FAMILY_FIELDS if getattr(found, f) != getattr(expected, f)]
  if family and found.model_type != expected.model_type:
    raise ValueError(f"{source}: checkpoint is another member of the BERT family than the "
                     f"config asks ({', '.join(family)})")
  if family:  # the same member with other settings of its own (ModernBERT's attention window)
    raise ValueError(f"{source}: checkpoint is a {found.model_type} with other settings than "
                     f"the config asks ({', '.join(family)})")
  diff = [f for f in ARCH_FIELDS if getattr(found, f) != getattr(expected, f)]
  if not diff:
    return
  shown = [f for f in _FIELD_ABBREV if f in ("num_layers", "hidden_size") or f in diff]
  details = ", ".join(f"{f}: checkpoint {getattr(found, f)} vs config {getattr(expected, f)}"
                      for f in diff)
  raise ValueError(f"{source}: checkpoint is {describe_arch(found, shown)} but config asks "
                   f"{describe_arch(expected, shown)} (differing fields: {details})")


def pretraining_shapes(config: BertConfig) -> dict[str, tuple[int, ...]]:
  """Shapes of every parameter of BertForPreTraining (pooler, MLM, NSP), by '/' path;
  for ELECTRA also its discriminator head, for DeBERTa-v2 the EMD's table (bert_jax.modeling.emd).

  (A variant without token types, DistilBERT, has no token_type_embeddings.)

  Computed with jax.eval_shape, so nothing is allocated.

  Args:
    config: the model config (its scan_layers is ignored: canonical layout).

  Returns:
    {'bert/embeddings/word_embeddings/embedding': (vocab, hidden), ...}.
  """
  config = config.replace(scan_layers=False)
  member = members.get(config.model_type)
  modules = [model_lib.BertForPreTraining(config, with_nsp=True, emd=member.emd)]
  if member.has_discriminator:
    modules.append(model_lib.ElectraDiscriminator(config))
  out = {}
  for module in modules:
    shapes = jax.eval_shape(lambda m=module: model_lib.init_params(m, jax.random.PRNGKey(0)))
    out.update({p: tuple(x.shape) for p, x in traverse_util.flatten_dict(shapes, sep="/").items()})
  return out


def vocab_lines(vocab_file: str) -> list[str]:
  """The tokens of a vocab file, one per line (a final newline ends the last token)."""
  lines = epath.Path(vocab_file).read_text(encoding="utf-8").split("\n")
  if lines and lines[-1] == "":
    lines = lines[:-1]
  return lines


def count_vocab(vocab_file: str) -> int:
  """Number of tokens (lines) in a vocab file."""
  return len(vocab_lines(vocab_file))


def guess_lowercase(vocab_file: str) -> bool:
  """Whether a WordPiece vocab belongs to an uncased model.

  Uncased vocabs (e.g. bert-base-uncased) have almost no tokens with capital
  letters apart from the bracketed special tokens; cased vocabs have thousands.

  Args:
    vocab_file: one token per line.

  Returns:
    True when fewer than 1% of the tokens hold an uppercase letter.
  """
  tokens = epath.Path(vocab_file).read_text(encoding="utf-8").split("\n")
  upper = sum(1 for t in tokens if any(ch.isupper() for ch in t)
              and not (t.startswith("[") and t.endswith("]")))
  return upper < 0.01 * max(len(tokens), 1)


def _check_vocab(vocab: Sequence[str], where: str, config: BertConfig, source: str) -> None:
  n = len(vocab)
  if n != config.vocab_size:
    raise ValueError(f"{where}: vocab has {n} tokens but {source} has vocab_size "
                     f"{config.vocab_size} (the word embedding matrix has that many rows)")


def _first_items(items: list, limit: int = 10) -> str:
  more = f" (+{len(items) - limit} more)" if len(items) > limit else ""
  return f"{items[:limit]}{more}"


def _check_shapes(found: dict[str, tuple], config: BertConfig, source: str) -> None:
  """Every encoder / pretraining-head tensor must have the config's shape."""
  expected = pretraining_shapes(config)
  heads = heads_of(traverse_util.unflatten_dict(dict.fromkeys(found, 0), sep="/"))
  groups = {"pooler": "bert/pooler/", "mlm": "mlm", "emd": "emd/", "nsp": "nsp/",
            "discriminator": "discriminator/"}
  wanted = {p: s for p, s in expected.items()
            if not any(p.startswith(pre) for h, pre in groups.items() if h not in heads)}
  bad = [f"{p}: stored {found[p]} vs expected {s}" for p, s in wanted.items()
         if p in found and tuple(found[p]) != s]
  missing = sorted(p for p in wanted if p not in found)
  unknown = sorted(p for p in found if p not in expected
                   and p.split("/")[0] not in TASK_HEADS + (pooling.DENSE_GROUP,))
  for head in TASK_HEADS:
    kernel = found.get(f"{head}/kernel")
    if kernel is not None and kernel[0] != config.hidden_size:
      bad.append(f"{head}/kernel: stored {kernel} but hidden_size is {config.hidden_size}")
  if bad or missing or unknown:
    parts = []
    if bad:
      parts.append(f"shape mismatches: {_first_items(bad)}")
    if missing:
      parts.append(f"missing: {_first_items(missing)}")
    if unknown:
      parts.append(f"unexpected: {unknown[:10]}")
    raise ValueError(f"{source}: params do not match its model_config.json "
                     f"({describe_arch(config)}): " + "; ".join(parts))


# Far above any published BERT-family model (BERT-large: 24 layers, hidden 1024, 16 heads;
# XLM-R: 250,002 tokens); beyond them a model_config.json is damaged or crafted, and building
# its model (tracing 20,000 layers) would hang. Refused before anything is built.
CONFIG_LIMITS = {"num_layers": 1024, "hidden_size": 65536, "intermediate_size": 262144,
                 "num_heads": 1024, "embedding_size": 65536, "vocab_size": 4_194_304,
                 "max_position_embeddings": 1_048_576, "type_vocab_size": 1024}
_LAYER_KEY = re.compile(r"(?:^|/)encoder/layer_(\d+)/")
_SCANNED_KEY = re.compile(r"(?:^|/)encoder/layers/")


def stored_layers(found: dict[str, tuple]) -> int:
  """Encoder layers held by params given as {'/'-path: shape}, canonical or scanned layout."""
  indices = {int(m.group(1)) for p in found for m in [_LAYER_KEY.search(p)] if m}
  scanned = {shape[0] for p, shape in found.items() if _SCANNED_KEY.search(p) and shape}
  return len(indices) + (max(scanned) if scanned else 0)


def check_limits(config: BertConfig, source: str) -> None:
  """Refuses, in one line, a config beyond CONFIG_LIMITS (before its model is built)."""
  absurd = [f"{f} {getattr(config, f):,} (at most {limit:,})"
            for f, limit in CONFIG_LIMITS.items() if getattr(config, f) > limit]
  if absurd:
    raise ValueError(f"{source}: its model config declares {', '.join(absurd)}: not a model "
                     "bert_jax builds (a damaged or hand-edited config file?)")


def check_declared_config(config: BertConfig, found: dict[str, tuple], source: str) -> None:
  """The declared config against the arrays on disk, before a model is built from it.

  Cheap (no tracing): absurd values (CONFIG_LIMITS), the number of encoder
  layers and the vocabulary size against the stored arrays. The full shape
  check (`_check_shapes`) follows once these agree.

  Args:
    config: the config the checkpoint declares.
    found: its arrays' shapes by '/' path (canonical or scanned layout).
    source: the checkpoint, for messages.

  Raises:
    ValueError: one line naming the field, its declared value and what is stored.
  """
  check_limits(config, source)
  layers = stored_layers(found)
  declared = 1 if config.share_layers else config.num_layers
  if layers != declared:
    raise ValueError(f"{source}: its model config declares num_layers {config.num_layers}"
                     f"{' (shared: 1 stored)' if config.share_layers else ''} but the params "
                     f"hold {layers} encoder layers")
  words = [s for p, s in found.items() if p.endswith("embeddings/word_embeddings/embedding")]
  if words and words[0][0] != config.vocab_size:
    raise ValueError(f"{source}: its model config declares vocab_size {config.vocab_size:,} but "
                     f"the word embeddings hold {words[0][0]:,} rows")


def _sync(name: str) -> None:
  if jax.process_count() > 1:
    from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
    multihost_utils.sync_global_devices(name)


def _writer_of_process_0() -> str:
  """Process 0's atomic_files.writer_id(), known to every process (the name of the temporary
  folder they write a bundle into together)."""
  mine = atomic_files.writer_id()
  if jax.process_count() == 1:
    return mine
  from jax.experimental import multihost_utils  # pylint: disable=g-import-not-at-top
  raw = np.frombuffer(mine.encode().ljust(_WRITER_ID_BYTES), np.uint8)
  agreed = multihost_utils.broadcast_one_to_all(raw)
  return bytes(np.asarray(agreed, np.uint8)).decode().strip()


_WRITER_ID_BYTES = 48  # a pid and 8 hex digits fit with room to spare


def _absolute(path: str) -> epath.Path:
  """Orbax takes only absolute paths: a relative local one is made absolute (a URL stays)."""
  path = str(path)
  return epath.Path(path if "://" in path else os.path.abspath(path))


def save_bundle(path: str, params: dict, config: BertConfig, vocab: Union[str, Sequence[str]],
                lowercase: bool, *,
                heads: Optional[Sequence[str]] = None, info: Optional[dict] = None,
                overwrite: bool = False, tokenizer_file: Optional[str] = None) -> None:
  """Writes a bundle whole: built beside `path`, then put in its place in one step.

  Call it on every process (Orbax saves sharded jax.Arrays cooperatively);
  process 0 writes the JSON and vocab files and does the renames.

  Args:
    path: the bundle directory (local or any path etils.epath supports).
    params: params of any model in bert_jax.modeling.model (numpy or jax arrays, scanned
      or not; stored unscanned).
    config: the model config.
    vocab: the tokenizer's tokens in id order, or the path of a vocab.txt;
      must have config.vocab_size tokens.
    lowercase: whether the tokenizer lowercases.
    heads: optional heads the caller expects in `params` (checked); by default
      they are read from the params.
    info: extra JSON-serialisable metadata for bundle.json (e.g. source, step).
    overwrite: replace an existing bundle (exchanged with the new one in one step, and
      removed after); a directory holding anything else is never replaced.
    tokenizer_file: the BPE vocab.json (merges.txt beside it) or SentencePiece
      .model of a tokenizer other than WordPiece; copied into BUNDLE/tokenizer/
      under its own name (the name tells SentencePiece families apart).

  Raises:
    FileExistsError: `path` is a non-empty directory and overwrite is False, or it
      is not a bundle (check_replaceable).
    ValueError: vocab size or param shapes disagree with the config, or an
      expected head is missing.
  """
  dst = _absolute(path)
  if dst.exists() and any(dst.iterdir()):
    if not overwrite:
      raise FileExistsError(f"{path} exists and is not empty; pass overwrite=True (--overwrite) "
                            "to replace it")
    check_replaceable(str(dst))
  if tokenizer_file and not epath.Path(tokenizer_file).exists():
    raise FileNotFoundError(f"tokenizer file {tokenizer_file} does not exist")
  tokens = vocab_lines(vocab) if isinstance(vocab, str) else list(vocab)
  _check_vocab(tokens, str(vocab) if isinstance(vocab, str) else "save_bundle", config,
               "the model config")
  params = model_lib.unstack_layers(params)
  flat_shapes = {p: tuple(np.shape(x)) for p, x in traverse_util.flatten_dict(params, sep="/").items()}
  _check_shapes(flat_shapes, config, "save_bundle")
  found = heads_of(params)
  if heads is not None and set(heads) - set(found):
    raise ValueError(f"save_bundle: heads {sorted(set(heads) - set(found))} requested but the "
                     f"params only have {list(found)}")
  primary = jax.process_index() == 0
  # Built whole beside dst and put in its place in one step (atomic_files.replacing_folder): a
  # kill or a full disk leaves dst the complete earlier bundle (or nothing), never a mix of two
  # and never a moment without one. Every process writes its shards into the same temporary
  # folder, named by process 0, which alone prepares it and puts it in place.
  with atomic_files.replacing_folder(path, writer=_writer_of_process_0(),
                                     primary=primary) as tmp:
    if primary:
      tmp.mkdir(parents=True)
    _sync("bert_jax.checkpoints.bundle.save.start")
    ckptr = ocp.PyTreeCheckpointer()
    ckptr.save(tmp / PARAMS_DIR, args=ocp.args.PyTreeSave(params))
    if primary:
      config.save_json(str(tmp / CONFIG_FILE))
      (tmp / VOCAB_FILE).write_text("".join(t + "\n" for t in tokens), encoding="utf-8")
      if tokenizer_file:
        _copy_tokenizer(tokenizer_file, tmp / TOKENIZER_DIR)
      meta = dict(info or {})
      meta.update(format_version=FORMAT_VERSION, lowercase=bool(lowercase), heads=list(found),
                  num_params=int(sum(int(np.prod(s)) for s in flat_shapes.values())),
                  created=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
      (tmp / INFO_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
  _sync("bert_jax.checkpoints.bundle.save.end")


_BUNDLE_ENTRIES = (PARAMS_DIR, CONFIG_FILE, VOCAB_FILE, TOKENIZER_DIR, INFO_FILE)


def check_replaceable(path: str) -> None:
  """Refuses to replace a directory that is not exactly a bundle (`convert --overwrite`
  must never delete notes or another bundle kept in --dst).

  Raises:
    FileExistsError: `path` holds a file or folder a bundle does not have, or is
      no bundle at all; nothing is touched.
  """
  p = _absolute(path)
  others = sorted(e.name for e in p.iterdir() if e.name not in _BUNDLE_ENTRIES)
  if others or not is_bundle(str(p)):
    what = f"holds {_first_items(others, 5)}, not part of a bundle" if others else (
        "is not a bert_jax bundle")
    raise FileExistsError(f"{path} {what}; --overwrite replaces only a bundle: choose another "
                          "destination or move those files away")


def _copy_tokenizer(tokenizer_file: str, dst: epath.Path) -> None:
  src = epath.Path(tokenizer_file)
  with_merges = src.name.endswith(".json") and src.name != "tokenizer.json"
  files = [src] + ([src.parent / "merges.txt"] if with_merges else [])
  dst.mkdir()
  for f in files:
    if not f.exists():
      raise FileNotFoundError(f"tokenizer file {f} does not exist")
    (dst / f.name).write_bytes(f.read_bytes())


def _tokenizer_file(p: epath.Path) -> Optional[str]:
  """The vocab.json / .model in a bundle's tokenizer/ directory (None: WordPiece)."""
  d = p / TOKENIZER_DIR
  if not d.is_dir():
    return None
  found = sorted(d.glob("*.model")) + ([d / "vocab.json"] if (d / "vocab.json").exists() else [])
  if not found and (d / "tokenizer.json").exists():  # a BPE saved whole (ModernBERT)
    found = [d / "tokenizer.json"]
  if len(found) != 1 or (found[0].name == "vocab.json" and not (d / "merges.txt").exists()):
    raise ValueError(f"{d}: expected vocab.json + merges.txt or one SentencePiece .model, found "
                     f"{sorted(f.name for f in d.iterdir())}")
  return str(found[0])


def metadata_tree(meta: Any) -> dict:
  """The tree of array metadata from Checkpointer.metadata (StepMetadata or a bare tree)."""
  meta = getattr(meta, "item_metadata", meta)
  return getattr(meta, "tree", meta)


class _NoStepMetadataWarning(logging.Filter):
  """Drops orbax's warning that an item directory has no step metadata file: an item of a
  CheckpointManager step (checkpoints/N/state) never has one, so every resume printed it."""

  def filter(self, record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("Metadata file does not exist")


def read_metadata_tree(ckptr: Any, path: Any) -> dict:
  """metadata_tree(ckptr.metadata(path)), without orbax's missing-step-metadata warning."""
  absl_logger = logging.getLogger("absl")
  quiet = _NoStepMetadataWarning()
  absl_logger.addFilter(quiet)
  try:
    return metadata_tree(ckptr.metadata(path))
  finally:
    absl_logger.removeFilter(quiet)


def is_bundle(path: str) -> bool:
  """Whether `path` looks like a bundle (has model_config.json and params/)."""
  p = epath.Path(path)
  return (p / CONFIG_FILE).exists() and (p / PARAMS_DIR).is_dir()


def _not_a_bundle_hint(p: epath.Path) -> str:
  if (p / "config.json").exists():
    return (" It looks like a Hugging Face model directory: convert it with "
            f"`python -m bert_jax.convert --from hf --src {p} --dst BUNDLE`.")
  if (p / "bert_config.json").exists():
    return (" It looks like a Google BERT TF checkpoint: convert it with "
            f"`python -m bert_jax.convert --from tf1 --src {p} --dst BUNDLE`.")
  return ""


def read_config(path: str) -> BertConfig:
  """Reads and validates a bundle's config without touching its params.

  Args:
    path: the bundle directory.

  Returns:
    The stored BertConfig.

  Raises:
    FileNotFoundError / ValueError with the path and what is wrong.
  """
  p = epath.Path(path)
  if not p.exists():
    raise FileNotFoundError(f"checkpoint not found: {path}")
  if not p.is_dir():
    raise ValueError(f"{path} is a file, not a bert_jax checkpoint directory")
  if not (p / CONFIG_FILE).exists():
    raise ValueError(f"{path} is not a bert_jax checkpoint: it has no {CONFIG_FILE}."
                     + _not_a_bundle_hint(p))
  return BertConfig.load_json(str(p / CONFIG_FILE))


def load_bundle(path: str, *, expect_config: Optional[BertConfig] = None,
                with_params: bool = True) -> Bundle:
  """Loads a bundle, validating everything before reading the arrays.

  Args:
    path: the bundle directory.
    expect_config: when given, its architecture fields must equal the stored
      config's (compute options such as dtype may differ).
    with_params: False to only read and validate the metadata (params={}).

  Returns:
    The Bundle; params are numpy arrays in the canonical unscanned layout.

  Raises:
    FileNotFoundError: no such directory, or a part of the bundle is missing.
    ValueError: not a bundle, architecture mismatch, vocab size mismatch,
      stored shapes that disagree with the config.
  """
  config = read_config(path)
  p = _absolute(path)
  if expect_config is not None:
    check_arch(config, expect_config, path)
  vocab = p / VOCAB_FILE
  if not vocab.exists():
    raise FileNotFoundError(f"{path}: bundle has no {VOCAB_FILE}")
  _check_vocab(vocab_lines(str(vocab)), str(vocab), config, str(p / CONFIG_FILE))
  tokenizer_file = _tokenizer_file(p)
  info_file = p / INFO_FILE
  info = read_json(info_file, missing=f"{path}: bundle has no {INFO_FILE}")
  version = info.get("format_version")
  if not isinstance(version, int) or version > FORMAT_VERSION:
    raise ValueError(f"{info_file}: format_version {version!r} is not supported by this "
                     f"bert_jax (knows up to {FORMAT_VERSION})")
  if not isinstance(info.get("lowercase"), bool):
    raise ValueError(f"{info_file}: 'lowercase' must be true or false")
  params_dir = p / PARAMS_DIR
  if not params_dir.is_dir():
    raise FileNotFoundError(f"{path}: bundle has no {PARAMS_DIR}/ directory")
  ckptr = ocp.PyTreeCheckpointer()
  tree = read_metadata_tree(ckptr, params_dir)
  flat_meta = traverse_util.flatten_dict(tree, sep="/")
  check_declared_config(config, {k: tuple(m.shape) for k, m in flat_meta.items()},
                        str(p / CONFIG_FILE))
  _check_shapes({k: tuple(m.shape) for k, m in flat_meta.items()}, config, str(params_dir))
  stored = traverse_util.unflatten_dict(dict.fromkeys(flat_meta, 0), sep="/")
  info["heads"] = list(heads_of(stored))  # the heads actually stored
  params = {}
  if with_params:
    restore_args = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), tree)
    params = ckptr.restore(params_dir, args=ocp.args.PyTreeRestore(restore_args=restore_args))
  return Bundle(params=params, config=config, vocab_file=str(vocab),
                lowercase=info["lowercase"], info=info, tokenizer_file=tokenizer_file)

